//! `bash`: runs a shell command in the workspace, killing everything it started when done.

use crate::output::OutputBuffer;
use crate::sandbox::{landlock_status, Sandbox, SandboxError, SandboxPolicy, SandboxStatus};
use crate::{Rerun, SandboxMode, ScratchDir, ToolContext, ToolError, ToolOutput, TypedTool};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};

/// How long output is still read after the command exits, for background children holding the
/// pipe; then the whole process group is killed.
const EXIT_GRACE: Duration = Duration::from_millis(250);
/// How long to read leftovers once the group has been killed (only processes that left the
/// group can still hold the pipe then).
const KILLED_DRAIN: Duration = Duration::from_millis(200);

/// Runs `bash -c COMMAND` in the workspace root, inside the Landlock sandbox.
///
/// Read-only agents may write only to a private `$TMPDIR`; they get no `bash` at all where
/// the kernel cannot enforce that, unless the context opts out of the sandbox.
///
/// The shell gets cadre's environment minus anything that may hold a credential, so a
/// command like `env` or `echo $ANTHROPIC_API_KEY` cannot put a key into the model's context,
/// transcripts or cassettes. Removed are `ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN`,
/// `OPENAI_API_KEY` and every variable whose name (compared case-insensitively) ends with
/// `_API_KEY` or `_TOKEN` or contains `SECRET`. Pass such a value to a command explicitly if
/// it really needs one.
#[derive(Debug, Default, Clone, Copy)]
pub struct BashTool;

/// What `bash` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashInput {
    /// The shell command to run.
    pub command: String,
    /// Timeout in milliseconds (default 120000).
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// What the command does, in 5-10 words.
    pub description: Option<String>,
}

impl TypedTool for BashTool {
    type Input = BashInput;
    type Output = ToolOutput;

    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> String {
        "Run a shell command with `bash -c` in the workspace root and return its output \
         (stdout and stderr interleaved, as a terminal would show them).\n\
         - Each call is a fresh shell: `cd`, variables and functions do not carry over, so \
         chain steps with `&&` (e.g. `cd sub && make`). Stdin is closed: commands cannot \
         prompt, so pass flags like `-y` or `--no-pager`.\n\
         - `timeout_ms` (default 120000, capped by the run's maximum, normally 600000): on \
         timeout the command and everything it started are killed and you get the output so \
         far.\n\
         - When the command exits, background processes it started (`cmd &`) are killed; do not \
         use it to start long-lived servers.\n\
         - Long output keeps its head and tail with the middle cut; redirect to a file and \
         grep/read it if you need all of it. A non-zero exit is reported as `[exit code N]`.\n\
         - Prefer read_file, list_files, grep, edit_file and write_file for reading, finding \
         and changing files: they are faster, safer and tracked.\n\
         - Sandbox (Linux Landlock): $TMPDIR is a private scratch folder you can always write \
         to; it is deleted after the call. Agents that may edit can write only inside the \
         workspace and $TMPDIR. Read-only agents cannot write, create, delete, rename or \
         chmod anything outside $TMPDIR (git commits, builds writing into the workspace, `>` \
         redirections and `sed -i` all fail with \"Permission denied\" or \"Operation not \
         permitted\"), so do not retry such writes; write scratch output under $TMPDIR \
         instead. Network access may be disabled (connections fail with \"Permission \
         denied\").\n\
         - `description`: a few words saying what the command is for (shown to humans)."
            .to_string()
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn rerun_call(&self, _input: &Value, ctx: &ToolContext) -> Rerun {
        // A read-only agent's command runs again after a crash only where the sandbox
        // leaves it no way to change anything: with the network open, a `curl -X POST` cut
        // short may have been sent.
        if confined(ctx, &landlock_status()) {
            Rerun::Repeat
        } else {
            Rerun::Never
        }
    }

    async fn run(&self, input: BashInput, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if input.command.trim().is_empty() {
            return Err(ToolError::invalid_input(
                "bash: command is empty".to_string(),
            ));
        }
        let timeout = match input.timeout_ms {
            Some(0) => {
                return Err(ToolError::invalid_input(
                    "bash: timeout_ms must be at least 1".to_string(),
                ))
            }
            Some(ms) => Duration::from_millis(ms),
            None => ctx.limits.bash_timeout,
        }
        .min(ctx.limits.bash_max_timeout);
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let sandbox = sandbox_for(ctx, &landlock_status())?;
        tracing::debug!(
            command = %input.command,
            description = ?input.description,
            ?sandbox,
            "bash"
        );
        run(&input.command, timeout, ctx, sandbox).await
    }
}

/// The model credentials cadre reads: never passed to the shell or to a hook (besides
/// those [`is_secret_env`] catches by pattern for the shell).
const SECRET_ENV_NAMES: [&str; 3] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
];

