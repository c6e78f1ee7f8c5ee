//! sbm-rpm: the responsiveness test's client (draft-ietf-ippm-responsiveness-09, "Final
//! Algorithm"), with sbm's readiness rules on its upload sockets.
//!
//! Each stage opens INP load-generating connections per direction (GET of the large
//! object; POST of an endless body to the upload URL), adds INC per direction at every
//! interval until goodput's moving average is stable, then probes until RPM's moving
//! average is stable, or until the stage's time limit, after which the result carries a
//! lower confidence. Probe pairs (a foreign probe on a new connection, a self probe on a
//! random load-generating connection) are launched evenly at min(MPS, PTC × goodput / 6000
//! B) per second. Where this differs from the draft, docs/rpm.md says so.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use http_body_util::BodyExt;
use hyper::body::Body;
use tokio::sync::mpsc;

use super::body::Zeros;
use super::connect::{self, ConnectError, Connected, Endpoint, HttpChoice, HttpVersion, Sender};
use super::method::{self, Parameters, ProbeTimes, Ramp, Stage};
use super::nq_config::{self, NqConfig, TestUrl, WELL_KNOWN_PATH};
use super::record::{self, IntervalRow, ProbeRow, RpmRun, SelfProbes, StageName, StageResult};
use super::rule::{EndpointRule, RuleArgs};
use crate::cli::{self, Failure};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Direction {
    /// Downloads and uploads at once (networkQuality's default).
    Both,
    Down,
    Up,
}

#[derive(Debug, Parser)]
#[command(
    name = "sbm-rpm",
    version,
    about = "The IETF responsiveness (RPM) test, with a chosen readiness rule on the upload sockets",
    after_help = "Examples:\n  sbm-rpm http://198.18.0.2:8080                       # both directions at once\n  sbm-rpm -s https://198.18.0.2:8443 --insecure        # download, then upload\n  sbm-rpm --idle http://198.18.0.2:8080                # no load: the idle baseline\n  sbm-rpm --replenish-time 5ms --replenish-impl emulated http://198.18.0.2:8080\n  sbm-rpm -c --out run1 http://198.18.0.2:8080         # networkQuality JSON, CSVs\n\nThe URL is the server's configuration object (/.well-known/nq is added to a bare\nhost:port). Against sbm-rpm-server, any web server that serves the draft's URLs, or\nnginx with a static configuration object. Exit status: 0 finished, 1 the test ended\nearly (the reason is printed; what was measured is kept), 2 bad input."
)]
pub struct ClientArgs {
    /// The configuration URL, or the server's http(s)://host:port.
    #[arg(value_name = "URL")]
    pub url: String,

    /// Which load: both directions at once, or one.
    #[arg(short, long, value_enum, default_value_t = Direction::Both)]
    pub direction: Direction,

    /// Download, then upload, each with its own result (networkQuality -s).
    #[arg(short, long, conflicts_with_all = ["direction", "idle"])]
    pub sequential: bool,

    /// No load: probes alone for MAD intervals (the idle round trip as RPM).
    #[arg(long)]
    pub idle: bool,

    /// Probe pairs per second in --idle (no goodput to scale by).
    #[arg(long, default_value_t = 10.0, value_name = "N", requires = "idle")]
    pub idle_probe_rate: f64,

    /// HTTP version.
    #[arg(long, value_enum, default_value_t = HttpChoice::Auto)]
    pub http: HttpChoice,

    /// Accept any TLS certificate (test servers with throwaway certificates).
    #[arg(short = 'k', long)]
    pub insecure: bool,

    /// Trust the certificates in this PEM file (e.g. sbm-rpm-server's server-cert.pem).
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub cacert: Option<PathBuf>,

    /// ID: the interval at which stability is evaluated (draft-09: 5s).
    #[arg(long, value_parser = crate::units::parse_duration, default_value = "5s", value_name = "DUR")]
    pub interval: Duration,

    /// MAD: intervals in a moving average.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub mad: u32,

    /// SDT: the standard-deviation tolerance for stability.
    #[arg(long, default_value_t = 0.05, value_name = "SHARE")]
    pub sdt: f64,

    /// MNP: the most load-generating connections per direction.
    #[arg(long, default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_connections: u32,

    /// MPS: the most probe pairs per second.
    #[arg(long, default_value_t = 100.0, value_name = "N")]
    pub max_probe_rate: f64,

    /// PTC: the share of goodput the probes may use.
    #[arg(long, default_value_t = 0.05, value_name = "SHARE")]
    pub probe_share: f64,

