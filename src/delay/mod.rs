//! sbm-delay: the test bed's delay line for kernels without netem. Packets forwarded
//! through the wan namespace are queued to userspace by an iptables NFQUEUE rule; each is
//! held for its direction's one-way delay and then accepted, in FIFO order, with one batch
//! verdict per queue per wakeup. Metadata-only copies, GSO packets passed unsegmented.
//! If sbm-delay is not running the queue drops everything (fails closed).

mod line;
mod nfnl;
mod queue;

pub use line::{DelayLine, DirectionSpec, DirectionStats, Release};

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use nix::poll::{PollFd, PollFlags};
use nix::sys::time::TimeSpec;
use serde::{Deserialize, Serialize};

use crate::signals::StopSignals;
use crate::units;
use queue::{NfQueue, QueueError, Read};

/// NFQUEUE delay line: holds each queued packet for its direction's delay, then accepts it.
#[derive(Debug, Parser)]
#[command(
    name = "sbm-delay",
    version,
    after_help = "Example (in the wan namespace of the test bed; testbed/wan starts it for you):\n  \
                  iptables -A FORWARD -i ws -j NFQUEUE --queue-num 0\n  \
                  iptables -A FORWARD -i wr -j NFQUEUE --queue-num 1\n  \
                  sbm-delay --queue 0:86ms:snd-to-rcv --queue 1:86ms:rcv-to-snd --stats /run/delay.json\n\n\
                  SIGTERM or SIGINT: every held packet is accepted, final statistics are printed."
)]
pub struct DelayArgs {
    /// A direction as QUEUE:DELAY[:NAME], e.g. 0:86ms:snd-to-rcv. Repeat for each direction.
    #[arg(long = "queue", value_parser = parse_direction, required = true, value_name = "Q:DELAY[:NAME]")]
    pub directions: Vec<DirectionSpec>,

    /// JSON statistics, rewritten every 250 ms and at exit.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,

    /// Kernel queue length per queue.
    #[arg(long, default_value_t = 65_536)]
    pub max_len: u32,

    /// Netlink socket receive buffer (forced; needs root).
    #[arg(long, default_value = "64MiB", value_parser = units::parse_bytes)]
    pub rcvbuf: u64,
}

fn parse_direction(s: &str) -> Result<DirectionSpec, String> {
    let mut parts = s.splitn(3, ':');
    let queue = parts
        .next()
        .and_then(|q| q.parse::<u16>().ok())
        .ok_or_else(|| {
            format!("invalid direction '{s}': expected QUEUE:DELAY[:NAME], e.g. 0:86ms:fwd")
        })?;
    let delay = parts
        .next()
        .ok_or_else(|| format!("invalid direction '{s}': missing delay"))
        .and_then(|d| units::parse_duration_or_zero(d).map_err(|e| e.to_string()))?;
    let name = parts
        .next()
        .map_or_else(|| format!("queue{queue}"), str::to_string);
    Ok(DirectionSpec {
        queue,
        name,
        delay_ns: delay.as_nanos() as u64,
    })
}

/// The stats file's content.
#[derive(Debug, Serialize, Deserialize)]
pub struct DelayStats {
    pub pid: u32,
    pub state: std::borrow::Cow<'static, str>,
    pub started_unix_s: u64,
    pub uptime_s: f64,
    pub directions: Vec<DirectionStats>,
    /// recv() reported ENOBUFS: the netlink buffer overflowed and the kernel dropped packets.
    pub netlink_overruns: u64,
    pub unknown_queue_packets: u64,
}

/// How often the stats file is rewritten.
const STATS_EVERY: Duration = Duration::from_millis(250);

struct Counters {
    overruns: u64,
    unknown: u64,
}

fn write_stats(path: &Path, stats: &DelayStats) {
    let tmp = path.with_extension("tmp");
    let json = serde_json::to_string_pretty(stats).expect("stats serialize");
    if std::fs::write(&tmp, json + "\n")
        .and_then(|_| std::fs::rename(&tmp, path))
        .is_err()
    {
        eprintln!("sbm-delay: cannot write {}", path.display());
    }
}

/// Writes the stats file on its own thread. The packet loop must never wait on a file
/// system: on a disk-backed /run a write and rename stalled it for up to a second (measured:
/// late releases of 0.99 s, then drops at the bottleneck when the held packets left at once).
struct StatsWriter {
    latest: std::sync::mpsc::SyncSender<DelayStats>,
    thread: std::thread::JoinHandle<()>,
}