/// Whether `name` is one of the model credentials cadre reads (`ANTHROPIC_API_KEY`, …),
/// which nothing cadre starts may see.
pub fn is_model_credential(name: &OsStr) -> bool {
    SECRET_ENV_NAMES.contains(&name.to_string_lossy().to_ascii_uppercase().as_str())
}

/// Whether an environment variable named `name` may hold a credential and so must not reach
/// the shell: the names in [`SECRET_ENV_NAMES`], and any ending with `_API_KEY` or `_TOKEN`
/// or containing `SECRET`, ignoring case.
pub fn is_secret_env(name: &OsStr) -> bool {
    let name = name.to_string_lossy().to_ascii_uppercase();
    SECRET_ENV_NAMES.contains(&name.as_str())
        || name.ends_with("_API_KEY")
        || name.ends_with("_TOKEN")
        || name.contains("SECRET")
}

/// Whether `name` configures cadre's own telemetry (`OTEL_*`): what cadre starts does not
/// inherit it, so a command that also speaks OpenTelemetry does not report to cadre's
/// collector, with cadre's headers, as if it were cadre.
pub fn is_telemetry_env(name: &OsStr) -> bool {
    name.to_string_lossy()
        .to_ascii_uppercase()
        .starts_with("OTEL_")
}

/// The names in `vars` of variables that configure cadre's telemetry: what a process
/// started with cadre's own environment (git, which runs the user's hooks) has removed.
pub fn telemetry_env_names(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> impl Iterator<Item = OsString> {
    vars.into_iter()
        .filter(|(name, _)| is_telemetry_env(name))
        .map(|(name, _)| name)
}

/// The environment the shell gets: `vars` without the ones that may hold credentials or
/// configure cadre's telemetry.
fn child_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> impl Iterator<Item = (OsString, OsString)> {
    vars.into_iter()
        .filter(|(name, _)| !is_secret_env(name) && !is_telemetry_env(name))
}

/// Said once per process when a writing agent's `bash` runs unsandboxed for lack of Landlock.
static WARNED_UNSANDBOXED: AtomicBool = AtomicBool::new(false);
/// Said once per process when read-only agents' `bash` can change file modes and owners.
static WARNED_NO_METADATA_FILTER: AtomicBool = AtomicBool::new(false);

/// Whether the agent of `ctx` is read-only and its commands are sandboxed so that they can
/// change nothing outside their scratch folder (see [`SandboxStatus::confines_read_only`]).
fn confined(ctx: &ToolContext, status: &SandboxStatus) -> bool {
    ctx.read_only
        && ctx.sandbox != SandboxMode::Unsandboxed
        && status.confines_read_only(ctx.allow_network)
}

/// The sandbox this call runs in, `None` for none, or why `bash` is refused.
fn sandbox_for(ctx: &ToolContext, status: &SandboxStatus) -> Result<Option<Sandbox>, ToolError> {
    if ctx.sandbox == SandboxMode::Unsandboxed {
        return Ok(None);
    }
    let policy = if ctx.read_only {
        if !status.fs_write_restriction {
            return Err(ToolError::refused(read_only_refusal(status)));
        }
        if !status.metadata_restriction && !WARNED_NO_METADATA_FILTER.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                "read-only agents' bash can still change file modes, owners and extended \
                 attributes: {}",
                status.summary
            );
        }
        SandboxPolicy::ReadOnly
    } else {
        if status.abi == 0 {
            if !WARNED_UNSANDBOXED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "bash runs WITHOUT a sandbox: {}. Writing agents may change files outside \
                     the workspace.",
                    status.summary
                );
            }
            return Ok(None);
        }
        SandboxPolicy::WorkspaceWrite
    };
    Ok(Some(Sandbox {
        policy,
        allow_network: ctx.allow_network,
    }))
}