    /// The time limit of each stage (the draft leaves it to the tool); a stage that does
    /// not reach stability by then reports its lower confidence.
    #[arg(long, value_parser = crate::units::parse_seconds, default_value = "60s", value_name = "DUR")]
    pub stage_limit: Duration,

    /// A probe not answered within this counts as failed.
    #[arg(long, value_parser = crate::units::parse_duration, default_value = "10s", value_name = "DUR")]
    pub probe_timeout: Duration,

    /// Bytes HTTP/2 may hold per upload stream above the socket (hyper's default, 1 MB, is
    /// a source buffer no socket rule can see).
    #[arg(long, value_parser = crate::units::parse_bytes, default_value = "16K", value_name = "BYTES")]
    pub h2_send_buffer: u64,

    /// Leave Nagle's algorithm on. By default every connection sets TCP_NODELAY, as
    /// browsers, curl and nginx do; with Nagle, a new HTTP/2 connection's small writes
    /// cost its first GET an extra round trip.
    #[arg(long)]
    pub nagle: bool,

    #[command(flatten)]
    pub rule: RuleArgs,

    /// Print networkQuality-style JSON on one line instead of the summary.
    #[arg(short = 'c', long, conflicts_with = "json")]
    pub compact: bool,

    /// Print networkQuality-style JSON, indented, instead of the summary.
    #[arg(short = 'J', long)]
    pub json: bool,

    /// Write summary.json, probes.csv and intervals.csv here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// No per-interval progress on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn main_with_args<I, A>(args: I) -> i32
where
    I: IntoIterator<Item = A>,
    A: Into<std::ffi::OsString> + Clone,
{
    cli::main_with(args, run)
}

fn run(args: ClientArgs) -> Result<i32, Failure> {
    let rule = args.rule.rule().map_err(Failure::usage)?;
    let params = parameters(&args).map_err(Failure::usage)?;
    let url = config_url(&args.url).map_err(Failure::usage)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::env(format!("starting the runtime: {e}")))?;
    rt.block_on(run_test(args, rule, params, url))
}

fn parameters(a: &ClientArgs) -> Result<Parameters, String> {
    if a.h2_send_buffer < 1 || a.h2_send_buffer > u64::from(u32::MAX) {
        return Err("--h2-send-buffer must be between 1 byte and 4 GiB".into());
    }
    if a.interval < Duration::from_millis(100) {
        return Err("--interval must be at least 100ms".into());
    }
    if !(a.sdt > 0.0 && a.sdt < 1.0) {
        return Err(format!("--sdt {}: a share between 0 and 1", a.sdt));
    }
    if !(a.probe_share > 0.0 && a.probe_share <= 1.0) {
        return Err(format!(
            "--probe-share {}: a share in (0, 1]",
            a.probe_share
        ));
    }
    if !(a.max_probe_rate > 0.0 && a.max_probe_rate <= 10_000.0) {
        return Err(format!(
            "--max-probe-rate {}: between 0 and 10000",
            a.max_probe_rate
        ));
    }
    if !(a.idle_probe_rate > 0.0 && a.idle_probe_rate <= 10_000.0) {
        return Err(format!(
            "--idle-probe-rate {}: between 0 and 10000",
            a.idle_probe_rate
        ));
    }
    Ok(Parameters {
        mad: a.mad as usize,
        interval: a.interval,
        sdt: a.sdt,
        max_connections: a.max_connections as usize,
        max_probes_per_sec: a.max_probe_rate,
        probe_capacity_share: a.probe_share,
        ..Parameters::default()
    })
}

/// The configuration URL: as given, or the well-known path on a bare scheme://host:port.
fn config_url(s: &str) -> Result<TestUrl, String> {
    let mut u = nq_config::parse_url(s)?;
    if u.path == "/" {
        u.path = WELL_KNOWN_PATH.to_string();
    }
    Ok(u)
}

async fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    let mut addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("resolving {host}: {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("resolving {host}: no address"))
}

/// Everything the stages share.
struct Test {
    ep: Endpoint,
    http: HttpChoice,
    small: String,
    large: String,
    upload: String,
    rule: EndpointRule,
    params: Parameters,
    args: ClientArgs,
    out: Option<Outputs>,
}

struct Outputs {
    probes: csv::Writer<std::fs::File>,
    intervals: csv::Writer<std::fs::File>,
}

impl Outputs {
    fn open(dir: &std::path::Path) -> Result<Outputs, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let open = |name: &str| {
            let p = dir.join(name);
            csv::Writer::from_path(&p).map_err(|e| format!("creating {}: {e}", p.display()))
        };
        Ok(Outputs {
            probes: open("probes.csv")?,
            intervals: open("intervals.csv")?,
        })
    }
}

