//! The event loop of sbm-sink: accept connections (up to `--max-conns`), read and discard,
//! an interval line per connection per interval, a total when each one closes.
//!
//! Built to stay healthy under abuse: when it runs out of file descriptors or reaches its
//! connection limit it stops polling the listener (the kernel's backlog holds the queue)
//! until a connection closes or a short back-off ends, and says so at most once per
//! [`LOG_EVERY`]; connections that send nothing for `--idle-timeout` are closed; a
//! connection costs a few hundred bytes until it shows it is a trip-timed stream.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::signal::Signal;
use nix::sys::socket::MsgFlags;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::clock::realtime_ns;
use crate::peers::{self, ForeignPeer, IPERF3_COOKIE_LEN};
use crate::report::csv_file::CsvError;
use crate::report::human;
use crate::report::schema::SinkIntervalRow;
use crate::report::schema::{SinkMessageRow, SinkReply};
use crate::report::CsvFile;
use crate::send::reverse::{self, DataConnections, Opening};
use crate::signals::StopSignals;
use crate::sink::stream::{clocks_shared, StreamState, MAX_REPLY_MESSAGES};
use crate::units;

const LISTEN_TOKEN: u64 = 0;
const SIGNAL_TOKEN: u64 = 1;
/// A reverse run (`sbm-send -R`) ended: its thread says so through an eventfd.
const REVERSE_TOKEN: u64 = 2;
const FIRST_CONN_TOKEN: u64 = 3;
/// Reads per readiness event before other connections get their turn.
const READS_PER_EVENT: usize = 16;
/// How long accepting pauses after the process or system ran out of descriptors (or
/// memory), unless a connection closes first.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(250);
/// At most one line per this long about refused or deferred connections.
const LOG_EVERY: Duration = Duration::from_secs(5);
/// How long a sender that half-closed has to take the sink's reply before the sink drops it.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct SinkConfig {
    pub listen: SocketAddr,
    pub interval: Duration,
    /// Exit once this many connections have ended (`--once`: 1; None: serve until a signal).
    pub exit_after: Option<u64>,
    pub out_dir: Option<PathBuf>,
    pub rcvbuf: Option<u32>,
    pub quiet: bool,
    /// Keep every connection's total for the caller (`-J`); off, a long-lived sink keeps
    /// nothing per finished connection.
    pub keep_totals: bool,
    pub expect_trip_times: bool,
    /// When to ask for immediate ACKs (`--ack`).
    pub ack: super::cli::AckPolicy,
    /// At most this many open connections; more wait in the kernel's backlog.
    pub max_conns: usize,
    /// Close a connection that has sent nothing for this long (None: never).
    pub idle_timeout: Option<Duration>,
    /// Copy plain streams' bytes as an application would (`--copy-reads`), rather than
    /// letting the kernel discard them.
    pub copy_reads: bool,
    /// The most one read takes (`-l`).
    pub read_size: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot listen on {addr}: {source}{}", listen_hint(source))]
    Listen {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("cannot create output directory {path}: {source}")]
    OutDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Csv(#[from] CsvError),
    #[error("{what}: {source}")]
    Os {
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

/// What to do about the usual reasons a listen fails.
fn listen_hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::AddrInUse => {
            " (another program is listening there: choose another port with --listen ADDR:PORT)"
        }
        io::ErrorKind::AddrNotAvailable => {
            " (no interface has that address: use 0.0.0.0 or [::] for all)"
        }
        io::ErrorKind::PermissionDenied => " (ports below 1024 need root or CAP_NET_BIND_SERVICE)",
        _ => "",
    }
}

fn os(what: &'static str) -> impl FnOnce(nix::Error) -> SinkError {
    move |e| SinkError::Os {
        what,
        source: e.into(),
    }
}

/// Consumes up to `buf.len()` bytes without copying them (recv with MSG_TRUNC, which TCP
/// takes as "consume, do not copy": `buf` is only the most to consume); returns how many.
fn discard_read(sock: &Socket, buf: &mut [u8]) -> io::Result<usize> {
    nix::sys::socket::recv(sock.as_raw_fd(), buf, MsgFlags::MSG_TRUNC).map_err(io::Error::from)
}

