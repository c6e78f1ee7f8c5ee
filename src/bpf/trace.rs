//! The tracer's BPF side: bpf/trace.bpf.c loaded, configured and attached to a cgroup, and
//! its ring buffer read back as [`TraceEvent`]s (sequence numbers raw, times on
//! CLOCK_MONOTONIC as the program took them).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::BorrowedFd;
use std::rc::Rc;
use std::time::Duration;

use libbpf_rs::{Link, MapCore, MapFlags, Object, RingBuffer, RingBufferBuilder};

use super::{find_map, load_and_attach, BpfError};

const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/trace.bpf.o"));
const PROGRAM: &str = "sbm_trace";
const CONFIG_MAP: &str = "sbm_trace_config";
const EVENTS_MAP: &str = "sbm_events";
const LOST_MAP: &str = "sbm_lost";
/// `sbm_trace_config.flags`.
const NO_WAKEUP: u16 = 1;
const NO_WRITES: u16 = 2;
/// `struct sbm_event`, padded to its 8-byte alignment.
const EVENT_LEN: usize = 80;

/// What the program is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSettings {
    /// Only connections with this local or remote port (None: every TCP connection).
    pub port: Option<u16>,
    /// Ask for BPF TX timestamping (Linux 6.15+): per-write SCHED/SND/ACK times.
    pub timestamping: bool,
    /// A departure event per segment that raised the highest sequence sent (a callback per
    /// outgoing segment: the costly part).
    pub per_packet: bool,
    /// Events wake a reader waiting in [`Tracer::poll`]. Off, the reader finds them when it
    /// reads on its own schedule (sbm-send's loop on its turns, sbm-trace each poll
    /// interval): a wakeup is an interrupt in the sending task, which cost a third of the
    /// sender's CPU in a VM (perf: irq_work's APIC write under bpf_ringbuf_submit).
    pub wake_reader: bool,
    /// A write event per sendmsg() (sbm-send records its own writes: off).
    pub write_events: bool,
    /// Set each traced connection's congestion control when it is established (an
    /// unmodified program chooses none; a namespace other than the host's may not make
    /// every algorithm its default). At most 15 bytes.
    pub congestion: Option<String>,
}

/// What one callback reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The connection is set up; `seq` is its first data sequence number; `aux` the error
    /// of setting the configured congestion control (0: set, or none asked).
    Established,
    /// A sendmsg() queued data; `seq` is the write's end (last byte + 1).
    Write,
    /// TX timestamps of the skb whose key (`seq`) is the last byte of the write that last
    /// touched it.
    Sched,
    Snd,
    Ack,
    /// A segment took the highest sent sequence number to `seq` (its end).
    Depart,
    Closed,
    /// Enabling BPF TX timestamping failed on this connection (`aux` = the error).
    NoTimestamping,
    /// A segment left carrying a TX timestamp request whose key byte (`seq`) it does not
    /// hold (`aux`: the segment's first byte − the key): the reports for that key will be
    /// this segment's.
    Displaced,
}

/// One event of one connection (`cookie`: the kernel's socket cookie).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    pub cookie: u64,
    pub mono_ns: u64,
    pub kind: EventKind,
    pub seq: u32,
    pub snd_nxt: u32,
    pub snd_una: u32,
    pub aux: i32,
    /// Set on `Established` only.
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
}

/// `struct sbm_event` decoded; None for a short or unknown record.
pub fn parse_event(b: &[u8]) -> Option<TraceEvent> {
    let b = b.get(..EVENT_LEN)?;
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_ne_bytes(s.try_into().unwrap()))
    };
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_ne_bytes(s.try_into().unwrap()))
    };
    let u16_at = |o: usize| {
        b.get(o..o + 2)
            .map(|s| u16::from_ne_bytes(s.try_into().unwrap()))
    };
    let kind = match u32_at(16)? {
        1 => EventKind::Established,
        2 => EventKind::Write,
        3 => EventKind::Sched,
        4 => EventKind::Snd,
        5 => EventKind::Ack,
        6 => EventKind::Depart,
        7 => EventKind::Closed,
        8 => EventKind::NoTimestamping,
        9 => EventKind::Displaced,
        _ => return None,
    };
    let (local_port, remote_port) = (u16_at(36)?, u16_at(38)?);
    let family = u32_at(40)?;
    // Addresses are in network byte order, i.e. their bytes as they sit in memory.
    let ip = |o: usize| -> Option<IpAddr> {
        let bytes: [u8; 16] = b.get(o..o + 16)?.try_into().ok()?;
        match family {
            2 => Some(IpAddr::V4(Ipv4Addr::new(
                bytes[0], bytes[1], bytes[2], bytes[3],
            ))),
            10 => Some(IpAddr::V6(Ipv6Addr::from(bytes))),
            _ => None,
        }
    };
    let established = kind == EventKind::Established;
    Some(TraceEvent {
        cookie: u64_at(0)?,
        mono_ns: u64_at(8)?,
        kind,
        seq: u32_at(20)?,
        snd_nxt: u32_at(24)?,
        snd_una: u32_at(28)?,
        aux: u32_at(32)? as i32,
        local: established
            .then(|| ip(44).map(|a| SocketAddr::new(a, local_port)))
            .flatten(),
        remote: established
            .then(|| ip(60).map(|a| SocketAddr::new(a, remote_port)))
            .flatten(),
    })
}