async fn run_test(
    args: ClientArgs,
    rule: EndpointRule,
    params: Parameters,
    url: TestUrl,
) -> Result<i32, Failure> {
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let tls_config = if url.tls {
        let trust = match &args.cacert {
            Some(p) => super::tls::Trust::CaFile(p.clone()),
            None if args.insecure => super::tls::Trust::Insecure,
            None => {
                return Err(Failure::usage(
                    "an https URL needs --cacert FILE (e.g. sbm-rpm-server's server-cert.pem) or --insecure",
                ))
            }
        };
        Some(super::tls::client_config(&trust, Vec::new()).map_err(Failure::usage)?)
    } else {
        None
    };
    let out = match &args.out {
        Some(d) => Some(Outputs::open(d).map_err(Failure::env)?),
        None => None,
    };
    // The configuration object.
    let config_addr = resolve(&url.host, url.port).await.map_err(Failure::env)?;
    let mut ep = Endpoint {
        addr: config_addr,
        h2_send_buffer: args.h2_send_buffer as usize,
        tls: tls_config.clone(),
        server_name: url.host.clone(),
        authority: url.authority(),
        connect_timeout: args.probe_timeout,
    };
    let (config, http) = fetch_config(&ep, args.http, !args.nagle, &url.path)
        .await
        .map_err(|e| Failure::env(format!("{}: {e}", url.to_url())))?;
    let large = nq_config::parse_url(&config.urls.large_download_url).map_err(Failure::env)?;
    let small = nq_config::parse_url(&config.urls.small_download_url).map_err(Failure::env)?;
    let upload = nq_config::parse_url(&config.urls.upload_url).map_err(Failure::env)?;
    // The draft: test_endpoint overrides the address the URLs' host resolves to.
    let host = config.test_endpoint.clone().unwrap_or(large.host.clone());
    ep.addr = resolve(&host, large.port).await.map_err(Failure::env)?;
    ep.authority = large.authority();
    ep.server_name = large.host.clone();
    if large.tls != url.tls {
        ep.tls = if large.tls {
            return Err(Failure::env(
                "the configuration names https URLs but was fetched over http: fetch it over https",
            ));
        } else {
            None
        };
    }
    let mut test = Test {
        ep,
        http,
        small: small.path,
        large: large.path,
        upload: upload.path,
        rule,
        params,
        args,
        out,
    };
    let stages: Vec<StageName> = if test.args.idle {
        vec![StageName::Idle]
    } else if test.args.sequential {
        vec![StageName::Down, StageName::Up]
    } else {
        vec![match test.args.direction {
            Direction::Both => StageName::DownUp,
            Direction::Down => StageName::Down,
            Direction::Up => StageName::Up,
        }]
    };
    let mut results = Vec::new();
    let mut incomplete = None;
    let stop = Arc::new(tokio::sync::Notify::new());
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            stop_signal().await;
            stop.notify_one();
        });
    }
    for name in stages {
        let (result, reason) = run_stage(&mut test, name, &stop).await;
        results.push(result);
        if let Some(r) = reason {
            incomplete = Some(r);
            break;
        }
    }
    let http_name = match test.http {
        HttpChoice::Http11 => HttpVersion::H1.name(),
        _ => HttpVersion::H2.name(),
    };
    let run = RpmRun {
        schema_version: record::SCHEMA_VERSION,
        program: "sbm-rpm".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        started_unix_s: started_unix,
        config_url: url.to_url(),
        server_addr: test.ep.addr.to_string(),
        tls: test.ep.tls.is_some(),
        http: http_name.into(),
        parameters: test.params.clone(),
        upload_rule: test.rule.label(),
        upload_rule_detail: serde_json::to_value(&test.rule).expect("json"),
        stages: results,
        complete: incomplete.is_none(),
        incomplete_reason: incomplete,
        warnings: Vec::new(),
    };
    if let Some(dir) = &test.args.out {
        let p = dir.join("summary.json");
        std::fs::write(&p, serde_json::to_string_pretty(&run).expect("json") + "\n")
            .map_err(|e| Failure::env(format!("writing {}: {e}", p.display())))?;
    }
    if test.args.compact {
        println!("{}", record::nq_json(&run));
    } else if test.args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&record::nq_json(&run)).expect("json")
        );
    } else {
        print!("{}", record::human(&run));
    }
    Ok(if run.complete { 0 } else { 1 })
}

async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