/// Asks for the next ACK at once: delayed ACKs would blur a trip-timed sender's ACK times.
/// (Linux leaves quick-ACK mode by itself, so this is per read.)
fn request_quickack(sock: &Socket) {
    let _ = crate::sys::set_int(sock.as_fd(), libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
}

/// How a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    /// Clean end of stream: the sender half-closed; it gets the sink's reply.
    Eof,
    /// Malformed trip-times data.
    Protocol(String),
    Failed(String),
    Signal(String),
    /// Nothing received for the idle timeout.
    Idle(Duration),
    /// Another tool's client (iperf3's), told apart by its first bytes.
    Foreign(ForeignPeer),
    /// A connection of `sbm-send -R`: the reverse run's thread takes it.
    Reverse(Opening),
}

/// Per-connection state.
struct Conn {
    id: u64,
    peer: SocketAddr,
    sock: Socket,
    accepted_at: Instant,
    bytes: u64,
    interval_start: Duration,
    interval_bytes: u64,
    /// Of `bytes` (and `interval_bytes`), those the kernel discarded without copying them
    /// to the sink (plain streams, unless --copy-reads).
    uncopied: u64,
    interval_uncopied: u64,
    /// When the last bytes arrived (or the connection was accepted): for --idle-timeout.
    last_data: Instant,
    stream: StreamState,
    /// The connection's first bytes, kept until there are as many as iperf3's cookie.
    opening: Vec<u8>,
}

impl Conn {
    /// Counts `n` bytes that arrived just now (`uncopied`: consumed without a copy).
    fn count(&mut self, n: usize, uncopied: bool) {
        let n = n as u64;
        self.last_data = Instant::now();
        self.bytes += n;
        self.interval_bytes += n;
        if uncopied {
            self.uncopied += n;
            self.interval_uncopied += n;
        }
    }

    fn elapsed(&self) -> Duration {
        self.accepted_at.elapsed()
    }

    fn next_tick(&self, interval: Duration) -> Instant {
        self.accepted_at + self.interval_start + interval
    }

    /// When the connection counts as idle, if nothing arrives before.
    fn idle_at(&self, idle_timeout: Option<Duration>) -> Option<Instant> {
        idle_timeout.map(|t| self.last_data + t)
    }
}

/// The reply to a sender that half-closed, written as its socket takes it, within the loop:
/// a peer that does not read holds its own reply back, not the sink.
struct PendingReply {
    conn: u64,
    peer: SocketAddr,
    sock: Socket,
    data: Vec<u8>,
    sent: usize,
    give_up_at: Instant,
}

impl PendingReply {
    /// Writes what the socket takes. True once the reply is finished: all written (the
    /// write side then closed), or the peer gone.
    fn advance(&mut self) -> bool {
        while self.sent < self.data.len() {
            match (&self.sock).write(&self.data[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return true,
            }
        }
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
        true
    }
}

/// A message about something that can repeat thousands of times a second (refused
/// connections): printed at most once per [`LOG_EVERY`], with the count of those held back.
#[derive(Default)]
struct RateLimitedLog {
    last: Option<Instant>,
    held_back: u64,
}

impl RateLimitedLog {
    fn say(&mut self, now: Instant, msg: impl FnOnce() -> String) {
        if self.last.is_some_and(|l| now.duration_since(l) < LOG_EVERY) {
            self.held_back += 1;
            return;
        }
        let more = match self.held_back {
            0 => String::new(),
            n => format!(" ({n} more since the last such line)"),
        };
        eprintln!("sbm-sink: {}{more}", msg());
        self.last = Some(now);
        self.held_back = 0;
    }
}

/// Whether the listener is polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accepting {
    Yes,
    /// Not polled until a connection closes or (for a shortage of descriptors or memory,
    /// which may be another process's) the instant given.
    Paused(Option<Instant>),
}

fn listen(cfg: &SinkConfig) -> Result<Socket, SinkError> {
    let addr = cfg.listen;
    let err = |source| SinkError::Listen { addr, source };
    let sock =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(err)?;
    sock.set_reuse_address(true).map_err(err)?;
    if addr.is_ipv6() {
        // [::] also takes IPv4 (mapped) connections.
        sock.set_only_v6(false).map_err(err)?;
    }
    if let Some(b) = cfg.rcvbuf {
        sock.set_recv_buffer_size(b as usize).map_err(err)?;
    }
    sock.bind(&SockAddr::from(addr)).map_err(err)?;
    sock.listen(128).map_err(err)?;
    sock.set_nonblocking(true).map_err(err)?;
    Ok(sock)
}

