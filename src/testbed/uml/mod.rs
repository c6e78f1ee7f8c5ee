//! The sender as a User-Mode Linux guest running our patched kernel (kernel/patches),
//! attached by a tap in the bed's snd namespace, so delay and bottleneck stay outside the
//! guest. `testbed/uml build` makes the kernel; `testbed/uml run` boots it, runs sbm-send
//! inside from the host's file system, optionally under a cgroup CPU quota, and leaves the
//! output (plus `uml.json`, `guest-console.log`) in the output directory.

pub mod build;
pub mod cgroup;
pub mod clock_probe;
pub mod cpu_log;
pub mod guest;
pub mod hang;
pub mod profile;
pub mod slices;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::cmd::{Cmd, CmdError};
use super::wan;
use cgroup::{CpuStat, GuestCgroup, Quota};
use cpu_log::CpuLog;
use guest::{GuestSpec, GuestTrace};
use profile::{NoProfile, Profiler};
use slices::{SliceError, SliceRecord, Slicer, Slices};

/// The host end of the guest's link, in the snd namespace (one guest per bed).
pub const TAP: &str = "sbmuml0";

#[derive(Debug, thiserror::Error)]
pub enum UmlError {
    #[error(transparent)]
    Testbed(#[from] wan::TestbedError),
    #[error(transparent)]
    Cmd(#[from] CmdError),
    #[error(transparent)]
    Build(#[from] build::BuildError),
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
    #[error(transparent)]
    Slices(#[from] SliceError),
    #[error("a guest is already running on bed '{0}' (one at a time: it owns {TAP} and {addr})", addr = guest::GUEST_ADDR)]
    Busy(String),
    #[error("{0}")]
    BadPath(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the guest kernel {0} could not start: {1}")]
    Spawn(PathBuf, std::io::Error),
    #[error("the host side of the guest's clock probes: {0}")]
    ClockProbe(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> UmlError + '_ {
    move |source| UmlError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What `testbed/uml run` is asked to do.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub prefix: String,
    pub kernel: PathBuf,
    pub out_dir: PathBuf,
    pub quota: Option<Quota>,
    /// The other contention model: the guest pinned to one CPU and dealt a share of every
    /// period there (slices.rs). Not together with `quota`.
    pub slices: Option<Slices>,
    pub mem_mb: u32,
    pub mtu: u32,
    pub sysctls: Vec<(String, String)>,
    /// Tracepoints the guest records while its command runs (guest::GuestTrace).
    pub trace: Option<GuestTrace>,
    /// The guest is stopped (its command asked first) after this long.
    pub timeout: Duration,
    pub command: Vec<String>,
}

/// `uml.json`: how the guest ran, and the proof that a CPU quota held. The one type that
/// writes it and reads it back (the matrix's report); fields that older files lack read as
/// their defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunRecord {
    pub kernel: String,
    pub kernel_args: Vec<String>,
    pub init_script: String,
    pub tap: String,
    pub guest_addr: String,
    pub mtu: u32,
    pub sysctls: Vec<(String, String)>,
    pub command: Vec<String>,
    pub cpu_quota: Option<QuotaRecord>,
    pub cpu_slices: Option<SlicesRecord>,
    /// What the guest traced, when asked to.
    pub trace: Option<TraceRecord>,
    /// The command's exit status inside the guest; None if the guest never reported one.
    pub guest_exit: Option<i32>,
    /// Why the host ended the guest, if it did.
    pub stopped: Option<String>,
    /// When the command ran past its time: the file the guest recorded its threads in
    /// (guest::TASK_DUMP_FILE), or why there is none.
    pub task_dump: Option<String>,
    /// When the command ran past its time: the host's CPU profile of the guest's processes
    /// over the seconds before it was asked to stop (profile::PROFILE_FILE), or why there is
    /// none.
    pub host_profile: Option<String>,
    /// Set when the guest's clock stopped (its init loop stood still past hang.rs's limit):
    /// when and for how long. The guest was then examined and ended, not left to its time.
    pub hung: Option<String>,
    /// For a hung guest: the file with its kernel's timer state (hang::STATE_FILE), or why
    /// there is none.
    pub hang_state: Option<String>,
    pub wall_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuotaRecord {
    pub pct: u32,
    pub period_us: u64,
    pub quota_us: u64,
    pub cgroup_version: cgroup::Version,
    pub cgroup: String,
    /// Counters over the guest's life (the group is made for it, so they start at zero).
    pub stat: CpuStat,
    /// nr_throttled / nr_periods.
    pub throttled_share: Option<f64>,
}

/// What a traced guest recorded: the events asked for, where they are, and how many the
/// ring kept and lost (its per-CPU stats: a full ring drops later events).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct TraceRecord {
    pub events: Vec<String>,
    pub buffer_kb: u32,
    /// guest::TRACE_FILE compressed, or why there is none.
    pub file: String,
    /// The ring's counters as the guest's stats file gave them (`entries`, `overrun`,
    /// `dropped events`, ...); empty if it wrote none.
    pub stats: std::collections::BTreeMap<String, String>,
    /// With CPU slices: the off-slices' times (slices::off_windows_csv), to line the events
    /// up with when the guest could run.
    pub slices_file: Option<String>,
    /// The guest's clock against the host's (clock_probe.rs): add `host_minus_guest_ns` to
    /// an event's stamp for the host's clock. None: no probe arrived.
    pub clock: Option<clock_probe::ClockOffset>,
    /// Every probe (guest and host clocks), clock_probe::probes_csv.
    pub clock_file: Option<String>,
}

/// The stats file's `name: value` lines.
pub fn parse_trace_stats(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The file name the trace of off-slices goes to.
pub const SLICES_FILE: &str = "guest-slices.csv";

/// The file the clock probes go to.
pub const CLOCK_FILE: &str = "guest-clock.csv";

/// Compresses the guest's trace and reads its stats; writes the off-slices and the clock
/// probes beside it.
fn trace_record(
    out_dir: &Path,
    tr: &GuestTrace,
    slices: Option<&SliceRecord>,
    probes: &[clock_probe::Probe],
) -> Result<TraceRecord, UmlError> {
    let plain = out_dir.join(guest::TRACE_FILE);
    let file = match crate::report::compressed::compress(&plain) {
        Ok(true) => format!("{}.xz", guest::TRACE_FILE),
        Ok(false) => "none: the guest wrote no trace (see guest-console.log)".to_string(),
        Err(source) => {
            return Err(UmlError::Io {
                path: plain,
                source,
            })
        }
    };
    let stats = fs::read_to_string(out_dir.join(guest::TRACE_STATS_FILE))
        .map(|t| parse_trace_stats(&t))
        .unwrap_or_default();
    let slices_file = match slices {
        Some(s) => {
            let path = out_dir.join(SLICES_FILE);
            fs::write(&path, slices::off_windows_csv(&s.off_windows)).map_err(io_err(&path))?;
            Some(SLICES_FILE.to_string())
        }
        None => None,
    };
    let clock_file = if probes.is_empty() {
        None
    } else {
        let path = out_dir.join(CLOCK_FILE);
        fs::write(&path, clock_probe::probes_csv(probes)).map_err(io_err(&path))?;
        Some(CLOCK_FILE.to_string())
    };
    Ok(TraceRecord {
        events: tr.events.clone(),
        buffer_kb: tr.buffer_kb,
        file,
        stats,
        slices_file,
        clock: clock_probe::offset(probes),
        clock_file,
    })
}

/// What the CPU slices dealt and what the guest received (its cgroup's CPU time).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlicesRecord {
    #[serde(flatten)]
    pub slicer: SliceRecord,
    /// The guest's CPU time over its life, and that over its wall time.
    pub usage_us: Option<u64>,
    pub received_share: Option<f64>,
}

/// Connects the guest to the bed: a tap with the host address in snd, forwarding in snd,
/// and wan's route back to the guest's network.
fn attach(names: &wan::Names) -> Result<(), UmlError> {
    let _ = Cmd::new("ip", &["link", "del", TAP])
        .in_ns(&names.snd)
        .run();
    Cmd::new("ip", &["tuntap", "add", "dev", TAP, "mode", "tap"])
        .in_ns(&names.snd)
        .run()?;
    Cmd::new(
        "ip",
        &[
            "addr",
            "add",
            &format!("{}/24", guest::HOST_ADDR),
            "dev",
            TAP,
        ],
    )
    .in_ns(&names.snd)
    .run()?;
    Cmd::new("ip", &["link", "set", TAP, "up"])
        .in_ns(&names.snd)
        .run()?;
    Cmd::new("sysctl", &["-q", "-w", "net.ipv4.ip_forward=1"])
        .in_ns(&names.snd)
        .run()?;
    Cmd::new(
        "ip",
        &["route", "replace", guest::GUEST_NET, "via", wan::SND_ADDR],
    )
    .in_ns(&names.wan)
    .run()?;
    Ok(())
}

fn detach(names: &wan::Names) {
    let _ = Cmd::new("ip", &["link", "del", TAP])
        .in_ns(&names.snd)
        .run();
}

/// Starts the kernel in snd's namespace, first moving the shell that execs it into the
/// cgroup so that every process UML forks is counted and limited.
fn spawn_guest(
    snd: &str,
    g: &GuestSpec,
    cg: Option<&GuestCgroup>,
    pin_cpu: Option<usize>,
    console: &Path,
) -> Result<Child, UmlError> {
    let mut line = String::new();
    if let Some(cg) = cg {
        for f in cg.procs_files() {
            line.push_str(&format!(
                "echo $$ > {} || exit 126; ",
                guest::quote(&f.to_string_lossy())
            ));
        }
    }
    line.push_str("exec ");
    if let Some(cpu) = pin_cpu {
        // Every host process of the guest (they inherit it) on the sliced CPU.
        line.push_str(&format!("taskset -c {cpu} "));
    }
    line.push_str("ip netns exec ");
    line.push_str(&guest::quote(snd));
    line.push(' ');
    line.push_str(&guest::quote(&g.kernel.to_string_lossy()));
    for a in guest::kernel_args(g) {
        line.push(' ');
        line.push_str(&guest::quote(&a));
    }
    let log = File::create(console).map_err(io_err(console))?;
    let log2 = log.try_clone().map_err(io_err(console))?;
    use std::os::unix::process::CommandExt;
    Command::new("sh")
        .args(["-c", &line])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        // Its own process group: a terminal's Ctrl-C reaches us, and we stop the guest's
        // command cleanly through the stop file instead of killing the kernel.
        .process_group(0)
        .spawn()
        .map_err(|e| UmlError::Spawn(g.kernel.clone(), e))
}

/// Boots the guest, runs the command, brings everything back. `should_stop` is polled
/// (e.g. a Ctrl-C): the guest's command is then asked to stop and given 30 s.
pub fn run(spec: &RunSpec, should_stop: &mut dyn FnMut() -> bool) -> Result<RunRecord, UmlError> {
    wan::validate_prefix(&spec.prefix)?;
    let state =
        wan::load_state(&spec.prefix).ok_or(wan::TestbedError::NotUp(spec.prefix.clone()))?;
    if !wan::healthy(&state) {
        return Err(wan::TestbedError::NotUp(spec.prefix.clone()).into());
    }
    let names = wan::Names::new(&spec.prefix);
    let bed_dir = wan::run_dir().join(&spec.prefix);
    let lock_path = bed_dir.join("uml.lock");
    let lock_file = File::create(&lock_path).map_err(io_err(&lock_path))?;
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|_| UmlError::Busy(spec.prefix.clone()))?;

    fs::create_dir_all(&spec.out_dir).map_err(io_err(&spec.out_dir))?;
    let out_dir = fs::canonicalize(&spec.out_dir).map_err(io_err(&spec.out_dir))?;
    let work = bed_dir.join(format!("uml-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(work.join("uml")).map_err(io_err(&work))?;
    for p in [&out_dir, &work, &spec.kernel] {
        guest::check_path(p).map_err(UmlError::BadPath)?;
    }
    for f in [
        guest::EXIT_FILE,
        guest::STOP_FILE,
        guest::TASK_DUMP_FILE,
        guest::HEARTBEAT_FILE,
        hang::STATE_FILE,
        guest::TRACE_FILE,
        guest::TRACE_STATS_FILE,
        SLICES_FILE,
        CLOCK_FILE,
    ] {
        let _ = fs::remove_file(out_dir.join(f));
    }
    let g = GuestSpec {
        kernel: spec.kernel.clone(),
        mem_mb: spec.mem_mb,
        tap: TAP.into(),
        mtu: spec.mtu,
        sysctls: spec.sysctls.clone(),
        trace: spec.trace.clone(),
        out_dir: out_dir.clone(),
        command: spec.command.clone(),
        // Relative paths in the command resolve against the caller's directory, as on the
        // host; a directory the kernel command line cannot carry falls back to /.
        cwd: std::env::current_dir()
            .ok()
            .filter(|d| guest::check_path(d).is_ok())
            .unwrap_or_else(|| PathBuf::from("/")),
        init_path: work.join("init"),
        uml_dir: work.join("uml"),
        umid: format!("sbm-{}", spec.prefix),
    };
    let script = guest::init_script(&g);
    write_executable(&g.init_path, &script)?;

    // The guest's cgroup: the quota's limit, or with slices no limit (one CPU is all a UML
    // guest can use) — there only to count what the guest received.
    let cg_quota = match (spec.quota, spec.slices) {
        (Some(q), _) => Some(q),
        (None, Some(s)) => Some(Quota::new(100, s.period)?),
        (None, None) => None,
    };
    let cg = cg_quota
        .map(|q| {
            GuestCgroup::create(
                &format!("sbm-uml-{}-{}", spec.prefix, std::process::id()),
                q,
            )
        })
        .transpose()?;
    attach(&names)?;
    // A traced guest's clock probes arrive on the tap's host side (clock_probe.rs).
    let clock_listener = match &spec.trace {
        Some(_) => match clock_probe::Listener::start(&names.snd, guest::HOST_ADDR) {
            Ok(l) => Some(l),
            Err(e) => {
                detach(&names);
                return Err(UmlError::ClockProbe(e));
            }
        },
        None => None,
    };
    // Slicing starts before the guest does, so that it never runs unsliced; it ends (also
    // on an error: Slicer's drop) once the guest is gone.
    let slicer = match spec.slices.map(Slicer::start).transpose() {
        Ok(s) => s,
        Err(e) => {
            detach(&names);
            return Err(e.into());
        }
    };
    let started = Instant::now();
    let console = out_dir.join("guest-console.log");
    let share = match (spec.quota, spec.slices) {
        (Some(q), _) => f64::from(q.pct) / 100.0,
        (None, Some(s)) => f64::from(s.share_pct) / 100.0,
        (None, None) => 1.0,
    };
    let mut heartbeat = hang::Heartbeat::new(&out_dir, hang::stall_limit(share));
    let mut cpu_log = cg
        .as_ref()
        .map(|cg| CpuLog::new(cg, Duration::from_secs(1)));
    let result = spawn_guest(
        &names.snd,
        &g,
        cg.as_ref(),
        spec.slices.map(|s| s.cpu),
        &console,
    )
    .map(|mut child| {
        supervise(
            &mut child,
            &out_dir,
            &work,
            spec.timeout,
            &mut heartbeat,
            should_stop,
            &mut || {
                if let Some(log) = cpu_log.as_mut() {
                    log.tick(slicer.as_ref());
                }
            },
        )
    });
    let slice_record = slicer.map(Slicer::stop);
    detach(&names);
    let _ = fs::remove_file(out_dir.join(guest::STOP_FILE));
    let Supervised {
        stopped,
        profile,
        hung,
    } = result?;
    let host_profile =
        profile.map(|p| p.and_then(|p| p.finish(&out_dir)).unwrap_or_else(|why| why));
    let (hung, hang_state) = match hung {
        Some(h) => (Some(h.why), Some(h.state)),
        None => (None, None),
    };
    let task_dump = stopped
        .as_deref()
        .filter(|why| !why.starts_with(INTERRUPTED) && hung.is_none())
        .map(|_| {
            if out_dir.join(guest::TASK_DUMP_FILE).exists() {
                guest::TASK_DUMP_FILE.to_string()
            } else {
                "none: the guest did not record its threads before it was ended".to_string()
            }
        });
    let wall_s = started.elapsed().as_secs_f64();
    if let Some(log) = &cpu_log {
        let path = out_dir.join("guest-cpu.csv");
        log.write(&path).map_err(|e| UmlError::Io {
            path,
            source: std::io::Error::other(e),
        })?;
    }
    drop(cpu_log);
    let cpu_quota = match (&cg, spec.quota) {
        (Some(cg), Some(_)) => Some(quota_record(cg)?),
        _ => None,
    };
    let probes = clock_listener.map(clock_probe::Listener::finish);
    let trace = spec
        .trace
        .as_ref()
        .map(|tr| {
            trace_record(
                &out_dir,
                tr,
                slice_record.as_ref(),
                probes.as_deref().unwrap_or_default(),
            )
        })
        .transpose()?;
    let cpu_slices = match slice_record {
        Some(slicer) => {
            let usage_us = match &cg {
                Some(cg) => cg.stat()?.usage_us,
                None => None,
            };
            Some(SlicesRecord {
                slicer,
                usage_us,
                received_share: usage_us.map(|u| u as f64 / (wall_s * 1e6)),
            })
        }
        None => None,
    };
    drop(cg);
    let _ = fs::remove_dir_all(&work);
    let guest_exit = fs::read_to_string(out_dir.join(guest::EXIT_FILE))
        .ok()
        .and_then(|t| t.trim().parse().ok());
    let record = RunRecord {
        kernel: spec.kernel.display().to_string(),
        kernel_args: guest::kernel_args(&g),
        init_script: script,
        tap: TAP.into(),
        guest_addr: guest::GUEST_ADDR.into(),
        mtu: spec.mtu,
        sysctls: spec.sysctls.clone(),
        command: spec.command.clone(),
        cpu_quota,
        cpu_slices,
        trace,
        guest_exit,
        stopped,
        task_dump,
        host_profile,
        hung,
        hang_state,
        wall_s,
    };
    let json_path = out_dir.join("uml.json");
    let json = serde_json::to_vec_pretty(&record).expect("record serializes");
    fs::write(&json_path, json).map_err(io_err(&json_path))?;
    Ok(record)
}

fn write_executable(path: &Path, text: &str) -> Result<(), UmlError> {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, text).map_err(io_err(path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).map_err(io_err(path))
}

fn quota_record(cg: &GuestCgroup) -> Result<QuotaRecord, UmlError> {
    let stat = cg.stat()?;
    Ok(QuotaRecord {
        pct: cg.quota.pct,
        period_us: cg.quota.period_us(),
        quota_us: cg.quota.quota_us(),
        cgroup_version: cg.version,
        cgroup: cg.dir.display().to_string(),
        throttled_share: (stat.nr_periods > 0)
            .then(|| stat.nr_throttled as f64 / stat.nr_periods as f64),
        stat,
    })
}

/// Why the host stopped a guest when the user asked it to (as opposed to its timeout).
const INTERRUPTED: &str = "interrupted";

/// How supervision ended: why the host stopped the guest, if it did, the profile it
/// started when the guest ran past its time or hung, and what it found in a hung guest.
struct Supervised {
    stopped: Option<String>,
    profile: Option<Result<Profiler, NoProfile>>,
    hung: Option<Hung>,
}

/// A guest found hung: why it counts as hung, and the state file (or why there is none).
struct Hung {
    why: String,
    state: String,
}

/// Why the host is ending a guest, and how.
enum StopReason {
    /// Asked by the user: the command is asked to stop.
    Interrupted,
    /// Past its time: the guest records its command's threads, then the command is asked.
    Timeout(String),
    /// Its clock stopped: its init loop cannot act on a stop file, so the kernel's timer
    /// state is recorded and the kernel ended at once.
    Hung(String, Duration),
}

/// Waits for the guest to power off. On a stop request or the timeout, asks its command to
/// stop (the stop file), then ends the kernel after a grace period. Past the timeout, or
/// when the guest's init loop stands still (hang.rs), it first profiles the guest's host
/// processes for a few seconds (profile.rs), so that the profile shows the state that kept
/// the command running, not its shutdown; a hung guest's timer state is then recorded and
/// its kernel ended without waiting.
fn supervise(
    child: &mut Child,
    out_dir: &Path,
    work: &Path,
    timeout: Duration,
    heartbeat: &mut hang::Heartbeat,
    should_stop: &mut dyn FnMut() -> bool,
    tick: &mut dyn FnMut(),
) -> Supervised {
    const GRACE: Duration = Duration::from_secs(30);
    let started = Instant::now();
    let mut profile = None;
    let mut hung = None;
    // Why the guest is to be stopped, and from when (after the profile's sampling).
    let mut pending: Option<(Instant, StopReason)> = None;
    let mut asked: Option<(Instant, String)> = None;
    let pid = child.id();
    let start_profile = |profile: &mut Option<Result<Profiler, NoProfile>>| {
        let p = Profiler::start(pid, work);
        let sampling = if p.is_ok() {
            profile::SAMPLING + Duration::from_millis(500)
        } else {
            Duration::ZERO
        };
        *profile = Some(p);
        Instant::now() + sampling
    };
    loop {
        tick();
        if let Ok(Some(_)) = child.try_wait() {
            let stopped = asked.map(|(_, why)| why).or(pending.map(|(_, r)| match r {
                StopReason::Interrupted => INTERRUPTED.to_string(),
                StopReason::Timeout(why) | StopReason::Hung(why, _) => why,
            }));
            return Supervised {
                stopped,
                profile,
                hung,
            };
        }
        if asked.is_none() && pending.is_none() {
            // A guest that has reported its exit, or was asked to stop, has left its loop.
            let stall = if out_dir.join(guest::EXIT_FILE).exists() {
                None
            } else {
                heartbeat.stalled(Instant::now())
            };
            if should_stop() {
                pending = Some((Instant::now(), StopReason::Interrupted));
            } else if let Some(age) = stall {
                let why = format!(
                    "hung: its init loop stood still for {:.1} s (limit {} s) at {:.1} s",
                    age.as_secs_f64(),
                    heartbeat.limit().as_secs(),
                    started.elapsed().as_secs_f64()
                );
                let from = start_profile(&mut profile);
                pending = Some((from, StopReason::Hung(why, age)));
            } else if started.elapsed() >= timeout {
                let from = start_profile(&mut profile);
                pending = Some((
                    from,
                    StopReason::Timeout(format!("still running after {} s", timeout.as_secs())),
                ));
            }
        }
        if let Some((_, reason)) = pending.take_if(|(from, _)| Instant::now() >= *from) {
            match reason {
                StopReason::Hung(why, age) => {
                    let state =
                        hang::record_state(pid, out_dir, work, age).unwrap_or_else(|why| why);
                    hung = Some(Hung {
                        why: why.clone(),
                        state,
                    });
                    // Straight to the end of the grace period: nothing in the guest acts.
                    asked = Some((Instant::now() - GRACE, why));
                }
                StopReason::Interrupted => {
                    let _ = fs::write(out_dir.join(guest::STOP_FILE), "");
                    asked = Some((Instant::now(), INTERRUPTED.to_string()));
                }
                StopReason::Timeout(why) => {
                    // Past its time, the guest records its command's threads before
                    // stopping it.
                    let _ = fs::write(out_dir.join(guest::STOP_FILE), guest::STOP_TIMEOUT);
                    asked = Some((Instant::now(), why));
                }
            }
        }
        if let Some((at, why)) = &asked {
            if at.elapsed() >= GRACE {
                // UML exits on SIGTERM after tidying its host side (last_ditch_exit).
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        let stopped = Some(format!("{why}; the guest was ended"));
                        return Supervised {
                            stopped,
                            profile,
                            hung,
                        };
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = child.kill();
                let _ = child.wait();
                let stopped = Some(format!("{why}; the guest was killed"));
                return Supervised {
                    stopped,
                    profile,
                    hung,
                };
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
