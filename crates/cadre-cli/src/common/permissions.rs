//! Permissions on the command line: the mode and rules from the flags, and the question
//! `ask` mode puts to the person at the terminal (allow once, always, or deny).

use crate::args::RunArgs;
use crate::common::exit::{CliError, Result};
use cadre_core::{ApprovalRequest, Approver, Decision, Permissions};
use console::Key;
use indicatif::ProgressBar;
use std::io::IsTerminal;
use tokio::sync::{mpsc, oneshot};

/// One question waiting for the terminal, and where its answer goes.
pub struct Ask {
    request: ApprovalRequest,
    reply: oneshot::Sender<Decision>,
}

/// Hands each question to the turn's display loop, which asks it on the terminal.
struct TerminalApprover {
    tx: mpsc::UnboundedSender<Ask>,
}

#[async_trait::async_trait]
impl Approver for TerminalApprover {
    async fn ask(&self, request: &ApprovalRequest) -> Decision {
        let (reply, answer) = oneshot::channel();
        let ask = Ask {
            request: request.clone(),
            reply,
        };
        if self.tx.send(ask).is_err() {
            return Decision::Deny;
        }
        // No one left to answer (the session is ending): the call does not run.
        answer.await.unwrap_or(Decision::Deny)
    }
}

/// Whether a person can be asked: stdin and stdout are both a terminal.
pub fn can_ask() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// The run's permissions from the settings files and the flags (`--permission-mode`,
/// `--allow`, `--deny`), with
/// the terminal as the approver when `interactive`; and the questions it will send, to be
/// asked by the display loop.
pub fn permissions(
    args: &RunArgs,
    settings: &cadre_core::PermissionSettings,
    interactive: bool,
) -> Result<(Permissions, Option<mpsc::UnboundedReceiver<Ask>>)> {
    let mut permissions = rules(args, settings)?;
    if !interactive {
        return Ok((permissions, None));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    permissions.approver = Some(std::sync::Arc::new(TerminalApprover { tx }));
    Ok((permissions, Some(rx)))
}

/// The run's mode and rules from the settings files and the flags, with no one to ask: what
/// a local run checks, and what an engine run sends its workers to check.
pub fn rules(args: &RunArgs, settings: &cadre_core::PermissionSettings) -> Result<Permissions> {
    let mut permissions = Permissions::default();
    // The settings files first: a flag's mode wins, and the flags' rules add to theirs.
    permissions
        .apply(settings, "settings")
        .map_err(|e| CliError::config_from("settings", e))?;
    if let Some(mode) = args.permission_mode {
        permissions.mode = mode;
    }
    for rule in &args.allow {
        permissions
            .allow(rule, "--allow")
            .map_err(|e| CliError::config_from("--allow", e))?;
    }
    for rule in &args.deny {
        permissions
            .deny(rule, "--deny")
            .map_err(|e| CliError::config_from("--deny", e))?;
    }
    for r in &args.unguarded {
        permissions
            .deny(&r.rule, &r.from)
            .map_err(|e| CliError::config_from(&r.from, e))?;
    }
    Ok(permissions)
}

/// Asks `ask` on the terminal, on a thread of its own (reading the answer blocks), with the
/// live block hidden meanwhile; the receiver resolves once the answer is given.
pub fn start(ask: Ask, live: Option<ProgressBar>) -> oneshot::Receiver<()> {
    let (done, answered) = oneshot::channel();
    // A plain thread, not the runtime's blocking pool: a question left open when the run is
    // given up must not keep the process from exiting.
    let spawned = std::thread::Builder::new()
        .name("cadre-ask".into())
        .spawn(move || {
            let decision = match &live {
                Some(bar) => bar.suspend(|| question(&ask.request)),
                None => question(&ask.request),
            };
            let _ = ask.reply.send(decision);
            let _ = done.send(());
        });
    if let Err(e) = spawned {
        tracing::warn!("could not ask for permission: {e}");
    }
    answered
}

/// Puts the question and reads the answer: `y` allows once, `a` allows the request's rule
/// for the rest of the session, `n` (or Ctrl-C, or the end of input) denies.
fn question(request: &ApprovalRequest) -> Decision {
    errln!(
        "\ncadre: {} ({}) asks to run {}: {}",
        request.agent,
        request.agent_type,
        request.tool,
        request.summary
    );
    errln!("       {}", request.reason);
    errln!(
        "       [y] allow once   [a] always allow {} this session   [n] deny",
        request.always
    );
    err!("allow? [y/a/n] ");
    // One key answers, as in Claude Code; Enter and other keys are passed over.
    let term = console::Term::stderr();
    loop {
        let (decision, said) = match term.read_key_raw() {
            Ok(Key::Char('y' | 'Y')) => (Decision::AllowOnce, "allowed once"),
            Ok(Key::Char('a' | 'A')) => (Decision::AllowAlways, "always allowed this session"),
            Ok(Key::Char('n' | 'N' | 'd' | 'D') | Key::Escape | Key::CtrlC) => {
                (Decision::Deny, "denied")
            }
            Ok(Key::Char(_)) => {
                err!("\n       answer y (allow once), a (always this session) or n (deny)\nallow? [y/a/n] ");
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!("could not read the answer: {e}");
                (Decision::Deny, "denied")
            }
        };
        errln!("{said}");
        return decision;
    }
}
