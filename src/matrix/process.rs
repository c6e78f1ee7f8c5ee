//! The process and namespace helpers every cell runner uses: clocks for file names, the
//! binaries beside this one, children started with their output logged, waited for with a
//! timeout or a signal, stopped; commands in a namespace; the sender namespace's sysctls
//! held for a cell. Below the runners (run, command, hosts); knows nothing of cells' records.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::record::AppliedSysctl;
use super::spec::Cell;
use crate::signals::StopSignals;
use crate::testbed::{status, wan};

pub(super) fn now_unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// UTC time as `20261129T193000Z`, for run directory names.
pub fn utc_stamp() -> String {
    let (y, m, d, hh, mm, ss) = crate::clock::utc_civil(now_unix_s());
    format!("{y:04}{m:02}{d:02}T{hh:02}{mm:02}{ss:02}Z")
}

pub(super) fn fmt_dur(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

pub(super) fn bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The commit the binary runs from (meta.json), or "unknown".
pub(super) fn git_commit() -> String {
    Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

pub(super) enum Waited {
    Exited(ExitStatus),
    TimedOut,
    Interrupted,
}

/// Waits for `child`, a timeout, or SIGINT/SIGTERM, whichever comes first.
pub(super) fn wait_child(child: &mut Child, timeout: Duration, signals: &StopSignals) -> Waited {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Waited::Exited(st);
        }
        if Instant::now() >= deadline {
            return Waited::TimedOut;
        }
        let mut fds = [PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, 100u16).is_ok_and(|n| n > 0) && signals.take().is_some() {
            return Waited::Interrupted;
        }
    }
}

pub(super) fn stop_child(child: &mut Child, sig: Signal, grace: Duration) -> Option<ExitStatus> {
    let _ = kill(Pid::from_raw(child.id() as i32), sig);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait().ok()
}

pub(super) fn testbed_status(prefix: &str) -> Option<status::Status> {
    wan::load_state(prefix).map(|st| status::collect(&st))
}

/// `argv` run in network namespace `ns` (`ip netns exec NS …`).
pub(super) fn in_netns(ns: &str, argv: impl IntoIterator<Item = String>) -> Vec<String> {
    ["ip", "netns", "exec", ns]
        .into_iter()
        .map(str::to_string)
        .chain(argv)
        .collect()
}

pub(super) fn spawn_logged(args: &[String], log: &Path) -> Result<Child, String> {
    let f = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let f2 = f.try_clone().map_err(|e| e.to_string())?;
    Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(f)
        .stderr(f2)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", args[0]))
}

pub(super) fn last_error_line(log: &Path, program: &str) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .rev()
        .find(|l| l.starts_with(&format!("{program}:")) || l.contains("error"))
        .map(str::to_string)
}

/// The cell's sysctls in the sender's namespace, put back when dropped (on every way out of
/// the cell).
pub(super) struct NsSysctls {
    ns: String,
    applied: Vec<AppliedSysctl>,
}

impl NsSysctls {
    pub(super) fn apply(prefix: &str, cell: &Cell) -> Result<NsSysctls, String> {
        let mut guard = NsSysctls {
            ns: wan::Names::new(prefix).snd,
            applied: vec![],
        };
        for (name, value) in &cell.sysctls {
            let previous = wan::set_ns_sysctl(&guard.ns, name, value)
                .map_err(|e| format!("setting {name}={value} in the sender's namespace: {e}"))?;
            guard.applied.push(AppliedSysctl {
                name: name.clone(),
                value: value.clone(),
                previous,
            });
        }
        Ok(guard)
    }

    pub(super) fn applied(&self) -> Vec<AppliedSysctl> {
        self.applied.clone()
    }
}

impl Drop for NsSysctls {
    fn drop(&mut self) {
        for a in self.applied.iter().rev() {
            if let Err(e) = wan::set_ns_sysctl(&self.ns, &a.name, &a.previous) {
                crate::say!(
                    "sbm-matrix: could not put back {}={}: {e}",
                    a.name,
                    a.previous
                );
            }
        }
    }
}
