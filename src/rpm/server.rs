//! sbm-rpm-server: a responsiveness test server (draft-ietf-ippm-responsiveness-09,
//! "Responsiveness Test Server") whose download sockets carry a chosen readiness rule.
//!
//! It serves the draft's four URLs over HTTP/1.1 and HTTP/2 (cleartext with prior
//! knowledge, or TLS with ALPN): the configuration object at `/.well-known/nq`, 1 byte at
//! `/small`, `--large-size` bytes of zeros at `/large`, and a sink at `/upload`. Every
//! accepted socket gets the rule (`rpm::rule`) before its first byte; each connection's
//! bytes, protocol and final tcp_info go to `connections.csv` under `--out` when the
//! connection ends, so nothing is lost if the server is stopped.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use tokio::net::TcpListener;

use super::body::Zeros;
use super::ledger::{Measured, PendingProbes, ProbeWait};
use super::nq_config::{NqConfig, LARGE_PATH, SMALL_PATH, UPLOAD_PATH, WELL_KNOWN_PATH};
use super::rule::{EndpointRule, RuleArgs, RuledStream};
use crate::cli::{self, Failure};
use crate::sys;
use crate::tcpinfo::TcpInfo;

/// HTTP/2 flow-control windows: large enough that the window never limits a test flow
/// (the draft's example: 4 MB at 32 ms carries 1 Gb/s; 16 MB covers 86 Mb/s at 1.5 s).
pub const H2_WINDOW: u32 = 16 << 20;

#[derive(Debug, Parser)]
#[command(
    name = "sbm-rpm-server",
    version,
    about = "A responsiveness (RPM) test server whose download sockets use a chosen readiness rule",
    after_help = "Examples:\n  sbm-rpm-server --listen 198.18.0.2:8080\n  sbm-rpm-server --listen [::]:8443 --tls --replenish-time 5ms\n  sbm-rpm-server --listen 0.0.0.0:8080 --lowat-per-write 5ms --out server-run\n  curl --http2-prior-knowledge http://198.18.0.2:8080/.well-known/nq\n\nThe configuration object names this server's own URLs, built from the request's Host\n(or --public-base). sbm-rpm runs the test against it: sbm-rpm http://HOST:PORT/.well-known/nq"
)]
pub struct ServerArgs {
    /// Address and port to listen on.
    #[arg(short, long, default_value = "0.0.0.0:8080", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,

    /// Serve TLS (HTTP/2 and HTTP/1.1 by ALPN); without --cert, a self-signed certificate
    /// made at start (its PEM written to OUT/server-cert.pem with --out).
    #[arg(long)]
    pub tls: bool,

    /// PEM certificate chain for --tls.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "key"])]
    pub cert: Option<PathBuf>,

    /// PEM private key for --tls.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "cert"])]
    pub key: Option<PathBuf>,

    /// The scheme://host:port the configuration object names (default: from each
    /// request's Host header).
    #[arg(long, value_name = "URL")]
    pub public_base: Option<String>,

    /// The configuration object's optional test_endpoint.
    #[arg(long, value_name = "HOST")]
    pub test_endpoint: Option<String>,

    /// Size of the large object (the draft asks for at least 8 GB).
    #[arg(long, value_parser = crate::units::parse_bytes, default_value = "8000000000", value_name = "BYTES")]
    pub large_size: u64,

    /// Bytes HTTP/2 may hold per stream above the socket, waiting for it to take them
    /// (hyper's own default, ~400 KB, is a source buffer no socket rule can see: at 2 Mb/s
    /// it is 1.6 s of data in front of a probe's response).
    #[arg(long, value_parser = crate::units::parse_bytes, default_value = "16K", value_name = "BYTES")]
    pub h2_send_buffer: u64,

    /// Leave Nagle's algorithm on. By default accepted sockets set TCP_NODELAY, as nginx
    /// does (tcp_nodelay on).
    #[arg(long)]
    pub nagle: bool,

    #[command(flatten)]
    pub rule: RuleArgs,

    /// Write connections.csv (one row per connection, as each ends) and server.json here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// One connection, as recorded when it ends.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionRow {
    pub id: u64,
    pub peer: String,
    pub tls: bool,
    /// "HTTP/2" or "HTTP/1.1" (of its first request; empty without one).
    pub http: String,
    pub requests: u64,
    pub bytes_written: u64,
    pub upload_bytes: u64,
    pub lowat_sets: u64,
    pub retrans: Option<u64>,
    pub srtt_us: u32,
    pub duration_s: f64,
    pub error: String,
}