fn read_only_refusal(status: &SandboxStatus) -> String {
    const HINT: &str = "pass --allow-unsandboxed-bash to run it without a sandbox";
    if status.abi == 0 {
        format!(
            "bash is disabled for read-only agents because this kernel has no Landlock \
             support; {HINT} ({})",
            status.summary
        )
    } else {
        format!(
            "bash is disabled for read-only agents because this kernel's Landlock (ABI {}) \
             is too old to stop every write (ABI 3, Linux 6.2, is needed); {HINT}",
            status.abi
        )
    }
}

/// Kills a process group when told to, or when dropped (the call's future may be dropped).
struct GroupKiller {
    pgid: Option<Pid>,
}

impl GroupKiller {
    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // ESRCH (group already empty) is the normal case after a clean exit.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

enum End {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
}

async fn run(
    command: &str,
    timeout: Duration,
    ctx: &ToolContext,
    sandbox: Option<Sandbox>,
) -> Result<ToolOutput, ToolError> {
    let io = |source| ToolError::Io {
        path: "bash".to_string(),
        source,
    };
    // Declared before the group killer so that, dropped after it, it is removed only once
    // every process that could write into it has been killed.
    let scratch = match sandbox {
        Some(_) => Some(ScratchDir::new().map_err(io)?),
        None => None,
    };
    let (writer, mut reader) = pipe::pipe().map_err(io)?;
    // The child must get a blocking fd; a non-blocking stdout makes programs fail with EAGAIN.
    let writer = writer.into_blocking_fd().map_err(io)?;
    let confinement = sandbox.zip(scratch.as_ref());
    let mut child = spawn_shell(command, ctx.workspace.root(), &writer, confinement).await?;
    // Our copy of the write end must go, or the pipe never reports end-of-file.
    drop(writer);
    let mut group = GroupKiller {
        pgid: child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
    };

    let mut out = OutputBuffer::new(ctx.limits.max_output_bytes);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut open = true;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let end = loop {
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => break End::Cancelled,
            _ = &mut deadline => break End::TimedOut,
            status = child.wait() => break End::Exited(status.map_err(io)?),
            read = reader.read(&mut chunk), if open => match read {
                Ok(0) | Err(_) => open = false,
                Ok(n) => out.push(&chunk[..n]),
            },
        }
    };

    match end {
        End::Exited(status) => {
            if open {
                drain(&mut reader, &mut chunk, &mut out, EXIT_GRACE).await;
            }
            group.kill();
            drain(&mut reader, &mut chunk, &mut out, KILLED_DRAIN).await;
            Ok(finish(out, status))
        }
        End::TimedOut => {
            group.kill();
            reap(&mut child).await;
            drain(&mut reader, &mut chunk, &mut out, KILLED_DRAIN).await;
            let mut text = out.finish();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "[timed out after {timeout:?}; the command and every process it started were \
                 killed. The output so far is above. If it needs longer, pass a larger \
                 timeout_ms (at most {} ms)]",
                ctx.limits.bash_max_timeout.as_millis()
            ));
            Ok(ToolOutput::error(text))
        }
        End::Cancelled => {
            group.kill();
            reap(&mut child).await;
            Err(ToolError::Cancelled)
        }
    }
}

