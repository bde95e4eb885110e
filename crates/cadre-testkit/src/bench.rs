//! What the fleet benchmarks measure and the one line shape they print it in, so the
//! in-process and the engine benchmarks read alike (scripts read these lines: the section
//! name, `N=…`, `wall … ms`, `cpu/turn … ms` and `peak … MiB` come first, new figures after).

use std::fmt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// This process's resident bytes now.
pub fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Starts this process's peak resident size afresh, so each run reports its own.
pub fn reset_peak() {
    // "5" resets VmHWM (Linux 4.0 and later); elsewhere the peak is the process's.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// CPU time (user and system) this process has used.
pub fn cpu_time() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) else {
        return Duration::ZERO;
    };
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(t.tv_sec()).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec()).unwrap_or(0))
    };
    tv(u.user_time()) + tv(u.system_time())
}

/// A `Vm…:` line of `/proc/PID/status` (`pid` may be `self`), in MiB; 0 when unreadable.
pub fn status_mib(pid: &str, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One section's figures for one N, printed as one line.
#[derive(Debug, Clone, Default)]
pub struct FleetLine {
    /// The section (`in-proc`, `journal`, `engine`, …).
    pub label: String,
    /// Subagents started.
    pub n: usize,
    /// Model turns per subagent.
    pub k: usize,
    /// The model's latency per response.
    pub latency: Duration,
    /// Requests in flight at most (`--max-parallel`).
    pub max_parallel: usize,
    /// The run's wall time.
    pub wall: Duration,
    /// CPU time this process spent on it.
    pub cpu: Duration,
    /// Model requests answered.
    pub turns: u64,
    /// This process's peak resident size during the run, in MiB.
    pub peak_mib: f64,
    /// What one waiting agent costs, in KiB, where measured.
    pub idle_kib: Option<f64>,
    /// What each further turn adds to an agent, in KiB, where measured.
    pub per_turn_kib: Option<f64>,
    /// Subagents that did not finish, and the first reason given.
    pub failed: (usize, Option<String>),
    /// Figures of the section's own, printed last (`name value` pairs).
    pub extra: Vec<(String, String)>,
}

impl FleetLine {
    /// The ideal wall time: the critical path, or — when the limit is the bottleneck — the
    /// subagents' N·k requests going through `max_parallel` slots, plus the primary
    /// agent's two; and how many responses long it is.
    fn critical(&self) -> (Duration, u32) {
        let waves = (self.n * self.k)
            .div_ceil(self.max_parallel.max(1))
            .max(self.k);
        let waves = u32::try_from(waves).unwrap_or(u32::MAX);
        (self.latency * waves.saturating_add(2), waves)
    }
}

impl fmt::Display for FleetLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (critical, waves) = self.critical();
        let turns = u32::try_from(self.n * self.k + 2).unwrap_or(u32::MAX);
        let sequential = self.latency * turns;
        let overhead = self.wall.saturating_sub(critical);
        let kib = |v: Option<f64>| v.map_or("—".to_owned(), |v| format!("{v:.1} KiB"));
        let failed = match &self.failed {
            (0, _) => "0".to_owned(),
            (count, why) => {
                let why: String = why.as_deref().unwrap_or("").chars().take(160).collect();
                format!("{count} (first: {why})")
            }
        };
        write!(
            f,
            "{:<9} N={:<5} wall {:>8.1} ms   ideal {:>7.1} ms ({:>5.2}×)   sequential {:>9.1} ms ({:>6.1}× faster)   overhead/turn {:>6.2} ms   cpu/turn {:>6.3} ms   peak {:>6.1} MiB   idle agent {:>9}   per turn {:>9}   failed {failed}",
            self.label,
            self.n,
            ms(self.wall),
            ms(critical),
            self.wall.as_secs_f64() / critical.as_secs_f64().max(f64::MIN_POSITIVE),
            ms(sequential),
            sequential.as_secs_f64() / self.wall.as_secs_f64().max(f64::MIN_POSITIVE),
            ms(overhead) / (f64::from(waves) + 2.0),
            // u64 → f64 is exact for any count of turns a benchmark makes.
            ms(self.cpu) / (self.turns.max(1) as f64),
            self.peak_mib,
            kib(self.idle_kib),
            kib(self.per_turn_kib),
        )?;
        for (name, value) in &self.extra {
            write!(f, "   {name} {value}")?;
        }
        Ok(())
    }
}

/// The `cadre` binary `bin` run with `args` in `dir` against the mock at `uri`, with `home` as
/// its home folder, no output kept, and none of the machine's variables that would change
/// its model: what the benchmarks of the real binary time.
pub fn cadre_command(bin: &Path, dir: &Path, home: &Path, uri: &str, args: &[&str]) -> Command {
    let mut command = Command::new(bin);
    command
        .current_dir(dir)
        .env("HOME", home)
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", uri)
        .env("TERM", "dumb")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CADRE_MODEL")
        .env_remove("CADRE_PROVIDER")
        .env_remove("RUST_LOG")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_keeps_the_shape_scripts_read_and_adds_its_own_figures_last() {
        let line = FleetLine {
            label: "engine".into(),
            n: 8,
            k: 3,
            latency: Duration::from_millis(50),
            max_parallel: 8,
            wall: Duration::from_millis(400),
            cpu: Duration::from_millis(26),
            turns: 26,
            peak_mib: 30.0,
            failed: (1, Some("timed out".into())),
            extra: vec![("restate cpu/turn".into(), "0.500 ms".into())],
            ..FleetLine::default()
        }
        .to_string();
        assert!(
            line.starts_with("engine    N=8     wall    400.0 ms   ideal   250.0 ms ( 1.60×)"),
            "{line}"
        );
        assert!(
            line.contains("   cpu/turn  1.000 ms   peak   30.0 MiB   idle agent         —"),
            "{line}"
        );
        assert!(
            line.ends_with("failed 1 (first: timed out)   restate cpu/turn 0.500 ms"),
            "{line}"
        );
    }
}
