//! Kernel-enforced confinement of `bash` with Linux Landlock.
//!
//! Each sandboxed `bash` call is spawned from a short-lived thread that first restricts
//! itself with a fresh Landlock ruleset (and, for read-only agents, a small seccomp filter)
//! and then starts the shell. Landlock and seccomp bind the calling *thread* and everything
//! it later forks, so the shell and all its descendants are confined while cadre itself,
//! its tokio workers and every other thread stay unrestricted. The thread ends right after
//! the spawn and is never reused. No `unsafe` is needed for Landlock; only installing the
//! seccomp filter uses one `prctl(2)` call.
//!
//! # What is enforced
//!
//! Every call gets a private scratch folder (`$TMPDIR`, `<temp dir>/cadre-sandbox-XXXX`,
//! mode 0700) that is removed when the call ends. Writes are allowed only:
//!
//! - [`SandboxPolicy::ReadOnly`]: in that scratch folder, and to `/dev/null`, `/dev/zero`,
//!   `/dev/tty` and `/dev/pts/*`;
//! - [`SandboxPolicy::WorkspaceWrite`]: additionally anywhere inside the workspace root.
//!
//! "Write" means every write-type Landlock right the running kernel knows, by ABI version:
//!
//! | ABI | Linux | what is denied outside the writable places |
//! |---|---|---|
//! | 1 | 5.13 | opening files for writing; creating, deleting and renaming files, folders, symlinks, FIFOs, sockets and device nodes; hard links and cross-folder renames are always denied; `ptrace` of (and `/proc/PID/mem` access to) processes outside the sandbox; `mount`/`pivot_root` |
//! | 2 | 5.19 | links and renames across folders are checked (`refer`) instead of always denied |
//! | 3 | 6.2 | truncating files (`truncate(2)`, `O_TRUNC`) — **the minimum for read-only agents** |
//! | 4 | 6.7 | TCP `bind` and `connect`, when [`Sandbox::allow_network`] is false |
//! | 5 | 6.10 | `ioctl` on device files (granted only on `/dev/null` and `/dev/zero`; this also stops `TIOCSTI` keystroke injection into the terminal) |
//! | 6 | 6.12 | read-only agents only: connecting to abstract UNIX sockets and sending signals to processes outside the call's own sandbox |
//! | 7, 8 | 6.15, 7.0 | nothing new for this sandbox (audit logging, thread synchronisation) |
//! | 9 | 7.1 | read-only agents only: connecting to pathname UNIX sockets (docker, D-Bus, tmux, ssh-agent, …) outside the scratch folder |
//!
//! For read-only agents on x86_64 and aarch64, a seccomp filter additionally makes
//! `chmod`, `chown`, setting or removing extended attributes, `file_setattr` and
//! `io_uring_setup` fail with `EPERM` everywhere (scratch folder included), because Landlock
//! does not cover file metadata.
//!
//! # What is not enforced
//!
//! - Reading and executing: allowed everywhere (secrets readable by the user stay readable).
//! - File timestamps (`touch` of an existing file, `utimensat`), file flags set with
//!   `ioctl(FS_IOC_SETFLAGS)` on regular files (`chattr`), and, for writing agents or on
//!   other architectures, modes, owners and extended attributes.
//! - UDP, and TCP before ABI 4; network access at all when [`Sandbox::allow_network`] is true.
//! - Pathname UNIX sockets before ABI 9 (and never for writing agents): a read-only agent
//!   can still ask a daemon listening on one (docker, systemd, tmux) to write for it.
//! - Signals and abstract UNIX sockets before ABI 6 (and never for writing agents).
//! - File descriptors inherited already open: only the output pipe and `/dev/null` are
//!   passed; every other descriptor of cadre is close-on-exec.
//!
//! Landlock needs Linux 5.13 or later built with `CONFIG_SECURITY_LANDLOCK` and `landlock` in
//! the active LSM list (`lsm=` boot parameter). [`landlock_status`] reports what this
//! machine offers.

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible,
    LandlockStatus, RestrictionStatus, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError,
    RulesetStatus, Scope, ABI,
};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tokio::process::{Child, Command};

