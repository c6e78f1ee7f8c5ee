//! Running a matrix on real hosts: one worker per sender/receiver pair, each with its ssh
//! master connections, taking the next cell from a shared queue. A cell on a pair: the
//! path's RTT probed, both ends described, the bottleneck held (`sbm-testbed shape hold`,
//! gone when the cell ends, on Ctrl-C, or when ssh dies), sbm-sink on the receiver's
//! measurement address, sbm-send, the outputs brought back into the cell's directory. A
//! pair that fails (unreachable, refused, a dead connection) leaves the pool; its cell is
//! retried once on another pair.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use super::argv::{send_args, send_flows};
use super::process::{bin_dir, fmt_dur, last_error_line, now_unix_s, utc_stamp};
use super::record::{CellStatus, ClockOffset, Clocks, HostsRecord, HostsShaping, Meta, Status};
use super::spec::pair::{HostShaping, Pair};
use super::spec::{Cell, MatrixSpec};
use super::store::store_cell;
use crate::remote::{self, install, Endpoint, Host, Job, RemoteError};
use crate::signals::StopSignals;
use crate::testbed::hold;
use crate::testbed::hostinfo::{HostInfo, RttProbe};

/// The build: the sender, the sink, and sbm-testbed (shaping, host facts).
const BINARIES: &[&str] = &["sbm-send", "sbm-sink", "sbm-testbed"];
/// What each end runs of it.
const SENDER_BINARIES: &[&str] = &["sbm-send", "sbm-testbed"];
const RECEIVER_BINARIES: &[&str] = &["sbm-sink", "sbm-testbed"];
/// How long a short remote command (a fact, a clock reading) may take.
const SHORT: Duration = Duration::from_secs(30);

/// One end of a pair: connected, checked, with sbm's binaries there.
struct End {
    host: Host,
    bins: install::Installed,
    /// Where cells write on this end before their outputs come back (None: locally, into
    /// the cell's own directory).
    remote_dir: Option<String>,
}

impl End {
    fn open(
        endpoint: &Endpoint,
        pair: &Pair,
        build: &install::Build,
        needs: &[&str],
        shapes: bool,
        say: &dyn Fn(String),
    ) -> Result<End, RemoteError> {
        let host = Host::connect(endpoint, &pair.ssh_options)?;
        let facts = host.output(
            host.shell("uname -r; id -u; grep '^CapEff:' /proc/self/status"),
            "checking the host",
            SHORT,
        )?;
        let mut lines = facts.lines();
        let kernel = lines.next().unwrap_or("").trim().to_string();
        let uid: Option<u32> = lines.next().and_then(|l| l.trim().parse().ok());
        let cap_net_admin = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .is_some_and(|caps| caps & (1 << 12) != 0);
        if shapes && uid != Some(0) && !cap_net_admin {
            return Err(host.error(format!(
                "shaping needs root or CAP_NET_ADMIN there (logged in as uid {})",
                uid.map_or("?".into(), |u| u.to_string())
            )));
        }
        let bins = install::ensure(&host, build, needs, &remote::join(&pair.remote_dir, "bin"))?;
        if bins.copied {
            say(format!(
                "{}: copied sbm {} to {endpoint}:{} (kernel {kernel})",
                pair.name, build.key, bins.dir
            ));
        }
        let remote_dir = (!host.is_local()).then(|| remote::join(&pair.remote_dir, "cells"));
        Ok(End {
            host,
            bins,
            remote_dir,
        })
    }

    fn testbed(&self, args: &[&str]) -> std::process::Command {
        let mut argv = vec![self.bins.bin("sbm-testbed")];
        argv.extend(args.iter().map(|s| s.to_string()));
        self.host.command(&argv)
    }

    fn info(&self, dev: Option<&str>) -> Result<HostInfo, String> {
        let mut args = vec!["host", "info"];
        if let Some(d) = dev {
            args.extend(["--dev", d]);
        }
        let out = self
            .host
            .output(self.testbed(&args), "describing the host", SHORT)
            .map_err(|e| e.to_string())?;
        serde_json::from_str(out.trim()).map_err(|e| format!("host info: {e}"))
    }

