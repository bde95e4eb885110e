//! Running one hook command: `sh -c COMMAND` in the project root with the event's JSON on
//! stdin, in a process group of its own that is killed whole at the timeout, on cancel, or
//! when the run's future is dropped, with an environment that holds no model credential.
//! A hook is the user's own command, so the rest of the environment (their other tokens
//! included) reaches it, as in Claude Code; only the model's API keys are withheld.

use cadre_tools::trace_context::{traceparent, TRACEPARENT};
use cadre_tools::{is_model_credential, is_telemetry_env};
use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop, ProcessGroup};
use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Most bytes kept of a hook's stdout or stderr; the rest is read and dropped.
const MAX_OUTPUT: usize = 256 * 1024;

/// How long the pipes are read once the shell has exited: a process it left running in the
/// background may hold them open for ever.
const DRAIN: Duration = Duration::from_millis(200);

/// How a hook's process ended.
#[derive(Debug, Clone)]
pub(crate) enum End {
    /// It exited by itself (`code` is `None` when a signal ended it).
    Exited(Option<i32>),
    /// It was killed, with its group, at its timeout.
    TimedOut,
    /// It was killed, with its group, because the run was cancelled.
    Cancelled,
    /// `sh` could not be started (shared, as a hook's result is cloned).
    NotStarted(std::sync::Arc<std::io::Error>),
}

/// What one hook run gave.
#[derive(Debug, Clone)]
pub(crate) struct Ran {
    /// How it ended.
    pub end: End,
    /// Its stdout (lossily decoded, at most [`MAX_OUTPUT`] bytes).
    pub stdout: String,
    /// Its stderr (the same).
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
}

/// Where and how a hook runs: the project root it runs in, and the variables it gets.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    /// The project root: the hook's working folder and `CLAUDE_PROJECT_DIR`.
    pub project_dir: std::path::PathBuf,
}

/// Runs `command` with `input` on its stdin; see the module's doc.
pub(crate) async fn run(
    command: &str,
    input: Vec<u8>,
    place: &Place,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Ran {
    let vars = std::env::vars_os().collect();
    run_with(command, input, place, timeout, cancel, vars).await
}

/// [`run`] with `vars` as the environment it starts from (cadre's own, but for tests).
async fn run_with(
    command: &str,
    input: Vec<u8>,
    place: &Place,
    timeout: Duration,
    cancel: &CancellationToken,
    vars: Vec<(OsString, OsString)>,
) -> Ran {
    let started = Instant::now();
    let done = |end, stdout: &[u8], stderr: &[u8]| Ran {
        end,
        stdout: String::from_utf8_lossy(stdout).into_owned(),
        stderr: String::from_utf8_lossy(stderr).into_owned(),
        elapsed: started.elapsed(),
    };
    if cancel.is_cancelled() {
        return done(End::Cancelled, b"", b"");
    }
    let mut wrap = CommandWrap::from(shell(command, &place.project_dir, vars));
    wrap.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let mut child = match wrap.spawn() {
        Ok(child) => child,
        Err(e) => return done(End::NotStarted(e.into()), b"", b""),
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let end = watch(&mut *child, &input, timeout, cancel, [&mut out, &mut err]).await;
    if matches!(end, End::TimedOut | End::Cancelled) {
        // The whole group: a child the hook started (a `sleep`, a server) goes too.
        let _ = Box::into_pin(child.kill()).await;
    }
    // Dropping the child kills what is left of its group (`KillOnDrop`).
    drop(child);
    done(end, &out, &err)
}

/// `sh -c command` in `dir`, its pipes taken, with the environment `vars` less the model's
/// credentials and cadre's telemetry settings, and the project's folder.
fn shell(command: &str, dir: &Path, vars: Vec<(OsString, OsString)>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .envs(
            vars.into_iter()
                .filter(|(name, _)| !is_model_credential(name) && !is_telemetry_env(name)),
        )
        .envs(project_vars(dir))
        // Its spans, if it makes any, join the run's trace under the current span.
        .envs(traceparent().map(|tp| (TRACEPARENT, tp)));
    cmd
}

/// Feeds `input` to the started `child` and reads its stdout and stderr into `into` until
/// it has exited and its pipes are drained (or [`DRAIN`] has passed since it exited), its
/// `timeout` has passed, or `cancel` fires: how it ended.
async fn watch(
    child: &mut dyn ChildWrapper,
    input: &[u8],
    timeout: Duration,
    cancel: &CancellationToken,
    [out, err]: [&mut Vec<u8>; 2],
) -> End {
    let stdin = child.stdin().take();
    let stdout = child.stdout().take();
    let stderr = child.stderr().take();
    let io = async {
        let write = async {
            if let Some(mut pipe) = stdin {
                // A hook that does not read its input closes the pipe early: no matter.
                let _ = pipe.write_all(input).await;
            }
        };
        tokio::join!(write, read_capped(stdout, out), read_capped(stderr, err));
    };
    tokio::pin!(io);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut exited: Option<Option<i32>> = None;
    let mut drained = false;
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => break End::Cancelled,
            () = &mut deadline => match exited {
                // The shell is gone; only what it left behind holds the pipes.
                Some(code) => break End::Exited(code),
                None => break End::TimedOut,
            },
            status = child.wait(), if exited.is_none() => {
                let code = status.ok().and_then(|s| s.code());
                if drained {
                    break End::Exited(code);
                }
                exited = Some(code);
                let drain_until = tokio::time::Instant::now() + DRAIN;
                if drain_until < deadline.deadline() {
                    deadline.as_mut().reset(drain_until);
                }
            }
            () = &mut io, if !drained => {
                drained = true;
                if let Some(code) = exited {
                    break End::Exited(code);
                }
            }
        }
    }
}

