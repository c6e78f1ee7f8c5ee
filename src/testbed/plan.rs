//! The tc commands of a bottleneck and a delay, as pure functions of their parameters:
//! what `--dry-run` prints is what runs.

use std::time::Duration;

use super::cmd::Cmd;

/// Ethernet frame of an MTU-sized packet as HTB accounts it.
pub const FULL_PACKET: u64 = 1514;
/// Bytes per second a bucket must refill per timer tick: sized for HZ = 100, the lowest
/// common kernel tick, so the shaper reaches its rate at any HZ (FACTS.md: burst ≥ rate/HZ).
const MIN_HZ: u64 = 100;

/// An HTB rate limit with a byte FIFO sized in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bottleneck {
    pub rate_bps: u64,
    pub queue: Duration,
}

impl Bottleneck {
    /// rate × queue, at least four full packets (at 100 kb/s, 200 ms is only 2500 B).
    pub fn limit_bytes(&self) -> u64 {
        self.queue_bytes_asked().max(4 * FULL_PACKET)
    }

    /// Whether the queue asked for was smaller than the four-packet floor and was raised.
    pub fn raised_to_floor(&self) -> bool {
        self.limit_bytes() > self.queue_bytes_asked()
    }

    fn queue_bytes_asked(&self) -> u64 {
        (u128::from(self.rate_bps) * self.queue.as_nanos() / 8 / 1_000_000_000) as u64
    }

    /// How long the installed queue (`limit_bytes`) takes to drain at the rate.
    pub fn drain_time(&self) -> Duration {
        Duration::from_nanos(
            (u128::from(self.limit_bytes()) * 8 * 1_000_000_000 / u128::from(self.rate_bps.max(1)))
                as u64,
        )
    }

    /// A policer's bucket: the queue's time at the rate, at least two full packets (the
    /// burst a policer lets through at line rate after an idle spell).
    pub fn bucket_bytes(&self) -> u64 {
        self.queue_bytes_asked().max(2 * FULL_PACKET)
    }

    /// HTB burst: at least one tick's worth at the rate and two full packets.
    pub fn burst_bytes(&self) -> u64 {
        (self.rate_bps / 8 / MIN_HZ).max(2 * FULL_PACKET)
    }

    /// The payload rate TCP can reach through it with `mss`-byte segments (the shaper
    /// counts Ethernet + IP + TCP headers).
    pub fn payload_bps(&self, mss: u64, header_bytes: u64) -> f64 {
        self.rate_bps as f64 * mss as f64 / (mss + header_bytes) as f64
    }
}

/// HTB root + one class at the rate + a bfifo child, on `dev` (created or changed in place).
pub fn htb(dev: &str, b: &Bottleneck) -> Vec<Cmd> {
    let rate = format!("{}bit", b.rate_bps);
    let burst = format!("{}b", b.burst_bytes());
    let quantum = FULL_PACKET.to_string();
    let limit = format!("{}b", b.limit_bytes());
    vec![
        Cmd::new(
            "tc",
            &[
                "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1",
            ],
        ),
        Cmd::new(
            "tc",
            &[
                "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate",
                &rate, "ceil", &rate, "burst", &burst, "cburst", &burst, "quantum", &quantum,
            ],
        ),
        Cmd::new(
            "tc",
            &[
                "qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "10:", "bfifo", "limit",
                &limit,
            ],
        ),
    ]
}

/// Redirects everything arriving on `dev` to the IFB device `ifb` (the report's
/// receiver-side ingress shaping): create the IFB, ingress qdisc, match-all mirred.
pub fn ingress_redirect(dev: &str, ifb: &str) -> Vec<Cmd> {
    vec![
        Cmd::new("ip", &["link", "add", ifb, "type", "ifb"]),
        Cmd::new("ip", &["link", "set", ifb, "up"]),
        Cmd::new(
            "tc",
            &["qdisc", "replace", "dev", dev, "handle", "ffff:", "ingress"],
        ),
        Cmd::new(
            "tc",
            &[
                "filter", "replace", "dev", dev, "parent", "ffff:", "protocol", "all", "prio", "1",
                "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev",
                ifb,
            ],
        ),
    ]
}

/// The IFB a policer's token bucket sits on where the kernel has no act_police.
pub const POLICER_IFB: &str = "ifbp0";

/// A policer on what arrives on `dev`: tc's police action (act_police) drops what exceeds
/// the rate and a bucket of `b.bucket_bytes()`; nothing waits.
pub fn police(dev: &str, b: &Bottleneck) -> Vec<Cmd> {
    let rate = format!("{}bit", b.rate_bps);
    let burst = format!("{}b", b.bucket_bytes());
    vec![
        Cmd::new(
            "tc",
            &["qdisc", "replace", "dev", dev, "handle", "ffff:", "ingress"],
        ),
        Cmd::new(
            "tc",
            &[
                "filter",
                "replace",
                "dev",
                dev,
                "parent",
                "ffff:",
                "protocol",
                "all",
                "prio",
                "1",
                "u32",
                "match",
                "u32",
                "0",
                "0",
                "action",
                "police",
                "rate",
                &rate,
                "burst",
                &burst,
                "mtu",
                "64kb",
                "conform-exceed",
                "drop",
            ],
        ),
    ]
}