/// Starts `bash -c command` (or `sh -c` where bash is missing) in its own process group,
/// confined when a sandbox is given.
async fn spawn_shell(
    command: &str,
    root: &Path,
    out: &OwnedFd,
    sandbox: Option<(Sandbox, &ScratchDir)>,
) -> Result<Child, ToolError> {
    match spawn_with("bash", command, root, out, sandbox).await {
        Err(SandboxError::Spawn(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            spawn_with("sh", command, root, out, sandbox).await
        }
        other => other,
    }
    .map_err(|e| match e {
        SandboxError::Spawn(source) => ToolError::Io {
            path: "bash".to_string(),
            source,
        },
        other => ToolError::Sandbox(other),
    })
}

async fn spawn_with(
    shell: &str,
    command: &str,
    root: &Path,
    out: &OwnedFd,
    sandbox: Option<(Sandbox, &ScratchDir)>,
) -> Result<Child, SandboxError> {
    let command = shell_command(shell, command, root, out, std::env::vars_os())
        .map_err(SandboxError::Spawn)?;
    match sandbox {
        None => {
            let mut command = command;
            command.spawn().map_err(SandboxError::Spawn)
        }
        Some((sandbox, scratch)) => {
            let (child, _enforcement) = sandbox.spawn(command, root, scratch).await?;
            Ok(child)
        }
    }
}

/// `shell -c command` in `root`, writing to `out`, with `env` (cadre's environment, in
/// production) minus the variables that may hold credentials.
fn shell_command(
    shell: &str,
    command: &str,
    root: &Path,
    out: &OwnedFd,
    env: impl IntoIterator<Item = (OsString, OsString)>,
) -> std::io::Result<Command> {
    let mut cmd = Command::new(shell);
    cmd.arg("-c")
        .arg(command)
        .current_dir(root)
        // Nothing is inherited: the shell gets exactly the filtered copy.
        .env_clear()
        .envs(child_env(env))
        .envs(crate::trace_context::traceparent().map(|tp| (crate::trace_context::TRACEPARENT, tp)))
        .stdin(Stdio::null())
        // One pipe for both streams keeps them interleaved in the order they were written.
        .stdout(Stdio::from(out.try_clone()?))
        .stderr(Stdio::from(out.try_clone()?))
        // Its own group, so killing the group reaches every descendant that stayed in it.
        .process_group(0)
        .kill_on_drop(true);
    Ok(cmd)
}

/// Reads whatever is left in the pipe until end-of-file or `limit` elapses.
async fn drain(
    reader: &mut pipe::Receiver,
    chunk: &mut [u8],
    out: &mut OutputBuffer,
    limit: Duration,
) {
    let stop = tokio::time::sleep(limit);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            read = reader.read(chunk) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => out.push(&chunk[..n]),
            },
        }
    }
}

/// Waits for the killed child so it leaves no zombie; SIGKILL makes this prompt.
async fn reap(child: &mut Child) {
    if let Err(e) = child.wait().await {
        tracing::warn!("could not reap bash child: {e}");
    }
}

