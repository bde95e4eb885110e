//! `cadre chat` (and `cadre` alone on a terminal): a conversation with the primary agent, one
//! turn per message, kept as one run so it can be resumed or continued like any other.

use crate::args::{ChatCmd, Engine, FollowUp};
use crate::common::definitions::load_skills_from;
use crate::common::display::{first_sentence, human_tokens, usage_table};
use crate::common::exit::{CliError, Code, Result};
use crate::common::project::workspace_root;
use crate::common::run_folders::{find, newest, open_run, print_runs};
use crate::common::session::{Job, Session, Signals};
use crate::common::signals::{self, Ending};
use crate::common::workflow_tool::offering_workflows;
use cadre_core::Conversation;
use rustyline::error::ReadlineError;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::Helper;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

const HELP: &str = "\
Type a message and press Enter; end a line with \\ to go on on the next one.
  /agents   the agent types          /skills   the skills
  /usage    tokens used so far       /runs     this workspace's runs
  /compact  summarise the conversation so far, to go on from the summary
  /help     this text                /exit     leave (Ctrl-D too)
Ctrl-C cancels the running turn and every subagent it started.";

/// A line ending in `\\` goes on on the next line.
struct Continuation;

impl Helper for Continuation {}
impl rustyline::highlight::Highlighter for Continuation {}
impl rustyline::completion::Completer for Continuation {
    type Candidate = String;
}
impl rustyline::hint::Hinter for Continuation {
    type Hint = String;
}

impl Validator for Continuation {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if ctx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

/// The line editor of the session.
type Editor = rustyline::Editor<Continuation, rustyline::history::DefaultHistory>;

/// What the session does after a line.
enum Next {
    /// Reads the next line.
    Go,
    /// Ends the session.
    Leave,
}

/// What the editor gave back.
enum Read {
    /// A line, its continuations joined.
    Line(String),
    /// Ctrl-C at the prompt: ask again.
    Again,
    /// Ctrl-D: leave.
    End,
}

/// A session's state between lines.
struct Chat {
    /// The prepared session the turns run in.
    session: Session,
    /// The conversation, kept open between messages; its run folder once there is one.
    conversation: Conversation,
    /// The last turn's summary, for `/usage`.
    last_summary: Option<cadre_core::RunSummary>,
    /// The exit code so far.
    code: Code,
    /// SIGTERM and SIGHUP as they come.
    endings: watch::Receiver<Option<Ending>>,
    /// Set while no turn or compaction is at work.
    idle: Arc<AtomicBool>,
}

/// Runs the session until Ctrl-D or `/exit`.
pub async fn chat(cmd: ChatCmd, directory: Option<PathBuf>) -> Result<Code> {
    let (session, conversation) = prepare(cmd, directory)?;
    let mut editor =
        Editor::new().map_err(|e| CliError::failed_from("cannot read from the terminal", e))?;
    editor.set_helper(Some(Continuation));
    let history = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/cadre/history"));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    errln!(
        "cadre · {} · {} — /help for commands, Ctrl-D to leave",
        session.args.agent,
        session.model_id
    );
    let endings = signals::watch_endings();
    let idle = Arc::new(AtomicBool::new(true));
    spawn_idle_watch(idle.clone(), endings.clone());
    let mut chat = Chat {
        session,
        conversation,
        last_summary: None,
        code: Code::Done,
        endings,
        idle,
    };
    loop {
        let line = match read_line(&mut editor)? {
            Read::Line(line) => line,
            Read::Again => continue,
            Read::End => break,
        };
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(text);
        if let Next::Leave = chat.handle(text).await {
            break;
        }
    }
    save_history(&mut editor, history.as_deref());
    chat.say_saved();
    Ok(chat.code)
}

/// Checks the options, opens the run to go on with (if any) and prepares the session.
fn prepare(cmd: ChatCmd, directory: Option<PathBuf>) -> Result<(Session, Conversation)> {
    let ChatCmd {
        follow: FollowUp {
            continue_last,
            resume,
        },
        mut args,
    } = cmd;
    if args.engine == Engine::Restate {
        return Err(CliError::config(
            "`cadre chat` runs here; for a run on the engine use `cadre run --engine restate TASK`",
        ));
    }
    let root = workspace_root(directory.clone())?;
    let dir = match (continue_last, resume) {
        (true, _) => newest(&root, true),
        (false, Some(id)) => Some(find(&root, &id)?),
        (false, None) => None,
    };
    let conversation = match dir {
        Some(d) => {
            let run = open_run(&d)?;
            args.agent = run.state.agent_type.clone();
            Conversation::opened(run)
        }
        None => Conversation::new(),
    };
    let session = offering_workflows(Session::prepare(args, directory, false)?);
    Ok((session, conversation))
}

/// Reads the next line from the terminal.
fn read_line(editor: &mut Editor) -> Result<Read> {
    // The editor blocks on the terminal; the runtime keeps serving other tasks meanwhile.
    match tokio::task::block_in_place(|| editor.readline("> ")) {
        Ok(line) => Ok(Read::Line(line.replace("\\\n", "\n"))),
        Err(ReadlineError::Interrupted) => {
            errln!("(Ctrl-D or /exit leaves)");
            Ok(Read::Again)
        }
        Err(ReadlineError::Eof) => Ok(Read::End),
        Err(e) => Err(CliError::failed_from("cannot read from the terminal", e)),
    }
}

/// Writes the history back, best effort.
fn save_history(editor: &mut Editor, history: Option<&std::path::Path>) {
    if let Some(h) = history {
        if let Some(parent) = h.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = editor.save_history(h);
    }
}