    /// This end's clock minus ours, from the best of three readings: (offset, ± bound).
    fn clock_offset(&self) -> Result<(i64, u64), String> {
        if self.host.is_local() {
            return Ok((0, 0));
        }
        let mut best: Option<(i64, u64)> = None;
        for _ in 0..3 {
            let t0 = crate::clock::realtime_ns();
            let out = self
                .host
                .output(self.testbed(&["host", "clock"]), "reading its clock", SHORT)
                .map_err(|e| e.to_string())?;
            let t1 = crate::clock::realtime_ns();
            let theirs: u64 = out
                .trim()
                .parse()
                .map_err(|_| format!("its clock said {:?}", out.trim()))?;
            let mid = t0 / 2 + t1 / 2;
            let bound = t1.saturating_sub(t0) / 2;
            let offset = theirs as i64 - mid as i64;
            if best.is_none_or(|(_, b)| bound < b) {
                best = Some((offset, bound));
            }
        }
        best.ok_or_else(|| "no reading".into())
    }

    /// A directory for one cell's outputs on this end.
    fn cell_dir(&self, local: &Path, tag: &str, cell: &str) -> Result<String, RemoteError> {
        match &self.remote_dir {
            None => Ok(local.to_string_lossy().into_owned()),
            Some(base) => {
                let d = remote::join(base, &format!("{tag}-{cell}"));
                self.host.output(
                    self.host.command(&["mkdir".into(), "-p".into(), d.clone()]),
                    "making the cell's directory",
                    SHORT,
                )?;
                Ok(d)
            }
        }
    }

    /// Brings a remote cell directory back into `local` and removes it there.
    fn bring_back(&self, remote_cell: &str, local: &Path) -> Result<(), RemoteError> {
        if self.remote_dir.is_none() {
            return Ok(());
        }
        self.host
            .fetch_dir(remote_cell, local, Duration::from_secs(600))?;
        self.host.output(
            self.host
                .command(&["rm".into(), "-rf".into(), remote_cell.to_string()]),
            "removing the cell's directory",
            SHORT,
        )?;
        Ok(())
    }
}

/// A pair, both ends open.
struct Session {
    pair: Pair,
    snd: End,
    rcv: End,
}

impl Session {
    fn open(
        pair: &Pair,
        build: &install::Build,
        shaping: HostShaping,
        say: &dyn Fn(String),
    ) -> Result<Session, RemoteError> {
        let shaped = pair.shaped_dev.is_some();
        let rcv = End::open(
            &pair.receiver,
            pair,
            build,
            RECEIVER_BINARIES,
            shaped && shaping == HostShaping::ReceiverIngress,
            say,
        )?;
        let snd = End::open(
            &pair.sender,
            pair,
            build,
            SENDER_BINARIES,
            shaped && shaping == HostShaping::SenderEgress,
            say,
        )?;
        Ok(Session {
            pair: pair.clone(),
            snd,
            rcv,
        })
    }

    fn alive(&mut self) -> bool {
        self.snd.host.alive() && self.rcv.host.alive()
    }
}

/// The bottleneck, held for the length of a cell.
struct Holder {
    job: Job,
    lines: mpsc::Receiver<String>,
    said: Vec<String>,
    host: String,
    dev: String,
    ingress: bool,
}

/// Sends every line of `r` to `tx` (a thread per pipe).
fn forward_lines(r: impl std::io::Read + Send + 'static, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

impl Holder {
    fn start(end: &End, dev: &str, cell: &Cell, ingress: bool) -> Result<Holder, String> {
        let rate = cell.rate_bps.unwrap_or_default();
        let mut argv = vec![
            end.bins.bin("sbm-testbed"),
            "shape".into(),
            "hold".into(),
            dev.into(),
            "--rate".into(),
            rate.to_string(),
            "--queue".into(),
            format!("{}us", cell.queue.as_micros()),
        ];
        if ingress {
            argv.push("--ingress".into());
        }
        let mut job = end
            .host
            .spawn_until_eof(&argv, Stdio::piped(), Stdio::piped())
            .map_err(|e| e.to_string())?;
        let (tx, lines) = mpsc::channel();
        if let Some(o) = job.child.stdout.take() {
            forward_lines(o, tx.clone());
        }
        if let Some(e) = job.child.stderr.take() {
            forward_lines(e, tx);
        }
        let mut h = Holder {
            job,
            lines,
            said: vec![],
            host: end.host.endpoint.to_string(),
            dev: dev.into(),
            ingress,
        };
        let deadline = Instant::now() + SHORT;
        loop {
            match h.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) if l.starts_with(hold::SHAPED) => return Ok(h),
                Ok(l) => h.said.push(l),
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(_) => {
                    h.job.finish(Duration::from_secs(10));
                    let why =
                        remote::last_line(&h.said.join("\n")).unwrap_or_else(|| "no answer".into());
                    return Err(format!("{}: shaping {dev}: {why}", h.host));
                }
            }
        }
    }

    /// Ends the hold and checks that the bottleneck is gone; the error names the manual
    /// clean-up.
    fn release(mut self) -> Result<(), String> {
        let status = self.job.finish(Duration::from_secs(20));
        let mut cleared = false;
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
            cleared |= l.starts_with(hold::CLEARED);
            self.said.push(l);
        }
        if cleared && status.is_some_and(|s| s.success()) {
            return Ok(());
        }
        Err(format!(
            "{}: the bottleneck on {} may be left ({}): run `testbed/shape clear {}{}` there",
            self.host,
            self.dev,
            remote::last_line(&self.said.join("\n")).unwrap_or_else(|| "no answer".into()),
            self.dev,
            if self.ingress { " --ingress" } else { "" }
        ))
    }
}