struct Sink<'a> {
    cfg: &'a SinkConfig,
    epoll: Epoll,
    listener: Socket,
    conns: HashMap<u64, Conn>,
    next_id: u64,
    csv: Option<CsvFile>,
    buf: Vec<u8>,
    finished_conns: u64,
    messages_csv: Option<CsvFile>,
    boot_id: Option<String>,
    rows: Vec<SinkMessageRow>,
    accepting: Accepting,
    refusals: RateLimitedLog,
    totals: Vec<SinkIntervalRow>,
    /// Replies not yet taken by their senders, by the token their connection had.
    replies: HashMap<u64, PendingReply>,
    reverse: ReverseRuns,
}

/// The reverse runs (`sbm-send -R`) under way, each in its own thread: sbm-send's loop on
/// a socket this sink accepted.
struct ReverseRuns {
    /// Data connections waiting for their request.
    data: Arc<DataConnections>,
    /// Written by a run's thread when it ends (polled as [`REVERSE_TOKEN`]).
    ended: Arc<EventFd>,
    /// Each ended run's connection number and closing line.
    ended_rx: mpsc::Receiver<(u64, String)>,
    ended_tx: mpsc::Sender<(u64, String)>,
    /// Runs under way: their threads and the eventfds that stop them.
    running: HashMap<u64, (std::thread::JoinHandle<()>, Arc<EventFd>)>,
}

impl ReverseRuns {
    fn new() -> nix::Result<ReverseRuns> {
        let (ended_tx, ended_rx) = mpsc::channel();
        Ok(ReverseRuns {
            data: Arc::default(),
            ended: Arc::new(EventFd::from_value_and_flags(
                0,
                EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC,
            )?),
            ended_rx,
            ended_tx,
            running: HashMap::new(),
        })
    }

    /// Stops every run as `sig` stops sbm-send, and waits for each to send its summary.
    fn stop_all(&mut self, sig: Signal) {
        for (_, stop) in self.running.values() {
            let _ = stop.write(sig as i32 as u64);
        }
        for (_, (thread, _)) in self.running.drain() {
            let _ = thread.join();
        }
    }
}

