//! TCP_REPLENISH_TIME on a stock kernel: bpf/replenish.bpf.c keeps every socket's
//! TCP_NOTSENT_LOWAT at a multiple of its drain rate × T. Started once per process
//! ([`BpfReplenish::start`]), which then lives in a fresh cgroup with the program attached;
//! the program's per-socket view is read back by fd through [`BpfReplenish::rule`], the
//! handle sbm-send's readiness gate owns.
//!
//! The arithmetic: Linux makes a socket writable (poll, epoll, wakeups) while
//! notsent < lowat / 2 and lets sendmsg() queue until notsent ≥ lowat. With threshold
//! R × T (R the drain rate):
//! - [`Wake::AtThreshold`]: lowat = 2 × R × T — invited below the threshold, a write
//!   accepted until the backlog is twice the threshold (the closest a lowat comes to the
//!   report's hysteresis);
//! - [`Wake::AtHalf`]: lowat = R × T — invited below half the threshold, the patched
//!   kernel's (v2) one test.
//!
//! Unlike the draft's option, a lowat also gates sendmsg: a large write returns short.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, Object};

use super::cgroup::FreshCgroup;
use super::{find_map, load_and_attach, require_root, BpfError};
use crate::replenish::{BpfSocketState, SocketRule};

/// The compiled program (build.rs).
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/replenish.bpf.o"));
const PROGRAM: &str = "sbm_replenish";
const CONFIG_MAP: &str = "sbm_config";
const STATE_MAP: &str = "sbm_state";

/// Where the socket is invited against the threshold R × T.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// lowat = 2 × R × T.
    AtThreshold,
    /// lowat = R × T.
    AtHalf,
}

/// The report's §6 sub-MSS clause: writable while the backlog is below one MSS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubMss {
    Off,
    /// Only while Nagle is on (the program reads the socket's TCP_NODELAY).
    WithNagle,
    Always,
}

/// What the program is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub time: Duration,
    pub wake: Wake,
    pub sub_mss: SubMss,
    /// Only connections to or from this port (None: every TCP connection in the cgroup).
    pub port: Option<u16>,
}

impl Settings {
    /// `struct sbm_config` as the program reads it.
    fn config_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(24);
        b.extend_from_slice(&(self.time.as_micros() as u64).to_ne_bytes());
        let per_threshold: u32 = match self.wake {
            Wake::AtThreshold => 2,
            Wake::AtHalf => 1,
        };
        b.extend_from_slice(&per_threshold.to_ne_bytes());
        let clause: u32 = match self.sub_mss {
            SubMss::Off => 0,
            SubMss::WithNagle => 1,
            SubMss::Always => 2,
        };
        b.extend_from_slice(&clause.to_ne_bytes());
        b.extend_from_slice(&self.port.unwrap_or(0).to_ne_bytes());
        b.extend_from_slice(&[0u8; 6]);
        b
    }
}

/// `struct sbm_state` read back.
fn parse_state(b: &[u8]) -> Option<BpfSocketState> {
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_ne_bytes(s.try_into().unwrap()))
    };
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_ne_bytes(s.try_into().unwrap()))
    };
    Some(BpfSocketState {
        rate_bytes_per_s: u64_at(0)?,
        threshold_bytes: u64_at(8)?,
        lowat_bytes: u32_at(16)?,
        rate_source: match u32_at(20)? {
            1 => "sample",
            2 => "app-limited-sample",
            3 => "cwnd-srtt",
            _ => "none",
        }
        .into(),
        updates: u64_at(24)?,
        samples: u64_at(32)?,
        app_limited_skipped: u64_at(40)?,
        spikes_dropped: u64_at(48)?,
        setsockopt_errors: u64_at(56)?,
        last_error: u32_at(64)? as i32,
    })
}

/// The program's per-socket state map, read by fd: the handle the readiness gate owns.
struct StateMap(MapHandle);

impl SocketRule for StateMap {
    fn state(&self, fd: BorrowedFd<'_>) -> Option<BpfSocketState> {
        let key = fd.as_raw_fd().to_ne_bytes();
        let bytes = self.0.lookup(&key, MapFlags::ANY).ok()??;
        parse_state(&bytes)
    }
}