/// Lowest Landlock ABI that can stop every kind of file write (truncation came with ABI 3).
pub const MIN_READ_ONLY_ABI: u32 = 3;

/// Devices any shell writes to; writes (not ioctls) are allowed on them.
const TERMINALS: [&str; 2] = ["/dev/tty", "/dev/pts"];
/// Data sinks and sources; writes and ioctls are allowed on them.
const NULL_DEVICES: [&str; 2] = ["/dev/null", "/dev/zero"];

/// Whether `bash` runs inside the Landlock sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Confine `bash` with Landlock (the default). Read-only agents get no `bash` where the
    /// kernel cannot enforce it; writing agents then run unsandboxed with a warning.
    #[default]
    Landlock,
    /// Run `bash` without any sandbox (explicit opt-out, e.g. `--allow-unsandboxed-bash`).
    Unsandboxed,
}

/// Where a sandboxed command may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxPolicy {
    /// Only its private scratch folder (`$TMPDIR`) and the null/terminal devices.
    ReadOnly,
    /// The workspace root as well.
    WorkspaceWrite,
}

/// How one command is confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sandbox {
    /// Where it may write.
    pub policy: SandboxPolicy,
    /// Whether it may bind and connect TCP sockets (denied from Landlock ABI 4 when false).
    pub allow_network: bool,
}

/// What Landlock can enforce on this machine, probed once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SandboxStatus {
    /// The Landlock ABI version the kernel offers; 0 when Landlock is missing or disabled.
    pub abi: u32,
    /// Whether every kind of file write, truncation included, can be denied (ABI ≥ 3).
    pub fs_write_restriction: bool,
    /// Whether TCP bind and connect can be denied (ABI ≥ 4).
    pub tcp_restriction: bool,
    /// Whether signals and abstract UNIX sockets can be scoped to the sandbox (ABI ≥ 6).
    pub ipc_scoping: bool,
    /// Whether the seccomp filter against metadata changes (chmod, chown, xattrs) works.
    pub metadata_restriction: bool,
    /// One line for humans saying what is and is not enforced.
    pub summary: String,
}

impl SandboxStatus {
    /// Whether a read-only agent's sandboxed command, with network access or not
    /// (`allow_network`), can change nothing outside its scratch folder: file writes and
    /// metadata, TCP, signals and UNIX sockets are all denied (ABI 9, network off). UDP,
    /// which Landlock does not cover, is the one way it leaves open.
    pub fn confines_read_only(&self, allow_network: bool) -> bool {
        !allow_network && self.abi >= 9 && self.fs_write_restriction && self.metadata_restriction
    }
}

/// How far a spawned command's confinement went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// Every requested Landlock restriction is in force.
    Full,
    /// Landlock is in force, but this kernel lacks some of the requested restrictions.
    Partial,
    /// Landlock could not restrict anything.
    None,
}

/// Why a sandboxed command could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// Landlock enforced none of the read-only sandbox's rules, so it would not stop writes.
    #[error("Landlock did not restrict the read-only sandbox")]
    NotEnforced,
    /// Building or applying the Landlock ruleset failed.
    #[error("Landlock ruleset: {0}")]
    Landlock(#[from] RulesetError),
    /// The command itself could not be started (e.g. the program does not exist).
    #[error("{0}")]
    Spawn(#[source] io::Error),
    /// The helper thread needs a tokio runtime, and there is none.
    #[error("sandbox helper thread: no tokio runtime: {0}")]
    NoRuntime(#[source] tokio::runtime::TryCurrentError),
    /// The helper thread could not be started.
    #[error("sandbox helper thread: {0}")]
    Thread(#[source] io::Error),
    /// The helper thread ended without an answer.
    #[error("sandbox helper thread: it ended without an answer")]
    ThreadLost,
}

/// A private scratch folder for one call, removed (with everything in it) when dropped.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates `<temp dir>/cadre-sandbox-XXXX` with mode 0700.
    pub fn new() -> io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("cadre-sandbox-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(std::env::temp_dir())?;
        Ok(Self { path: dir.keep() })
    }

    /// The folder's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::fs::remove_dir_all(&self.path).is_ok() || !self.path.exists() {
            return;
        }
        // Something inside was made unsearchable or unwritable; give the owner its rights
        // back and try again.
        make_owner_writable(&self.path);
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(
                "could not remove sandbox scratch folder {:?}: {e}",
                self.path
            );
        }
    }
}