/// Fetches and checks the configuration object; in cleartext `auto`, HTTP/2 with prior
/// knowledge first and HTTP/1.1 if that gets no answer. Returns the HTTP that worked.
async fn fetch_config(
    ep: &Endpoint,
    http: HttpChoice,
    nodelay: bool,
    path: &str,
) -> Result<(NqConfig, HttpChoice), String> {
    let attempt = |choice: HttpChoice| async move {
        let c = connect::connect(ep, choice, nodelay, None)
            .await
            .map_err(|e| e.to_string())?;
        let (_, body) = tokio::time::timeout(
            ep.connect_timeout,
            connect::get_all(ep, &c.sender, c.version, path, None),
        )
        .await
        .map_err(|_| format!("no answer within {:?}", ep.connect_timeout))??;
        let text = String::from_utf8_lossy(&body).to_string();
        let config =
            NqConfig::parse(&text).map_err(|e| format!("invalid configuration object: {e}"))?;
        let used = match c.version {
            HttpVersion::H2 => HttpChoice::Http2,
            HttpVersion::H1 => HttpChoice::Http11,
        };
        Ok::<_, String>((config, used))
    };
    match http {
        HttpChoice::Auto if ep.tls.is_none() => match attempt(HttpChoice::Http2).await {
            Ok(r) => Ok(r),
            Err(e2) => attempt(HttpChoice::Http11)
                .await
                .map_err(|e1| format!("HTTP/2: {e2}; HTTP/1.1: {e1}")),
        },
        other => attempt(other).await,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Down,
    Up,
}

impl Dir {
    fn name(self) -> &'static str {
        match self {
            Dir::Down => "down",
            Dir::Up => "up",
        }
    }
}

/// A load-generating connection.
struct LoadConn {
    dir: Dir,
    conn: Arc<Connected>,
    /// The socket's byte count at the last interval's end: tcp_info's bytes_received for a
    /// download, bytes_acked for an upload (what crossed the path, read at the socket,
    /// not when the application happened to read it).
    bytes_at_last: u64,
    task: tokio::task::JoinHandle<()>,
}

impl LoadConn {
    /// Bytes moved since the last call.
    fn take_bytes(&mut self) -> u64 {
        let info = self.conn.tcp_info();
        let now = match self.dir {
            Dir::Down => info.and_then(|i| i.bytes_received),
            Dir::Up => info.and_then(|i| i.bytes_acked),
        }
        .unwrap_or(self.bytes_at_last);
        let d = now.saturating_sub(self.bytes_at_last);
        self.bytes_at_last = now;
        d
    }
}

impl Drop for LoadConn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug)]
struct ProbeDone {
    /// Unique in the run: the stage and the pair's number.
    probe_id: String,
    kind: &'static str,
    on: &'static str,
    version: HttpVersion,
    start_s: f64,
    tcp_ms: Option<f64>,
    tls_ms: Option<f64>,
    http_ms: Option<f64>,
    /// When the self probe's GET was sent (CLOCK_REALTIME, ns).
    sent_unix_ns: Option<u64>,
    srtt_substitute: bool,
    error: Option<String>,
}

/// What opening a load-generating connection needs, owned, so that it can run beside the
/// interval loop (a connection through a loaded path can take many round trips to open).
#[derive(Clone)]
struct LoadSpec {
    ep: Endpoint,
    http: HttpChoice,
    nodelay: bool,
    upload_rule: EndpointRule,
    large: String,
    upload: String,
}

impl LoadSpec {
    fn of(test: &Test) -> LoadSpec {
        LoadSpec {
            ep: test.ep.clone(),
            http: test.http,
            nodelay: !test.args.nagle,
            upload_rule: test.rule.clone(),
            large: test.large.clone(),
            upload: test.upload.clone(),
        }
    }

    /// Opens a connection in a task of its own; the result arrives on `opened`.
    fn spawn_open(
        &self,
        dir: Dir,
        failures: &mpsc::UnboundedSender<String>,
        opened: &mpsc::UnboundedSender<Result<LoadConn, String>>,
    ) {
        let spec = self.clone();
        let failures = failures.clone();
        let opened = opened.clone();
        tokio::spawn(async move {
            let r = open_load(&spec, dir, &failures)
                .await
                .map_err(|e| format!("opening a load-generating connection: {e}"));
            let _ = opened.send(r);
        });
    }
}

