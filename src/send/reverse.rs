//! `-R`, iperf's reverse mode: sbm-send's host opens the connections and receives; the
//! sender, and with it every sender-side measurement (TX timestamps, the snd_nxt sampler,
//! the readiness rule), runs in sbm-sink on the socket it accepted. Both ends of this small
//! protocol are here, so that what one writes the other reads through the same types.
//!
//! 1. The client opens a control connection: [`CONTROL_MARK`], then one JSON line, a
//!    [`ReverseRequest`]: a token and sbm-send's own sending options as given on its
//!    command line (forwarded, not re-described: sbm-sink parses them with sbm-send's
//!    parser, so each means there what it means here).
//! 2. The client opens the data connection: [`DATA_MARK`] and the token on one line.
//! 3. sbm-sink runs sbm-send's loop on the data connection. The client reads, prints
//!    interval lines as sbm-sink does and, at the end of the stream, replies as sbm-sink
//!    does (a [`SinkReply`]), so the sender's summary has its receiver's view.
//! 4. sbm-sink writes one JSON line on the control connection, a [`ReverseResult`] (the
//!    sender's summary, or why there is none), and closes it.
//!
//! A signal at the client is sent on as `stop` on the control connection: the sender ends
//! as it would on its own Ctrl-C, and its summary still comes back. The control connection
//! closing early (the client died) stops the sender too.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use clap::parser::ValueSource;
use clap::{CommandFactory, Parser};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::EventFd;
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use socket2::Socket;

use super::cli::SendArgs;
use super::config::TimestampSource;
use super::run::{bind_and_connect, run_with_stop, tcp_socket, Attached};
use super::SendConfig;
use crate::cli::Failure;
use crate::report::human;
use crate::report::schema::{IntervalRow, SendSummary, SinkIntervalRow, SinkReply};
use crate::report::CsvFile;
use crate::signals::{exit_status_for, StopBroadcast, StopSignals, StopSource};
use crate::units;

/// How long the opening marks are: sbm-sink tells a reverse run's connections from a
/// stream by this many first bytes.
pub const MARK_LEN: usize = 8;
const CONTROL_MARK: &[u8; MARK_LEN] = b"SBM-REV1";
const DATA_MARK: &[u8; MARK_LEN] = b"SBM-DAT1";
/// The longest request line sbm-sink reads.
const MAX_REQUEST: usize = 64 << 10;
/// How long a new connection has to send its line, and sbm-sink waits for the data
/// connection after the request.
const OPENING_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the client waits for the result after its reply (the sender writes its files
/// first).
const RESULT_TIMEOUT: Duration = Duration::from_secs(60);
/// sbm-send's options that act on the client's side only, never forwarded.
const LOCAL_OPTIONS: &[&str] = &[
    "connect",
    "port",
    "bind",
    "reverse",
    "bidir",
    "out",
    "quiet",
    "json",
    "json_stream",
    "logfile",
    "forceflush",
    "format",
    "version4",
    "version6",
    "connect_timeout",
    "help",
    "version",
];

/// What a connection's first [`MARK_LEN`] bytes make it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    Control,
    Data,
}

impl Opening {
    pub fn of(first: &[u8]) -> Option<Opening> {
        match first.get(..MARK_LEN)? {
            m if m == CONTROL_MARK => Some(Opening::Control),
            m if m == DATA_MARK => Some(Opening::Data),
            _ => None,
        }
    }
}

/// The control connection's line.
#[derive(Debug, Serialize, Deserialize)]
struct ReverseRequest {
    sbm_version: String,
    /// Names the data connection that belongs to this request.
    token: String,
    /// sbm-send's sending options, as `--long=value` and `--flag`.
    args: Vec<String>,
}

/// The control connection's answer at the end.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ReverseResult {
    summary: Option<SendSummary>,
    /// The sender's interval rows (intervals.csv's), for `-J`.
    #[serde(default)]
    intervals: Vec<IntervalRow>,
    /// sbm-send's exit status for the run (2: the options were refused there).
    exit_code: i32,
    error: Option<String>,
}

