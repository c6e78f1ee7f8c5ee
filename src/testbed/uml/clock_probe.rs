//! The guest's clock against the host's, measured: a traced guest stamps its events with its
//! own CLOCK_REALTIME, which UML sets from the host's at boot but which lags it by however
//! long the early boot ran on the jiffies clocksource (measured: 0.4 ms) — enough to put a
//! guest's events inside the host's off-slices. So before its command the guest sends UDP
//! probes, each carrying its CLOCK_REALTIME read just before the send, to a socket of ours on
//! the tap's host side, which stamps their arrival with the host's CLOCK_REALTIME
//! (SO_TIMESTAMPNS). For each probe host − guest is the offset plus that probe's one-way
//! latency; the smallest over the probes is the offset to within the shortest latency.

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};

/// Where the probes go: the tap's host side.
pub const PORT: u16 = 5399;
/// How many the guest sends, and how far apart.
pub const PROBES: u32 = 40;
pub const PROBE_GAP_MS: u32 = 5;

/// One probe: the guest's clock when it sent it, the host's when it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub guest_unix_ns: i64,
    pub host_unix_ns: i64,
}

/// What the probes say: host − guest at its smallest, and how many probes said it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClockOffset {
    /// Add to a guest stamp to get the host's clock (an overestimate by the shortest
    /// one-way latency of a probe).
    pub host_minus_guest_ns: i64,
    pub probes: usize,
    /// The next-smallest host − guest above it: how far the best two probes agree.
    pub second_ns: Option<i64>,
}

/// The guest's side: a shell line that sends the probes (python3, as the guest's
/// power-off already needs).
pub fn guest_command(host_addr: &str) -> String {
    format!(
        "import socket, time\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         for _ in range({PROBES}):\n    \
             s.sendto(str(time.time_ns()).encode(), ('{host_addr}', {PORT}))\n    \
             time.sleep({gap})\n",
        gap = f64::from(PROBE_GAP_MS) / 1000.0
    )
}

/// The smallest host − guest over `probes`.
pub fn offset(probes: &[Probe]) -> Option<ClockOffset> {
    let mut d: Vec<i64> = probes
        .iter()
        .map(|p| p.host_unix_ns - p.guest_unix_ns)
        .collect();
    d.sort_unstable();
    Some(ClockOffset {
        host_minus_guest_ns: *d.first()?,
        probes: d.len(),
        second_ns: d.get(1).copied(),
    })
}

/// The probes as CSV, in arrival order.
pub fn probes_csv(probes: &[Probe]) -> String {
    let mut s = String::from("guest_unix_ns,host_unix_ns\n");
    for p in probes {
        s.push_str(&format!("{},{}\n", p.guest_unix_ns, p.host_unix_ns));
    }
    s
}

/// The host's socket, receiving in a thread of its own inside the bed's snd namespace.
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Probe>>>,
}

impl Listener {
    /// Binds `addr`:[`PORT`] in network namespace `ns` (ip-netns's name); fails if it cannot.
    pub fn start(ns: &str, addr: &str) -> Result<Listener, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let ns = ns.to_string();
        let bind: SocketAddrV4 = format!("{addr}:{PORT}")
            .parse()
            .map_err(|e| format!("{addr}: {e}"))?;
        let stop_flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sbm-clock-probe".into())
            .spawn(move || match open(&ns, bind) {
                Ok(sock) => {
                    let _ = ready_tx.send(Ok(()));
                    receive(&sock, &stop_flag)
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    vec![]
                }
            })
            .map_err(|e| format!("clock probe thread: {e}"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Listener {
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err("the clock probe thread ended before it bound".into()),
        }
    }

    /// Stops receiving; the probes that arrived.
    pub fn finish(mut self) -> Vec<Probe> {
        self.end()
    }

    fn end(&mut self) -> Vec<Probe> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.end();
    }
}

/// The socket, made inside `ns` (this thread enters it for good: it is the listener's own).
fn open(ns: &str, bind: SocketAddrV4) -> Result<UdpSocket, String> {
    crate::testbed::wan::enter_netns(ns).map_err(|e| e.to_string())?;
    let sock = UdpSocket::bind(bind).map_err(|e| format!("bind({bind}): {e}"))?;
    setsockopt(&sock, sockopt::ReceiveTimestampns, &true)
        .map_err(|e| format!("setsockopt(SO_TIMESTAMPNS) on {bind}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| format!("SO_RCVTIMEO on {bind}: {e}"))?;
    Ok(sock)
}

fn receive(sock: &UdpSocket, stop: &AtomicBool) -> Vec<Probe> {
    use std::os::fd::AsRawFd;
    let mut probes = vec![];
    let mut buf = [0u8; 64];
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    while !stop.load(Ordering::Relaxed) {
        let (len, host) = {
            let mut iov = [std::io::IoSliceMut::new(&mut buf)];
            let Ok(msg) = recvmsg::<()>(
                sock.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::empty(),
            ) else {
                continue; // the read timeout: look at the stop flag again
            };
            let host = msg.cmsgs().into_iter().flatten().find_map(|m| match m {
                ControlMessageOwned::ScmTimestampns(t) => {
                    Some(t.tv_sec() * 1_000_000_000 + t.tv_nsec())
                }
                _ => None,
            });
            (msg.bytes, host)
        };
        let guest = std::str::from_utf8(&buf[..len])
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok());
        if let (Some(guest_unix_ns), Some(host_unix_ns)) = (guest, host) {
            probes.push(Probe {
                guest_unix_ns,
                host_unix_ns,
            });
        }
    }
    probes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_the_smallest_difference() {
        let p = |g, h| Probe {
            guest_unix_ns: g,
            host_unix_ns: h,
        };
        assert_eq!(offset(&[]), None);
        let o = offset(&[p(100, 600), p(200, 640), p(300, 1000)]).unwrap();
        assert_eq!(o.host_minus_guest_ns, 440);
        assert_eq!(o.second_ns, Some(500));
        assert_eq!(o.probes, 3);
        assert_eq!(probes_csv(&[p(1, 2)]), "guest_unix_ns,host_unix_ns\n1,2\n");
    }

    #[test]
    fn the_guest_sends_its_clock_to_the_host_side() {
        let c = guest_command("198.18.3.1");
        assert!(c.contains("('198.18.3.1', 5399)"), "{c}");
        assert!(c.contains("for _ in range(40):"), "{c}");
        assert!(c.contains("str(time.time_ns())"), "{c}");
    }
}