async fn open_load(
    spec: &LoadSpec,
    dir: Dir,
    failures: &mpsc::UnboundedSender<String>,
) -> Result<LoadConn, ConnectError> {
    let rule = match dir {
        Dir::Up => Some(&spec.upload_rule),
        Dir::Down => None,
    };
    let conn = Arc::new(connect::connect(&spec.ep, spec.http, spec.nodelay, rule).await?);
    let ep = spec.ep.clone();
    let (path, method) = match dir {
        Dir::Down => (spec.large.clone(), hyper::Method::GET),
        Dir::Up => (spec.upload.clone(), hyper::Method::POST),
    };
    let sender = conn.sender.clone();
    let version = conn.version;
    let failures = failures.clone();
    let task = tokio::spawn(async move {
        let body = match dir {
            Dir::Down => connect::empty(),
            Dir::Up => Zeros::new(None, Arc::new(AtomicU64::new(0))).boxed(),
        };
        let req = connect::request(&ep, version, method, &path, body);
        let what = format!("{} {path}", dir.name());
        let resp = match connect::send(&sender, req).await {
            Ok(r) => r,
            Err(e) => {
                let _ = failures.send(format!("load-generating connection ({what}): {e}"));
                return;
            }
        };
        if !resp.status().is_success() {
            let _ = failures.send(format!(
                "load-generating connection ({what}): status {}",
                resp.status()
            ));
            return;
        }
        let mut body = resp.into_body();
        loop {
            match body.frame().await {
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    let _ = failures.send(format!("load-generating connection ({what}): {e}"));
                    return;
                }
                None => {
                    if !body.is_end_stream() || dir == Dir::Down {
                        let _ = failures.send(format!(
                            "load-generating connection ({what}): the server ended the response"
                        ));
                    }
                    return;
                }
            }
        }
    });
    // Counting starts at zero: the handshake's bytes fall in the first interval.
    Ok(LoadConn {
        dir,
        conn,
        bytes_at_last: 0,
        task,
    })
}

/// A foreign probe: a new connection (TCP, TLS), then GET small on it.
async fn foreign_probe(
    ep: Endpoint,
    http: HttpChoice,
    nodelay: bool,
    small: String,
    start_s: f64,
    probe_id: String,
) -> ProbeDone {
    let mut p = ProbeDone {
        probe_id,
        kind: "foreign",
        on: "",
        version: HttpVersion::H2,
        start_s,
        tcp_ms: None,
        tls_ms: None,
        http_ms: None,
        sent_unix_ns: None,
        srtt_substitute: false,
        error: None,
    };
    match connect::connect(&ep, http, nodelay, None).await {
        Ok(c) => {
            p.version = c.version;
            p.tcp_ms = Some(c.tcp_ms);
            p.tls_ms = c.tls_ms;
            match connect::get_all(&ep, &c.sender, c.version, &small, None).await {
                Ok((ms, _)) => p.http_ms = Some(ms),
                Err(e) => p.error = Some(e),
            }
        }
        Err(e) => p.error = Some(e.to_string()),
    }
    p
}

/// A self probe: GET small on a load-generating (or, idle, the idle) connection; on an
/// HTTP/1.1 connection, whose one request is the transfer, tcp_info's sRTT instead.
async fn self_probe(
    ep: Endpoint,
    conn: Arc<Connected>,
    on: &'static str,
    small: String,
    start_s: f64,
    probe_id: String,
) -> ProbeDone {
    let mut p = ProbeDone {
        probe_id,
        kind: "self",
        on,
        version: conn.version,
        start_s,
        tcp_ms: None,
        tls_ms: None,
        http_ms: None,
        sent_unix_ns: None,
        srtt_substitute: false,
        error: None,
    };
    match &conn.sender {
        Sender::H2(_) => {
            p.sent_unix_ns = Some(crate::clock::realtime_ns());
            match connect::get_all(&ep, &conn.sender, conn.version, &small, Some(&p.probe_id)).await
            {
                Ok((ms, _)) => p.http_ms = Some(ms),
                Err(e) => p.error = Some(e),
            }
        }
        Sender::H1(_) => match conn.tcp_info() {
            Some(i) if i.rtt_us > 0 => {
                p.http_ms = Some(f64::from(i.rtt_us) / 1e3);
                p.srtt_substitute = true;
            }
            _ => p.error = Some("no sRTT in tcp_info".into()),
        },
    }
    p
}