/// What a request handler updates for its connection.
#[derive(Debug, Default)]
struct ConnStats {
    id: AtomicU64,
    requests: AtomicU64,
    upload_bytes: AtomicU64,
    http: Mutex<String>,
    /// The self probes whose socket backlog has not yet left (`rpm::ledger`).
    pending: Mutex<PendingProbes>,
    /// A probe arrived: the sampler wakes.
    probe_arrived: tokio::sync::Notify,
    /// Bytes written to the socket so far (published by `Tracked`).
    written: Arc<AtomicU64>,
    /// A second descriptor of the socket, for SIOCOUTQNSD while hyper owns it.
    socket: Option<OwnedFd>,
    /// Writes to the socket that took bytes (published by `Tracked`).
    writes: AtomicU64,
    /// Probe responses whose body HTTP/2 has taken, waiting for the socket's next flush
    /// after a write; then their own offset is known (`Tracked::responses_flushed`).
    handed: Mutex<Vec<Handed>>,
    /// The probes whose response's own bytes have not yet left (`rpm::ledger`).
    responses: Mutex<PendingProbes>,
    /// Each probe's two waits as they complete: a row is written when both are known.
    halves: Mutex<HashMap<String, Halves>>,
}

/// A probe's response, taken by HTTP/2.
#[derive(Debug, Clone)]
struct Handed {
    id: String,
    ready: Instant,
    written_at_ready: u64,
    /// `ConnStats::writes` when HTTP/2 took the body: a flush counts only after a later write.
    writes_then: u64,
}

/// A probe's waits: for the bytes ahead of it, and for its own bytes (with the bytes
/// written between ready and its flush).
#[derive(Debug, Default)]
struct Halves {
    ahead: Option<Measured>,
    response: Option<Measured>,
    written_after_ready: Option<u64>,
}

impl Halves {
    fn complete(&self) -> bool {
        self.ahead.is_some() && self.response.is_some()
    }
}

struct Shared {
    /// When the server started: probes.csv's clock.
    started: Instant,
    /// CLOCK_REALTIME at `started`, ns: probes.csv's `ready_unix_ns`.
    started_unix_ns: u64,
    probes: ProbeRecorder,
    large_size: u64,
    h2_send_buffer: usize,
    public_base: Option<String>,
    test_endpoint: Option<String>,
    tls: bool,
}

pub fn main_with_args<I, A>(args: I) -> i32
where
    I: IntoIterator<Item = A>,
    A: Into<std::ffi::OsString> + Clone,
{
    cli::main_with(args, run)
}

fn run(args: ServerArgs) -> Result<i32, Failure> {
    let rule = args.rule.rule().map_err(Failure::usage)?;
    if args.h2_send_buffer < 1 || args.h2_send_buffer > u64::from(u32::MAX) {
        return Err(Failure::usage(
            "--h2-send-buffer must be between 1 byte and 4 GiB",
        ));
    }
    if args.large_size < 1 {
        return Err(Failure::usage("--large-size must be at least 1 byte"));
    }
    if let Some(b) = &args.public_base {
        super::nq_config::parse_url(b)
            .map_err(|e| Failure::usage(format!("--public-base: {e}")))?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::env(format!("starting the runtime: {e}")))?;
    rt.block_on(serve(args, rule))
}

