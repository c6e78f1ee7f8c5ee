//! What a real host is, as one JSON document (`sbm-testbed host info`): kernel, the sysctls
//! that shape a sender, each named interface's MTU, offloads and qdiscs (with their
//! counters), and whether its clock is synchronised; `host clock` prints its wall clock for
//! an offset measurement, `host probe-rtt` the round trip to an address measured with TCP
//! handshakes. The matrix collects these from both ends of a real path before and after
//! every cell.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::plan;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HostInfo {
    pub hostname: String,
    /// The running kernel's boot id: two ends with the same one share one clock.
    pub boot_id: String,
    pub kernel_release: String,
    pub sysctls: BTreeMap<String, String>,
    pub interfaces: Vec<Interface>,
    /// What chrony or systemd-timesyncd say, or why neither could be asked.
    pub clock_sync: String,
    /// Whether that says the clock is synchronised (None: not known).
    pub clock_synchronised: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Interface {
    pub name: String,
    pub mtu: Option<u32>,
    /// ethtool -k's segmentation and receive offloads (`on`/`off`), empty without ethtool.
    pub offloads: BTreeMap<String, String>,
    /// `tc -s qdisc show dev NAME`, as tc prints it.
    pub qdiscs: String,
    /// The same for the interface's ingress IFB (`ifb-NAME`), when it exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ifb_qdiscs: Option<String>,
}

/// A program's stdout, or None where it is missing or fails (a fact not known).
fn run(program: &'static str, args: &[&str]) -> Option<String> {
    super::cmd::Cmd::new(program, args).run().ok()
}

fn exists(dev: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(dev).exists()
}

/// The offloads that decide what a qdisc sees (segments or whole GSO packets).
const OFFLOADS: &[&str] = &[
    "tcp-segmentation-offload",
    "generic-segmentation-offload",
    "generic-receive-offload",
    "large-receive-offload",
];

fn interface(name: &str) -> Interface {
    let mtu = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let offloads = run("ethtool", &["-k", name])
        .map(|text| {
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .filter(|(k, _)| OFFLOADS.contains(&k.trim()))
                .map(|(k, v)| {
                    let v = v.split_whitespace().next().unwrap_or("").to_string();
                    (k.trim().to_string(), v)
                })
                .collect()
        })
        .unwrap_or_default();
    let qdiscs = |dev: &str| run("tc", &["-s", "qdisc", "show", "dev", dev]).unwrap_or_default();
    let ifb = plan::ifb_name(name);
    Interface {
        name: name.to_string(),
        mtu,
        offloads,
        qdiscs: qdiscs(name),
        ifb_qdiscs: exists(&ifb).then(|| qdiscs(&ifb)),
    }
}

/// chrony's or systemd-timesyncd's own word on the clock.
fn clock_sync() -> (String, Option<bool>) {
    if let Some(t) = run("chronyc", &["-n", "tracking"]) {
        let pick = |key: &str| {
            t.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let leap = pick("Leap status").unwrap_or_default();
        let offset = pick("System time").unwrap_or_default();
        return (
            format!("chrony: leap status {leap}; system time {offset}"),
            Some(leap == "Normal"),
        );
    }
    if let Some(v) = run("timedatectl", &["show", "-p", "NTPSynchronized", "--value"]) {
        let v = v.trim().to_string();
        return (
            format!("timedatectl: NTPSynchronized={v}"),
            Some(v == "yes"),
        );
    }
    (
        "not known: neither chronyc nor timedatectl answered".into(),
        None,
    )
}

/// This host, with `devs` described.
pub fn collect(devs: &[String]) -> HostInfo {
    let (clock_sync, clock_synchronised) = clock_sync();
    HostInfo {
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        kernel_release: crate::sysinfo::kernel_release(),
        sysctls: crate::sysinfo::relevant_sysctls(),
        interfaces: devs.iter().map(|d| interface(d)).collect(),
        clock_sync,
        clock_synchronised,
    }
}

/// Round trips to `addr` from TCP handshakes: a refused connection (RST) answers as fast as
/// an accepted one (SYN-ACK, closed at once). Before a cell nothing listens on the sink's
/// port, so nothing counts the probes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RttProbe {
    pub address: String,
    pub samples_us: Vec<u64>,
    pub min_us: Option<u64>,
    /// Why a probe had no answer (timeouts, unreachable), if any had none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

pub fn probe_rtt(addr: SocketAddr, count: u32, timeout: Duration) -> RttProbe {
    let mut samples_us = vec![];
    let mut errors = vec![];
    for k in 0..count {
        if k > 0 {
            std::thread::sleep(Duration::from_millis(50));
        }
        let t0 = Instant::now();
        let r = TcpStream::connect_timeout(&addr, timeout);
        let took = t0.elapsed().as_micros() as u64;
        match r {
            Ok(_) => samples_us.push(took),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => samples_us.push(took),
            Err(e) => errors.push(e.to_string()),
        }
    }
    RttProbe {
        address: addr.to_string(),
        min_us: samples_us.iter().copied().min(),
        samples_us,
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_port_still_gives_a_round_trip() {
        // A port nothing listens on: bind one, learn its number, close it.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let p = probe_rtt(addr, 3, Duration::from_secs(1));
        assert_eq!(p.samples_us.len(), 3, "{p:?}");
        assert!(p.errors.is_empty(), "{p:?}");
        assert!(p.min_us.is_some());
    }

    #[test]
    fn loopback_is_described() {
        let info = collect(&["lo".into()]);
        assert_eq!(info.interfaces[0].mtu, Some(65536));
        assert!(!info.kernel_release.is_empty());
    }
}