impl StatsWriter {
    fn spawn(path: PathBuf) -> StatsWriter {
        let (latest, snapshots) = std::sync::mpsc::sync_channel::<DelayStats>(1);
        let thread = std::thread::spawn(move || {
            for stats in snapshots {
                write_stats(&path, &stats);
            }
        });
        StatsWriter { latest, thread }
    }

    /// Hands a snapshot over without waiting; dropped if the previous one is still being
    /// written (the next one follows 250 ms later).
    fn offer(&self, stats: DelayStats) {
        let _ = self.latest.try_send(stats);
    }

    /// Writes the final snapshot and waits until it is on file.
    fn finish(self, last: DelayStats) {
        let _ = self.latest.send(last);
        drop(self.latest);
        let _ = self.thread.join();
    }
}

fn run(args: &DelayArgs) -> Result<(), QueueError> {
    let signals = StopSignals::install().map_err(|e| QueueError::Sys {
        call: "signalfd",
        errno: e,
        hint: "",
    })?;
    // Release times are sub-millisecond targets: ask for hrtimer wakeups without the
    // default 50 µs slack.
    let _ = nix::sys::prctl::set_timerslack(1);
    let mut nfq = NfQueue::open(args.rcvbuf as usize)?;
    for d in &args.directions {
        nfq.bind_queue(d.queue, args.max_len)?;
    }
    let mut line = DelayLine::new(args.directions.clone());
    let start = Instant::now();
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let now_ns = || start.elapsed().as_nanos() as u64;
    let mut counters = Counters {
        overruns: 0,
        unknown: 0,
    };
    let snapshot = |line: &DelayLine, c: &Counters, state: &'static str| DelayStats {
        pid: std::process::id(),
        state: state.into(),
        started_unix_s,
        uptime_s: start.elapsed().as_secs_f64(),
        directions: line.stats(),
        netlink_overruns: c.overruns,
        unknown_queue_packets: c.unknown,
    };
    let stats = args.stats.clone().map(StatsWriter::spawn);
    if let Some(w) = &stats {
        w.offer(snapshot(&line, &counters, "running"));
    }
    eprintln!(
        "sbm-delay: serving queues {:?}",
        args.directions.iter().map(|d| d.queue).collect::<Vec<_>>()
    );
    let mut releases = Vec::with_capacity(8);
    let mut next_stats = STATS_EVERY;
    let result = loop {
        let timeout = line.next_due().map(|due| {
            let ns = due.saturating_sub(now_ns());
            TimeSpec::from_duration(Duration::from_nanos(ns))
        });
        let timeout =
            Some(timeout.unwrap_or_else(|| TimeSpec::from_duration(Duration::from_millis(200))));
        let mut fds = [
            PollFd::new(nfq.as_fd(), PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        match nix::poll::ppoll(&mut fds, timeout, None) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                break Err(QueueError::Sys {
                    call: "ppoll",
                    errno: e,
                    hint: "",
                })
            }
        }
        let stop = fds[1].any().unwrap_or(false) && signals.take().is_some();
        // Read everything queued, stamping arrivals with one clock reading per datagram.
        let mut read_error = None;
        loop {
            let t = now_ns();
            let mut on_msg = |m| {
                if let nfnl::Incoming::Packet { queue, id, gso } = m {
                    if line.on_packet(queue, id, gso, t).is_err() {
                        counters.unknown += 1;
                    }
                }
            };
            match nfq.read(&mut on_msg) {
                Ok(Read::Messages) => continue,
                Ok(Read::Overrun) => counters.overruns += 1,
                Ok(Read::Empty) => break,
                Err(e) => {
                    read_error = Some(e);
                    break;
                }
            }
        }
        line.release(now_ns(), stop, &mut releases);
        for r in releases.drain(..) {
            if let Err(e) = nfq.accept_through(r.queue, r.max_id) {
                read_error.get_or_insert(e);
            }
        }
        if let Some(e) = read_error {
            break Err(e);
        }
        if stop {
            break Ok(());
        }
        if start.elapsed() >= next_stats {
            next_stats += STATS_EVERY;
            if let Some(w) = &stats {
                w.offer(snapshot(&line, &counters, "running"));
            }
        }
    };
    // Whatever happened, let go of every packet still held.
    line.release(now_ns(), true, &mut releases);
    for r in releases.drain(..) {
        let _ = nfq.accept_through(r.queue, r.max_id);
    }
    let last = snapshot(&line, &counters, "exited");
    crate::say!("{}", serde_json::to_string(&last).expect("stats serialize"));
    if let Some(w) = stats {
        w.finish(last);
    }
    result
}

/// The whole of `main` for bin/sbm-delay.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    crate::cli::main_with(args, |a: DelayArgs| {
        run(&a).map(|()| 0).map_err(crate::cli::Failure::env)
    })
}