async fn serve(args: ServerArgs, rule: EndpointRule) -> Result<i32, Failure> {
    let names = vec!["localhost".to_string(), args.listen.ip().to_string()];
    let tls = if args.tls {
        let files = args.cert.as_deref().zip(args.key.as_deref());
        let (config, generated) =
            super::tls::server_config(files, names).map_err(Failure::usage)?;
        if let (Some(pem), Some(dir)) = (&generated, &args.out) {
            std::fs::create_dir_all(dir)
                .and_then(|_| std::fs::write(dir.join("server-cert.pem"), pem))
                .map_err(|e| Failure::env(format!("writing {}: {e}", dir.display())))?;
        }
        Some(tokio_rustls::TlsAcceptor::from(config))
    } else {
        None
    };
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::env(format!("bind {}: {e}", args.listen)))?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::env(format!("getsockname: {e}")))?;
    let rows = Recorder::open(args.out.as_deref()).map_err(Failure::env)?;
    if let Some(dir) = &args.out {
        let meta = serde_json::json!({
            "program": "sbm-rpm-server",
            "version": env!("CARGO_PKG_VERSION"),
            "listen": local.to_string(),
            "tls": args.tls,
            "rule": &rule,
            "large_size": args.large_size,
            "nodelay": !args.nagle,
            "h2_send_buffer": args.h2_send_buffer,
        });
        std::fs::write(
            dir.join("server.json"),
            serde_json::to_string_pretty(&meta).expect("json") + "\n",
        )
        .map_err(|e| Failure::env(format!("writing {}: {e}", dir.display())))?;
    }
    let scheme = if args.tls { "https" } else { "http" };
    // On stdout, as iperf3 -s says it: scripts and tests wait for this line.
    println!(
        "sbm-rpm-server: listening on {local} ({scheme}, HTTP/2 and HTTP/1.1), rule {}; configuration at {scheme}://{local}{WELL_KNOWN_PATH}",
        rule.label()
    );
    let shared = Arc::new(Shared {
        started: Instant::now(),
        started_unix_ns: crate::clock::realtime_ns(),
        probes: ProbeRecorder::open(args.out.as_deref()).map_err(Failure::env)?,
        large_size: args.large_size,
        h2_send_buffer: args.h2_send_buffer as usize,
        public_base: args.public_base.clone(),
        test_endpoint: args.test_endpoint.clone(),
        tls: args.tls,
    });
    let rows = Arc::new(rows);
    let mut next_id = 0u64;
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("sbm-rpm-server: accept: {e}");
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        next_id += 1;
        let id = next_id;
        if !args.nagle {
            let _ = stream.set_nodelay(true);
        }
        let per_write = match rule.apply(stream.as_fd()) {
            Ok((_, per_write)) => per_write,
            Err(e) => {
                eprintln!("sbm-rpm-server: connection {id} from {peer}: the rule could not be set ({e}); closing it");
                continue;
            }
        };
        let ruled = RuledStream::new(stream, per_write);
        let shared = shared.clone();
        let rows = rows.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let row = serve_connection(id, peer, ruled, tls, shared).await;
            rows.record(&row);
        });
    }
    let served = rows.count();
    println!("sbm-rpm-server: stopped after {served} connections ended");
    Ok(0)
}

/// SIGINT or SIGTERM.
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

async fn serve_connection(
    id: u64,
    peer: SocketAddr,
    ruled: RuledStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
) -> ConnectionRow {
    let started = Instant::now();
    let written = Arc::new(AtomicU64::new(0));
    let stats = Arc::new(ConnStats {
        id: AtomicU64::new(id),
        requests: AtomicU64::new(0),
        upload_bytes: AtomicU64::new(0),
        http: Mutex::new(String::new()),
        pending: Mutex::new(PendingProbes::default()),
        probe_arrived: tokio::sync::Notify::new(),
        written: written.clone(),
        socket: nix::unistd::dup(ruled.get_ref().as_fd()).ok(),
        writes: AtomicU64::new(0),
        handed: Mutex::new(Vec::new()),
        responses: Mutex::new(PendingProbes::default()),
        halves: Mutex::new(HashMap::new()),
    });
    let sampler = tokio::spawn(sample_probes(stats.clone(), shared.clone()));
    let lowat_sets = Arc::new(AtomicU64::new(0));
    let last_info = Arc::new(Mutex::new(None));
    let tracked = Tracked {
        inner: ruled,
        written: written.clone(),
        lowat_sets: lowat_sets.clone(),
        last_info: last_info.clone(),
        stats: stats.clone(),
        shared: shared.clone(),
    };
    let service = {
        let stats = stats.clone();
        let shared = shared.clone();
        hyper::service::service_fn(move |req| handle(req, stats.clone(), shared.clone()))
    };
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .initial_stream_window_size(H2_WINDOW)
        .initial_connection_window_size(H2_WINDOW)
        .max_send_buf_size(shared.h2_send_buffer);
    let result = match tls {
        Some(acceptor) => match acceptor.accept(tracked).await {
            Ok(s) => builder
                .serve_connection(TokioIo::new(s), service)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("TLS handshake: {e}")),
        },
        None => builder
            .serve_connection(TokioIo::new(tracked), service)
            .await
            .map_err(|e| e.to_string()),
    };
    sampler.abort();
    // Probes whose own bytes had not left when the connection ended: their row, without
    // the response's wait.
    let left: Vec<Halves> = stats
        .halves
        .lock()
        .expect("not poisoned")
        .drain()
        .map(|(_, h)| h)
        .collect();
    for h in left {
        shared.probes.record(&shared, &stats, h);
    }
    let info: Option<TcpInfo> = last_info.lock().expect("not poisoned").take();
    let http = stats.http.lock().expect("not poisoned").clone();
    ConnectionRow {
        id,
        peer: peer.to_string(),
        tls: shared.tls,
        http,
        requests: stats.requests.load(Ordering::Relaxed),
        bytes_written: written.load(Ordering::Relaxed),
        upload_bytes: stats.upload_bytes.load(Ordering::Relaxed),
        lowat_sets: lowat_sets.load(Ordering::Relaxed),
        retrans: info.as_ref().and_then(|i| i.bytes_retrans),
        srtt_us: info.as_ref().map(|i| i.rtt_us).unwrap_or(0),
        duration_s: started.elapsed().as_secs_f64(),
        error: result.err().unwrap_or_default(),
    }
}

