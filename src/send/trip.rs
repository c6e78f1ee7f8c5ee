//! `--trip-times`: messages framed with the wire header, matched to the sink's read
//! times after the run, and the sender-side latency estimates checked against them.
//! Also the control exchange every run ends with: half-close, read the sink's reply.

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::time::{Duration, Instant};

use socket2::Socket;

use crate::report::schema::{EstimatorError, SinkReply, TripMessageRow};
use crate::wire::Header;

/// The message being written, possibly over several invitations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Current {
    seq: u64,
    write_ns: u64,
    /// The message's length, header included.
    len: u32,
    /// Bytes of the message not yet accepted.
    remaining: u32,
}

/// Frames the stream into messages of `size` bytes, each starting with a header.
#[derive(Debug)]
pub struct Framer {
    size: u32,
    next_seq: u64,
    current: Option<Current>,
    /// Ends of finished messages whose rows are not final yet: (end offset, seq, write_ns).
    ends: VecDeque<(u64, u64, u64)>,
}

impl Framer {
    pub fn new(size: u32) -> Framer {
        Framer {
            size,
            next_seq: 1,
            current: None,
            ends: VecDeque::new(),
        }
    }

    /// Between messages: a limit may end the writing here.
    pub fn at_boundary(&self) -> bool {
        self.current.is_none()
    }

    /// The bytes of `buf` to write now; a new message's header is written into `buf`.
    pub fn next(&mut self, buf: &mut [u8], now_ns: u64) -> std::ops::Range<usize> {
        self.next_message(buf, now_ns, self.size, now_ns)
    }

    /// As [`Framer::next`], for an application-limited source: a new message is `size`
    /// bytes (the frame) and its header carries the frame's content time.
    pub fn next_message(
        &mut self,
        buf: &mut [u8],
        now_ns: u64,
        size: u32,
        content_ns: u64,
    ) -> std::ops::Range<usize> {
        let c = *self.current.get_or_insert_with(|| {
            let c = Current {
                seq: self.next_seq,
                write_ns: now_ns,
                len: size,
                remaining: size,
            };
            Header::data(c.seq, c.write_ns, size)
                .with_content_time(content_ns)
                .encode(&mut buf[..crate::wire::HEADER_LEN]);
            self.next_seq += 1;
            c
        });
        (c.len - c.remaining) as usize..c.len as usize
    }

    /// The message being written, if one is begun.
    pub fn current_seq(&self) -> Option<u64> {
        self.current.map(|c| c.seq)
    }

    /// `n` bytes of the current message were accepted; the stream now ends at `end_offset`.
    pub fn accepted(&mut self, n: u32, end_offset: u64) {
        if let Some(c) = &mut self.current {
            c.remaining -= n.min(c.remaining);
            if c.remaining == 0 {
                self.ends.push_back((end_offset, c.seq, c.write_ns));
                self.current = None;
            }
        }
    }

    /// A write row became final; if it closed a message, that message's (seq, write_ns).
    pub fn on_row(&mut self, end_offset: u64) -> Option<(u64, u64)> {
        while let Some(&(end, seq, w)) = self.ends.front() {
            if end > end_offset {
                return None;
            }
            self.ends.pop_front();
            if end == end_offset {
                return Some((seq, w));
            }
        }
        None
    }
}

/// What the sender knows of one message: its write time and its last write's TX times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRecord {
    pub seq: u64,
    pub write_ns: u64,
    pub sched_ns: Option<u64>,
    pub ack_ns: Option<u64>,
    /// Whether the SCHED time is the message's own (not coalesced).
    pub exact: bool,
    pub srtt_us: u32,
}

pub const ESTIMATORS: [&str; 5] = [
    "sched-write",
    "ack-write",
    "sojourn+srtt/2",
    "sojourn+srtt",
    "ack-srtt/2",
];

fn us(ns: i128) -> i64 {
    (ns / 1_000) as i64
}

