//! Running a matrix on the emulated path: bring the path up once, set the bottleneck per
//! cell in place, run sbm-sink and sbm-send in their namespaces, collect, tear down — on
//! success, on failure and on Ctrl-C. Finished cells are never touched again; `--resume`
//! runs only the cells without an `ok` cell.json.

use std::fs;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::signal::Signal;

use super::argv::{emulated_sink, send_args, send_flows};
use super::process::{
    bin_dir, fmt_dur, last_error_line, now_unix_s, spawn_logged, stop_child, testbed_status,
    utc_stamp, wait_child, NsSysctls, Waited,
};
use super::record::Meta;
use super::record::{CellStatus, Status};
use super::run_report::CellPlots;
use super::schedule;
use super::spec::{Cell, MatrixSpec, SenderKernel, SpecError, Workload};
use super::store::store_cell;
use crate::signals::StopSignals;
use crate::testbed::wan;

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub matrix: PathBuf,
    pub out: Option<PathBuf>,
    pub only: Option<String>,
    pub resume: bool,
    pub dry_run: bool,
    pub prefix: Option<String>,
}

/// Why `sbm-matrix run` or `report` stopped, typed up to where main prints it.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Spec {
        path: PathBuf,
        #[source]
        source: SpecError,
    },
    #[error(transparent)]
    Cells(SpecError),
    #[error("cell {cell}: its sender arguments are refused: {reason}")]
    SenderArgs { cell: String, reason: String },
    #[error("{} has no matrix.toml: not a run directory", .0.display())]
    NotARunDir(PathBuf),
    #[error("--only {0:?} matches no cell")]
    NoCellMatches(String),
    #[error("{0}: no such cell in the run's matrix.toml")]
    NoSuchCell(String),
    #[error(
        "the matrix runs on the emulated path and needs root (network namespaces, tc, iptables)"
    )]
    NotRoot,
    #[error("signalfd: {0}")]
    Signals(nix::Error),
    #[error("UML kernel: {0}")]
    UmlKernel(String),
    #[error("emulated path: {0}")]
    Path(#[from] wan::TestbedError),
    #[error("report: {0}")]
    Report(String),
    #[error("compare: {0}")]
    Compare(String),
}

pub(super) fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> MatrixError + '_ {
    move |source| MatrixError::File {
        path: path.to_path_buf(),
        source,
    }
}