fn make_owner_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                make_owner_writable(&entry.path());
            }
        }
    }
}

impl Sandbox {
    /// Starts `command` confined by this sandbox: writes only in `scratch` (its `$TMPDIR`),
    /// the null and terminal devices and, for [`SandboxPolicy::WorkspaceWrite`], `workspace`.
    ///
    /// The restriction is applied on a fresh thread that spawns the command and ends; the
    /// calling thread and process stay unrestricted. Must be called within a tokio runtime.
    pub async fn spawn(
        &self,
        mut command: Command,
        workspace: &Path,
        scratch: &ScratchDir,
    ) -> Result<(Child, Enforcement), SandboxError> {
        command.env("TMPDIR", scratch.path());
        let runtime = tokio::runtime::Handle::try_current().map_err(SandboxError::NoRuntime)?;
        let sandbox = *self;
        let workspace = workspace.to_path_buf();
        let scratch = scratch.path().to_path_buf();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("cadre-sandbox".to_string())
            .spawn(move || {
                // Entering the runtime lets tokio register the child with its reaper; it
                // starts no thread, so nothing else ever inherits this thread's restrictions.
                let _runtime = runtime.enter();
                let result = sandbox
                    .restrict_current_thread(&workspace, &scratch)
                    .and_then(|enforcement| {
                        let child = command.spawn().map_err(SandboxError::Spawn)?;
                        Ok((child, enforcement))
                    });
                if let Err(Ok((child, _))) = tx.send(result) {
                    // The caller is gone: nobody will kill this command's group, so do it now.
                    kill_group(&child);
                }
            })
            .map_err(SandboxError::Thread)?;
        rx.await.map_err(|_| SandboxError::ThreadLost)?
    }

    /// Restricts the calling thread (and everything it forks from now on) for good.
    ///
    /// Only ever call this on a thread that is about to end.
    fn restrict_current_thread(
        &self,
        workspace: &Path,
        scratch: &Path,
    ) -> Result<Enforcement, SandboxError> {
        let read_only = self.policy == SandboxPolicy::ReadOnly;
        let write = write_access(self.policy);
        let mut ruleset = Ruleset::default();
        if read_only {
            // Without truncation control a read-only agent could still empty any file.
            ruleset = ruleset
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_write(ABI::V3))?
                .set_compatibility(CompatLevel::BestEffort);
        }
        ruleset = ruleset.handle_access(write)?;
        if !self.allow_network {
            ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
        if read_only {
            ruleset = ruleset.scope(Scope::from_all(ABI::V6))?;
        }
        let mut writable = vec![scratch];
        if !read_only {
            writable.push(workspace);
        }
        let status = ruleset
            .create()?
            .add_rules(path_beneath_rules(writable, write))?
            .add_rules(path_beneath_rules(
                NULL_DEVICES,
                write & (AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev),
            ))?
            .add_rules(path_beneath_rules(
                TERMINALS,
                write & (AccessFs::WriteFile | AccessFs::Truncate),
            ))?
            .restrict_self()?;
        let enforcement = match status.ruleset {
            RulesetStatus::FullyEnforced => Enforcement::Full,
            RulesetStatus::PartiallyEnforced => Enforcement::Partial,
            _ => Enforcement::None,
        };
        if read_only {
            if enforcement == Enforcement::None {
                return Err(SandboxError::NotEnforced);
            }
            // Best effort: Landlock already stops every content change; this adds metadata.
            let _ = metadata_filter::install();
        }
        Ok(enforcement)
    }
}

/// Every write-type Landlock right this sandbox handles for `policy`.
fn write_access(policy: SandboxPolicy) -> BitFlags<AccessFs> {
    match policy {
        // ABI 9 adds connecting to pathname UNIX sockets, a way to make daemons write.
        SandboxPolicy::ReadOnly => AccessFs::from_write(ABI::V9),
        // Writing agents keep ssh-agent, docker and the like.
        SandboxPolicy::WorkspaceWrite => AccessFs::from_write(ABI::V8),
    }
}