impl Sink<'_> {
    fn emit(&mut self, row: SinkIntervalRow) -> Result<(), SinkError> {
        if !self.cfg.quiet || row.kind == "total" {
            crate::say!("{}", human::sink_interval_line(&row));
        }
        if let Some(csv) = &mut self.csv {
            csv.write(&row)?;
            csv.flush()?;
        }
        if self.cfg.keep_totals && row.kind == "total" {
            self.totals.push(row);
        }
        Ok(())
    }

    fn accept_all(&mut self) -> Result<(), SinkError> {
        loop {
            if self.conns.len() >= self.cfg.max_conns {
                let n = self.conns.len();
                self.refusals.say(Instant::now(), || {
                    format!(
                        "{n} connections open (--max-conns): not accepting more until one closes"
                    )
                });
                return self.pause_accepting(None);
            }
            match self.listener.accept() {
                Ok((sock, peer)) => self.add_conn(sock, peer)?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The peer gave up between SYN and accept: nothing to do.
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(e) => {
                    // EMFILE/ENFILE/ENOBUFS/ENOMEM: the listener stays readable, so polling
                    // it again at once would spin. Wait for a close or the back-off.
                    let n = self.conns.len();
                    self.refusals.say(Instant::now(), || {
                        format!(
                            "accept failed: {e} ({n} connections open); \
                             pausing accepts until one closes or {} ms pass",
                            ACCEPT_BACKOFF.as_millis()
                        )
                    });
                    return self.pause_accepting(Some(Instant::now() + ACCEPT_BACKOFF));
                }
            }
        }
    }

    fn add_conn(&mut self, sock: Socket, peer: SockAddr) -> Result<(), SinkError> {
        let peer = peer.as_socket().unwrap_or(self.cfg.listen);
        sock.set_nonblocking(true).map_err(|e| SinkError::Os {
            what: "set O_NONBLOCK",
            source: e,
        })?;
        let id = self.next_id;
        self.next_id += 1;
        self.epoll
            .add(
                sock.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP, id),
            )
            .map_err(os("epoll_ctl(ADD connection)"))?;
        crate::say!("[{:>3}] connection from {peer}", id - FIRST_CONN_TOKEN + 1);
        let now = Instant::now();
        self.conns.insert(
            id,
            Conn {
                id: id - FIRST_CONN_TOKEN + 1,
                peer,
                sock,
                accepted_at: now,
                bytes: 0,
                interval_start: Duration::ZERO,
                interval_bytes: 0,
                uncopied: 0,
                interval_uncopied: 0,
                last_data: now,
                stream: StreamState::new(self.cfg.expect_trip_times),
                opening: Vec::new(),
            },
        );
        Ok(())
    }

    /// Stops polling the listener (level-triggered: it would report the same pending
    /// connection again at once).
    fn pause_accepting(&mut self, until: Option<Instant>) -> Result<(), SinkError> {
        if self.accepting == Accepting::Yes {
            self.epoll
                .delete(self.listener.as_fd())
                .map_err(os("epoll_ctl(DEL listener)"))?;
        }
        self.accepting = Accepting::Paused(until);
        Ok(())
    }

    /// Polls the listener again and takes what waits in the backlog.
    fn resume_accepting(&mut self) -> Result<(), SinkError> {
        if self.accepting == Accepting::Yes {
            return Ok(());
        }
        self.epoll
            .add(
                self.listener.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, LISTEN_TOKEN),
            )
            .map_err(os("epoll_ctl(ADD listener)"))?;
        self.accepting = Accepting::Yes;
        self.accept_all()
    }

    /// Reads what is there. Returns Some(reason) when the connection has ended: `None`
    /// reason text for a clean end of stream.
    fn read_conn(&mut self, token: u64) -> Option<Ending> {
        let conn = self.conns.get_mut(&token)?;
        for _ in 0..READS_PER_EVENT {
            // Once a stream is known to be plain (past its opening, which tells sbm-send -R
            // and iperf3 clients apart), its bytes are only counted: the kernel can drop them
            // without the copy that dominates a receiver's CPU at line rate.
            let discard = !self.cfg.copy_reads
                && conn.bytes >= IPERF3_COOKIE_LEN as u64
                && conn.stream.is_plain();
            let got = if discard {
                discard_read(&conn.sock, &mut self.buf)
            } else {
                (&conn.sock).read(&mut self.buf)
            };
            match got {
                Ok(0) => {
                    return Some(match conn.stream.finish(realtime_ns()) {
                        Ok(()) => Ending::Eof,
                        Err(e) => Ending::Protocol(e.to_string()),
                    })
                }
                Ok(n) if discard => {
                    conn.count(n, true);
                    if self.cfg.ack.quickack(false) {
                        request_quickack(&conn.sock);
                    }
                }
                Ok(n) => {
                    let read_ns = realtime_ns();
                    conn.count(n, false);
                    let before = conn.bytes - n as u64;
                    if before < IPERF3_COOKIE_LEN as u64 {
                        let take = n.min(IPERF3_COOKIE_LEN - before as usize);
                        conn.opening.extend_from_slice(&self.buf[..take]);
                        if let Some(opening) = Opening::of(&conn.opening) {
                            // The thread that takes it over reads on from here.
                            conn.opening.extend_from_slice(&self.buf[take..n]);
                            return Some(Ending::Reverse(opening));
                        }
                        // An iperf3 client sends its cookie and waits for an answer that
                        // will not come: end it now, saying what it is.
                        if conn.bytes == IPERF3_COOKIE_LEN as u64
                            && peers::is_iperf3_cookie(&conn.opening)
                        {
                            return Some(Ending::Foreign(ForeignPeer::Iperf3Client));
                        }
                        if conn.bytes >= IPERF3_COOKIE_LEN as u64 {
                            conn.opening = Vec::new();
                        }
                    }
                    let was_trip = conn.stream.is_trip();
                    if let Err(e) =
                        conn.stream
                            .feed(conn.id, &self.buf[..n], read_ns, &mut self.rows)
                    {
                        return Some(Ending::Protocol(e.to_string()));
                    }
                    if self.cfg.ack.quickack(conn.stream.is_trip()) {
                        request_quickack(&conn.sock);
                    }
                    if !was_trip && conn.stream.peer_boot_id().is_some() {
                        let shared =
                            clocks_shared(conn.stream.peer_boot_id(), self.boot_id.as_deref());
                        let clocks = match shared {
                            Some(true) => "same boot id: clocks shared, latencies are exact",
                            _ => "different hosts: latencies only as good as the hosts' clock sync",
                        };
                        crate::say!("[{:>3}] trip times from {} ({clocks})", conn.id, conn.peer);
                    }
                    if let Some(csv) = &mut self.messages_csv {
                        for r in self.rows.drain(..) {
                            if let Err(e) = csv.write(&r) {
                                eprintln!("sbm-sink: {e}");
                            }
                        }
                    } else {
                        self.rows.clear();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(Ending::Failed(e.to_string())),
            }
        }
        None
    }

    /// The sink's view of a connection, sent back after a clean end of stream (the sender
    /// half-closed).
    fn reply_bytes(conn: &Conn, own_boot_id: Option<&str>, ack: super::cli::AckPolicy) -> Vec<u8> {
        let end = conn.elapsed();
        let st = &conn.stream;
        let trip = st.trip();
        let messages = trip.map_or(0, |t| t.messages);
        let reply = SinkReply {
            sbm_version: env!("CARGO_PKG_VERSION").into(),
            boot_id: own_boot_id.map(str::to_string),
            peer_boot_id: st.peer_boot_id().map(str::to_string),
            clocks_shared: clocks_shared(st.peer_boot_id(), own_boot_id),
            bytes: conn.bytes,
            duration_s: end.as_secs_f64(),
            goodput_bps: units::bits_per_second(conn.bytes, end),
            trip_times: st.is_trip(),
            messages,
            latency: st.latency(),
            content_age: st.content_age(),
            negative_latencies: trip.map_or(0, |t| t.negative_latencies),
            read_times: trip.map_or_else(Vec::new, |t| t.read_times.clone()),
            read_times_truncated: messages as usize > MAX_REPLY_MESSAGES,
            quickack: Some(ack.quickack(st.is_trip())),
        };
        serde_json::to_vec(&reply).expect("reply serializes")
    }

    /// Starts a connection's reply: what the socket takes now is written at once (all of it,
    /// usually); the rest when the socket is writable again, or never after
    /// [`REPLY_TIMEOUT`].
    fn start_reply(&mut self, token: u64, conn: Conn) -> Result<(), SinkError> {
        let data = Self::reply_bytes(&conn, self.boot_id.as_deref(), self.cfg.ack);
        let mut reply = PendingReply {
            conn: conn.id,
            peer: conn.peer,
            sock: conn.sock,
            data,
            sent: 0,
            give_up_at: Instant::now() + REPLY_TIMEOUT,
        };
        if reply.advance() {
            return Ok(());
        }
        self.epoll
            .add(
                reply.sock.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLOUT, token),
            )
            .map_err(os("epoll_ctl(ADD reply)"))?;
        self.replies.insert(token, reply);
        Ok(())
    }

    fn continue_reply(&mut self, token: u64) {
        if self.replies.get_mut(&token).is_some_and(|r| r.advance()) {
            self.end_reply(token);
        }
    }

    fn end_reply(&mut self, token: u64) {
        if let Some(reply) = self.replies.remove(&token) {
            let _ = self.epoll.delete(reply.sock.as_fd());
        }
    }

    /// Drops the replies their senders did not take in time.
    fn drop_stale_replies(&mut self, now: Instant) {
        let stale: Vec<u64> = self
            .replies
            .iter()
            .filter(|(_, r)| now >= r.give_up_at)
            .map(|(&token, _)| token)
            .collect();
        for token in stale {
            let r = &self.replies[&token];
            eprintln!(
                "sbm-sink: [{:>3}] {} did not take the reply ({} of {} bytes) within {} s: dropped",
                r.conn,
                r.peer,
                r.sent,
                r.data.len(),
                REPLY_TIMEOUT.as_secs()
            );
            self.end_reply(token);
        }
    }

    /// A row of the `(bytes, uncopied)` read over `start`..`end`.
    fn interval_row(
        conn: &Conn,
        kind: &'static str,
        start: Duration,
        end: Duration,
        (bytes, uncopied): (u64, u64),
    ) -> SinkIntervalRow {
        let lat = if kind == "total" {
            conn.stream.latency()
        } else {
            conn.stream.interval_latency()
        };
        SinkIntervalRow {
            messages: lat.count,
            latency_p50_us: lat.p50_us,
            latency_p95_us: lat.p95_us,
            latency_max_us: lat.max_us,
            uncopied_bytes: uncopied,
            ..SinkIntervalRow::counted(conn.id, conn.peer.to_string(), kind, start, end, bytes)
        }
    }

    fn close_conn(&mut self, token: u64, ending: Ending) -> Result<(), SinkError> {
        let Some(conn) = self.conns.remove(&token) else {
            return Ok(());
        };
        let _ = self.epoll.delete(conn.sock.as_fd());
        if let Some(csv) = &mut self.messages_csv {
            csv.flush()?;
        }
        let reason = match &ending {
            Ending::Eof => "closed by peer".to_string(),
            Ending::Protocol(e) => format!("closed: {e}"),
            Ending::Failed(e) => format!("failed: {e}"),
            Ending::Signal(s) => format!("cut short by {s}"),
            Ending::Idle(t) => format!("closed: nothing received for {t:?} (--idle-timeout)"),
            Ending::Foreign(peer) => format!("is {}; closed", peer.explain()),
            Ending::Reverse(_) => String::new(),
        };
        if let Ending::Reverse(opening) = ending {
            self.start_reverse(opening, conn)?;
            return self.resume_accepting();
        }
        let end = conn.elapsed();
        if let Ending::Foreign(_) = ending {
            // Another tool's control bytes, not a stream to account for: one line only.
            eprintln!("sbm-sink: [{:>3}] {} {reason}", conn.id, conn.peer);
            self.finished_conns += 1;
            return self.resume_accepting();
        }
        if conn.interval_bytes > 0 || conn.interval_start < end {
            let row = Self::interval_row(
                &conn,
                "interval",
                conn.interval_start,
                end,
                (conn.interval_bytes, conn.interval_uncopied),
            );
            self.emit(row)?;
        }
        if ending != Ending::Eof {
            crate::say!(
                "[{:>3}] connection from {} {reason} after {} bytes",
                conn.id,
                conn.peer,
                conn.bytes
            );
        }
        let counts = (conn.bytes, conn.uncopied);
        let total = Self::interval_row(&conn, "total", Duration::ZERO, end, counts);
        self.emit(total)?;
        if ending == Ending::Eof {
            self.start_reply(token, conn)?;
        }
        self.finished_conns += 1;
        // A descriptor and a connection slot are free again.
        self.resume_accepting()
    }

    /// Hands a connection of `sbm-send -R` to a thread: a control connection's run, or a
    /// data connection to the run that waits for it.
    fn start_reverse(&mut self, opening: Opening, conn: Conn) -> Result<(), SinkError> {
        let spawn_failed = |e| SinkError::Os {
            what: "starting a reverse run's thread",
            source: e,
        };
        match opening {
            Opening::Data => {
                crate::say!(
                    "[{:>3}] {} is a reverse run's data connection",
                    conn.id,
                    conn.peer
                );
                let data = self.reverse.data.clone();
                let (id, peer) = (conn.id, conn.peer);
                std::thread::Builder::new()
                    .name("reverse-data".into())
                    .spawn(move || {
                        if let Err(e) = reverse::serve_data(conn.sock, conn.opening, &data) {
                            eprintln!("sbm-sink: [{id:>3}] {peer}: not a reverse run's data connection: {e}; closed");
                        }
                    })
                    .map_err(spawn_failed)?;
            }
            Opening::Control => {
                crate::say!(
                    "[{:>3}] {} asks for a reverse run (sbm-send -R): this sink sends, and measures its sending",
                    conn.id,
                    conn.peer
                );
                let stop = Arc::new(
                    EventFd::from_value_and_flags(
                        0,
                        EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC,
                    )
                    .map_err(os("eventfd"))?,
                );
                let setup = reverse::ServeSetup {
                    conn: conn.id,
                    peer: conn.peer,
                    data: self.reverse.data.clone(),
                    out_dir: self.cfg.out_dir.clone(),
                    quiet: self.cfg.quiet,
                    stop: stop.clone(),
                };
                let (tx, ended) = (self.reverse.ended_tx.clone(), self.reverse.ended.clone());
                let id = conn.id;
                let thread = std::thread::Builder::new()
                    .name(format!("reverse-{id}"))
                    .spawn(move || {
                        let line = reverse::serve_control(conn.sock, conn.opening, setup);
                        let _ = tx.send((id, line));
                        let _ = ended.write(1);
                    })
                    .map_err(spawn_failed)?;
                self.reverse.running.insert(id, (thread, stop));
            }
        }
        Ok(())
    }

    /// The reverse runs that ended: a line each, and each counts for --once and --conns.
    fn finish_reverse_runs(&mut self) {
        let _ = self.reverse.ended.read();
        while let Ok((id, line)) = self.reverse.ended_rx.try_recv() {
            if let Some((thread, _)) = self.reverse.running.remove(&id) {
                let _ = thread.join();
            }
            crate::say!("[{id:>3}] reverse run {line}");
            self.finished_conns += 1;
        }
    }

    fn tick(&mut self) -> Result<(), SinkError> {
        let now = Instant::now();
        let interval = self.cfg.interval;
        let mut rows = Vec::new();
        for conn in self.conns.values_mut() {
            while now >= conn.next_tick(interval) {
                let start = conn.interval_start;
                let end = start + interval;
                rows.push(Self::interval_row(
                    conn,
                    "interval",
                    start,
                    end,
                    (conn.interval_bytes, conn.interval_uncopied),
                ));
                conn.interval_start = end;
                conn.interval_bytes = 0;
                conn.interval_uncopied = 0;
                conn.stream.reset_interval();
            }
        }
        rows.sort_by(|a, b| {
            (a.conn, a.end_s.total_cmp(&b.end_s)).cmp(&(b.conn, std::cmp::Ordering::Equal))
        });
        for r in rows {
            self.emit(r)?;
        }
        let idle: Vec<(u64, Duration)> = self
            .conns
            .iter()
            .filter(|(_, c)| c.idle_at(self.cfg.idle_timeout).is_some_and(|t| now >= t))
            .map(|(&token, c)| (token, now.duration_since(c.last_data)))
            .collect();
        for (token, quiet_for) in idle {
            self.close_conn(token, Ending::Idle(quiet_for))?;
        }
        self.drop_stale_replies(now);
        if let Accepting::Paused(Some(until)) = self.accepting {
            if now >= until {
                self.resume_accepting()?;
            }
        }
        Ok(())
    }

    /// Until the next interval line, idle deadline or end of an accept back-off.
    fn timeout_ms(&self) -> u16 {
        let now = Instant::now();
        let resume = match self.accepting {
            Accepting::Paused(until) => until,
            Accepting::Yes => None,
        };
        self.conns
            .values()
            .flat_map(|c| {
                [
                    Some(c.next_tick(self.cfg.interval)),
                    c.idle_at(self.cfg.idle_timeout),
                ]
            })
            .chain([resume])
            .chain(self.replies.values().map(|r| Some(r.give_up_at)))
            .flatten()
            .map(|t| t.saturating_duration_since(now))
            .min()
            .map_or(u16::MAX, |d| {
                d.as_micros().div_ceil(1000).min(u128::from(u16::MAX)) as u16
            })
    }
}