/// The program loaded and attached to one cgroup: it looks after the TCP sockets that the
/// cgroup's processes create from now on. Dropping it detaches it.
pub struct BpfReplenishLink {
    // Drop order is declaration order: detach, then unload.
    _link: Link,
    _object: Object,
    state: MapHandle,
}

impl BpfReplenishLink {
    /// Loads the program with `settings` and attaches it to the cgroup `cgroup` (a
    /// directory's fd).
    pub fn attach(
        settings: &Settings,
        cgroup: BorrowedFd<'_>,
    ) -> Result<BpfReplenishLink, BpfError> {
        let (object, link) = load_and_attach(
            OBJECT,
            PROGRAM,
            CONFIG_MAP,
            &settings.config_bytes(),
            cgroup,
        )?;
        let state =
            MapHandle::try_from(&find_map(&object, STATE_MAP)?).map_err(|e| BpfError::Map {
                map: STATE_MAP,
                reason: e.to_string(),
            })?;
        Ok(BpfReplenishLink {
            _link: link,
            _object: object,
            state,
        })
    }
}

/// The program for this process's own sockets: attached to a fresh cgroup that this
/// process has joined. Dropping it detaches the program, takes the process back to its own
/// cgroup and removes the new one.
pub struct BpfReplenish {
    // Drop order is declaration order: detach, then leave and remove the cgroup.
    attached: BpfReplenishLink,
    cgroup: FreshCgroup,
}

impl BpfReplenish {
    /// Loads the program, attaches it to a fresh cgroup and joins it: every TCP socket
    /// this process creates from now on is looked after.
    pub fn start(settings: &Settings) -> Result<BpfReplenish, BpfError> {
        require_root()?;
        let mut cgroup = FreshCgroup::create("sbm-bpf")?;
        let attached = BpfReplenishLink::attach(settings, cgroup.as_fd())?;
        // Attached first, joined second: every socket this process creates from here on
        // is looked after.
        cgroup.join_self()?;
        Ok(BpfReplenish { attached, cgroup })
    }

    /// The program's view of each socket, for the readiness gate (every flow of the process
    /// may hold one).
    pub fn rule(&self) -> Result<Arc<dyn SocketRule>, BpfError> {
        let state = MapHandle::try_from(&self.attached.state).map_err(|e| BpfError::Map {
            map: STATE_MAP,
            reason: e.to_string(),
        })?;
        Ok(Arc::new(StateMap(state)))
    }

    /// The cgroup the program is attached to.
    pub fn cgroup(&self) -> &std::path::Path {
        self.cgroup.path()
    }

    /// The cgroup's directory, for another program on the same sockets.
    pub fn cgroup_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.cgroup.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_layout_matches_struct_sbm_config() {
        let s = Settings {
            time: Duration::from_millis(15),
            wake: Wake::AtHalf,
            sub_mss: SubMss::WithNagle,
            port: Some(5301),
        };
        let b = s.config_bytes();
        assert_eq!(b.len(), 24);
        assert_eq!(u64::from_ne_bytes(b[0..8].try_into().unwrap()), 15_000);
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 1);
        assert_eq!(u32::from_ne_bytes(b[12..16].try_into().unwrap()), 1);
        assert_eq!(u16::from_ne_bytes(b[16..18].try_into().unwrap()), 5301);
    }

    #[test]
    fn state_layout_matches_struct_sbm_state() {
        let mut b = Vec::new();
        for v in [250_000u64, 3_750] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&7_500u32.to_ne_bytes());
        b.extend_from_slice(&2u32.to_ne_bytes());
        for v in [10u64, 9, 3, 1, 0] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&(-22i32).to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        assert_eq!(b.len(), 72);
        let s = parse_state(&b).unwrap();
        assert_eq!(s.rate_bytes_per_s, 250_000);
        assert_eq!(s.threshold_bytes, 3_750);
        assert_eq!(s.lowat_bytes, 7_500);
        assert_eq!(s.rate_source, "app-limited-sample");
        assert_eq!(
            (
                s.updates,
                s.samples,
                s.app_limited_skipped,
                s.spikes_dropped
            ),
            (10, 9, 3, 1)
        );
        assert_eq!(s.last_error, -22);
        assert!(parse_state(&b[..60]).is_none());
    }
}