fn finish(out: OutputBuffer, status: ExitStatus) -> ToolOutput {
    let mut text = if out.is_empty() {
        String::new()
    } else {
        out.finish()
    };
    let note = match (status.code(), status.signal()) {
        (Some(0), _) => None,
        (Some(code), _) => Some(format!("[exit code {code}]")),
        (None, Some(signal)) => Some(format!("[killed by signal {signal}]")),
        (None, None) => Some("[exited abnormally]".to_string()),
    };
    match note {
        None if text.is_empty() => ToolOutput::ok("(no output)"),
        None => ToolOutput::ok(text),
        Some(note) => {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&note);
            ToolOutput::error(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Workspace;
    use std::sync::Arc;

    fn status(abi: u32) -> SandboxStatus {
        SandboxStatus {
            abi,
            fs_write_restriction: abi >= 3,
            tcp_restriction: abi >= 4,
            ipc_scoping: abi >= 6,
            metadata_restriction: true,
            summary: format!("fake ABI {abi}"),
        }
    }

    fn ctx(read_only: bool, sandbox: SandboxMode) -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = ToolContext::new(Arc::new(Workspace::new(dir.path()).unwrap()));
        ctx.read_only = read_only;
        ctx.sandbox = sandbox;
        (dir, ctx)
    }

    #[test]
    fn read_only_refused_without_landlock() {
        let (_d, ctx) = ctx(true, SandboxMode::Landlock);
        let Err(ToolError::Refused { reason: msg }) = sandbox_for(&ctx, &status(0)) else {
            panic!("not refused");
        };
        assert!(
            msg.starts_with(
                "bash is disabled for read-only agents because this kernel has no Landlock \
                 support; pass --allow-unsandboxed-bash to run it without a sandbox"
            ),
            "{msg}"
        );
    }

    #[test]
    fn read_only_refused_when_truncation_cannot_be_stopped() {
        let (_d, ctx) = ctx(true, SandboxMode::Landlock);
        for abi in [1, 2] {
            let Err(ToolError::Refused { reason: msg }) = sandbox_for(&ctx, &status(abi)) else {
                panic!("ABI {abi} not refused");
            };
            assert!(msg.contains(&format!("(ABI {abi})")), "{msg}");
            assert!(msg.contains("--allow-unsandboxed-bash"), "{msg}");
        }
        let sandbox = sandbox_for(&ctx, &status(3)).unwrap().unwrap();
        assert_eq!(sandbox.policy, SandboxPolicy::ReadOnly);
    }

    #[test]
    fn a_command_is_repeated_only_where_the_sandbox_leaves_no_way_to_change_anything() {
        let (_d, mut ctx) = ctx(true, SandboxMode::Landlock);
        ctx.allow_network = false;
        assert!(confined(&ctx, &status(9)));
        // Before ABI 9 a daemon's UNIX socket is a way to write.
        assert!(!confined(&ctx, &status(8)));
        // With the network open, a request may have changed something.
        ctx.allow_network = true;
        assert!(!confined(&ctx, &status(9)));
        ctx.allow_network = false;
        let mut no_seccomp = status(9);
        no_seccomp.metadata_restriction = false;
        assert!(!confined(&ctx, &no_seccomp));
        // A writing agent's command, or an unsandboxed one, is never repeated.
        ctx.read_only = false;
        assert!(!confined(&ctx, &status(9)));
        let (_d, mut ctx) = super::tests::ctx(true, SandboxMode::Unsandboxed);
        ctx.allow_network = false;
        assert!(!confined(&ctx, &status(9)));
        // Where the network is open, that is what the tool answers for the call.
        let (_d, ctx) = super::tests::ctx(true, SandboxMode::Landlock);
        assert_eq!(
            crate::Tool::rerun_call(&BashTool, &serde_json::json!({"command": "ls"}), &ctx),
            Rerun::Never
        );
    }

    #[test]
    fn opting_out_runs_unsandboxed() {
        for read_only in [true, false] {
            let (_d, ctx) = ctx(read_only, SandboxMode::Unsandboxed);
            assert_eq!(sandbox_for(&ctx, &status(0)).unwrap(), None);
            assert_eq!(sandbox_for(&ctx, &status(7)).unwrap(), None);
        }
    }

    #[test]
    fn writers_fall_back_to_no_sandbox_only_without_landlock() {
        let (_d, mut ctx) = ctx(false, SandboxMode::Landlock);
        assert_eq!(sandbox_for(&ctx, &status(0)).unwrap(), None);
        assert!(WARNED_UNSANDBOXED.load(Ordering::Relaxed));
        ctx.allow_network = false;
        assert_eq!(
            sandbox_for(&ctx, &status(1)).unwrap(),
            Some(Sandbox {
                policy: SandboxPolicy::WorkspaceWrite,
                allow_network: false,
            })
        );
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)))
            .collect()
    }

    const SECRETS: [(&str, &str); 9] = [
        ("ANTHROPIC_API_KEY", "leaked-value-1"),
        ("ANTHROPIC_AUTH_TOKEN", "leaked-value-2"),
        ("OPENAI_API_KEY", "leaked-value-3"),
        ("MISTRAL_API_KEY", "leaked-value-4"),
        ("GITHUB_TOKEN", "leaked-value-5"),
        ("cargo_registry_token", "leaked-value-6"),
        ("AWS_SECRET_ACCESS_KEY", "leaked-value-7"),
        ("MY_SECRET", "leaked-value-8"),
        ("ClientSecretValue", "leaked-value-9"),
    ];
    const KEPT: [(&str, &str); 6] = [
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/home/u"),
        ("LANG", "C.UTF-8"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("API_KEY_FILE", "/etc/k"),
        ("KEEP_ME", "yes"),
    ];

    #[test]
    fn credentials_are_filtered_from_the_child_env() {
        for (name, _) in SECRETS {
            assert!(is_secret_env(OsStr::new(name)), "{name} should be removed");
        }
        for (name, _) in KEPT {
            assert!(!is_secret_env(OsStr::new(name)), "{name} should be kept");
        }
        let all: Vec<_> = vars(&SECRETS).into_iter().chain(vars(&KEPT)).collect();
        let kept: Vec<_> = child_env(all).collect();
        assert_eq!(kept, vars(&KEPT));
    }

    #[test]
    fn cadre_telemetry_settings_stay_out_of_the_child_env() {
        let telemetry = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team=abc"),
            ("otel_service_name", "cadre"),
        ];
        let all: Vec<_> = vars(&telemetry).into_iter().chain(vars(&KEPT)).collect();
        let kept: Vec<_> = child_env(all).collect();
        assert_eq!(kept, vars(&KEPT));
        assert!(!is_telemetry_env(OsStr::new("HOTEL_ROOM")));
        let all: Vec<_> = vars(&telemetry).into_iter().chain(vars(&KEPT)).collect();
        let names: Vec<_> = telemetry_env_names(all).collect();
        let want: Vec<OsString> = telemetry.iter().map(|(n, _)| (*n).into()).collect();
        assert_eq!(names, want);
    }

    #[tokio::test]
    async fn shell_command_passes_only_the_filtered_env() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, mut reader) = pipe::pipe().unwrap();
        let writer = writer.into_blocking_fd().unwrap();
        let env: Vec<_> = vars(&SECRETS).into_iter().chain(vars(&KEPT)).collect();
        let mut cmd = shell_command("sh", "env; echo done", dir.path(), &writer, env).unwrap();
        // Exactly the kept variables are set, and nothing of the test process is inherited.
        let set: Vec<_> = cmd
            .as_std()
            .get_envs()
            .map(|(n, v)| (n.to_owned(), v.map(OsStr::to_owned)))
            .collect();
        let expected: Vec<_> = vars(&KEPT).into_iter().map(|(n, v)| (n, Some(v))).collect();
        let mut sorted = set.clone();
        sorted.sort();
        let mut expected_sorted = expected;
        expected_sorted.sort();
        assert_eq!(sorted, expected_sorted);
        let mut child = cmd.spawn().unwrap();
        // The command and our writer hold the pipe's write end open; the reader needs EOF.
        drop(cmd);
        drop(writer);
        let mut out = String::new();
        reader.read_to_string(&mut out).await.unwrap();
        assert!(child.wait().await.unwrap().success());
        assert!(
            out.contains("KEEP_ME=yes") && out.ends_with("done\n"),
            "{out}"
        );
        for (name, value) in SECRETS {
            assert!(
                !out.contains(name) && !out.contains(value),
                "{name} leaked: {out}"
            );
        }
    }
}
