//! sbm-trace's run: the cgroup, the programs, the command, and the event loop that turns
//! the program's events into per-connection files.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::conn::{Connection, TracedWrite};
use crate::bpf::cgroup::FreshCgroup;
use crate::bpf::replenish::{self, BpfReplenishLink};
use crate::bpf::trace::{EventKind, TraceSettings, Tracer};
use crate::clock::MonoToReal;
use crate::report::csv_file::CsvFile;
use crate::report::csv_row::RowFile;
use crate::report::schema::{
    AttributionCounts, Resources, TraceConnSummary, TraceIntervalRow, TraceSummary, WriteRow,
};
use crate::signals::StopSignals;
use crate::stats::LatencyHist;
use crate::tstamp::sampler::Departure;
use crate::tstamp::StampState;
use crate::units::{BitRate, Bytes, Micros};

/// What a trace is asked to do.
#[derive(Debug, Clone)]
pub struct TraceConfig {
    pub command: Vec<OsString>,
    pub cgroup: Option<PathBuf>,
    pub time: Option<Duration>,
    pub port: Option<u16>,
    pub out: Option<PathBuf>,
    pub interval: Duration,
    pub warmup: Duration,
    pub timestamping: bool,
    /// Per-packet departures (off: `--no-departures`).
    pub departures: bool,
    /// Each traced connection's congestion control (None: the program's own choice).
    pub congestion: Option<String>,
    pub replenish: Option<replenish::Settings>,
    pub quiet: bool,
}

/// Where the traced processes live: a cgroup of ours (removed at the end) or the user's.
enum Cgroup {
    Fresh(FreshCgroup),
    Existing(std::fs::File, PathBuf),
}

impl Cgroup {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Cgroup::Fresh(c) => c.as_fd(),
            Cgroup::Existing(f, _) => f.as_fd(),
        }
    }

    fn path(&self) -> &Path {
        match self {
            Cgroup::Fresh(c) => c.path(),
            Cgroup::Existing(_, p) => p,
        }
    }
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One connection's record and files.
struct Traced {
    conn: Connection,
    writes: Option<RowFile>,
    intervals: Option<CsvFile>,
    dir: Option<PathBuf>,
    prev_sched_ns: Option<u64>,
    sojourn: LatencyHist,
    attribution: AttributionCounts,
    /// (written, sent, acked) and writes at the last interval.
    last_progress: (u64, u64, u64),
    last_writes: u64,
}