fn kill_group(child: &Child) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// What Landlock can enforce here: probed once, by restricting a throwaway thread.
pub fn landlock_status() -> SandboxStatus {
    static STATUS: OnceLock<SandboxStatus> = OnceLock::new();
    STATUS.get_or_init(probe).clone()
}

fn probe() -> SandboxStatus {
    let outcome = std::thread::Builder::new()
        .name("cadre-landlock-probe".to_string())
        .spawn(|| {
            let restriction = Ruleset::default()
                .handle_access(AccessFs::from_write(ABI::V9))
                .and_then(|r| r.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp))
                .and_then(|r| r.scope(Scope::from_all(ABI::V6)))
                .and_then(|r| r.create())
                .and_then(|r| r.restrict_self());
            let metadata = metadata_filter::install().is_ok();
            (restriction, metadata)
        })
        .map_err(|e| e.to_string())
        .and_then(|thread| {
            thread
                .join()
                .map_err(|_| "the probe thread panicked".to_string())
        });
    match outcome {
        Ok((Ok(status), metadata)) => status_from(&status, metadata),
        Ok((Err(e), _)) => unavailable(&format!("probing Landlock failed: {e}")),
        Err(e) => unavailable(&format!("probing Landlock failed: {e}")),
    }
}

fn unavailable(why: &str) -> SandboxStatus {
    SandboxStatus {
        abi: 0,
        fs_write_restriction: false,
        tcp_restriction: false,
        ipc_scoping: false,
        metadata_restriction: false,
        summary: format!("Landlock unavailable ({why}); bash cannot be sandboxed"),
    }
}

fn status_from(status: &RestrictionStatus, metadata: bool) -> SandboxStatus {
    let abi =
        match status.landlock {
            LandlockStatus::Available {
                kernel_abi: Some(raw),
                ..
            } => u32::try_from(raw).unwrap_or(0),
            LandlockStatus::Available { effective_abi, .. } => abi_number(effective_abi),
            LandlockStatus::NotEnabled => return unavailable(
                "built into the kernel but not enabled; add landlock to the lsm= boot parameter",
            ),
            LandlockStatus::NotImplemented => {
                return unavailable("not built into this kernel; Linux 5.13+ is needed")
            }
        };
    let mut status = SandboxStatus {
        abi,
        fs_write_restriction: abi >= MIN_READ_ONLY_ABI,
        tcp_restriction: abi >= 4,
        ipc_scoping: abi >= 6,
        metadata_restriction: metadata,
        summary: String::new(),
    };
    status.summary = summarise(&status);
    status
}

/// The number of a known ABI (the type is deliberately opaque; its variants are ordered).
fn abi_number(abi: ABI) -> u32 {
    const KNOWN: [ABI; 10] = [
        ABI::V1,
        ABI::V2,
        ABI::V3,
        ABI::V4,
        ABI::V5,
        ABI::V6,
        ABI::V7,
        ABI::V8,
        ABI::V9,
        ABI::V10,
    ];
    KNOWN.iter().filter(|known| abi >= **known).count() as u32
}

fn summarise(s: &SandboxStatus) -> String {
    let yes_no = |on: bool| if on { "enforced" } else { "NOT enforced" };
    format!(
        "Landlock ABI {}: file writes {}{}; TCP bind/connect {}; for read-only agents: \
         signal and abstract-socket scoping {}, pathname UNIX-socket connects {}, \
         chmod/chown/xattr filter {}; reads never restricted; read-only agents {}",
        s.abi,
        yes_no(s.abi >= 1),
        if s.abi >= 1 && !s.fs_write_restriction {
            " (but not truncation: needs ABI 3, Linux 6.2)"
        } else {
            ""
        },
        yes_no(s.tcp_restriction),
        yes_no(s.ipc_scoping),
        yes_no(s.abi >= 9),
        yes_no(s.metadata_restriction),
        if s.fs_write_restriction {
            "can use bash"
        } else {
            "get no bash"
        }
    )
}