/// sbm-send's options on `argv` that the sender at the far end needs, as it would be given
/// them: every option set on the command line except [`LOCAL_OPTIONS`].
pub fn forwarded_args(argv: &[OsString]) -> Result<Vec<String>, String> {
    let cmd = SendArgs::command();
    let matches = cmd
        .clone()
        .try_get_matches_from(argv)
        .map_err(|e| e.to_string())?;
    let mut out = vec![];
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if LOCAL_OPTIONS.contains(&id) || matches.value_source(id) != Some(ValueSource::CommandLine)
        {
            continue;
        }
        let long = arg
            .get_long()
            .ok_or_else(|| format!("option {id} has no long name to forward"))?;
        if arg.get_action().takes_values() {
            for value in matches.get_raw(id).into_iter().flatten() {
                let value = value
                    .to_str()
                    .ok_or_else(|| format!("--{long}: not UTF-8"))?;
                out.push(format!("--{long}={value}"));
            }
        } else {
            out.push(format!("--{long}"));
        }
    }
    Ok(out)
}

/// What `-R` cannot do yet, said before anything connects.
pub fn refusal(cfg: &SendConfig, parallel: u16) -> Option<String> {
    if parallel > 1 {
        return Some("-R runs one flow: -P is not available with it yet".into());
    }
    if cfg.trip_times {
        return Some(
            "-R does not take --trip-times yet: the receiving side's parser is sbm-sink's".into(),
        );
    }
    cfg.needs_bpf().map(|flag| {
        format!(
            "{flag} is not available with -R: the BPF programs act on sockets sbm creates in \
             its own cgroup, and a reverse run's socket is one sbm-sink accepted"
        )
    })
}

fn token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::clock::realtime_ns());
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

fn io_failure(what: &str) -> impl Fn(io::Error) -> Failure + '_ {
    move |e| Failure::env(format!("{what}: {e}"))
}

/// sbm-send `-R`: asks the sink at `cfg.peer` to send with `args`, receives, and prints
/// the sender's summary that comes back (or `-J`'s document of it).
pub fn run_client(cfg: &SendConfig, args: Vec<String>, json: bool) -> Result<i32, Failure> {
    let signals = StopSignals::install().map_err(|e| Failure::env(format!("signalfd: {e}")))?;
    let (summary, intervals, exit_code) = reverse_run(cfg, args, &signals, &|_| {})?;
    if json {
        crate::cli::print_json_document(&super::json_document(&summary, &intervals));
    } else {
        if cfg.json_stream {
            crate::cli::print_json_event("end", None, &summary);
        }
        say_summary(cfg, &summary);
    }
    Ok(exit_code)
}

/// sbm-send `--bidir`: this side's own run (`[TX-C]`) and a reverse run (`[RX-C]`) at
/// once, each with its own connection; `-J` prints both summaries as `tx` and `rx`.
pub fn run_bidir(cfg: &SendConfig, args: Vec<String>, json: bool) -> Result<i32, Failure> {
    let signals = StopSignals::install().map_err(|e| Failure::env(format!("signalfd: {e}")))?;
    let mut relay = StopBroadcast::default();
    let stop = relay
        .relay()
        .map_err(|e| Failure::env(format!("eventfd: {e}")))?;
    let subdir = |name: &str| cfg.out_dir.as_ref().map(|d| d.join(name));
    let tx_cfg = SendConfig {
        direction_tag: Some("[TX-C]"),
        out_dir: subdir("tx"),
        ..cfg.clone()
    };
    let rx_cfg = SendConfig {
        direction_tag: Some("[RX-C]"),
        out_dir: subdir("rx"),
        ..cfg.clone()
    };
    let tx = std::thread::Builder::new()
        .name("bidir-tx".into())
        .spawn(move || run_with_stop(&tx_cfg, stop, Attached::default()))
        .map_err(|e| Failure::env(format!("starting the sending direction: {e}")))?;
    let rx = reverse_run(&rx_cfg, args, &signals, &|sig| relay.send(sig));
    if rx.is_err() {
        // This side's run must not outlive the other direction's failure.
        relay.send(Signal::SIGTERM);
    }
    let tx = tx
        .join()
        .map_err(|_| Failure::env("the sending direction's thread panicked"))?
        .map_err(Failure::env)?;
    let (rx_summary, rx_intervals, rx_exit) = rx?;
    if json {
        crate::cli::print_json_document(&super::BidirDocument {
            tx: super::json_document(&tx.summary, &tx.intervals),
            rx: super::json_document(&rx_summary, &rx_intervals),
        });
    } else {
        crate::say!("[TX-C] this side's sending:");
        crate::say!("{}", human::send_summary_text(&tx.summary));
        say_summary(&rx_cfg, &rx_summary);
    }
    Ok(tx.exit_code.max(rx_exit))
}