/// Runs one stage; the result, and why the test must stop if it must.
async fn run_stage(
    test: &mut Test,
    name: StageName,
    stop: &tokio::sync::Notify,
) -> (StageResult, Option<String>) {
    let params = test.params.clone();
    let dirs: &[Dir] = match name {
        StageName::Idle => &[],
        StageName::DownUp => &[Dir::Down, Dir::Up],
        StageName::Down => &[Dir::Down],
        StageName::Up => &[Dir::Up],
    };
    let (fail_tx, mut fail_rx) = mpsc::unbounded_channel::<String>();
    let (probe_tx, mut probe_rx) = mpsc::unbounded_channel::<ProbeDone>();
    let started = Instant::now();
    let mut loads: Vec<LoadConn> = Vec::new();
    let mut abort: Option<String> = None;
    // The idle stage's self probes ride on one connection of their own.
    let idle_conn = if name == StageName::Idle {
        match connect::connect(&test.ep, test.http, !test.args.nagle, None).await {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                abort = Some(format!("the idle connection: {e}"));
                None
            }
        }
    } else {
        None
    };
    let spec = LoadSpec::of(test);
    let (opened_tx, mut opened_rx) = mpsc::unbounded_channel::<Result<LoadConn, String>>();
    // The first interval starts before the first load connection opens: the bytes that
    // arrive while the others open are counted over the time they took.
    let mut last_tick = Instant::now();
    'open: for _ in 0..params.initial_connections {
        for &d in dirs {
            match open_load(&spec, d, &fail_tx).await {
                Ok(l) => loads.push(l),
                Err(e) => {
                    abort = Some(format!("opening a load-generating connection: {e}"));
                    break 'open;
                }
            }
        }
    }
    // Connections asked for and not yet open: they count toward MNP.
    let mut opening = 0usize;
    let mut ramp = Ramp::default();
    let mut intervals_done = 0usize;
    // (interval it ended in, probe)
    let mut probes: VecDeque<(usize, ProbeDone)> = VecDeque::new();
    let mut all_probes: Vec<(usize, ProbeDone)> = Vec::new();
    let mut launched = 0u64;
    let mut failed = 0u64;
    let mut first_probe_error: Option<String> = None;
    let mut dl_series: Vec<f64> = Vec::new();
    let mut ul_series: Vec<f64> = Vec::new();
    let mut rng_state = (started.elapsed().as_nanos() as u64) | 1;
    let idle_intervals = params.mad;
    let probe_rate = |g: Option<f64>| {
        if name == StageName::Idle {
            test.args.idle_probe_rate.min(params.max_probes_per_sec)
        } else {
            params.probe_pairs_per_sec(g)
        }
    };
    let mut rate = probe_rate(None);
    let mut next_probe = tokio::time::Instant::now();
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + params.interval,
        params.interval,
    );
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let limit = tokio::time::sleep(test.args.stage_limit);
    tokio::pin!(limit);
    let mut limit_reached = false;
    while abort.is_none() {
        tokio::select! {
            _ = ticker.tick() => {
                intervals_done += 1;
                let mut down = 0u64;
                let mut up = 0u64;
                for l in loads.iter_mut() {
                    match l.dir {
                        Dir::Down => down += l.take_bytes(),
                        Dir::Up => up += l.take_bytes(),
                    }
                }
                // The interval as it ran (a late tick must not read as a rate spike).
                let now = Instant::now();
                let start_s = last_tick.duration_since(started).as_secs_f64();
                let end_s = now.duration_since(started).as_secs_f64();
                let secs = (end_s - start_s).max(1e-3);
                last_tick = now;
                let (dl, ul) = (down as f64 / secs, up as f64 / secs);
                dl_series.push(dl);
                ul_series.push(ul);
                let goodput = dl + ul;
                let window = window_probes(&probes, intervals_done, params.mad);
                let r = method::responsiveness(&window, params.trimmed_mean_pct);
                let verdict = if name == StageName::Idle {
                    None
                } else {
                    Some(ramp.end_interval(&params, goodput, r.as_ref().map(|r| r.rpm), (loads.len() + opening) / dirs.len().max(1)))
                };
                let ended_here = probes.iter().filter(|(i, _)| *i == intervals_done).count();
                let row = IntervalRow {
                    stage: name.name().into(),
                    interval: intervals_done,
                    start_s,
                    end_s,
                    ramp_stage: verdict.map(|v| stage_name(v.stage)).unwrap_or("idle").into(),
                    dl_bps: dl * 8.0,
                    ul_bps: ul * 8.0,
                    goodput_average_bps: verdict.map(|v| v.goodput_average * 8.0).unwrap_or(0.0),
                    dl_flows: loads.iter().filter(|l| l.dir == Dir::Down).count(),
                    ul_flows: loads.iter().filter(|l| l.dir == Dir::Up).count(),
                    rpm: r.as_ref().map(|r| r.rpm),
                    foreign_rpm: r.as_ref().map(|r| r.foreign_rpm),
                    self_rpm: r.as_ref().map(|r| r.self_rpm),
                    probes_ended: ended_here,
                };
                if !test.args.quiet {
                    eprintln!(
                        "[{:6.1}s] {:<7} dl {:>9} ul {:>9} flows {}+{} RPM {:>6} {}",
                        row.end_s,
                        name.name(),
                        format!("{:.2}M", row.dl_bps / 1e6),
                        format!("{:.2}M", row.ul_bps / 1e6),
                        row.dl_flows,
                        row.ul_flows,
                        r.as_ref().map(|r| format!("{:.0}", r.rpm)).unwrap_or("-".into()),
                        row.ramp_stage,
                    );
                }
                if let Some(o) = test.out.as_mut() {
                    let _ = o.intervals.serialize(&row).and_then(|_| o.intervals.flush().map_err(csv::Error::from));
                }
                rate = probe_rate(Some(goodput));
                match verdict {
                    None => {
                        if intervals_done >= idle_intervals {
                            break;
                        }
                    }
                    Some(v) if v.stage == Stage::Done => break,
                    Some(v) => {
                        for _ in 0..v.add_connections {
                            for &d in dirs {
                                spec.spawn_open(d, &fail_tx, &opened_tx);
                                opening += 1;
                            }
                        }
                    }
                }
            }
            _ = tokio::time::sleep_until(next_probe) => {
                next_probe += Duration::from_secs_f64(1.0 / rate);
                let start_s = started.elapsed().as_secs_f64();
                launched += 1;
                let timeout = test.args.probe_timeout;
                let tx = probe_tx.clone();
                let pair_id = format!("{}-{launched}", name.name());
                let foreign_id = format!("{pair_id}-f");
                let fp = foreign_probe(
                    test.ep.clone(),
                    test.http,
                    !test.args.nagle,
                    test.small.clone(),
                    start_s,
                    foreign_id.clone(),
                );
                tokio::spawn(async move {
                    let p = match tokio::time::timeout(timeout, fp).await {
                        Ok(p) => p,
                        Err(_) => timed_out(foreign_id, "foreign", "", start_s, timeout),
                    };
                    let _ = tx.send(p);
                });
                // The self probe's connection: a random load-generating one.
                let carrier = if let Some(c) = &idle_conn {
                    Some((c.clone(), "idle"))
                } else if loads.is_empty() {
                    None
                } else {
                    rng_state ^= rng_state << 13;
                    rng_state ^= rng_state >> 7;
                    rng_state ^= rng_state << 17;
                    let l = &loads[(rng_state % loads.len() as u64) as usize];
                    Some((l.conn.clone(), l.dir.name()))
                };
                if let Some((conn, on)) = carrier {
                    let tx = probe_tx.clone();
                    let self_id = format!("{pair_id}-s");
                    let sp = self_probe(
                        test.ep.clone(),
                        conn,
                        on,
                        test.small.clone(),
                        start_s,
                        self_id.clone(),
                    );
                    tokio::spawn(async move {
                        let p = match tokio::time::timeout(timeout, sp).await {
                            Ok(p) => p,
                            Err(_) => timed_out(self_id, "self", on, start_s, timeout),
                        };
                        let _ = tx.send(p);
                    });
                }
            }
            Some(p) = probe_rx.recv() => {
                let interval = intervals_done + 1;
                if let Some(e) = &p.error {
                    failed += 1;
                    if first_probe_error.is_none() {
                        first_probe_error = Some(e.clone());
                    }
                }
                if let Some(o) = test.out.as_mut() {
                    let row = probe_row(name, interval, &p);
                    let _ = o.probes.serialize(&row).and_then(|_| o.probes.flush().map_err(csv::Error::from));
                }
                probes.push_back((interval, p));
                // Keep only what the window can still use in `probes`.
                while probes.front().is_some_and(|(i, _)| *i + params.mad < interval) {
                    all_probes.push(probes.pop_front().expect("front"));
                }
            }
            Some(r) = opened_rx.recv() => {
                opening = opening.saturating_sub(1);
                match r {
                    Ok(l) => loads.push(l),
                    Err(e) => abort = Some(e),
                }
            }
            Some(e) = fail_rx.recv() => {
                abort = Some(e);
            }
            _ = &mut limit => {
                limit_reached = true;
                break;
            }
            _ = stop.notified() => {
                abort = Some("interrupted".into());
            }
        }
    }
    let dl_flows = loads.iter().filter(|l| l.dir == Dir::Down).count();
    let ul_flows = loads.iter().filter(|l| l.dir == Dir::Up).count();
    // The load's connections end with the stage (dropping one aborts its transfer).
    loads.clear();
    all_probes.extend(probes.drain(..));
    let last = intervals_done;
    let window: VecDeque<(usize, ProbeDone)> = all_probes
        .into_iter()
        .filter(|(i, _)| *i + params.mad > last)
        .collect();
    let final_window = window_probes(&window, last, params.mad);
    let responsiveness = method::responsiveness(&final_window, params.trimmed_mean_pct);
    let self_on = |on: &str| {
        let v: Vec<f64> = window
            .iter()
            .filter(|(_, p)| p.kind == "self" && p.on == on)
            .filter_map(|(_, p)| p.http_ms)
            .collect();
        SelfProbes {
            count: v.len(),
            tm_ms: method::trimmed_mean(&v, params.trimmed_mean_pct),
            srtt_substitutes: window
                .iter()
                .filter(|(_, p)| p.on == on && p.srtt_substitute)
                .count(),
        }
    };
    let ramped = name != StageName::Idle;
    let has = |d: Dir| dirs.contains(&d);
    let result = StageResult {
        stage: name,
        intervals: intervals_done,
        duration_s: started.elapsed().as_secs_f64(),
        dl_throughput_bps: has(Dir::Down)
            .then(|| method::moving_average(&dl_series, params.mad).unwrap_or(0.0) * 8.0),
        ul_throughput_bps: has(Dir::Up)
            .then(|| method::moving_average(&ul_series, params.mad).unwrap_or(0.0) * 8.0),
        dl_flows,
        ul_flows,
        ended_by: if abort.is_some() {
            "error".into()
        } else if limit_reached {
            "time limit".into()
        } else if ramped {
            "stable".into()
        } else {
            "idle intervals done".into()
        },
        responsiveness,
        self_on_down: self_on("down"),
        self_on_up: self_on("up"),
        goodput_confidence: ramped.then(|| ramp.goodput_confidence(params.mad)),
        rpm_confidence: if ramped {
            Some(ramp.rpm_confidence(params.mad))
        } else {
            Some(method::Confidence::of(
                intervals_done,
                intervals_done >= params.mad,
                params.mad,
            ))
        },
        probes_launched: launched,
        probes_failed: failed,
        probe_error: first_probe_error,
    };
    (result, abort)
}