/// The ruled socket, publishing its byte and lowat counts for the connection's row (the
/// stream itself moves into hyper), and its last tcp_info when hyper drops it.
struct Tracked {
    inner: RuledStream,
    written: Arc<AtomicU64>,
    lowat_sets: Arc<AtomicU64>,
    last_info: Arc<Mutex<Option<TcpInfo>>>,
    /// For the probes' own offsets at each flush.
    stats: Arc<ConnStats>,
    shared: Arc<Shared>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.publish();
        if let Ok(info) = sys::tcp_info(self.inner.get_ref().as_fd()) {
            *self.last_info.lock().expect("not poisoned") = Some(info);
        }
    }
}

impl tokio::io::AsyncRead for Tracked {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Tracked {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        self.publish();
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.stats.writes.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_flush(cx);
        if matches!(r, std::task::Poll::Ready(Ok(()))) {
            self.responses_flushed();
        }
        r
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Tracked {
    /// A flush completed: every probe response HTTP/2 took before a write since is in the
    /// socket now, so its own bytes end at or before what has been written.
    fn responses_flushed(&self) {
        let writes = self.stats.writes.load(Ordering::Relaxed);
        let flushed: Vec<Handed> = {
            let mut handed = self.stats.handed.lock().expect("not poisoned");
            if handed.is_empty() {
                return;
            }
            let (flushed, keep) = handed.drain(..).partition(|h| h.writes_then < writes);
            *handed = keep;
            flushed
        };
        let Some(fd) = &self.stats.socket else { return };
        let now = Instant::now();
        let written = self.inner.written();
        let backlog = sys::outq_notsent(fd.as_fd()).unwrap_or(0);
        for h in flushed {
            let after = written.saturating_sub(h.written_at_ready);
            self.stats
                .halves
                .lock()
                .expect("not poisoned")
                .entry(h.id.clone())
                .or_default()
                .written_after_ready = Some(after);
            let done = self
                .stats
                .responses
                .lock()
                .expect("not poisoned")
                .offset_known(h.id, h.ready, now, written, backlog);
            match done {
                Some(m) => response_done(&self.stats, &self.shared, m),
                None => self.stats.probe_arrived.notify_one(),
            }
        }
    }

    fn publish(&self) {
        self.written.store(self.inner.written(), Ordering::Relaxed);
        self.lowat_sets
            .store(self.inner.lowat_sets(), Ordering::Relaxed);
    }
}

/// The header by which sbm-rpm names a self probe, so that the server's ledger can be
/// joined with the client's probes.csv.
pub const PROBE_HEADER: &str = "x-sbm-probe";

/// A self probe's response is ready: its wait starts now, behind every byte already
/// written to the socket. Returns what the response's body announces when HTTP/2 takes it.
fn probe_ready(stats: &Arc<ConnStats>, shared: &Shared, id: String) -> Option<Handed> {
    let fd = stats.socket.as_ref()?;
    let now = Instant::now();
    let written = stats.written.load(Ordering::Relaxed);
    let backlog = sys::outq_notsent(fd.as_fd()).unwrap_or(0);
    let done = stats
        .pending
        .lock()
        .expect("not poisoned")
        .ready(id.clone(), now, written, backlog);
    match done {
        Some(m) => ahead_done(stats, shared, m),
        None => stats.probe_arrived.notify_one(),
    }
    Some(Handed {
        id,
        ready: now,
        written_at_ready: written,
        writes_then: 0,
    })
}

/// One of a probe's waits is known; its row is written when both are.
fn half_done(stats: &ConnStats, shared: &Shared, id: &str, set: impl FnOnce(&mut Halves)) {
    let mut halves = stats.halves.lock().expect("not poisoned");
    let h = halves.entry(id.to_string()).or_default();
    set(h);
    if h.complete() {
        let h = halves.remove(id).expect("there");
        shared.probes.record(shared, stats, h);
    }
}

/// What is done with a wait when the sampler sees it end.
type WaitDone = fn(&ConnStats, &Shared, Measured);

/// The bytes ahead of a probe have left.
fn ahead_done(stats: &ConnStats, shared: &Shared, m: Measured) {
    let id = m.probe_id.clone();
    half_done(stats, shared, &id, |h| h.ahead = Some(m));
}

/// A probe's own bytes have left.
fn response_done(stats: &ConnStats, shared: &Shared, m: Measured) {
    let id = m.probe_id.clone();
    half_done(stats, shared, &id, |h| h.response = Some(m));
}

/// A self probe's response body: when HTTP/2 first polls it, the response is on its way to
/// the socket, and the connection's next flush after a write puts it there.
struct ProbeBody {
    inner: Full<Bytes>,
    announce: Option<(Arc<ConnStats>, Handed)>,
}

impl hyper::body::Body for ProbeBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        if let Some((stats, mut handed)) = self.announce.take() {
            handed.writes_then = stats.writes.load(Ordering::Relaxed);
            stats.handed.lock().expect("not poisoned").push(handed);
        }
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Samples snd_nxt (written − SIOCOUTQNSD) every millisecond while a probe waits.
async fn sample_probes(stats: Arc<ConnStats>, shared: Arc<Shared>) {
    let Some(fd) = &stats.socket else { return };
    loop {
        let idle = stats.pending.lock().expect("not poisoned").is_empty()
            && stats.responses.lock().expect("not poisoned").is_empty();
        if idle {
            stats.probe_arrived.notified().await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        let before = Instant::now();
        // Written first, then the unsent count: a write between the two makes `sent` low,
        // so a departure is seen late (by one sample), never early.
        let written = stats.written.load(Ordering::Relaxed);
        let Ok(notsent) = sys::outq_notsent(fd.as_fd()) else {
            return;
        };
        let after = Instant::now();
        let sent = written.saturating_sub(u64::from(notsent));
        // The bytes ahead of each probe first, then its own: a row is written once both
        // have left, and the same sample may pass both.
        let ledgers: [(&Mutex<PendingProbes>, WaitDone); 2] = [
            (&stats.pending, ahead_done),
            (&stats.responses, response_done),
        ];
        for (ledger, done) in ledgers {
            let passed = ledger
                .lock()
                .expect("not poisoned")
                .sample(before, after, sent);
            for m in passed {
                done(&stats, &shared, m);
            }
        }
    }
}

type ServerBody = BoxBody<Bytes, Infallible>;

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<ServerBody> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body.into()).boxed())
        .expect("a valid response")
}

