//! Where an engine run's workers work: a commit of the project's repository, or each
//! worker's own folder outside git.

use crate::common::exit::{CliError, Result};
use cadre_engine::wire::WorkspaceRef;
use std::path::Path;

/// Where the workers work: the repository and commit (made reachable as
/// `refs/cadre/RUN/base`), or each worker's own folder outside git.
pub(super) async fn workspace_ref(
    root: &Path,
    repo: Option<&str>,
    run: &str,
    quiet: bool,
) -> Result<(WorkspaceRef, Option<String>)> {
    let Ok(top) = git(root, &["rev-parse", "--show-toplevel"]).await else {
        if repo.is_some() {
            return Err(CliError::config(format!(
                "--repo needs a git repository, and {} is not in one",
                root.display()
            )));
        }
        return Ok((WorkspaceRef::Local, None));
    };
    let commit = git(root, &["rev-parse", "HEAD"]).await.map_err(|_| {
        CliError::config(
            "the repository has no commit yet: the workers start from one, so commit first",
        )
    })?;
    if !quiet && !git(root, &["status", "--porcelain"]).await?.is_empty() {
        errln!(
            "cadre: warning: the workers start from commit {}; uncommitted changes here are not part of the run",
            &commit[..commit.len().min(12)]
        );
    }
    let base_ref = format!("refs/cadre/{run}/base");
    let url = match repo {
        Some(url) => {
            git(root, &["push", "--quiet", url, &format!("HEAD:{base_ref}")])
                .await
                .map_err(|e| {
                    CliError::config_from(format!("cannot push HEAD to --repo {url}"), e)
                })?;
            url.to_owned()
        }
        None => {
            git(root, &["update-ref", &base_ref, &commit]).await?;
            top
        }
    };
    Ok((
        WorkspaceRef::Git {
            url,
            commit: commit.clone(),
        },
        Some(commit),
    ))
}

/// Runs git in `dir`; its trimmed stdout, or its stderr as the error.
pub(super) async fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = cadre_tools::git::Git::new(dir)
        .args(args.iter().copied())
        .output()
        .await
        .map_err(|e| CliError::config_from("cannot run git", e))?;
    if !out.status.success() {
        return Err(CliError::config(format!(
            "{}: {}",
            out.command,
            out.failure_text()
        )));
    }
    Ok(out.stdout_trimmed())
}