fn clocks(s: &Session, snd: Option<&HostInfo>, rcv: Option<&HostInfo>) -> Clocks {
    judge_clocks(
        snd,
        rcv,
        s.snd.clock_offset().ok(),
        s.rcv.clock_offset().ok(),
    )
}

/// Whether trip times between the two ends are comparable, from their descriptions and
/// their clocks' offsets from this machine (each with the ± bound of its reading).
fn judge_clocks(
    snd: Option<&HostInfo>,
    rcv: Option<&HostInfo>,
    so: Option<(i64, u64)>,
    ro: Option<(i64, u64)>,
) -> Clocks {
    let (comparable, why) = match (snd, rcv) {
        (Some(a), Some(b)) if !a.boot_id.is_empty() && a.boot_id == b.boot_id => (
            true,
            "one kernel at both ends (same boot id): one clock".to_string(),
        ),
        (Some(a), Some(b)) => match (a.clock_synchronised, b.clock_synchronised, so, ro) {
            (Some(true), Some(true), Some((x, ex)), Some((y, ey))) => {
                let diff = x.abs_diff(y);
                let consistent = diff <= ex + ey;
                (
                    consistent,
                    format!(
                        "both synchronised ({}; {}); measured difference {:.1} ms ± {:.1} ms{}",
                        a.clock_sync,
                        b.clock_sync,
                        diff as f64 / 1e6,
                        (ex + ey) as f64 / 1e6,
                        if consistent {
                            ""
                        } else {
                            ": larger than the reading's bound, so not comparable"
                        }
                    ),
                )
            }
            _ => (
                false,
                format!(
                    "not both known to be synchronised (sender: {}; receiver: {})",
                    a.clock_sync, b.clock_sync
                ),
            ),
        },
        _ => (false, "an end could not be described".into()),
    };
    let reading = |o: Option<(i64, u64)>| {
        o.map(|(offset_ns, bound_ns)| ClockOffset {
            offset_ns,
            bound_ns,
        })
    };
    Clocks {
        sender: reading(so),
        receiver: reading(ro),
        trip_times_comparable: comparable,
        why,
    }
}

/// What one cell on one pair came to.
struct Outcome {
    st: CellStatus,
    interrupted: bool,
    /// Set when the pair, not the cell, failed: it leaves the pool and the cell may be
    /// retried elsewhere.
    pair_failed: Option<String>,
}

