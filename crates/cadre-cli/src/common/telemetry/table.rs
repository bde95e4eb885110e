//! The `[telemetry]` table of the settings files, read before logging starts so the
//! exporters see it. The `OTEL_*` variables win over it (see [`super::vars::var`]).
//!
//! A project's own file may set where telemetry goes, its headers and whether content is
//! sent only once the project is trusted (the table of settings marks those rows): the
//! trust file must say so for the project's items as they are now, or the command line
//! gives `--trust-project`. Nobody is asked here: an untrusted project's values are left
//! out, and the run that decides the project's trust names them with its other items.

use crate::args::RunArgs;
use crate::common::project::{user_dir, workspace_root};
use crate::common::project_items::{of_project, trusted_without_asking};
use crate::common::settings::{files, telemetry_values, user_files, CadreFiles};
use crate::common::table::{self, Project};
use crate::common::trust::{State, Store};
use std::path::{Path, PathBuf};

/// Reads the `[telemetry]` tables of the user's file and of the project's at `directory`
/// (`-C`, else found from the current folder); `run`: the options of a command that runs
/// agents, whose trust decision the project's values follow (see
/// [`trusted_without_asking`]). A file that cannot be read gives nothing here: the command
/// tells why when it reads it again.
pub fn configure_from_settings(directory: Option<PathBuf>, run: Option<&RunArgs>) {
    let Ok(root) = workspace_root(directory) else {
        return;
    };
    let Ok(files) = files(&root, user_dir(true).as_deref()) else {
        return;
    };
    let trusted = !sets_gated(&files)
        || match run {
            Some(args) => trusted_without_asking(args, &root),
            None => trusted_now(&root),
        };
    super::vars::set_table(telemetry_values(&files, trusted));
}

/// Reads the `[telemetry]` table of the user's file alone (a worker's: it serves no
/// project of its own). A file that cannot be read gives nothing.
pub fn configure_from_user_settings() {
    if let Ok(files) = user_files(user_dir(true).as_deref()) {
        super::vars::set_table(telemetry_values(&files, false));
    }
}

/// Whether the project's file sets a telemetry setting that needs trust.
fn sets_gated(files: &CadreFiles) -> bool {
    files.project.found
        && table::ROWS
            .iter()
            .filter(|r| r.key.starts_with("telemetry.") && r.project == Project::IfTrusted)
            .any(|r| files.project.has(r.key))
}

/// Whether the trust file trusts the project at `root` with its items as they are now.
fn trusted_now(root: &Path) -> bool {
    let Ok(items) = of_project(root) else {
        return false;
    };
    Store::load(user_dir(true).as_deref()).state(root, &items.fingerprint()) == State::Trusted
}