fn say_summary(cfg: &SendConfig, summary: &SendSummary) {
    crate::say!(
        "{}sender (in sbm-sink at {}):\n{}",
        cfg.line_tag(),
        cfg.peer,
        human::send_summary_text(summary)
    );
}

/// One reverse run from this side: the request, the stream received, the reply, and the
/// sender's summary with its exit status (128 + N when a signal here stopped it). A signal
/// goes to the sender as `stop` and to `on_signal`.
fn reverse_run(
    cfg: &SendConfig,
    args: Vec<String>,
    signals: &StopSignals,
    on_signal: &dyn Fn(Signal),
) -> Result<(SendSummary, Vec<IntervalRow>, i32), Failure> {
    let connect = |local: Option<SocketAddr>| -> Result<Socket, Failure> {
        let sock = tcp_socket(cfg.peer).map_err(Failure::env)?;
        bind_and_connect(&sock, cfg.peer, local, cfg.connect_timeout).map_err(Failure::env)?;
        Ok(sock)
    };
    let request = ReverseRequest {
        sbm_version: env!("CARGO_PKG_VERSION").into(),
        token: token(),
        args,
    };
    // The control connection from -B's address (its port is the data connection's).
    let control = connect(cfg.bind.map(|a| SocketAddr::new(a.ip(), 0)))?;
    let mut line = CONTROL_MARK.to_vec();
    line.extend(serde_json::to_vec(&request).expect("the request serializes"));
    line.push(b'\n');
    (&control)
        .write_all(&line)
        .map_err(io_failure("sending the reverse request"))?;
    let data = connect(cfg.bind)?;
    let mut line = DATA_MARK.to_vec();
    line.extend(request.token.as_bytes());
    line.push(b'\n');
    (&data)
        .write_all(&line)
        .map_err(io_failure("opening the reverse data connection"))?;
    let local = data
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map_or_else(|| "?".into(), |a| a.to_string());
    let tag = cfg.line_tag();
    crate::say!(
        "{tag}sbm-send -R: {} sends to {local}; the sender and its measurement (sojourn, readiness rule) run in sbm-sink there, and its summary comes back at the end",
        cfg.peer
    );
    if !request.args.is_empty() {
        crate::say!("{tag}sender's options: {}", request.args.join(" "));
    }
    let mut receiver = Receiver::new(cfg, &data)?;
    let signal = receiver.receive(&data, &control, signals, on_signal)?;
    receiver.reply(&data);
    drop(data);
    let result = read_result(&control)?;
    if let Some(sig) = signal {
        crate::say!("{tag}sbm-send -R: {sig}: the sender was asked to stop; its summary follows");
    }
    let Some(summary) = result.summary else {
        return Err(Failure {
            status: if result.exit_code == 0 {
                1
            } else {
                result.exit_code
            },
            message: format!(
                "the sink could not run the reverse run: {}",
                result.error.as_deref().unwrap_or("it gave no reason")
            ),
        });
    };
    receiver.finish();
    if let Some(dir) = &cfg.out_dir {
        let path = dir.join("summary.json");
        let text = serde_json::to_string_pretty(&summary).expect("the schema serializes");
        std::fs::write(&path, text + "\n")
            .map_err(|e| Failure::env(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok((
        summary,
        result.intervals,
        signal.map_or(result.exit_code, exit_status_for),
    ))
}

/// The client's receiving side: bytes per interval, as sbm-sink counts them.
struct Receiver<'a> {
    cfg: &'a SendConfig,
    peer: String,
    started: Instant,
    bytes: u64,
    interval_start: Duration,
    interval_bytes: u64,
    /// When the stream ended (its last interval and total end here).
    ended: Option<Instant>,
    csv: Option<CsvFile>,
}

impl<'a> Receiver<'a> {
    fn new(cfg: &'a SendConfig, data: &Socket) -> Result<Receiver<'a>, Failure> {
        data.set_nonblocking(true)
            .map_err(io_failure("set O_NONBLOCK"))?;
        let csv = match &cfg.out_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| Failure::env(format!("cannot create {}: {e}", dir.display())))?;
                Some(
                    CsvFile::create(&dir.join("sink-intervals.csv"))
                        .map_err(|e| Failure::env(e.to_string()))?,
                )
            }
            None => None,
        };
        Ok(Receiver {
            cfg,
            peer: cfg.peer.to_string(),
            started: Instant::now(),
            bytes: 0,
            interval_start: Duration::ZERO,
            interval_bytes: 0,
            ended: None,
            csv,
        })
    }

    fn row(
        &self,
        kind: &'static str,
        start: Duration,
        end: Duration,
        bytes: u64,
    ) -> SinkIntervalRow {
        SinkIntervalRow::counted(1, self.peer.clone(), kind, start, end, bytes)
    }

    fn emit(&mut self, row: SinkIntervalRow) {
        if !self.cfg.quiet || row.kind == "total" {
            crate::say!("{}{}", self.cfg.line_tag(), human::sink_interval_line(&row));
        }
        if self.cfg.json_stream && row.kind == "interval" {
            crate::cli::print_json_event("interval", None, &row);
        }
        if let Some(csv) = &mut self.csv {
            if let Err(e) = csv.write(&row).and_then(|()| csv.flush()) {
                eprintln!("sbm-send: {e}");
                self.csv = None;
            }
        }
    }

    /// Reads to the end of the stream; a signal is passed on to the sender as `stop` and
    /// returned.
    fn receive(
        &mut self,
        data: &Socket,
        control: &Socket,
        signals: &StopSignals,
        on_signal: &dyn Fn(Signal),
    ) -> Result<Option<Signal>, Failure> {
        let mut signal = None;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let tick = self.started + self.interval_start + self.cfg.interval;
            let wait = tick.saturating_duration_since(Instant::now());
            let ms = wait.as_micros().div_ceil(1000).min(u128::from(u16::MAX)) as u16;
            let mut fds = [
                PollFd::new(data.as_fd(), PollFlags::POLLIN),
                PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            ];
            match nix::poll::poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(Failure::env(format!("poll: {e}"))),
            }
            if let Some(sig) = signals.take() {
                if signal.is_none() {
                    signal = Some(sig);
                    // The sender ends its run as on its own signal; the stream's end follows.
                    let _ = (&*control).write_all(b"stop\n");
                    on_signal(sig);
                }
            }
            loop {
                match (&*data).read(&mut buf) {
                    Ok(0) => {
                        self.ended = Some(Instant::now());
                        return Ok(signal);
                    }
                    Ok(n) => {
                        self.bytes += n as u64;
                        self.interval_bytes += n as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        self.ended = Some(Instant::now());
                        self.finish();
                        return Err(Failure::env(format!(
                            "the reverse stream from {} failed after {} bytes: {e}",
                            self.peer, self.bytes
                        )));
                    }
                }
            }
            while Instant::now() >= self.started + self.interval_start + self.cfg.interval {
                let start = self.interval_start;
                let end = start + self.cfg.interval;
                let row = self.row("interval", start, end, self.interval_bytes);
                self.emit(row);
                self.interval_start = end;
                self.interval_bytes = 0;
            }
        }
    }

    /// The last, partial interval and the total.
    fn finish(&mut self) {
        let end = self.ended.unwrap_or_else(Instant::now) - self.started;
        // (A partial interval with nothing in it is the stream's end, not a measurement.)
        if self.interval_bytes > 0 {
            let row = self.row("interval", self.interval_start, end, self.interval_bytes);
            self.emit(row);
        }
        let total = self.row("total", Duration::ZERO, end, self.bytes);
        self.emit(total);
    }

    /// The receiver's view, sent to the sender as sbm-sink sends it.
    fn reply(&self, data: &Socket) {
        let elapsed = self.ended.unwrap_or_else(Instant::now) - self.started;
        let reply = SinkReply {
            sbm_version: env!("CARGO_PKG_VERSION").into(),
            boot_id: crate::sysinfo::boot_id(),
            bytes: self.bytes,
            duration_s: elapsed.as_secs_f64(),
            goodput_bps: units::bits_per_second(self.bytes, elapsed),
            ..SinkReply::default()
        };
        let text = serde_json::to_vec(&reply).expect("the reply serializes");
        let _ = data.set_nonblocking(false);
        let _ = data.set_write_timeout(Some(OPENING_TIMEOUT));
        if let Err(e) = (&*data).write_all(&text) {
            eprintln!("sbm-send: -R: the reply to the sender was not taken: {e}");
        }
        let _ = data.shutdown(std::net::Shutdown::Write);
    }
}