/// Loads a matrix file; its name defaults to the file's stem.
pub fn load(path: &Path) -> Result<(MatrixSpec, String), MatrixError> {
    let spec_error = |source| MatrixError::Spec {
        path: path.to_path_buf(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(file_error(path))?;
    let mut spec = MatrixSpec::parse(&text).map_err(spec_error)?;
    if spec.name.is_none() {
        spec.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    }
    spec.validate().map_err(spec_error)?;
    Ok((spec, text))
}

/// A rough wall time of one cell: the run, a drain, the pause and set-up.
pub fn estimate(spec: &MatrixSpec, cell: &Cell) -> Duration {
    let pause = crate::units::parse_duration_or_zero(&spec.pause).unwrap_or_default();
    cell.duration
        + cell.drain_timeout.unwrap_or(Duration::from_secs(5))
        + pause
        + Duration::from_secs(3)
}

/// The emulated path for the whole run; torn down when dropped.
struct PathGuard {
    prefix: String,
}

impl Drop for PathGuard {
    fn drop(&mut self) {
        for p in wan::down(&self.prefix) {
            eprintln!("sbm-matrix: {p}");
        }
    }
}

/// How long a sender may take to connect before its cell's schedule is abandoned (a UML
/// guest boots first).
const CONNECT_PATIENCE: Duration = Duration::from_secs(120);

/// Wraps the sbm-send command line so that it runs where the cell says: in the bed's
/// snd namespace, or inside a UML guest of the patched kernel (`kernel`) attached to it.
fn sender_command(
    spec: &MatrixSpec,
    prefix: &str,
    cell: &Cell,
    dir: &Path,
    kernel: Option<&Path>,
    sender: Vec<String>,
) -> Vec<String> {
    let mut cmd: Vec<String> = match (cell.sender_kernel, kernel) {
        (SenderKernel::Uml, Some(kernel)) => {
            let limit = cell.duration
                + cell.drain_timeout.unwrap_or(Duration::from_secs(60))
                + Duration::from_secs(30);
            let mut c: Vec<String> = vec![
                bin_dir().join("sbm-testbed").to_string_lossy().into_owned(),
                "uml".into(),
                "run".into(),
                "--prefix".into(),
                prefix.into(),
                "--kernel".into(),
                kernel.to_string_lossy().into_owned(),
                "--out".into(),
                dir.to_string_lossy().into_owned(),
                "--mtu".into(),
                spec.uml.mtu.to_string(),
                "--mem".into(),
                spec.uml.mem.to_string(),
                "--timeout".into(),
                format!("{}s", limit.as_secs()),
            ];
            if let Some(q) = cell.cpu_quota {
                c.extend([
                    "--cpu-quota".into(),
                    q.to_string(),
                    "--cpu-period".into(),
                    spec.uml.cpu_period.clone(),
                ]);
            }
            if let Some(q) = cell.cpu_slices {
                c.extend([
                    "--cpu-slices".into(),
                    q.to_string(),
                    "--cpu-period".into(),
                    spec.uml.cpu_period.clone(),
                ]);
            }
            for (k, v) in &cell.guest_sysctls {
                c.extend(["--sysctl".into(), format!("{k}={v}")]);
            }
            for e in &cell.guest_trace_events {
                c.extend(["--trace-event".into(), e.clone()]);
            }
            c.push("--".into());
            c
        }
        _ => vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            wan::Names::new(prefix).snd,
        ],
    };
    cmd.extend(sender);
    cmd
}

/// Every cell's sbm-send command line goes through sbm-send's own parser before anything
/// is built (a path, a UML kernel): a typo in `args` is one line now, not a failed cell
/// after minutes of set-up.
pub fn check_send_args(spec: &MatrixSpec, cells: &[Cell]) -> Result<(), MatrixError> {
    use clap::Parser as _;
    for cell in cells {
        if let Workload::Command { server, .. } = &cell.workload {
            super::command::check_trace_args(spec, cell, server).map_err(|reason| {
                MatrixError::SenderArgs {
                    cell: cell.name.clone(),
                    reason,
                }
            })?;
            continue;
        }
        let mut argv = vec!["sbm-send".to_string()];
        argv.extend(send_args(spec, cell, "OUT", &emulated_sink()));
        let parsed = crate::send::cli::SendArgs::try_parse_from(&argv)
            .map_err(|e| crate::cli::one_line("sbm-send", &e.render().to_string()));
        if let Err(reason) = parsed.and_then(|a| a.check().map(drop)) {
            return Err(MatrixError::SenderArgs {
                cell: cell.name.clone(),
                reason,
            });
        }
    }
    Ok(())
}

/// Sets the bottleneck the cell asks for, if the path's differs.
pub(super) fn set_bottleneck(prefix: &str, cell: &Cell) -> Result<(), String> {
    if let Some(state) = wan::load_state(prefix) {
        if state.rate_bps != cell.rate_bps
            || state.queue_us != cell.queue.as_micros() as u64
            || state.bottleneck != cell.bottleneck
        {
            wan::set(
                prefix,
                cell.rate_bps,
                Some(cell.queue),
                Some(cell.bottleneck),
            )
            .map_err(|e| format!("setting the bottleneck: {e}"))?;
        }
    }
    Ok(())
}

/// Runs one cell in `dir`. Returns its status and whether the run was interrupted.
fn run_cell(
    spec: &MatrixSpec,
    prefix: &str,
    cell: &Cell,
    dir: &Path,
    kernel: Option<&Path>,
    signals: &StopSignals,
) -> (CellStatus, bool) {
    let mut st = CellStatus::starting(&cell.name, None);
    let _ = std::fs::create_dir_all(dir);
    let names = wan::Names::new(prefix);
    let bins = bin_dir();
    let sysctls = match set_bottleneck(prefix, cell).and_then(|()| NsSysctls::apply(prefix, cell)) {
        Ok(g) => g,
        Err(e) => {
            st.error = Some(e);
            st.ended_unix_s = now_unix_s();
            return (st, false);
        }
    };
    if let Workload::Command { server, client } = &cell.workload {
        return super::command::run_cell(
            &super::command::CommandCell {
                spec,
                prefix,
                cell,
                dir,
                server,
                client,
                sysctls: &sysctls,
            },
            st,
            signals,
        );
    }
    let before = testbed_status(prefix);
    let mut sink_cmd: Vec<String> = vec![
        "ip".into(),
        "netns".into(),
        "exec".into(),
        names.rcv.clone(),
        bins.join("sbm-sink").to_string_lossy().into_owned(),
        "--listen".into(),
        emulated_sink(),
        // The sink ends with the sender's connections: one, or each of `-P N` flows.
        "--conns".into(),
        send_flows(spec, cell).to_string(),
        "--out".into(),
        dir.to_string_lossy().into_owned(),
        "-q".into(),
    ];
    sink_cmd.extend(cell.sink_args.iter().cloned());
    let mut send_cmd = vec![bins.join("sbm-send").to_string_lossy().into_owned()];
    send_cmd.extend(send_args(
        spec,
        cell,
        &dir.to_string_lossy(),
        &emulated_sink(),
    ));
    let send_cmd = sender_command(spec, prefix, cell, dir, kernel, send_cmd);

    let sink_log = dir.join("sink.log");
    let mut sink = match spawn_logged(&sink_cmd, &sink_log) {
        Ok(c) => c,
        Err(e) => {
            st.error = Some(e);
            return (st, false);
        }
    };
    // Wait for the sink to listen before the sender connects.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&sink_log).is_ok_and(|t| t.contains("listening on")) {
        if Instant::now() >= deadline || sink.try_wait().ok().flatten().is_some() {
            st.error = Some(
                last_error_line(&sink_log, "sbm-sink")
                    .unwrap_or_else(|| "sbm-sink did not start".into()),
            );
            stop_child(&mut sink, Signal::SIGTERM, Duration::from_secs(2));
            return (st, false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let send_log = dir.join("send.log");
    // A rerun cell's old console must not show a connection before this one's.
    let _ = std::fs::remove_file(dir.join("guest-console.log"));
    let mut send = match spawn_logged(&send_cmd, &send_log) {
        Ok(c) => c,
        Err(e) => {
            st.error = Some(e);
            stop_child(&mut sink, Signal::SIGTERM, Duration::from_secs(2));
            return (st, false);
        }
    };
    let limit = cell.duration
        + cell.drain_timeout.unwrap_or(Duration::from_secs(60))
        + Duration::from_secs(60);
    let spawned = Instant::now();
    // A schedule counts from the sender's connection (a UML sender boots first).
    let origin = if cell.schedule.is_empty() {
        None
    } else {
        let console = dir.join("guest-console.log");
        schedule::wait_for_connect(&[&send_log, &console], CONNECT_PATIENCE, &mut || {
            matches!(send.try_wait(), Ok(None))
        })
    };
    let origin_unix_ns = origin.map(|_| crate::clock::realtime_ns());
    let mut rate_changes = vec![];
    let mut interrupted = false;
    let send_status = loop {
        let step = origin.zip(cell.schedule.get(rate_changes.len()));
        let left = limit.saturating_sub(spawned.elapsed());
        let wait = step.map_or(left, |(o, s)| {
            (o + s.at)
                .saturating_duration_since(Instant::now())
                .min(left)
        });
        match wait_child(&mut send, wait, signals) {
            Waited::Exited(s) => break Some(s),
            Waited::TimedOut => match step {
                Some((o, s)) if Instant::now() >= o + s.at && spawned.elapsed() < limit => {
                    rate_changes.push(schedule::apply(prefix, s, o));
                }
                _ => {
                    st.error = Some(format!(
                        "sbm-send still running after {}s: stopped",
                        limit.as_secs()
                    ));
                    break stop_child(&mut send, Signal::SIGINT, Duration::from_secs(30));
                }
            },
            Waited::Interrupted => {
                interrupted = true;
                break stop_child(&mut send, Signal::SIGINT, Duration::from_secs(30));
            }
        }
    };
    if !cell.schedule.is_empty() && origin.is_none() {
        st.error.get_or_insert_with(|| {
            "rate schedule not applied: the sender's banner (its connection) never appeared in its log".into()
        });
    }
    if let Some(e) = rate_changes.iter().find_map(|c| c.error.as_ref()) {
        st.error
            .get_or_insert_with(|| format!("changing the bottleneck: {e}"));
    }
    st.send_exit = send_status.and_then(|s| s.code());
    // The sink exits by itself (--once) when the sender's connection ends; an interrupted
    // cell stops it at once.
    let sink_wait = if interrupted {
        Duration::ZERO
    } else {
        Duration::from_secs(15)
    };
    let sink_status = match wait_child(&mut sink, sink_wait, signals) {
        Waited::Exited(s) => Some(s),
        Waited::Interrupted => {
            interrupted = true;
            stop_child(&mut sink, Signal::SIGTERM, Duration::from_secs(5))
        }
        Waited::TimedOut => stop_child(&mut sink, Signal::SIGTERM, Duration::from_secs(5)),
    };
    st.sink_exit = sink_status.and_then(|s| s.code());
    let mut meta = Meta::new(cell, sink_cmd, send_cmd);
    meta.ns_sysctls = sysctls.applied();
    meta.testbed_before = before;
    meta.testbed_after = testbed_status(prefix);
    meta.schedule_origin_unix_ns = origin_unix_ns;
    meta.rate_changes = rate_changes;
    meta.write(dir);
    st.status = if interrupted {
        Status::Interrupted
    } else if st.send_exit == Some(0) && st.error.is_none() {
        Status::Ok
    } else {
        st.error.get_or_insert_with(|| {
            last_error_line(&send_log, "sbm-send")
                .unwrap_or_else(|| format!("sbm-send exited with {:?}", st.send_exit))
        });
        Status::Failed
    };
    st.ended_unix_s = now_unix_s();
    (st, interrupted)
}

/// The cells on the emulated path: the path up once, the cells one after another, the path
/// down on every way out. Returns the exit status.
fn run_emulated(
    spec: &MatrixSpec,
    todo: &[&Cell],
    run_dir: &Path,
    signals: &StopSignals,
    prefix: Option<String>,
    total: Duration,
) -> Result<i32, MatrixError> {
    let prefix = prefix.unwrap_or_else(|| format!("mx{}", std::process::id() % 1_000_000));
    let path = wan::WanSpec {
        prefix: prefix.clone(),
        rtt: crate::units::parse_duration_or_zero(&spec.path.rtt)
            .map_err(|e| MatrixError::Cells(SpecError::Invalid(format!("path.rtt: {e}"))))?,
        rate_bps: todo.first().and_then(|c| c.rate_bps),
        queue: match todo.first() {
            Some(c) => c.queue,
            None => crate::units::parse_duration(&spec.path.queue)
                .map_err(|e| MatrixError::Cells(SpecError::Invalid(format!("path.queue: {e}"))))?,
        },
        shape_at: spec.path.shape_at().map_err(MatrixError::Cells)?,
        delay_impl: spec.path.delay_impl,
        bottleneck: todo.first().map_or_else(Default::default, |c| c.bottleneck),
        owner: std::process::id(),
    };
    // The patched kernel for UML cells, built (or found in the cache) before the path
    // goes up: a first build takes minutes.
    let kernel = if todo.iter().any(|c| c.sender_kernel == SenderKernel::Uml) {
        let built = crate::testbed::uml::build::build_from(
            &crate::testbed::uml::build::default_kernel_dir(),
            crate::testbed::uml::build::default_cache_root(),
            None,
            false,
            &mut |line| crate::say!("sbm-matrix: UML kernel: {line}"),
        )
        .map_err(|e| MatrixError::UmlKernel(e.to_string()))?;
        crate::say!(
            "sbm-matrix: UML kernel {} (key {})",
            built.kernel.display(),
            built.record.key
        );
        Some(built.kernel)
    } else {
        None
    };
    crate::say!(
        "sbm-matrix: {} cells -> {} (about {})",
        todo.len(),
        run_dir.display(),
        fmt_dur(total)
    );
    let mut exit = 0;
    {
        let _guard = PathGuard {
            prefix: prefix.clone(),
        };
        wan::up(&path)?;
        let tty = std::io::stdout().is_terminal();
        let mut left = total;
        let pause = crate::units::parse_duration_or_zero(&spec.pause).unwrap_or_default();
        for (k, cell) in todo.iter().enumerate() {
            if k > 0 && !pause.is_zero() {
                let mut fds = [PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
                let ms = u16::try_from(pause.as_millis()).unwrap_or(u16::MAX);
                if poll(&mut fds, ms).is_ok_and(|n| n > 0) && signals.take().is_some() {
                    exit = 130;
                    break;
                }
            }
            let line = format!(
                "[{}/{}] {} (ETA {})",
                k + 1,
                todo.len(),
                cell.name,
                fmt_dur(left)
            );
            if tty {
                crate::say_partial!("\r\x1b[2K{line}");
            } else {
                crate::say!("{line}");
            }
            let _ = std::io::stdout().flush();
            let dir = run_dir.join(&cell.name);
            let (st, interrupted) = run_hung_again(cell, &dir, run_dir, || {
                run_cell(spec, &prefix, cell, &dir, kernel.as_deref(), signals)
            });
            let result = store_cell(cell, &dir, &st);
            left = left.saturating_sub(estimate(spec, cell));
            if tty {
                crate::say!(
                    "\r\x1b[2K[{}/{}] {}: {result}",
                    k + 1,
                    todo.len(),
                    cell.name
                );
            } else {
                crate::say!("  {}: {result}", cell.name);
            }
            if interrupted {
                exit = 130;
                break;
            }
            if st.status != Status::Ok {
                exit = 1;
            }
        }
    }
    Ok(exit)
}

/// How many times a cell whose UML guest hung is run again before it counts as failed.
const HUNG_RETRIES: usize = 2;
/// Where the attempts whose guest hung are kept, in the run's directory.
pub const HUNG_DIR: &str = "hung";

/// Runs a cell, and again (up to [`HUNG_RETRIES`] times) when its UML guest hung (uml.json's
/// `hung`, set by testbed/uml/hang.rs within seconds of the guest's clock stopping): such an
/// attempt measured a broken guest, not the cell. Each hung attempt that is run again is kept
/// whole, with the guest's timer state and profile, as hung/CELL-aN; the last stays as the
/// cell's failure.
fn run_hung_again(
    cell: &Cell,
    dir: &Path,
    run_dir: &Path,
    mut run: impl FnMut() -> (CellStatus, bool),
) -> (CellStatus, bool) {
    let mut attempt = 1;
    loop {
        let (st, interrupted) = run();
        let hung = (st.status == Status::Failed && cell.sender_kernel == SenderKernel::Uml)
            .then(|| hung_guest(dir))
            .flatten();
        let Some(why) = hung else {
            return (st, interrupted);
        };
        // The last attempt stays where it is, as the cell's failure (`--resume` runs it).
        if interrupted || attempt > HUNG_RETRIES {
            return (st, interrupted);
        }
        let kept = run_dir
            .join(HUNG_DIR)
            .join(format!("{}-a{attempt}", cell.name));
        let moved =
            fs::create_dir_all(run_dir.join(HUNG_DIR)).and_then(|()| fs::rename(dir, &kept));
        if let Err(e) = moved {
            crate::say!(
                "  {}: the guest {why}; could not keep the attempt in {}: {e}",
                cell.name,
                kept.display()
            );
            return (st, interrupted);
        }
        crate::say!(
            "  {}: the guest {why}; attempt kept in {}, running the cell again",
            cell.name,
            kept.display()
        );
        attempt += 1;
    }
}

/// Why a cell's UML guest counted as hung, if it did (its uml.json).
fn hung_guest(dir: &Path) -> Option<String> {
    let text = fs::read(dir.join("uml.json")).ok()?;
    serde_json::from_slice::<crate::testbed::uml::RunRecord>(&text)
        .ok()?
        .hung
}

/// `sbm-matrix run`. Returns the exit status.
pub fn run(opts: &RunOptions) -> Result<i32, MatrixError> {
    // With --resume the run directory's own copy of the matrix is authoritative (clap
    // makes --resume require --out).
    let (spec, text, run_dir) = match (&opts.out, opts.resume) {
        (Some(dir), true) => {
            let dir = dir.clone();
            let stored = dir.join("matrix.toml");
            if !stored.exists() {
                return Err(MatrixError::NotARunDir(dir));
            }
            let (mut spec, text) = load(&stored)?;
            if let Ok((given, _)) = load(&opts.matrix) {
                spec.name = given.name;
            }
            (spec, text, dir)
        }
        _ => {
            let (spec, text) = load(&opts.matrix)?;
            let dir = opts.out.clone().unwrap_or_else(|| {
                PathBuf::from("results").join(format!(
                    "{}-{}",
                    spec.name.clone().unwrap_or_default(),
                    utc_stamp()
                ))
            });
            (spec, text, dir)
        }
    };
    let all = spec.cells().map_err(MatrixError::Cells)?;
    check_send_args(&spec, &all)?;
    let filters: Vec<&str> = opts
        .only
        .as_deref()
        .map(|f| f.split(',').collect())
        .unwrap_or_default();
    let selected: Vec<&Cell> = all
        .iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name.contains(f)))
        .collect();
    if selected.is_empty() {
        return Err(MatrixError::NoCellMatches(
            opts.only.clone().unwrap_or_default(),
        ));
    }
    let todo: Vec<&Cell> = selected
        .iter()
        .copied()
        .filter(|c| {
            !opts.resume
                || CellStatus::read(&run_dir.join(&c.name)).is_none_or(|s| s.status != Status::Ok)
        })
        .collect();
    let total: Duration = todo.iter().map(|c| estimate(&spec, c)).sum();
    if opts.dry_run {
        crate::say!(
            "matrix {}: {} cells to run, about {} in all",
            spec.name.clone().unwrap_or_default(),
            todo.len(),
            fmt_dur(total)
        );
        for p in spec.host_pairs().unwrap_or_default() {
            crate::say!(
                "  pair {}: {} -> {} (sink {}{})",
                p.name,
                p.sender,
                p.receiver,
                p.sink_addr(),
                p.shaped_dev
                    .as_deref()
                    .map_or(String::new(), |d| format!(", shaping {d}"))
            );
        }
        for c in &todo {
            crate::say!(
                "  {:<40} {:<8} {:<28} {:>7} {}{}{}{} {:>5} ~{}",
                c.name,
                c.rate,
                c.label,
                c.write_size,
                c.cc,
                if c.nodelay { " nodelay" } else { "" },
                if c.sender_kernel == SenderKernel::Uml {
                    " uml"
                } else {
                    ""
                },
                c.cpu_quota
                    .map(|q| format!(" cpu {q}%"))
                    .or(c.cpu_slices.map(|q| format!(" cpu slices {q}%")))
                    .unwrap_or_default(),
                format!("{}s", c.duration.as_secs()),
                fmt_dur(estimate(&spec, c)),
            );
        }
        return Ok(0);
    }
    if !spec.path.is_hosts() && !nix::unistd::geteuid().is_root() {
        return Err(MatrixError::NotRoot);
    }
    std::fs::create_dir_all(&run_dir).map_err(file_error(&run_dir))?;
    // The run directory keeps its own copy, named, so that `report` and `--resume` need
    // nothing else.
    let stored = if MatrixSpec::parse(&text).is_ok_and(|m| m.name.is_some()) {
        text.clone()
    } else {
        format!("name = {:?}\n{text}", spec.name.clone().unwrap_or_default())
    };
    let stored_path = run_dir.join("matrix.toml");
    std::fs::write(&stored_path, stored).map_err(file_error(&stored_path))?;
    let signals = StopSignals::install().map_err(MatrixError::Signals)?;

    let exit = if spec.path.is_hosts() {
        super::hosts::run_cells(&spec, &todo, &run_dir, &signals, total)
    } else {
        run_emulated(&spec, &todo, &run_dir, &signals, opts.prefix.clone(), total)?
    };
    let table = super::export::write_all(&run_dir, &spec, &all, CellPlots::default())
        .map_err(MatrixError::Report)?;
    crate::say!("\n{table}");
    crate::say!(
        "results: {}/ (summary.csv, table.md, plots/, one directory per cell)",
        run_dir.display()
    );
    if exit == 130 {
        crate::say!(
            "interrupted: finished cells are kept; complete the run with: scripts/matrix run {} --out {} --resume",
            opts.matrix.display(),
            run_dir.display()
        );
    }
    Ok(exit)
}

/// `sbm-matrix report DIR`.
pub fn rebuild_report(dir: &Path, plots: CellPlots) -> Result<String, MatrixError> {
    let (spec, _) = load(&dir.join("matrix.toml"))?;
    let cells = spec.cells().map_err(MatrixError::Cells)?;
    super::export::write_all(dir, &spec, &cells, plots).map_err(MatrixError::Report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell whose guest hung (uml.json `hung`) is run again, the hung attempt kept whole
    /// under hung/; one that failed otherwise, or hung past the retries, is not.
    #[test]
    fn a_cell_whose_guest_hung_runs_again_and_the_attempt_is_kept() {
        let (spec, _) = load(Path::new("scripts/matrices/uml-quick.toml")).unwrap();
        let cell = spec.cells().unwrap().remove(0);
        assert_eq!(cell.sender_kernel, SenderKernel::Uml);
        let run_dir = std::env::temp_dir().join(format!("sbm-hung-{}", std::process::id()));
        let _ = fs::remove_dir_all(&run_dir);
        let dir = run_dir.join(&cell.name);
        let attempt = |hung: bool, n: &mut usize| {
            *n += 1;
            fs::create_dir_all(&dir).unwrap();
            let record = crate::testbed::uml::RunRecord {
                hung: hung.then(|| "hung: its init loop stood still".to_string()),
                ..Default::default()
            };
            fs::write(dir.join("uml.json"), serde_json::to_vec(&record).unwrap()).unwrap();
            fs::write(dir.join("attempt"), n.to_string()).unwrap();
            (CellStatus::starting(&cell.name, None), false)
        };
        // Hung once, then a failure of another kind: run twice, the first attempt kept.
        let mut n = 0;
        let (st, _) = run_hung_again(&cell, &dir, &run_dir, || attempt(n == 0, &mut n));
        assert_eq!((n, st.status), (2, Status::Failed));
        let kept = run_dir.join(HUNG_DIR).join(format!("{}-a1", cell.name));
        assert_eq!(fs::read_to_string(kept.join("attempt")).unwrap(), "1");
        assert_eq!(fs::read_to_string(dir.join("attempt")).unwrap(), "2");
        // Hung every time: 1 + HUNG_RETRIES attempts, then it counts as failed, the last
        // attempt in the cell's place.
        fs::remove_dir_all(&run_dir).unwrap();
        let mut n = 0;
        let (st, _) = run_hung_again(&cell, &dir, &run_dir, || attempt(true, &mut n));
        assert_eq!((n, st.status), (1 + HUNG_RETRIES, Status::Failed));
        assert_eq!(
            fs::read_dir(run_dir.join(HUNG_DIR)).unwrap().count(),
            HUNG_RETRIES
        );
        assert!(dir.join("uml.json").exists());
        fs::remove_dir_all(&run_dir).unwrap();
    }

    #[test]
    fn utc_stamps_look_right() {
        let s = utc_stamp();
        assert_eq!(s.len(), 16);
        assert!(
            s.starts_with("20") && s.ends_with('Z') && s.as_bytes()[8] == b'T',
            "{s}"
        );
    }
}