async fn handle(
    req: Request<Incoming>,
    stats: Arc<ConnStats>,
    shared: Arc<Shared>,
) -> Result<Response<ServerBody>, Infallible> {
    stats.requests.fetch_add(1, Ordering::Relaxed);
    {
        let mut http = stats.http.lock().expect("not poisoned");
        if http.is_empty() {
            *http = match req.version() {
                hyper::Version::HTTP_2 => "HTTP/2".into(),
                hyper::Version::HTTP_11 => "HTTP/1.1".into(),
                v => format!("{v:?}"),
            };
        }
    }
    let path = req.uri().path().to_string();
    let response = match (req.method(), path.as_str()) {
        (&Method::GET, WELL_KNOWN_PATH) => {
            let base = match &shared.public_base {
                Some(b) => b.trim_end_matches('/').to_string(),
                None => {
                    let host = req
                        .uri()
                        .authority()
                        .map(|a| a.to_string())
                        .or_else(|| {
                            req.headers()
                                .get("host")
                                .and_then(|h| h.to_str().ok())
                                .map(str::to_string)
                        })
                        .unwrap_or_else(|| "localhost".into());
                    format!("{}://{host}", if shared.tls { "https" } else { "http" })
                }
            };
            let config = NqConfig::for_base(&base, shared.test_endpoint.clone());
            full(StatusCode::OK, "application/json", config.to_json())
        }
        (&Method::GET, SMALL_PATH) => {
            if let Some(id) = req
                .headers()
                .get(PROBE_HEADER)
                .and_then(|v| v.to_str().ok())
            {
                let handed = probe_ready(&stats, &shared, id.to_string());
                return Ok(Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "application/octet-stream")
                    .body(
                        ProbeBody {
                            inner: Full::new(Bytes::from_static(b"x")),
                            announce: handed.map(|h| (stats.clone(), h)),
                        }
                        .boxed(),
                    )
                    .expect("a valid response"));
            }
            full(StatusCode::OK, "application/octet-stream", "x")
        }
        (&Method::GET, LARGE_PATH) => Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/octet-stream")
            .body(Zeros::new(Some(shared.large_size), Arc::new(AtomicU64::new(0))).boxed())
            .expect("a valid response"),
        (&Method::POST, UPLOAD_PATH) => {
            let mut body = req.into_body();
            let mut total = 0u64;
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(f) => {
                        if let Some(d) = f.data_ref() {
                            total += d.len() as u64;
                            stats
                                .upload_bytes
                                .fetch_add(d.len() as u64, Ordering::Relaxed);
                        }
                    }
                    // The client ended the upload (as it does at the end of a test).
                    Err(_) => break,
                }
            }
            full(StatusCode::OK, "text/plain", format!("{total}\n"))
        }
        _ => full(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    };
    Ok(response)
}