impl Chat {
    /// Acts on one non-empty line: a slash command or a message.
    async fn handle(&mut self, text: &str) -> Next {
        match text {
            "/exit" | "/quit" => return Next::Leave,
            "/help" => errln!("{HELP}"),
            "/agents" => {
                for s in self.session.registry.all() {
                    outln!("{:<16} {}", s.name, first_sentence(&s.description));
                }
            }
            "/skills" => self.show_skills(),
            "/usage" => match &self.last_summary {
                Some(summary) => outln!("{}", usage_table(summary)),
                None => outln!("no tokens used yet"),
            },
            "/runs" => print_runs(&self.session.root),
            "/compact" => return self.compact().await,
            command if command.starts_with('/') => {
                errln!("unknown command {command}; /help lists them")
            }
            message => return self.send(message).await,
        }
        Next::Go
    }

    /// `/skills`: the skills found, or why there are none.
    fn show_skills(&self) {
        let session = &self.session;
        let include_user = session.args.replay.is_none();
        let skills = load_skills_from(&session.root, &session.args.skills.skills_dir, include_user);
        if skills.is_empty() {
            errln!(
                "{}",
                crate::common::definitions::no_skills_found(
                    &session.root,
                    &session.args.skills.skills_dir,
                    include_user
                )
            );
        }
        for s in skills.all() {
            outln!("{:<16} {}", s.name, first_sentence(&s.description));
        }
    }

    /// `/compact`: summarises the conversation so far and says how it went.
    async fn compact(&mut self) -> Next {
        let Some(d) = self.conversation.dir().map(PathBuf::from) else {
            errln!("/compact: nothing to compact yet");
            return Next::Go;
        };
        self.idle.store(false, Ordering::SeqCst);
        let compacted = compact(&self.session, &d, self.endings.clone()).await;
        self.idle.store(true, Ordering::SeqCst);
        // The summary is in the journal, not in what the conversation kept: it is read again.
        self.conversation = Conversation::at(d);
        match compacted {
            Some(Ok(used)) => errln!(
                "compacted: the conversation so far is now a summary ({} tokens)",
                human_tokens(used.total())
            ),
            Some(Err(e)) => errln!("/compact: {}", e.report()),
            None => errln!("/compact: given up"),
        }
        self.after_work()
    }

    /// Runs one message as a turn of the run.
    async fn send(&mut self, message: &str) -> Next {
        let before = self.conversation.dir().map(PathBuf::from);
        let job = Job::Say(&mut self.conversation, message.to_owned());
        self.idle.store(false, Ordering::SeqCst);
        let turn = self
            .session
            .turn(job, false, Signals::Turn, self.endings.clone())
            .await;
        self.idle.store(true, Ordering::SeqCst);
        match turn {
            Ok(turn) => {
                // A turn cancelled with Ctrl-C is the person's choice, not a failure
                // of the session: leaving afterwards is a normal exit.
                self.code = match turn.code {
                    Code::Cancelled => Code::Done,
                    other => other,
                };
                self.last_summary = Some(turn.summary);
                self.mend(turn.dir.or(before));
            }
            Err(e) => {
                errln!("cadre: {}", e.report());
                self.mend(before);
            }
        }
        self.after_work()
    }

    /// A conversation a turn left without its run (given up, or failed before it began)
    /// goes on from the run's folder `dir`, read again.
    fn mend(&mut self, dir: Option<PathBuf>) {
        if let (None, Some(dir)) = (self.conversation.dir(), dir) {
            self.conversation = Conversation::at(dir);
        }
    }

    /// SIGTERM or SIGHUP during a turn or compaction (or as it ended): the session ends too.
    fn after_work(&mut self) -> Next {
        match *self.endings.borrow() {
            Some(ending) => {
                self.code = ending_code(ending);
                Next::Leave
            }
            None => Next::Go,
        }
    }

    /// Tells how to go on with the run, if there is one.
    fn say_saved(&self) {
        if let Some(d) = self.conversation.dir() {
            let id = d
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            errln!("session saved as run {id}: `cadre run --resume {id} TASK` or `cadre chat --resume {id}` goes on with it");
        }
    }
}

/// The exit code of a session that SIGTERM or SIGHUP ended.
fn ending_code(ending: Ending) -> Code {
    match ending {
        Ending::HungUp => Code::HungUp,
        Ending::Terminated => Code::Cancelled,
    }
}

/// Compacts the conversation in `dir`. SIGTERM or SIGHUP lets it finish (the session ends
/// after it); a second one gives it up at once (`None`).
async fn compact(
    session: &Session,
    dir: &std::path::Path,
    mut endings: watch::Receiver<Option<Ending>>,
) -> Option<Result<cadre_model::Usage>> {
    let second = async {
        let _ = endings.wait_for(Option::is_some).await;
        errln!("cadre: leaving once the compaction is done (a second signal leaves at once)");
        let _ = endings.changed().await;
    };
    tokio::select! {
        compacted = session.compact(dir) => Some(compacted),
        () = second => None,
    }
}

/// Between turns, SIGTERM or SIGHUP (the terminal closed) ends the session at once, as it
/// would if cadre did not watch them: no agent is at work then. During a turn or a
/// compaction, the chat loop looks at `endings` itself once it is over.
fn spawn_idle_watch(idle: Arc<AtomicBool>, mut endings: watch::Receiver<Option<Ending>>) {
    tokio::spawn(async move {
        while endings.changed().await.is_ok() {
            let ending = *endings.borrow_and_update();
            if let (Some(ending), true) = (ending, idle.load(Ordering::SeqCst)) {
                crate::common::telemetry::shutdown();
                std::process::exit(ending_code(ending) as i32);
            }
        }
    });
}