/// `CLAUDE_PROJECT_DIR` (so `"$CLAUDE_PROJECT_DIR"/.claude/hooks/x.sh` works as in Claude
/// Code) and cadre's own name for it.
fn project_vars(dir: &Path) -> [(&'static str, OsString); 2] {
    [
        ("CLAUDE_PROJECT_DIR", dir.as_os_str().to_owned()),
        ("CADRE_PROJECT_DIR", dir.as_os_str().to_owned()),
    ]
}

/// Reads `from` to its end into `into`, keeping at most [`MAX_OUTPUT`] bytes.
async fn read_capped(from: Option<impl AsyncRead + Unpin>, into: &mut Vec<u8>) {
    let Some(mut from) = from else {
        return;
    };
    let mut chunk = [0u8; 8192];
    loop {
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(into.len());
                into.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> (tempfile::TempDir, Place) {
        let dir = tempfile::tempdir().unwrap();
        let place = Place {
            project_dir: dir.path().to_path_buf(),
        };
        (dir, place)
    }

    #[tokio::test]
    async fn runs_in_the_project_with_stdin_and_exit_code() {
        let (dir, place) = place();
        let ran = run(
            "cat; echo \"$CLAUDE_PROJECT_DIR\" >&2; pwd; exit 3",
            b"{\"a\":1}".to_vec(),
            &place,
            Duration::from_secs(10),
            &CancellationToken::new(),
        )
        .await;
        assert!(matches!(ran.end, End::Exited(Some(3))), "{:?}", ran.end);
        let root = dir.path().canonicalize().unwrap();
        assert!(ran.stdout.starts_with("{\"a\":1}"), "{}", ran.stdout);
        assert!(
            ran.stdout.contains(&root.display().to_string()),
            "{}",
            ran.stdout
        );
        assert_eq!(ran.stderr.trim(), dir.path().display().to_string());
    }

    #[tokio::test]
    async fn a_background_child_does_not_hold_the_hook() {
        let (_dir, place) = place();
        let ran = run(
            "sleep 30 & echo done",
            Vec::new(),
            &place,
            Duration::from_secs(20),
            &CancellationToken::new(),
        )
        .await;
        assert!(matches!(ran.end, End::Exited(Some(0))), "{:?}", ran.end);
        assert_eq!(ran.stdout.trim(), "done");
    }

    #[tokio::test]
    async fn no_api_key_reaches_a_hook() {
        let (_dir, place) = place();
        let vars = [
            ("ANTHROPIC_API_KEY", "sk-ant-secret"),
            ("ANTHROPIC_AUTH_TOKEN", "tok-secret"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("MY_SERVICE_TOKEN", "svc-token"),
            ("PATH", "/usr/bin:/bin"),
            ("KEEP_ME", "kept"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let ran = run_with(
            "env",
            Vec::new(),
            &place,
            Duration::from_secs(10),
            &CancellationToken::new(),
            vars.into(),
        )
        .await;
        assert!(matches!(ran.end, End::Exited(Some(0))), "{:?}", ran.end);
        assert!(ran.stdout.contains("KEEP_ME=kept"), "{}", ran.stdout);
        // The user's own tokens are theirs to use in their hooks.
        assert!(
            ran.stdout.contains("MY_SERVICE_TOKEN=svc-token"),
            "{}",
            ran.stdout
        );
        assert!(ran.stdout.contains("CLAUDE_PROJECT_DIR="), "{}", ran.stdout);
        assert!(!ran.stdout.contains("secret"), "{}", ran.stdout);
    }

    #[tokio::test]
    async fn cancel_kills_it() {
        let (_dir, place) = place();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            c.cancel();
        });
        let ran = run(
            "sleep 30",
            Vec::new(),
            &place,
            Duration::from_secs(60),
            &cancel,
        )
        .await;
        assert!(matches!(ran.end, End::Cancelled), "{:?}", ran.end);
    }
}
