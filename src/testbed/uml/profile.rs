//! A host-side CPU profile of a guest that ran past its time: `perf record` over the UML
//! kernel's host process for a few seconds, reported by function. To the host the guest
//! kernel is an ordinary program with its symbols, so whatever spins in it shows by name —
//! where the guest's own task dump (guest::TASK_DUMP_FILE) needs a guest whose userspace
//! still runs (in one bbr-vm hang it did not get to write it).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The report, in the run's output directory.
pub const PROFILE_FILE: &str = "guest-profile.txt";
/// How long the profile samples, and how often per second.
pub const SAMPLING: Duration = Duration::from_secs(SECONDS as u64);
const SECONDS: u32 = 3;
const FREQUENCY_HZ: u32 = 499;

/// A `perf record` started over a guest's host processes.
pub struct Profiler {
    record: Child,
    log: PathBuf,
    pid: u32,
    /// The guest kernel binary's file name: the shared object its functions show under.
    kernel_dso: Option<String>,
    data: PathBuf,
    started: Instant,
}

/// Why there is no profile, as uml.json's `host_profile` says it.
pub type NoProfile = String;

impl Profiler {
    /// Starts sampling the process `root` (the UML kernel, all its threads). The data file
    /// goes in `work`.
    pub fn start(root: u32, work: &Path) -> Result<Profiler, NoProfile> {
        // The UML kernel's own process only: with the guest's userspace processes (which UML
        // ptraces) on the list too, perf record sometimes hung past SIGINT and the guest's
        // command with it (seen here 3 times in 9 runs).
        let data = work.join("guest-perf.data");
        // perf's own messages go to a file: a pipe nobody reads while it runs could fill.
        let log = work.join("guest-perf.log");
        let stderr = fs::File::create(&log).map_err(|e| format!("none: {}: {e}", log.display()))?;
        let record = Command::new("perf")
            .args(["record", "-q", "-g", "-F", &FREQUENCY_HZ.to_string(), "-o"])
            .arg(&data)
            .args(["-p", &root.to_string(), "--", "sleep", &SECONDS.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    "none: perf is not installed (Debian: linux-perf)".to_string()
                }
                _ => format!("none: perf could not start: {e}"),
            })?;
        let kernel_dso = fs::read_link(format!("/proc/{root}/exe"))
            .ok()
            .and_then(|p| Some(p.file_name()?.to_string_lossy().into_owned()));
        Ok(Profiler {
            record,
            log,
            pid: root,
            kernel_dso,
            data,
            started: Instant::now(),
        })
    }

    /// Waits for the sampling to end — a `perf record` still running 5 s after it gets
    /// SIGINT (it then writes what it has), and SIGKILL 10 s later — writes the report by
    /// function into `out_dir` and returns its file name, or why there is none.
    pub fn finish(mut self, out_dir: &Path) -> Result<String, NoProfile> {
        let pid = nix::unistd::Pid::from_raw(self.record.id() as i32);
        let interrupt_at = self.started + SAMPLING + Duration::from_secs(5);
        let kill_at = interrupt_at + Duration::from_secs(10);
        let mut interrupted = false;
        let status = loop {
            match self.record.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < kill_at => {
                    if !interrupted && Instant::now() >= interrupt_at {
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
                        interrupted = true;
                    }
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = self.record.kill();
                    let _ = self.record.wait();
                    break None;
                }
            }
        };
        let record_err = fs::read_to_string(&self.log).unwrap_or_default();
        let Some(status) = status else {
            return Err(format!(
                "none: perf record did not end, even on SIGINT; it said: {}",
                one_line(&record_err)
            ));
        };
        if !status.success() && !interrupted {
            return Err(format!(
                "none: perf record failed ({status}): {}",
                one_line(&record_err)
            ));
        }
        let late = if interrupted {
            format!(
                "; it was still running {} s after its {SECONDS} s and was interrupted",
                (interrupt_at - self.started).as_secs()
            )
        } else {
            String::new()
        };
        // Everything (the host kernel's share is UML's own switching), then the guest
        // kernel's functions alone, as shares of its own samples.
        let all = self.report(&["--sort", "pid,dso,sym", "--percent-limit", "1"])?;
        let guest = match &self.kernel_dso {
            Some(dso) => self.report(&[
                "--dsos",
                dso,
                "--percentage",
                "relative",
                "-g",
                "none",
                "--sort",
                "sym",
                "--percent-limit",
                "0.5",
            ])?,
            None => "# the guest kernel's binary was not known: no section of its own\n".into(),
        };
        let _ = fs::remove_file(&self.data);
        let text = format!(
            "# The UML kernel's host process (PID {pid}), sampled by \
             `perf record -g -F {FREQUENCY_HZ}` for {SECONDS} s from the moment the host stopped \
             waiting (the command past its time, or the guest hung: uml.json says which), \
             before it stopped the guest.\n\
             # perf record said: {rec}{late}\n\
             ## All samples by process, binary and function\n{all}\n\
             ## The guest kernel's functions ({dso}), as shares of its own samples\n{guest}",
            pid = self.pid,
            rec = one_line(&record_err),
            dso = self.kernel_dso.as_deref().unwrap_or("unknown"),
        );
        let path = out_dir.join(PROFILE_FILE);
        fs::write(&path, text).map_err(|e| format!("none: {}: {e}", path.display()))?;
        Ok(PROFILE_FILE.to_string())
    }
}

impl Profiler {
    /// One `perf report` of the recorded data, with what perf said on stderr in front.
    fn report(&self, args: &[&str]) -> Result<String, NoProfile> {
        let out = Command::new("perf")
            .args(["report", "--stdio", "--no-children", "-i"])
            .arg(&self.data)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("none: perf report could not start: {e}"))?;
        Ok(format!(
            "# perf report {} said: {}\n{}",
            args.join(" "),
            one_line(&String::from_utf8_lossy(&out.stderr)),
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

fn one_line(text: &str) -> String {
    let t = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if t.is_empty() {
        "nothing".into()
    } else {
        t
    }
}