impl TraceSettings {
    fn config_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(24);
        b.extend_from_slice(&self.port.unwrap_or(0).to_ne_bytes());
        b.extend_from_slice(&u16::from(self.timestamping).to_ne_bytes());
        b.extend_from_slice(&u16::from(self.per_packet).to_ne_bytes());
        let flags = if self.wake_reader { 0 } else { NO_WAKEUP }
            | if self.write_events { 0 } else { NO_WRITES };
        b.extend_from_slice(&flags.to_ne_bytes());
        let mut cc = [0u8; 16];
        if let Some(name) = &self.congestion {
            let n = name.len().min(15);
            cc[..n].copy_from_slice(&name.as_bytes()[..n]);
        }
        b.extend_from_slice(&cc);
        b
    }
}

/// The running program, attached to one cgroup; dropping it detaches it.
pub struct Tracer {
    // Drop order: the ring buffer, the link (detach), then the object.
    ring: RingBuffer<'static>,
    queue: Rc<RefCell<VecDeque<TraceEvent>>>,
    malformed: Rc<RefCell<u64>>,
    _link: Link,
    object: Object,
}

impl Tracer {
    /// Loads the program and attaches it to the cgroup `cgroup` (a directory's fd).
    pub fn attach(settings: &TraceSettings, cgroup: BorrowedFd<'_>) -> Result<Tracer, BpfError> {
        let (object, link) = load_and_attach(
            OBJECT,
            PROGRAM,
            CONFIG_MAP,
            &settings.config_bytes(),
            cgroup,
        )?;
        let map_error = |e: libbpf_rs::Error| BpfError::Map {
            map: EVENTS_MAP,
            reason: e.to_string(),
        };
        // Attached before the ring buffer is read: events queue in it meanwhile.
        let queue = Rc::new(RefCell::new(VecDeque::new()));
        let malformed = Rc::new(RefCell::new(0u64));
        let (q, bad) = (queue.clone(), malformed.clone());
        let events = find_map(&object, EVENTS_MAP)?;
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&events, move |data: &[u8]| {
                match parse_event(data) {
                    Some(e) => q.borrow_mut().push_back(e),
                    None => *bad.borrow_mut() += 1,
                }
                0
            })
            .map_err(map_error)?;
        let ring = builder.build().map_err(map_error)?;
        Ok(Tracer {
            ring,
            queue,
            malformed,
            _link: link,
            object,
        })
    }

    /// Appends every event queued so far to `out`, in order, without waiting and without a
    /// system call (the ring buffer is shared memory): for a loop that reads it on turns it
    /// takes anyway.
    pub fn take_queued(&self, out: &mut Vec<TraceEvent>) -> Result<(), BpfError> {
        self.ring.consume().map_err(|e| BpfError::Map {
            map: EVENTS_MAP,
            reason: e.to_string(),
        })?;
        out.extend(self.queue.borrow_mut().drain(..));
        Ok(())
    }

    /// Waits up to `timeout` for events (the whole of it when events do not wake the reader)
    /// and returns every one queued by then, in order.
    pub fn poll(&self, timeout: Duration) -> Result<Vec<TraceEvent>, BpfError> {
        let map_error = |e: libbpf_rs::Error| BpfError::Map {
            map: EVENTS_MAP,
            reason: e.to_string(),
        };
        // poll() reads only the rings whose wakeup came; consume() reads every one.
        self.ring.poll(timeout).map_err(map_error)?;
        self.ring.consume().map_err(map_error)?;
        Ok(self.queue.borrow_mut().drain(..).collect())
    }

    /// Events the program could not queue (ring buffer full), and records that did not
    /// decode.
    pub fn lost(&self) -> (u64, u64) {
        let lost = self
            .object
            .maps()
            .find(|m| m.name() == LOST_MAP)
            .and_then(|m| m.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).ok().flatten())
            .and_then(|v| {
                v.get(..8)
                    .map(|s| u64::from_ne_bytes(s.try_into().unwrap()))
            })
            .unwrap_or(0);
        (lost, *self.malformed.borrow())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, family: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0xABCDu64.to_ne_bytes());
        b.extend_from_slice(&5_000_000u64.to_ne_bytes());
        for v in [kind, 1_000_001, 1_000_000, 999_000] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&(-95i32).to_ne_bytes());
        b.extend_from_slice(&40000u16.to_ne_bytes());
        b.extend_from_slice(&5301u16.to_ne_bytes());
        b.extend_from_slice(&family.to_ne_bytes());
        let mut local = [0u8; 16];
        local[..4].copy_from_slice(&[198, 18, 1, 1]);
        let mut remote = [0u8; 16];
        remote[..4].copy_from_slice(&[198, 18, 2, 1]);
        b.extend_from_slice(&local);
        b.extend_from_slice(&remote);
        b.extend_from_slice(&[0u8; 4]);
        assert_eq!(b.len(), EVENT_LEN);
        b
    }

    #[test]
    fn event_layout_matches_struct_sbm_event() {
        let e = parse_event(&record(1, 2)).unwrap();
        assert_eq!(e.cookie, 0xABCD);
        assert_eq!(e.mono_ns, 5_000_000);
        assert_eq!(e.kind, EventKind::Established);
        assert_eq!(
            (e.seq, e.snd_nxt, e.snd_una, e.aux),
            (1_000_001, 1_000_000, 999_000, -95)
        );
        assert_eq!(e.local, Some("198.18.1.1:40000".parse().unwrap()));
        assert_eq!(e.remote, Some("198.18.2.1:5301".parse().unwrap()));
        // Addresses only on the connection's first event.
        let w = parse_event(&record(2, 2)).unwrap();
        assert_eq!((w.kind, w.local), (EventKind::Write, None));
        assert!(parse_event(&record(99, 2)).is_none());
        assert!(parse_event(&record(2, 2)[..30]).is_none());
    }
}