/// The policer where the kernel lacks act_police: what arrives on `dev` goes through an IFB
/// whose root is a token bucket (TBF) with the same rate and bucket and a queue of one full
/// packet — it drops what a policer drops, except that one packet may wait.
pub fn police_by_tbf(dev: &str, b: &Bottleneck) -> Vec<Cmd> {
    let mut cmds = ingress_redirect(dev, POLICER_IFB);
    cmds.push(tbf_policer(b));
    cmds
}

/// The token bucket of [`police_by_tbf`] (replaced in place to change it).
pub fn tbf_policer(b: &Bottleneck) -> Cmd {
    let rate = format!("{}bit", b.rate_bps);
    let burst = format!("{}b", b.bucket_bytes());
    let limit = format!("{FULL_PACKET}b");
    Cmd::new(
        "tc",
        &[
            "qdisc",
            "replace",
            "dev",
            POLICER_IFB,
            "root",
            "handle",
            "1:",
            "tbf",
            "rate",
            &rate,
            "burst",
            &burst,
            "limit",
            &limit,
        ],
    )
}

/// Removes a policer of either kind from `dev`.
pub fn unpolice(dev: &str) -> Vec<Cmd> {
    vec![
        Cmd::new("tc", &["qdisc", "del", "dev", dev, "ingress"]),
        Cmd::new("ip", &["link", "del", POLICER_IFB]),
    ]
}

/// netem delay as the root qdisc of `dev`.
pub fn netem_delay(dev: &str, delay: Duration) -> Cmd {
    let d = format!("{}us", delay.as_micros());
    Cmd::new(
        "tc",
        &[
            "qdisc", "replace", "dev", dev, "root", "netem", "delay", &d, "limit", "100000",
        ],
    )
}

/// The IFB device name for `dev` on a real host (at most 15 characters).
pub fn ifb_name(dev: &str) -> String {
    let mut name = format!("ifb-{dev}");
    name.truncate(15);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_is_sized_in_time_with_a_floor_of_four_packets() {
        let two_m = Bottleneck {
            rate_bps: 2_000_000,
            queue: Duration::from_millis(200),
        };
        assert_eq!(two_m.limit_bytes(), 50_000);
        let slow = Bottleneck {
            rate_bps: 100_000,
            queue: Duration::from_millis(200),
        };
        assert_eq!(slow.limit_bytes(), 4 * 1514); // 2500 B by time
        assert!(slow.raised_to_floor() && !two_m.raised_to_floor());
        assert_eq!(slow.drain_time(), Duration::from_micros(484_480));
        assert_eq!(two_m.drain_time(), Duration::from_millis(200));
        let fast = Bottleneck {
            rate_bps: 86_000_000,
            queue: Duration::from_millis(200),
        };
        assert_eq!(fast.limit_bytes(), 2_150_000);
    }

    #[test]
    fn burst_covers_one_tick_at_the_rate() {
        assert_eq!(
            Bottleneck {
                rate_bps: 100_000,
                queue: Duration::ZERO
            }
            .burst_bytes(),
            3028
        );
        assert_eq!(
            Bottleneck {
                rate_bps: 86_000_000,
                queue: Duration::ZERO
            }
            .burst_bytes(),
            107_500
        );
    }

    #[test]
    fn htb_commands() {
        let b = Bottleneck {
            rate_bps: 2_000_000,
            queue: Duration::from_millis(200),
        };
        let lines: Vec<String> = htb("wr", &b).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            lines,
            [
                "tc qdisc replace dev wr root handle 1: htb default 1",
                "tc class replace dev wr parent 1: classid 1:1 htb rate 2000000bit ceil 2000000bit burst 3028b cburst 3028b quantum 1514",
                "tc qdisc replace dev wr parent 1:1 handle 10: bfifo limit 50000b",
            ]
        );
    }

    #[test]
    fn payload_rate_accounts_for_headers() {
        let b = Bottleneck {
            rate_bps: 2_000_000,
            queue: Duration::ZERO,
        };
        // 1448-byte payload in a 1514-byte frame with timestamps (66 bytes of headers).
        let p = b.payload_bps(1448, 66);
        assert!((p - 1_912_813.7).abs() < 1.0, "{p}");
    }

    #[test]
    fn ifb_names_fit_linux_limits() {
        assert_eq!(ifb_name("eth0"), "ifb-eth0");
        assert_eq!(ifb_name("enp0s31f6longname").len(), 15);
    }

    #[test]
    fn a_policer_drops_beyond_its_bucket_or_emulates_it_with_a_one_packet_tbf() {
        let b = Bottleneck {
            rate_bps: 100_000_000,
            queue: Duration::from_millis(20),
        };
        assert_eq!(b.bucket_bytes(), 250_000);
        let p: Vec<String> = police("ws", &b).iter().map(|c| c.to_string()).collect();
        assert!(
            p[1].ends_with(
                "action police rate 100000000bit burst 250000b mtu 64kb conform-exceed drop"
            ),
            "{}",
            p[1]
        );
        let t: Vec<String> = police_by_tbf("ws", &b)
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(t[0], "ip link add ifbp0 type ifb");
        assert_eq!(
            t.last().unwrap(),
            "tc qdisc replace dev ifbp0 root handle 1: tbf rate 100000000bit burst 250000b limit 1514b"
        );
        // A tiny queue still leaves a bucket of two full packets.
        let tiny = Bottleneck {
            rate_bps: 100_000,
            queue: Duration::from_millis(1),
        };
        assert_eq!(tiny.bucket_bytes(), 2 * FULL_PACKET);
    }
}