impl Traced {
    fn take(&mut self, rows: Vec<TracedWrite>) -> Result<(), String> {
        for r in rows {
            let w = &r.timed;
            let warmup = w.write.write_ns < self.conn.warmup_end_ns;
            let advance_us = self
                .prev_sched_ns
                .map(|prev| (prev as i64 - w.write.write_ns as i64) / 1_000);
            self.prev_sched_ns = w.sched.time_ns;
            if !warmup {
                self.attribution.add(w.sched.state.name());
                if matches!(
                    w.sched.state,
                    StampState::Exact | StampState::Coalesced | StampState::Displaced
                ) {
                    if let Some(us) = w.sojourn_us() {
                        self.sojourn.record(us);
                    }
                }
            }
            let departure = r.depart_ns.map(|d| Departure { lo_ns: d, hi_ns: d });
            if let Some(f) = &mut self.writes {
                f.write(&WriteRow::new(
                    w,
                    warmup,
                    advance_us,
                    departure,
                    r.depart_ns,
                ))
                .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    fn summary(&self) -> TraceConnSummary {
        let (written, sent, acked) = self.conn.progress();
        let (goodput_bps, goodput_window_s) = self.conn.goodput();
        let c = &self.conn.counts;
        TraceConnSummary {
            id: self.conn.id,
            cookie: self.conn.cookie,
            local: self
                .conn
                .local
                .map_or_else(|| "?".into(), |a| a.to_string()),
            remote: self
                .conn
                .remote
                .map_or_else(|| "?".into(), |a| a.to_string()),
            established_unix_ns: self.conn.established_ns,
            closed: self.conn.closed,
            writes: c.writes,
            bytes_written: written,
            bytes_sent: sent,
            bytes_acked: acked,
            goodput_bps,
            goodput_window_s,
            sojourn: self.sojourn.percentiles(),
            sojourn_depart: self.conn.depart_sojourn.percentiles(),
            attribution_after_warmup: self.attribution.clone(),
            sched_reports: c.sched,
            snd_reports: c.snd,
            ack_reports: c.ack,
            departures: c.departures,
            stamps_displaced: c.stamps_displaced,
            congestion_error: c.congestion_error,
            timestamping_error: c.timestamping_error,
        }
    }
}

/// Runs the trace to its end; the run's summary.
pub fn run(cfg: &TraceConfig) -> Result<TraceSummary, String> {
    let signals = StopSignals::install().map_err(|e| format!("signalfd: {e}"))?;
    let cgroup = match &cfg.cgroup {
        Some(dir) => Cgroup::Existing(
            std::fs::File::open(dir).map_err(|e| format!("cgroup {}: {e}", dir.display()))?,
            dir.clone(),
        ),
        None => Cgroup::Fresh(FreshCgroup::create("sbm-trace").map_err(|e| e.to_string())?),
    };
    let tracer = Tracer::attach(
        &TraceSettings {
            port: cfg.port,
            timestamping: cfg.timestamping,
            per_packet: cfg.departures,
            // Read every poll interval (50 ms): no event wakes sbm-trace, so none costs the
            // traced program an interrupt.
            wake_reader: false,
            write_events: true,
            congestion: cfg.congestion.clone(),
        },
        cgroup.fd(),
    )
    .map_err(|e| e.to_string())?;
    let _replenish: Option<BpfReplenishLink> = match &cfg.replenish {
        Some(s) => Some(BpfReplenishLink::attach(s, cgroup.fd()).map_err(|e| e.to_string())?),
        None => None,
    };
    if let Some(dir) = &cfg.out {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let clock = MonoToReal::now();
    let started_unix_ns = now_unix_ns();
    let t0 = Instant::now();
    let mut child: Option<Child> = match (&cfg.cgroup, &cgroup) {
        (None, Cgroup::Fresh(c)) => Some(spawn_in(&c.procs_file(), &cfg.command)?),
        _ => None,
    };
    crate::say!(
        "sbm-trace: tracing {} in cgroup {}{}",
        if cfg.command.is_empty() {
            "its processes".to_string()
        } else {
            format!(
                "{:?}",
                cfg.command
                    .iter()
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
            )
        },
        cgroup.path().display(),
        cfg.port.map_or(String::new(), |p| format!(", port {p}"))
    );

    let mut conns: HashMap<u64, Traced> = HashMap::new();
    let mut order: Vec<u64> = vec![];
    let mut events = 0u64;
    let mut next_interval = t0 + cfg.interval;
    let mut exit_status = None;
    let mut end_reason = String::from("command exited");
    let mut drain_until: Option<Instant> = None;
    loop {
        let batch = tracer
            .poll(Duration::from_millis(50))
            .map_err(|e| e.to_string())?;
        events += batch.len() as u64;
        for ev in &batch {
            if ev.kind == EventKind::Established {
                let id = order.len() as u32;
                let mut conn = Connection::new(id, ev, clock);
                conn.warmup_end_ns = conn.established_ns + cfg.warmup.as_nanos() as u64;
                let dir = cfg.out.as_ref().map(|d| d.join(format!("conn-{id}")));
                let (writes, intervals) = match &dir {
                    Some(d) => {
                        std::fs::create_dir_all(d)
                            .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
                        (
                            Some(
                                RowFile::create::<WriteRow>(&d.join("writes.csv"))
                                    .map_err(|e| e.to_string())?,
                            ),
                            Some(
                                CsvFile::create(&d.join("intervals.csv"))
                                    .map_err(|e| e.to_string())?,
                            ),
                        )
                    }
                    None => (None, None),
                };
                if !cfg.quiet {
                    crate::say!(
                        "[conn {id}] {} -> {}",
                        conn.local.map_or_else(|| "?".into(), |a| a.to_string()),
                        conn.remote.map_or_else(|| "?".into(), |a| a.to_string())
                    );
                }
                order.push(ev.cookie);
                conns.insert(
                    ev.cookie,
                    Traced {
                        conn,
                        writes,
                        intervals,
                        dir,
                        prev_sched_ns: None,
                        sojourn: LatencyHist::new(),
                        attribution: AttributionCounts::default(),
                        last_progress: (0, 0, 0),
                        last_writes: 0,
                    },
                );
                continue;
            }
            if let Some(t) = conns.get_mut(&ev.cookie) {
                let mut rows = vec![];
                t.conn.on_event(ev, &mut rows);
                t.take(rows)?;
            }
        }
        let now = Instant::now();
        if now >= next_interval {
            let start = next_interval - cfg.interval;
            let span = Span {
                start_s: start.duration_since(t0).as_secs_f64(),
                end_s: now.duration_since(t0).as_secs_f64(),
                start_unix_ns: started_unix_ns + start.duration_since(t0).as_nanos() as u64,
            };
            intervals(&mut conns, &order, &span, cfg.quiet)?;
            next_interval += cfg.interval;
        }
        if let Some(until) = drain_until {
            // After the command ended: until the program has nothing more to say.
            if batch.is_empty() || now >= until {
                break;
            }
            continue;
        }
        if let Some(sig) = signals.take() {
            end_reason = format!("interrupted by {sig}");
            stop_child(&mut child, &mut exit_status);
            break;
        }
        if cfg.time.is_some_and(|t| now - t0 >= t) {
            end_reason = "time limit".to_string();
            stop_child(&mut child, &mut exit_status);
            break;
        }
        if let Some(c) = &mut child {
            if let Ok(Some(status)) = c.try_wait() {
                exit_status = status.code();
                child = None;
                drain_until = Some(now + Duration::from_secs(2));
            }
        }
    }
    let duration = t0.elapsed();
    // The rest of every connection's record.
    let mut summaries = vec![];
    for cookie in &order {
        let t = conns.get_mut(cookie).expect("every id has its connection");
        let mut rows = vec![];
        t.conn.finish(&mut rows);
        t.take(rows)?;
        if let Some(f) = &mut t.writes {
            f.flush().map_err(|e| e.to_string())?;
        }
        if let Some(f) = &mut t.intervals {
            f.flush().map_err(|e| e.to_string())?;
        }
        let s = t.summary();
        if let Some(d) = &t.dir {
            write_json(&d.join("summary.json"), &s)?;
        }
        summaries.push(s);
    }
    let (lost, malformed) = tracer.lost();
    drop(tracer);
    let resources = Resources::of_self();
    let summary = TraceSummary {
        schema_version: 1,
        sbm_version: env!("CARGO_PKG_VERSION").into(),
        kernel_release: crate::sysinfo::kernel_release(),
        command: cfg
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        cgroup: cgroup.path().display().to_string(),
        started_unix_ns,
        duration_s: duration.as_secs_f64(),
        end_reason,
        exit_status,
        timestamping: cfg.timestamping,
        departures: cfg.departures,
        congestion: cfg.congestion.clone(),
        port: cfg.port,
        warmup_s: cfg.warmup.as_secs_f64(),
        replenish_time_us: cfg.replenish.as_ref().map(|s| s.time.as_micros() as u64),
        connections: summaries,
        events,
        events_per_s: events as f64 / duration.as_secs_f64().max(1e-9),
        events_lost: lost,
        events_malformed: malformed,
        cpu_share: (resources.user_s + resources.sys_s) / duration.as_secs_f64().max(1e-9),
        resources,
    };
    if let Some(dir) = &cfg.out {
        write_json(&dir.join("trace.json"), &summary)?;
    }
    Ok(summary)
}

/// Runs `command` with its own PID written into the cgroup's `procs` before it execs, so
/// that every socket it creates is traced. The command learns that it is traced from
/// [`crate::trace::TRACED_ENV`] (sbm-send then keeps to the cgroup instead of taking BPF
/// timestamps in one of its own).
fn spawn_in(procs: &Path, command: &[OsString]) -> Result<Child, String> {
    let (program, _) = command
        .split_first()
        .ok_or("no command to run (give one after --, or --cgroup DIR)")?;
    Command::new("sh")
        .arg("-c")
        .arg("echo $$ > \"$0\" && exec \"$@\"")
        .arg(procs)
        .args(command)
        .env(crate::trace::TRACED_ENV, procs.parent().unwrap_or(procs))
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.to_string_lossy()))
}

/// Ends the command we started: SIGTERM, then SIGKILL after five seconds.
fn stop_child(child: &mut Option<Child>, status: &mut Option<i32>) {
    let Some(c) = child.as_mut() else { return };
    let pid = Pid::from_raw(c.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(Some(s)) = c.try_wait() {
            *status = s.code();
            break;
        }
        if Instant::now() >= deadline {
            let _ = c.kill();
            *status = c.wait().ok().and_then(|s| s.code());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    *child = None;
}

/// An interval: its bounds since the trace started, and its start on CLOCK_REALTIME.
struct Span {
    start_s: f64,
    end_s: f64,
    start_unix_ns: u64,
}

/// Every connection's row of the interval (intervals.csv) and, unless quiet, its line.
fn intervals(
    conns: &mut HashMap<u64, Traced>,
    order: &[u64],
    span: &Span,
    quiet: bool,
) -> Result<(), String> {
    let secs = (span.end_s - span.start_s).max(1e-9);
    for cookie in order {
        let t = conns.get_mut(cookie).expect("every id has its connection");
        if t.conn.closed && t.conn.progress() == t.last_progress {
            continue;
        }
        let (w, s, a) = t.conn.progress();
        let (w0, s0, a0) = t.last_progress;
        let h = &t.conn.interval_sojourn;
        let row = TraceIntervalRow {
            start_s: span.start_s,
            end_s: span.end_s,
            warmup: span.start_unix_ns < t.conn.warmup_end_ns,
            bytes_written: w - w0,
            bytes_sent: s - s0,
            bytes_acked: a - a0,
            goodput_bps: (a - a0) as f64 * 8.0 / secs,
            writes: t.conn.counts.writes - t.last_writes,
            writes_departed: h.count(),
            departure_p50_us: h.quantile(0.5),
            departure_p95_us: h.quantile(0.95),
        };
        if let Some(f) = &mut t.intervals {
            f.write(&row).map_err(|e| e.to_string())?;
        }
        if !quiet {
            let p = |v: Option<u64>| v.map_or("-".into(), |v| Micros(v).to_string());
            crate::say!(
                "[conn {}] {:.2}-{:.2} s  written {}  sent {}  acked {} ({})  writes departed {}  sojourn p50 {} p95 {}",
                t.conn.id,
                row.start_s,
                row.end_s,
                Bytes(row.bytes_written),
                Bytes(row.bytes_sent),
                Bytes(row.bytes_acked),
                BitRate(row.goodput_bps),
                row.writes_departed,
                p(row.departure_p50_us),
                p(row.departure_p95_us),
            );
        }
        t.last_progress = (w, s, a);
        t.last_writes = t.conn.counts.writes;
        t.conn.interval_sojourn.reset();
    }
    Ok(())
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).expect("the schema serializes");
    std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
}