/// probes.csv: one row per self probe, when its wait is known (flushed at once).
struct ProbeRecorder {
    writer: Option<Mutex<csv::Writer<std::fs::File>>>,
}

impl ProbeRecorder {
    fn open(dir: Option<&std::path::Path>) -> Result<ProbeRecorder, String> {
        let writer = match dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
                let path = d.join("probes.csv");
                let w = csv::Writer::from_path(&path)
                    .map_err(|e| format!("creating {}: {e}", path.display()))?;
                Some(Mutex::new(w))
            }
            None => None,
        };
        Ok(ProbeRecorder { writer })
    }

    /// A probe's row; a probe whose bytes ahead never left (the connection ended) has none.
    fn record(&self, shared: &Shared, stats: &ConnStats, halves: Halves) {
        let Some(w) = &self.writer else { return };
        let Some(m) = halves.ahead else { return };
        let since_start = m.ready.saturating_duration_since(shared.started);
        let row = ProbeWait {
            probe_id: m.probe_id,
            connection: stats.id.load(Ordering::Relaxed),
            ready_s: since_start.as_secs_f64(),
            ready_unix_ns: shared.started_unix_ns + since_start.as_nanos() as u64,
            backlog_bytes: m.backlog_bytes,
            socket_wait_ms: (m.lo_ms + m.hi_ms) / 2.0,
            bound_ms: (m.hi_ms - m.lo_ms) / 2.0,
            response_wait_ms: halves.response.as_ref().map(|r| (r.lo_ms + r.hi_ms) / 2.0),
            response_bound_ms: halves.response.as_ref().map(|r| (r.hi_ms - r.lo_ms) / 2.0),
            written_after_ready: halves.written_after_ready,
        };
        let mut w = w.lock().expect("not poisoned");
        if let Err(e) = w
            .serialize(&row)
            .and_then(|_| w.flush().map_err(csv::Error::from))
        {
            eprintln!("sbm-rpm-server: writing probes.csv: {e}");
        }
    }
}

/// connections.csv, one row as each connection ends (flushed at once).
struct Recorder {
    writer: Option<Mutex<csv::Writer<std::fs::File>>>,
    count: AtomicU64,
}

impl Recorder {
    fn open(dir: Option<&std::path::Path>) -> Result<Recorder, String> {
        let writer = match dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
                let path = d.join("connections.csv");
                let w = csv::Writer::from_path(&path)
                    .map_err(|e| format!("creating {}: {e}", path.display()))?;
                Some(Mutex::new(w))
            }
            None => None,
        };
        Ok(Recorder {
            writer,
            count: AtomicU64::new(0),
        })
    }

    fn record(&self, row: &ConnectionRow) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = &self.writer {
            let mut w = w.lock().expect("not poisoned");
            if let Err(e) = w
                .serialize(row)
                .and_then(|_| w.flush().map_err(csv::Error::from))
            {
                eprintln!("sbm-rpm-server: writing connections.csv: {e}");
            }
        }
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}