/// Joins the sender's records with the sink's read times.
pub fn compare(
    records: &[MessageRecord],
    read_times: &HashMap<u64, u64>,
) -> (Vec<TripMessageRow>, Vec<EstimatorError>) {
    let mut rows = Vec::with_capacity(records.len());
    let mut errors: [Vec<i64>; 5] = Default::default();
    for r in records {
        let read = read_times.get(&r.seq).copied();
        let w = i128::from(r.write_ns);
        let sojourn = r.sched_ns.map(|s| us(i128::from(s) - w));
        let ack = r.ack_ns.map(|a| us(i128::from(a) - w));
        let half = i64::from(r.srtt_us / 2);
        let srtt = i64::from(r.srtt_us);
        let estimates = [
            sojourn,
            ack,
            sojourn.map(|s| s + half),
            sojourn.map(|s| s + srtt),
            ack.map(|a| a - half),
        ];
        let truth = read.map(|t| us(i128::from(t) - w));
        if let Some(t) = truth {
            for (e, est) in errors.iter_mut().zip(estimates) {
                if let Some(v) = est {
                    e.push(v - t);
                }
            }
        }
        rows.push(TripMessageRow {
            seq: r.seq,
            write_ns: r.write_ns,
            sched_ns: r.sched_ns,
            ack_ns: r.ack_ns,
            exact: r.exact,
            srtt_us: r.srtt_us,
            sink_read_ns: read,
            truth_us: truth,
            sojourn_us: estimates[0],
            ack_us: estimates[1],
            sojourn_half_rtt_us: estimates[2],
            sojourn_rtt_us: estimates[3],
            ack_minus_half_rtt_us: estimates[4],
        });
    }
    let stats = ESTIMATORS
        .iter()
        .zip(errors.iter_mut())
        .map(|(name, e)| {
            e.sort_unstable();
            let at =
                |q: f64| (!e.is_empty()).then(|| e[((e.len() - 1) as f64 * q).round() as usize]);
            EstimatorError {
                name: (*name).into(),
                count: e.len() as u64,
                median_error_us: at(0.5),
                p95_error_us: at(0.95),
            }
        })
        .collect();
    (rows, stats)
}

/// Half-closes and reads the sink's reply until it closes or `timeout` passes, through the
/// type the sink writes it with (fields it lacks: their defaults).
pub fn read_reply(sock: &Socket, timeout: Duration) -> Result<SinkReply, String> {
    sock.shutdown(std::net::Shutdown::Write)
        .map_err(|e| format!("shutdown: {e}"))?;
    sock.set_nonblocking(false).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    let mut data = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no reply from the sink within {timeout:?}"));
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match (&*sock).read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                data.extend_from_slice(&buf[..n]);
                if data.len() > 256 << 20 {
                    return Err("the sink's reply is larger than 256 MiB".into());
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("no reply from the sink within {timeout:?}"));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading the sink's reply: {e}")),
        }
    }
    if data.is_empty() {
        return Err("the peer closed without a reply (not an sbm-sink?)".into());
    }
    serde_json::from_slice(&data)
        .map_err(|e| format!("the sink's reply is not an sbm-sink reply: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_accepts_complete_the_message_before_a_new_one() {
        let mut f = Framer::new(100);
        let mut buf = vec![0u8; 100];
        assert_eq!(f.next(&mut buf, 7), 0..100);
        assert_eq!(&buf[0..4], b"SBMt");
        f.accepted(60, 60);
        assert!(!f.at_boundary());
        buf[0] = 0; // the header is not rewritten for the rest
        assert_eq!(f.next(&mut buf, 8), 60..100);
        assert_eq!(buf[0], 0);
        f.accepted(40, 100);
        assert!(f.at_boundary());
        assert_eq!(f.next(&mut buf, 9), 0..100);
        assert_eq!(&buf[8..16], &2u64.to_be_bytes());
        assert_eq!(&buf[16..24], &9u64.to_be_bytes());
        f.accepted(100, 200);
        // The first row (end 60) closes nothing; the one ending at 100 closes message 1.
        assert_eq!(f.on_row(60), None);
        assert_eq!(f.on_row(100), Some((1, 7)));
        assert_eq!(f.on_row(200), Some((2, 9)));
    }

    #[test]
    fn estimator_errors_against_the_sink() {
        let ms = 1_000_000u64;
        // Written at 0, left at 10 ms, read at 96 ms (86 ms one way), acked at 182 ms.
        let rec = MessageRecord {
            seq: 1,
            write_ns: 0,
            sched_ns: Some(10 * ms),
            ack_ns: Some(182 * ms),
            exact: true,
            srtt_us: 172_000,
        };
        let reads: HashMap<u64, u64> = [(1, 96 * ms)].into_iter().collect();
        let (rows, stats) = compare(&[rec], &reads);
        assert_eq!(rows[0].truth_us, Some(96_000));
        let by: HashMap<&str, Option<i64>> = stats
            .iter()
            .map(|s| (s.name.as_ref(), s.median_error_us))
            .collect();
        assert_eq!(by["sched-write"], Some(-86_000));
        assert_eq!(by["ack-write"], Some(86_000));
        assert_eq!(by["sojourn+srtt/2"], Some(0));
        assert_eq!(by["sojourn+srtt"], Some(86_000));
        assert_eq!(by["ack-srtt/2"], Some(0));
        // A message the sink never saw has no truth and counts nowhere.
        let (_, stats) = compare(&[MessageRecord { seq: 2, ..rec }], &reads);
        assert!(stats.iter().all(|s| s.count == 0));
    }

    #[test]
    fn read_times_come_typed_from_the_reply() {
        let v = serde_json::json!({"bytes": 7, "read_times": [[1, 10], [2, 20]]});
        let r: crate::report::schema::SinkReply = serde_json::from_value(v).unwrap();
        let m: HashMap<u64, u64> = r.read_times.into_iter().collect();
        assert_eq!(m.get(&2), Some(&20));
        assert_eq!(r.bytes, 7);
    }
}