fn waits_for_listening(sink: &mut Job, log: &Path, patience: Duration) -> Result<(), String> {
    let deadline = Instant::now() + patience;
    loop {
        if std::fs::read_to_string(log).is_ok_and(|t| t.contains("listening on")) {
            return Ok(());
        }
        if Instant::now() >= deadline || sink.try_wait().is_some() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Err(remote::last_line(&text).unwrap_or_else(|| "sbm-sink did not start".into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_cell(
    s: &mut Session,
    spec: &MatrixSpec,
    cell: &Cell,
    dir: &Path,
    tag: &str,
    shaping: HostShaping,
    stop: &AtomicBool,
) -> Outcome {
    let mut o = Outcome {
        st: CellStatus::starting(&cell.name, Some(s.pair.name.clone())),
        interrupted: false,
        pair_failed: None,
    };
    let _ = std::fs::create_dir_all(dir);
    let pair = s.pair.clone();
    let sink_addr = pair.sink_addr();
    // Before anything listens or shapes: the path's own round trip.
    let rtt: Result<RttProbe, String> = s
        .snd
        .host
        .output(
            s.snd
                .testbed(&["host", "probe-rtt", &sink_addr, "--count", "5"]),
            "probing the path's RTT",
            SHORT,
        )
        .map_err(|e| e.to_string())
        .and_then(|out| serde_json::from_str(out.trim()).map_err(|e| e.to_string()));
    let snd_before = s.snd.info(pair.sender_dev.as_deref());
    let rcv_before = s.rcv.info(pair.receiver_dev.as_deref());
    let clocks = clocks(s, snd_before.as_ref().ok(), rcv_before.as_ref().ok());
    let fail = |mut o: Outcome, why: String| {
        o.st.error = Some(why.clone());
        o.pair_failed = Some(why);
        o.st.ended_unix_s = now_unix_s();
        o
    };
    let (shaper, ingress) = match shaping {
        HostShaping::ReceiverIngress => (&s.rcv, true),
        HostShaping::SenderEgress => (&s.snd, false),
    };
    let holder = match (cell.rate_bps, &pair.shaped_dev) {
        (Some(_), Some(dev)) => match Holder::start(shaper, dev, cell, ingress) {
            Ok(h) => Some(h),
            Err(e) => return fail(o, e),
        },
        _ => None,
    };
    let (rcv_dir, snd_dir) = match (
        s.rcv.cell_dir(dir, tag, &cell.name),
        s.snd.cell_dir(dir, tag, &cell.name),
    ) {
        (Ok(r), Ok(d)) => (r, d),
        (Err(e), _) | (_, Err(e)) => {
            let released = holder.map(Holder::release).and_then(Result::err);
            return fail(o, released.unwrap_or_else(|| e.to_string()));
        }
    };
    let mut sink_cmd = vec![
        s.rcv.bins.bin("sbm-sink"),
        "--listen".into(),
        sink_addr.clone(),
        "--conns".into(),
        send_flows(spec, cell).to_string(),
        "--out".into(),
        rcv_dir.clone(),
        "-q".into(),
    ];
    sink_cmd.extend(cell.sink_args.iter().cloned());
    let mut send_cmd = vec![s.snd.bins.bin("sbm-send")];
    send_cmd.extend(send_args(spec, cell, &snd_dir, &sink_addr));
    let logs = |name: &str| -> Result<(Stdio, Stdio), String> {
        let f = File::create(dir.join(name)).map_err(|e| format!("{name}: {e}"))?;
        let g = f.try_clone().map_err(|e| e.to_string())?;
        Ok((Stdio::from(f), Stdio::from(g)))
    };
    let sink_log = dir.join("sink.log");
    let started_sink = logs("sink.log").and_then(|(out, err)| {
        let mut job = s
            .rcv
            .host
            .spawn_tied(&sink_cmd, None, out, err)
            .map_err(|e| e.to_string())?;
        match waits_for_listening(&mut job, &sink_log, SHORT) {
            Ok(()) => Ok(job),
            Err(e) => {
                job.finish(Duration::from_secs(5));
                Err(format!("{}: sbm-sink: {e}", s.rcv.host.endpoint))
            }
        }
    });
    let mut sink = match started_sink {
        Ok(j) => j,
        Err(e) => {
            let released = holder.map(Holder::release).and_then(Result::err);
            return fail(o, released.map_or(e.clone(), |r| format!("{e}; {r}")));
        }
    };
    // A remote sender's output stays there (ssh carries only keepalives while it
    // measures) and comes back with its other files; ssh's own complaints land here.
    let (send_log_name, remote_log) = if s.snd.host.is_local() {
        ("send.log", None)
    } else {
        ("send-ssh.log", Some(remote::join(&snd_dir, "send.log")))
    };
    let send = logs(send_log_name).and_then(|(out, err)| {
        s.snd
            .host
            .spawn_tied(&send_cmd, remote_log.as_deref(), out, err)
            .map_err(|e| e.to_string())
    });
    let mut send = match send {
        Ok(j) => j,
        Err(e) => {
            sink.finish(Duration::from_secs(5));
            let released = holder.map(Holder::release).and_then(Result::err);
            return fail(o, released.map_or(e.clone(), |r| format!("{e}; {r}")));
        }
    };
    let limit = cell.duration
        + cell.drain_timeout.unwrap_or(Duration::from_secs(60))
        + Duration::from_secs(60);
    let t0 = Instant::now();
    let mut checked = Instant::now();
    let send_status = loop {
        if let Some(st) = send.try_wait() {
            break Some(st);
        }
        // A sink that ended before its sender, with the connection to its host gone: ssh
        // died mid-cell.
        if checked.elapsed() >= Duration::from_secs(1) {
            checked = Instant::now();
            if sink.try_wait().is_some() && !s.rcv.host.alive() {
                let host = &s.rcv.host;
                let e = host
                    .error(format!(
                        "the ssh connection died during the cell{}",
                        host.last_words()
                            .map_or(String::new(), |w| format!(" ({w})"))
                    ))
                    .to_string();
                o.st.error = Some(e);
                break send.finish(Duration::from_secs(30));
            }
        }
        if stop.load(Ordering::Relaxed) {
            o.interrupted = true;
            break send.finish(Duration::from_secs(30));
        }
        if t0.elapsed() >= limit {
            o.st.error = Some(format!(
                "sbm-send still running after {}s: stopped",
                limit.as_secs()
            ));
            break send.finish(Duration::from_secs(30));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    o.st.send_exit = send_status.and_then(|s| s.code());
    // The sink ends with the sender's connections; an interrupted cell stops it at once.
    let sink_status = if o.interrupted {
        sink.finish(Duration::from_secs(10))
    } else {
        sink.wait_for(Duration::from_secs(15))
            .or_else(|| sink.finish(Duration::from_secs(10)))
    };
    o.st.sink_exit = sink_status.and_then(|s| s.code());
    // Both ends again while the bottleneck still stands (its counters are the cell's).
    let snd_after = s.snd.info(pair.sender_dev.as_deref());
    let rcv_after = s.rcv.info(pair.receiver_dev.as_deref());
    let mut pair_error: Option<String> = None;
    if let Some(Err(e)) = holder.map(Holder::release) {
        crate::say!("sbm-matrix: {}: {e}", pair.name);
        pair_error = Some(e);
    }
    for (end, remote_cell) in [(&s.rcv, &rcv_dir), (&s.snd, &snd_dir)] {
        if let Err(e) = end.bring_back(remote_cell, dir) {
            pair_error.get_or_insert(e.to_string());
        }
    }
    let mut meta = Meta::new(cell, sink_cmd, send_cmd);
    meta.hosts = Some(HostsRecord {
        pair: pair.name.clone(),
        sender: pair.sender.to_string(),
        receiver: pair.receiver.to_string(),
        sink: sink_addr.to_string(),
        shaping: pair
            .shaped_dev
            .as_ref()
            .filter(|_| cell.rate_bps.is_some())
            .map(|d| HostsShaping {
                at: shaping,
                dev: d.clone(),
            }),
        rtt_before: rtt.into(),
        clocks,
        sender_before: snd_before.into(),
        sender_after: snd_after.into(),
        receiver_before: rcv_before.into(),
        receiver_after: rcv_after.into(),
    });
    meta.write(dir);
    // A cell that failed on a connection that no longer works failed for the pair.
    if o.st.send_exit != Some(0) && !o.interrupted && !s.alive() {
        pair_error.get_or_insert_with(|| "the ssh connection died during the cell".into());
    }
    if let Some(e) = &pair_error {
        o.st.error.get_or_insert_with(|| e.clone());
        o.pair_failed = Some(e.clone());
    }
    o.st.status = if o.interrupted {
        Status::Interrupted
    } else if o.st.send_exit == Some(0) && o.st.error.is_none() {
        Status::Ok
    } else {
        o.st.error.get_or_insert_with(|| {
            last_error_line(&dir.join("send.log"), "sbm-send")
                .unwrap_or_else(|| format!("sbm-send exited with {:?}", o.st.send_exit))
        });
        Status::Failed
    };
    o.st.ended_unix_s = now_unix_s();
    o
}

/// A cell waiting in the shared queue.
struct Queued {
    index: usize,
    /// The pair it failed on, with why (it is retried once, elsewhere).
    failed_on: Option<(String, String)>,
}

enum Report {
    Done {
        index: usize,
        pair: String,
        result: String,
        status: Status,
    },
    Note(String),
}

struct Shared<'a> {
    spec: &'a MatrixSpec,
    cells: &'a [&'a Cell],
    run_dir: &'a Path,
    build: &'a install::Build,
    shaping: HostShaping,
    tag: String,
    queue: Mutex<VecDeque<Queued>>,
    working: AtomicUsize,
    stop: AtomicBool,
    /// Why pairs left the pool (`pair: reason`), for cells none could run.
    out: Mutex<Vec<String>>,
}

fn worker(sh: &Shared<'_>, pair: &Pair, tx: mpsc::Sender<Report>) {
    let say = |m: String| {
        let _ = tx.send(Report::Note(m));
    };
    let mut session = match Session::open(pair, sh.build, sh.shaping, &say) {
        Ok(s) => s,
        Err(e) => {
            sh.working.fetch_sub(1, Ordering::SeqCst);
            leave(sh, &pair.name, &e.to_string(), &say);
            return;
        }
    };
    let pause = crate::units::parse_duration_or_zero(&sh.spec.pause).unwrap_or_default();
    let mut first = true;
    loop {
        if sh.stop.load(Ordering::Relaxed) {
            break;
        }
        let next = {
            let mut q = sh.queue.lock().unwrap_or_else(|p| p.into_inner());
            let k = q
                .iter()
                .position(|c| c.failed_on.as_ref().is_none_or(|(p, _)| p != &pair.name));
            k.and_then(|k| q.remove(k))
        };
        let Some(job) = next else {
            break;
        };
        if !first && !pause.is_zero() {
            std::thread::sleep(pause);
        }
        first = false;
        let cell = sh.cells[job.index];
        let dir = sh.run_dir.join(&cell.name);
        let mut o = run_cell(
            &mut session,
            sh.spec,
            cell,
            &dir,
            &sh.tag,
            sh.shaping,
            &sh.stop,
        );
        if let Some(why) = o.pair_failed.take() {
            let others = sh.working.load(Ordering::SeqCst) > 1;
            if job.failed_on.is_none() && others && !o.interrupted {
                say(format!(
                    "{}: {} failed for the pair ({why}); retrying it on another pair",
                    pair.name, cell.name
                ));
                sh.queue
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_back(Queued {
                        index: job.index,
                        failed_on: Some((pair.name.clone(), why.clone())),
                    });
            } else {
                finish(sh, &tx, job.index, &pair.name, &dir, &o.st);
            }
            sh.working.fetch_sub(1, Ordering::SeqCst);
            leave(sh, &pair.name, &why, &say);
            return;
        }
        if let Some((p, why)) = &job.failed_on {
            o.st.error
                .get_or_insert_with(|| format!("after failing on {p}: {why}"));
        }
        finish(sh, &tx, job.index, &pair.name, &dir, &o.st);
        if o.interrupted {
            break;
        }
    }
    sh.working.fetch_sub(1, Ordering::SeqCst);
}

/// A pair leaves the pool, saying why.
fn leave(sh: &Shared<'_>, pair: &str, why: &str, say: &dyn Fn(String)) {
    say(format!("{pair}: out of the pool: {why}"));
    sh.out
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(format!("{pair}: {why}"));
}

fn finish(
    sh: &Shared<'_>,
    tx: &mpsc::Sender<Report>,
    index: usize,
    pair: &str,
    dir: &Path,
    st: &CellStatus,
) {
    let result = store_cell(sh.cells[index], dir, st);
    let _ = tx.send(Report::Done {
        index,
        pair: pair.to_string(),
        result,
        status: st.status,
    });
}

/// Runs `cells` over the pairs of `spec.path.hosts`; returns the exit status (0 all ok,
/// 1 a cell failed, 130 interrupted).
pub fn run_cells(
    spec: &MatrixSpec,
    cells: &[&Cell],
    run_dir: &Path,
    signals: &StopSignals,
    total: Duration,
) -> i32 {
    let pairs = match spec.host_pairs() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sbm-matrix: {e}");
            return 1;
        }
    };
    let shaping = match spec.path.host_shaping() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sbm-matrix: {e}");
            return 1;
        }
    };
    let build = match install::Build::local(&bin_dir(), BINARIES) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("sbm-matrix: sbm's binaries: {e}");
            return 1;
        }
    };
    let sh = Shared {
        spec,
        cells,
        run_dir,
        build: &build,
        shaping,
        tag: format!("{}-{}", utc_stamp(), std::process::id()),
        queue: Mutex::new(
            (0..cells.len())
                .map(|index| Queued {
                    index,
                    failed_on: None,
                })
                .collect(),
        ),
        working: AtomicUsize::new(pairs.len()),
        stop: AtomicBool::new(false),
        out: Mutex::new(vec![]),
    };
    crate::say!(
        "sbm-matrix: {} cells on {} pair{} -> {} (about {} of cell time)",
        cells.len(),
        pairs.len(),
        if pairs.len() == 1 { "" } else { "s" },
        run_dir.display(),
        fmt_dur(total)
    );
    let mut exit = 0;
    let mut done = 0;
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel();
        for p in &pairs {
            let tx = tx.clone();
            let sh = &sh;
            scope.spawn(move || worker(sh, p, tx));
        }
        drop(tx);
        loop {
            if signals.take().is_some() {
                sh.stop.store(true, Ordering::SeqCst);
                crate::say!(
                    "sbm-matrix: stopping: the running cells end now, their hosts are cleaned up"
                );
                exit = 130;
            }
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Report::Note(m)) => crate::say!("sbm-matrix: {m}"),
                Ok(Report::Done {
                    index,
                    pair,
                    result,
                    status,
                }) => {
                    done += 1;
                    crate::say!(
                        "[{done}/{}] {} on {pair}: {result}",
                        cells.len(),
                        cells[index].name
                    );
                    if status != Status::Ok && exit == 0 {
                        exit = if status == Status::Interrupted {
                            130
                        } else {
                            1
                        };
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    });
    // Cells no pair could take: every pair left the pool, or the run was interrupted.
    let left: Vec<Queued> = sh
        .queue
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .collect();
    if exit == 130 {
        return exit;
    }
    let why_out = sh
        .out
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .join("; ");
    for q in left {
        let cell = cells[q.index];
        let dir = run_dir.join(&cell.name);
        let _ = std::fs::create_dir_all(&dir);
        let mut st = CellStatus::starting(&cell.name, q.failed_on.as_ref().map(|(p, _)| p.clone()));
        st.error = Some(match &q.failed_on {
            Some((p, why)) => format!("{p}: {why}; no other pair was left to retry it"),
            None => format!("no pair was left to run it: {why_out}"),
        });
        let result = store_cell(cell, &dir, &st);
        crate::say!("  {}: {result}", cell.name);
        exit = 1;
    }
    exit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(boot: &str, synced: Option<bool>) -> HostInfo {
        HostInfo {
            hostname: "h".into(),
            boot_id: boot.into(),
            kernel_release: "6.12".into(),
            sysctls: Default::default(),
            interfaces: vec![],
            clock_sync: "chrony: leap status Normal".into(),
            clock_synchronised: synced,
        }
    }

    #[test]
    fn trip_times_are_comparable_on_one_clock_or_two_agreeing_synchronised_ones() {
        let (a, b) = (info("x", None), info("x", None));
        assert!(judge_clocks(Some(&a), Some(&b), None, None).trip_times_comparable);
        let (a, b) = (info("x", Some(true)), info("y", Some(true)));
        // 2 ms apart, each read within ± 3 ms: consistent with synchronised clocks.
        let c = judge_clocks(
            Some(&a),
            Some(&b),
            Some((0, 3_000_000)),
            Some((2_000_000, 3_000_000)),
        );
        assert!(c.trip_times_comparable, "{}", c.why);
        // 50 ms apart: not, whatever chrony says.
        let c = judge_clocks(
            Some(&a),
            Some(&b),
            Some((0, 3_000_000)),
            Some((50_000_000, 3_000_000)),
        );
        assert!(
            !c.trip_times_comparable && c.why.contains("not comparable"),
            "{}",
            c.why
        );
        let (a, b) = (info("x", Some(true)), info("y", None));
        let c = judge_clocks(Some(&a), Some(&b), Some((0, 1)), Some((0, 1)));
        assert!(
            !c.trip_times_comparable && c.why.contains("not both known"),
            "{}",
            c.why
        );
        assert!(!judge_clocks(None, Some(&b), None, None).trip_times_comparable);
    }
}