/// A seccomp filter refusing the metadata-changing syscalls Landlock does not cover.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod metadata_filter {
    use nix::libc;
    use std::io;

    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

    /// Numbers shared by every architecture with the generic syscall table (Linux 6.6+).
    const SYS_FCHMODAT2: libc::c_long = 452;
    const SYS_SETXATTRAT: libc::c_long = 463;
    const SYS_REMOVEXATTRAT: libc::c_long = 466;
    const SYS_FILE_SETATTR: libc::c_long = 469;

    /// The syscalls that fail with `EPERM`.
    pub(super) fn blocked() -> Vec<libc::c_long> {
        let mut list = vec![
            libc::SYS_fchmod,
            libc::SYS_fchmodat,
            SYS_FCHMODAT2,
            libc::SYS_fchown,
            libc::SYS_fchownat,
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            libc::SYS_fremovexattr,
            SYS_SETXATTRAT,
            SYS_REMOVEXATTRAT,
            SYS_FILE_SETATTR,
            // io_uring can set extended attributes without the syscalls above.
            libc::SYS_io_uring_setup,
        ];
        #[cfg(target_arch = "x86_64")]
        list.extend([libc::SYS_chmod, libc::SYS_chown, libc::SYS_lchown]);
        list
    }

    fn stmt(code: u32, k: u32) -> libc::sock_filter {
        jump(code, k, 0, 0)
    }

    fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
        libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        }
    }

    /// The BPF program: foreign architectures are killed, blocked syscalls get `EPERM`.
    pub(super) fn program() -> Vec<libc::sock_filter> {
        const LOAD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
        const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
        const RET: u32 = libc::BPF_RET | libc::BPF_K;
        // Offsets of `nr` and `arch` in `struct seccomp_data`.
        const NR: u32 = 0;
        const ARCH: u32 = 4;
        let mut checks: Vec<(u32, u32)> = Vec::new();
        // x32 syscalls carry this bit and are numbered differently: refuse them all.
        #[cfg(target_arch = "x86_64")]
        checks.push((libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K, 0x4000_0000));
        checks.extend(blocked().into_iter().map(|nr| (JEQ, nr as u32)));
        let mut prog = vec![
            stmt(LOAD, ARCH),
            jump(JEQ, AUDIT_ARCH, 1, 0),
            stmt(RET, libc::SECCOMP_RET_KILL_PROCESS),
            stmt(LOAD, NR),
        ];
        let count = checks.len();
        for (i, (code, k)) in checks.into_iter().enumerate() {
            // Past the remaining checks and the ALLOW return, onto the EPERM return.
            let to_deny = u8::try_from(count - i).unwrap_or(u8::MAX);
            prog.push(jump(code, k, to_deny, 0));
        }
        prog.push(stmt(RET, libc::SECCOMP_RET_ALLOW));
        prog.push(stmt(RET, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
        prog
    }

    /// Installs the filter on the calling thread (and what it forks). Needs no_new_privs,
    /// which `restrict_self` has already set.
    pub(super) fn install() -> io::Result<()> {
        let mut filter = program();
        let len = u16::try_from(filter.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter too long"))?;
        let prog = libc::sock_fprog {
            len,
            filter: filter.as_mut_ptr(),
        };
        #[allow(unsafe_code)]
        // SAFETY: `prog` points at `filter`, a live, initialised array of exactly `len`
        // instructions; both outlive the call, the kernel only reads them (it copies the
        // program) and keeps no pointer afterwards. The remaining arguments are plain integers.
        let rc = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// No filter on other architectures: metadata changes stay possible there.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod metadata_filter {
    /// Always fails: no filter for this architecture.
    pub(super) fn install() -> std::io::Result<()> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "no metadata filter for this architecture",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    #[test]
    fn print_landlock_status() {
        let status = landlock_status();
        eprintln!("landlock_status(): {status:#?}");
        eprintln!("{}", status.summary);
        assert_eq!(status, landlock_status(), "probed once, same answer");
        assert_eq!(status.fs_write_restriction, status.abi >= 3);
        assert_eq!(status.tcp_restriction, status.abi >= 4);
        assert_eq!(status.ipc_scoping, status.abi >= 6);
        assert!(status.summary.contains("Landlock"));
    }

    #[test]
    fn abi_numbers() {
        assert_eq!(abi_number(ABI::Unsupported), 0);
        assert_eq!(abi_number(ABI::V1), 1);
        assert_eq!(abi_number(ABI::V4), 4);
        assert_eq!(abi_number(ABI::V10), 10);
    }

    #[test]
    fn summary_names_the_gaps() {
        let old = SandboxStatus {
            abi: 2,
            fs_write_restriction: false,
            tcp_restriction: false,
            ipc_scoping: false,
            metadata_restriction: true,
            summary: String::new(),
        };
        let text = summarise(&old);
        assert!(text.contains("not truncation"), "{text}");
        assert!(text.contains("read-only agents get no bash"), "{text}");
        assert!(unavailable("x").summary.contains("unavailable"));
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn filter_jumps_land_on_the_deny_return() {
        let prog = metadata_filter::program();
        let deny = prog.len() - 1;
        assert_eq!(
            prog[deny].k,
            nix::libc::SECCOMP_RET_ERRNO | nix::libc::EPERM as u32
        );
        assert_eq!(prog[deny - 1].k, nix::libc::SECCOMP_RET_ALLOW);
        let checks = &prog[4..deny - 1];
        assert_eq!(
            checks.len(),
            metadata_filter::blocked().len() + usize::from(cfg!(target_arch = "x86_64"))
        );
        for (i, insn) in checks.iter().enumerate() {
            assert_eq!(4 + i + 1 + usize::from(insn.jt), deny, "check {i}");
            assert_eq!(insn.jf, 0);
        }
    }

    #[test]
    fn scratch_dir_is_private_and_removed_even_when_locked() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = ScratchDir::new().unwrap();
        let path = scratch.path().to_path_buf();
        assert!(path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("cadre-sandbox-"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let locked = path.join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::write(locked.join("f"), "x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        drop(scratch);
        assert!(!path.exists());
    }

    fn status_line(text: &str, key: &str) -> String {
        text.lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_default()
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string()
    }

    /// The shell is confined (no_new_privs, seccomp) while the calling thread is not.
    #[tokio::test]
    #[cfg_attr(
        not(has_landlock),
        ignore = "needs Landlock ABI 3 (Linux 6.2+, landlock in the lsm= boot parameter): the kernel cannot confine writes"
    )]
    async fn only_the_spawned_command_is_restricted() {
        if !landlock_status().fs_write_restriction {
            // CI sets CADRE_REQUIRE_LANDLOCK: there a kernel without it fails, never skips.
            assert!(
                std::env::var_os("CADRE_REQUIRE_LANDLOCK").is_none(),
                "CADRE_REQUIRE_LANDLOCK is set but {}",
                landlock_status().summary
            );
            eprintln!("SKIPPED: {}", landlock_status().summary);
            return;
        }
        let workspace = tempfile::tempdir().unwrap();
        let scratch = ScratchDir::new().unwrap();
        let out = scratch.path().join("status");
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg("cat /proc/self/status > \"$TMPDIR/status\"")
            .stdin(Stdio::null());
        let sandbox = Sandbox {
            policy: SandboxPolicy::ReadOnly,
            allow_network: true,
        };
        let (mut child, enforcement) = sandbox
            .spawn(command, workspace.path(), &scratch)
            .await
            .unwrap();
        assert_ne!(enforcement, Enforcement::None);
        assert!(child.wait().await.unwrap().success());
        let child_status = std::fs::read_to_string(out).unwrap();
        assert_eq!(status_line(&child_status, "NoNewPrivs:"), "1");
        if landlock_status().metadata_restriction {
            assert_eq!(status_line(&child_status, "Seccomp:"), "2");
        }
        let own = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        assert_eq!(status_line(&own, "NoNewPrivs:"), "0");
        assert_eq!(status_line(&own, "Seccomp:"), "0");
        std::fs::write(workspace.path().join("parent-can-write"), "yes").unwrap();
    }
}