fn stage_name(s: Stage) -> &'static str {
    match s {
        Stage::Goodput => "goodput",
        Stage::Responsiveness => "responsiveness",
        Stage::Done => "done",
    }
}

fn timed_out(
    probe_id: String,
    kind: &'static str,
    on: &'static str,
    start_s: f64,
    t: Duration,
) -> ProbeDone {
    ProbeDone {
        probe_id,
        kind,
        on,
        version: HttpVersion::H2,
        start_s,
        tcp_ms: None,
        tls_ms: None,
        http_ms: None,
        sent_unix_ns: None,
        srtt_substitute: false,
        error: Some(format!("no answer within {t:?}")),
    }
}

/// The probe times of the probes that ended in the last MAD intervals up to `interval`.
fn window_probes(probes: &VecDeque<(usize, ProbeDone)>, interval: usize, mad: usize) -> ProbeTimes {
    let mut t = ProbeTimes::default();
    for (i, p) in probes {
        if *i + mad <= interval || *i > interval || p.error.is_some() {
            continue;
        }
        match p.kind {
            "foreign" => {
                if let (Some(tcp), Some(http)) = (p.tcp_ms, p.http_ms) {
                    t.tcp_f.push(tcp);
                    t.http_f.push(http);
                    if let Some(tls) = p.tls_ms {
                        t.tls_f.push(tls);
                    }
                }
            }
            _ => {
                if let Some(h) = p.http_ms {
                    t.http_l.push(h);
                }
            }
        }
    }
    t
}

fn probe_row(stage: StageName, interval: usize, p: &ProbeDone) -> ProbeRow {
    ProbeRow {
        probe_id: p.probe_id.clone(),
        stage: stage.name().into(),
        kind: p.kind.into(),
        on: p.on.into(),
        http: p.version.name().into(),
        start_s: p.start_s,
        interval,
        tcp_ms: p.tcp_ms,
        tls_ms: p.tls_ms,
        http_ms: p.http_ms,
        sent_unix_ns: p.sent_unix_ns,
        srtt_substitute: p.srtt_substitute,
        error: p.error.clone().unwrap_or_default(),
    }
}