fn read_result(control: &Socket) -> Result<ReverseResult, Failure> {
    let _ = control.set_nonblocking(false);
    let _ = control.set_read_timeout(Some(RESULT_TIMEOUT));
    let mut text = Vec::new();
    control
        .take(256 << 20)
        .read_to_end(&mut text)
        .map_err(|e| Failure::env(format!("waiting for the sender's summary: {e}")))?;
    if text.is_empty() {
        return Err(Failure::env(
            "the sink closed the control connection without the sender's summary",
        ));
    }
    serde_json::from_slice(&text)
        .map_err(|e| Failure::env(format!("the sink's result is not sbm's: {e}")))
}

/// sbm-sink's side: data connections parked by token until their request's thread takes
/// them (either may come first: each connection is read in its own thread).
#[derive(Default)]
pub struct DataConnections {
    parked: Mutex<HashMap<String, Socket>>,
    changed: Condvar,
}

impl DataConnections {
    fn park(&self, token: String, data: Socket) {
        lock(&self.parked).insert(token, data);
        self.changed.notify_all();
    }

    /// The data connection with `token`, waiting up to `timeout` for it.
    fn take(&self, token: &str, timeout: Duration) -> Option<Socket> {
        let deadline = Instant::now() + timeout;
        let mut parked = lock(&self.parked);
        loop {
            if let Some(data) = parked.remove(token) {
                self.changed.notify_all();
                return Some(data);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            parked = self
                .changed
                .wait_timeout(parked, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits up to `timeout` for `token`'s request to take its data connection; true if
    /// it did, else the connection is dropped.
    fn taken_within(&self, token: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut parked = lock(&self.parked);
        while parked.contains_key(token) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                parked.remove(token);
                return false;
            }
            parked = self
                .changed
                .wait_timeout(parked, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

/// What sbm-sink gives a reverse run.
pub struct ServeSetup {
    pub conn: u64,
    pub peer: SocketAddr,
    pub data: Arc<DataConnections>,
    /// The run's files (writes.csv, summary.json, …) go here.
    pub out_dir: Option<PathBuf>,
    pub quiet: bool,
    /// sbm-sink's signals for this run.
    pub stop: Arc<EventFd>,
}

/// sbm-sink's side of a control connection (its `first` bytes read already): runs the
/// request and answers it. Returns the line sbm-sink prints at its end.
pub fn serve_control(control: Socket, first: Vec<u8>, setup: ServeSetup) -> String {
    let result = serve(&control, first, &setup);
    let line = match (&result.summary, &result.error) {
        (Some(s), _) => format!(
            "{}: {}",
            if s.complete {
                "complete"
            } else {
                "ended early"
            },
            s.end_reason
        ),
        (None, Some(e)) => format!("refused: {e}"),
        (None, None) => "ended".into(),
    };
    let mut text = serde_json::to_vec(&result).expect("the result serializes");
    text.push(b'\n');
    let _ = control.set_write_timeout(Some(OPENING_TIMEOUT));
    let _ = (&control).write_all(&text);
    let _ = control.shutdown(std::net::Shutdown::Write);
    line
}

fn serve(control: &Socket, first: Vec<u8>, setup: &ServeSetup) -> ReverseResult {
    let refused = |exit_code: i32, error: String| ReverseResult {
        exit_code,
        error: Some(error),
        ..ReverseResult::default()
    };
    let line = match read_line(control, first) {
        Ok(l) => l,
        Err(e) => return refused(1, format!("reading the request: {e}")),
    };
    let request: ReverseRequest = match serde_json::from_slice(&line) {
        Ok(r) => r,
        Err(e) => return refused(2, format!("the request is not sbm-send's: {e}")),
    };
    let Some(data) = setup.data.take(&request.token, OPENING_TIMEOUT) else {
        return refused(
            1,
            format!(
                "no data connection with the request's token within {} s",
                OPENING_TIMEOUT.as_secs()
            ),
        );
    };
    let peer = match data.peer_addr().ok().and_then(|a| a.as_socket()) {
        Some(p) => p,
        None => return refused(1, "the data connection has no peer address".into()),
    };
    let argv = ["sbm-send".to_string(), "-c".into(), peer.to_string()]
        .into_iter()
        .chain(request.args.iter().cloned());
    let mut cfg = match SendArgs::try_parse_from(argv) {
        Ok(args) => match args.into_config() {
            Ok(cfg) => cfg,
            Err(e) => return refused(e.exit_status(), e.to_string()),
        },
        Err(e) => return refused(2, e.to_string().lines().next().unwrap_or("").to_string()),
    };
    cfg.peer = peer;
    cfg.bind = None;
    cfg.quiet = setup.quiet;
    cfg.json_stream = false;
    cfg.out_dir = setup
        .out_dir
        .as_ref()
        .map(|d| d.join(format!("reverse-{}", setup.conn)));
    cfg.settle_timestamps(
        TimestampSource::Socket,
        "a reverse run sends on the connection sbm-sink accepted: the BPF programs act on \
         sockets sbm creates in its own cgroup",
    );
    if let Some(why) = refusal(&cfg, 1) {
        return refused(2, why);
    }
    crate::say!(
        "[{:>3}] reverse run for {}: sending to {peer} with {}",
        setup.conn,
        setup.peer,
        if request.args.is_empty() {
            "sbm-send's defaults".to_string()
        } else {
            request.args.join(" ")
        }
    );
    let running = Arc::new(AtomicBool::new(true));
    let watcher = watch_control(control, setup.stop.clone(), running.clone());
    let outcome = run_with_stop(
        &cfg,
        StopSource::Relay(setup.stop.clone()),
        Attached {
            connected: Some(data),
            ..Attached::default()
        },
    );
    running.store(false, Ordering::Relaxed);
    if let Some(w) = watcher {
        let _ = w.join();
    }
    match outcome {
        Ok(o) => {
            crate::say!("{}", human::send_summary_text(&o.summary));
            ReverseResult {
                summary: Some(o.summary),
                exit_code: o.exit_code,
                error: None,
                intervals: o.intervals,
            }
        }
        Err(e) => refused(1, e.to_string()),
    }
}

/// Reads the control connection while the sender runs: `stop`, or the client gone, stops
/// the sender as a signal would.
fn watch_control(
    control: &Socket,
    stop: Arc<EventFd>,
    running: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    let control = control.try_clone().ok()?;
    let _ = control.set_read_timeout(Some(Duration::from_millis(200)));
    std::thread::Builder::new()
        .name("reverse-control".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            while running.load(Ordering::Relaxed) {
                match (&control).read(&mut buf) {
                    Ok(0) => {
                        let _ = stop.write(Signal::SIGTERM as i32 as u64);
                        return;
                    }
                    Ok(_) => {
                        let _ = stop.write(Signal::SIGINT as i32 as u64);
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock
                                | io::ErrorKind::TimedOut
                                | io::ErrorKind::Interrupted
                        ) => {}
                    Err(_) => {
                        let _ = stop.write(Signal::SIGTERM as i32 as u64);
                        return;
                    }
                }
            }
        })
        .ok()
}

/// sbm-sink's side of a data connection: parks it for the request that names its token.
pub fn serve_data(
    data: Socket,
    first: Vec<u8>,
    connections: &DataConnections,
) -> Result<(), String> {
    let line = read_line(&data, first)?;
    let token = String::from_utf8_lossy(&line).into_owned();
    connections.park(token.clone(), data);
    if connections.taken_within(&token, OPENING_TIMEOUT) {
        Ok(())
    } else {
        Err(format!(
            "no reverse request named its token '{token}' within {} s",
            OPENING_TIMEOUT.as_secs()
        ))
    }
}

/// The rest of the line after the mark (`first` holds what was read already), without its
/// newline.
fn read_line(sock: &Socket, first: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut line = first.get(MARK_LEN..).unwrap_or_default().to_vec();
    sock.set_nonblocking(false).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(OPENING_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 4096];
    while !line.contains(&b'\n') {
        if line.len() > MAX_REQUEST {
            return Err(format!("no end of line in its first {MAX_REQUEST} bytes"));
        }
        match (&*sock).read(&mut buf) {
            Ok(0) => return Err("closed before its line ended".into()),
            Ok(n) => line.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    line.truncate(end);
    Ok(line)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_sending_options_are_forwarded_and_the_local_ones_are_not() {
        let fwd = forwarded_args(&argv(&[
            "sbm-send",
            "-c",
            "198.18.0.2:5301",
            "-R",
            "-t",
            "3",
            "-l",
            "128K",
            "--nodelay",
            "--notsent-lowat=16KB",
            "-q",
            "-o",
            "/tmp/x",
            "-J",
        ]))
        .unwrap();
        assert!(fwd.contains(&"--time=3".to_string()), "{fwd:?}");
        assert!(fwd.contains(&"--write-size=128K".to_string()), "{fwd:?}");
        assert!(fwd.contains(&"--nodelay".to_string()), "{fwd:?}");
        assert!(fwd.contains(&"--notsent-lowat=16KB".to_string()), "{fwd:?}");
        assert_eq!(fwd.len(), 4, "{fwd:?}");
        // What is forwarded parses back to the same sender.
        let back = SendArgs::try_parse_from(
            ["sbm-send", "-c", "198.18.0.1"]
                .into_iter()
                .map(String::from)
                .chain(fwd),
        )
        .unwrap();
        assert_eq!(back.write_size, 128 << 10);
        assert_eq!(back.notsent_lowat, Some(16_000));
        assert!(back.nodelay && !back.quiet && !back.json);
    }

    #[test]
    fn only_the_two_marks_open_a_reverse_run() {
        assert_eq!(Opening::of(b"SBM-REV1{\"x\":1}"), Some(Opening::Control));
        assert_eq!(Opening::of(b"SBM-DAT1abcd"), Some(Opening::Data));
        assert_eq!(Opening::of(b"SBM-REV"), None);
        assert_eq!(Opening::of(b"SBM-REV2"), None);
        assert_eq!(Opening::of(&[0, 1, 2, 3, 4, 5, 6, 7]), None);
    }
}