/// Serves until Ctrl-C/SIGTERM (or, with `exit_after`, until that many connections have
/// ended); returns the connections' totals when `keep_totals` asked for them.
pub fn run(cfg: &SinkConfig) -> Result<Vec<SinkIntervalRow>, SinkError> {
    let signals = StopSignals::install().map_err(os("signalfd"))?;
    let csv = match &cfg.out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|source| SinkError::OutDir {
                path: dir.clone(),
                source,
            })?;
            Some(CsvFile::create(&dir.join("sink-intervals.csv"))?)
        }
        None => None,
    };
    let messages_csv = match &cfg.out_dir {
        Some(dir) => Some(CsvFile::create(&dir.join("sink-messages.csv"))?),
        None => None,
    };
    let listener = listen(cfg)?;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(os("epoll_create1"))?;
    epoll
        .add(
            listener.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, LISTEN_TOKEN),
        )
        .map_err(os("epoll_ctl(ADD listener)"))?;
    epoll
        .add(
            signals.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, SIGNAL_TOKEN),
        )
        .map_err(os("epoll_ctl(ADD signalfd)"))?;
    let reverse = ReverseRuns::new().map_err(os("eventfd"))?;
    epoll
        .add(
            reverse.ended.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, REVERSE_TOKEN),
        )
        .map_err(os("epoll_ctl(ADD eventfd)"))?;
    let bound = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .unwrap_or(cfg.listen);
    crate::say!(
        "sbm-sink {}: listening on {bound}",
        env!("CARGO_PKG_VERSION")
    );
    let _ = io::stdout().flush();

    let mut sink = Sink {
        cfg,
        epoll,
        listener,
        conns: HashMap::new(),
        next_id: FIRST_CONN_TOKEN,
        csv,
        buf: vec![0; cfg.read_size],
        finished_conns: 0,
        messages_csv,
        boot_id: crate::sysinfo::boot_id(),
        rows: Vec::with_capacity(64),
        accepting: Accepting::Yes,
        refusals: RateLimitedLog::default(),
        totals: vec![],
        replies: HashMap::new(),
        reverse,
    };
    let mut events = [EpollEvent::empty(); 64];
    loop {
        let n = match sink.epoll.wait(&mut events, sink.timeout_ms()) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                return Err(SinkError::Os {
                    what: "epoll_wait",
                    source: e.into(),
                })
            }
        };
        for ev in &events[..n] {
            match ev.data() {
                LISTEN_TOKEN => sink.accept_all()?,
                REVERSE_TOKEN => sink.finish_reverse_runs(),
                SIGNAL_TOKEN => {
                    if let Some(sig) = signals.take() {
                        crate::say!(
                            "sbm-sink: {sig}: closing {} open connection(s)",
                            sink.conns.len()
                        );
                        // Runs that ended before the signal are said as such (a client may
                        // have its summary before this loop has read the run's end); the rest
                        // are stopped, and each one's end is said once its thread is done.
                        sink.finish_reverse_runs();
                        if !sink.reverse.running.is_empty() {
                            crate::say!(
                                "sbm-sink: {sig}: stopping {} reverse run(s); their summaries go back to their clients",
                                sink.reverse.running.len()
                            );
                            sink.reverse.stop_all(sig);
                            sink.finish_reverse_runs();
                        }
                        let open: Vec<u64> = sink.conns.keys().copied().collect();
                        for token in open {
                            sink.close_conn(token, Ending::Signal(sig.to_string()))?;
                        }
                        if !sink.replies.is_empty() {
                            crate::say!(
                                "sbm-sink: replies not yet taken by their senders: {} dropped",
                                sink.replies.len()
                            );
                        }
                        let _ = io::stdout().flush();
                        return Ok(sink.totals);
                    }
                }
                token if sink.replies.contains_key(&token) => sink.continue_reply(token),
                token => {
                    if let Some(ending) = sink.read_conn(token) {
                        sink.close_conn(token, ending)?;
                    }
                }
            }
        }
        sink.tick()?;
        let _ = io::stdout().flush();
        // After the tick too: --once and --conns count a connection closed by
        // --idle-timeout as well as one its peer closed. Replies under way are finished (or
        // given up) first: the sender is waiting for its own.
        if cfg.exit_after.is_some_and(|n| sink.finished_conns >= n)
            && sink.replies.is_empty()
            && sink.reverse.running.is_empty()
        {
            return Ok(sink.totals);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// The kernel consumes a discarded read's bytes without writing them to the buffer: the
    /// buffer keeps what it held, and the next read starts where the discarded bytes ended.
    /// (This, not a CPU figure, is what proves no copy is made; the CPU saving is the bench's.)
    #[test]
    fn a_discarded_read_consumes_bytes_without_writing_the_buffer() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let sock = Socket::from(server);
        let sent: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8 + 1).collect();
        client.write_all(&sent).unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();

        let mut buf = vec![0u8; 1000];
        let discarded = discard_read(&sock, &mut buf).unwrap();
        assert!(discarded > 0 && discarded <= buf.len(), "{discarded}");
        assert!(
            buf.iter().all(|&b| b == 0),
            "a discarded read wrote the buffer"
        );
        let mut rest = Vec::new();
        (&sock).read_to_end(&mut rest).unwrap();
        assert_eq!(rest, sent[discarded..], "the discarded bytes were consumed");
    }
}
