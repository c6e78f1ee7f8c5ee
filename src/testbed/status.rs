//! `testbed/wan status`: what the bed is and what its parts counted. The JSON is what the
//! matrix records before and after each cell.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::delay::DelayStats;

use super::cmd::Cmd;
use super::wan::{self, BottleneckKind, DelayImpl, Names, PolicerImpl, ShapeAt, State};

/// One line of /proc/net/netfilter/nfnetlink_queue (net/netfilter/nfnetlink_queue.c
/// `seq_show`): the kernel's own counters for a queue.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct KernelQueue {
    pub queue: u32,
    pub portid: u32,
    /// Packets waiting for a verdict now.
    pub queue_total: u64,
    /// Dropped because the queue was full.
    pub queue_dropped: u64,
    /// Dropped because the netlink socket could not take them.
    pub user_dropped: u64,
    pub id_sequence: u64,
}

pub fn parse_nfnetlink_queue(text: &str) -> Vec<KernelQueue> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (f.len() >= 8).then(|| KernelQueue {
                queue: f[0] as u32,
                portid: f[1] as u32,
                queue_total: f[2],
                queue_dropped: f[5],
                user_dropped: f[6],
                id_sequence: f[7],
            })
        })
        .collect()
}

/// Packet counters of the NFQUEUE rules (`iptables -L FORWARD -v -x -n`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RuleCounter {
    pub in_dev: String,
    pub packets: u64,
    pub bytes: u64,
}

pub fn parse_iptables_counters(text: &str) -> Vec<RuleCounter> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // pkts bytes target prot opt in out source destination ...
            (f.len() >= 6 && f[2] == "NFQUEUE").then(|| RuleCounter {
                in_dev: f[5].to_string(),
                packets: f[0].parse().unwrap_or(0),
                bytes: f[1].parse().unwrap_or(0),
            })
        })
        .collect()
}

/// What `sbm-testbed status` prints and the matrix keeps in meta.json before and after each
/// cell (read back through this type).
#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    pub prefix: String,
    pub up: bool,
    pub healthy: bool,
    pub owner_pid: u32,
    pub owner_alive: bool,
    pub namespaces: NamespaceNames,
    pub addresses: Addresses,
    pub rtt_ms: f64,
    pub one_way_delay_ms: f64,
    /// null = no bottleneck.
    pub rate_bps: Option<u64>,
    /// The queue asked for, in time at the rate.
    pub queue_ms: f64,
    /// The queue installed (the bottleneck FIFO's limit).
    pub queue_bytes: Option<u64>,
    /// How long the installed queue takes to drain at the rate.
    pub queue_drain_ms: Option<f64>,
    /// Whether the queue asked for was under the four-packet floor and was raised to it.
    pub queue_raised_to_floor: Option<bool>,
    /// shaper (HTB and the queue above) or policer (nothing queued: excess dropped);
    /// records from before policers existed have no field and were shapers.
    #[serde(default)]
    pub bottleneck: BottleneckKind,
    /// A policer's bucket in bytes (the queue's time at the rate) and how it is made:
    /// `police` (act_police) or `tbf` (a token bucket with a one-packet queue).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policer_bucket_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policer_impl: Option<PolicerImpl>,
    pub shape_at: ShapeAt,
    pub shape_dev: String,
    pub delay_impl: DelayImpl,
    pub delay_pid: Option<u32>,
    /// `tc -s -j qdisc show` of the bottleneck device, kept as tc wrote it (its JSON is
    /// tc's, not sbm's: nothing reads it, a reader sees what tc said); None when tc gave none.
    pub qdisc: Option<Box<RawValue>>,
    /// sbm-delay's statistics file (None: not readable, or no delay line).
    pub delay_line: Option<DelayStats>,
    pub nfnetlink_queue: Vec<KernelQueue>,
    pub nfqueue_rules: Vec<RuleCounter>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct NamespaceNames {
    pub snd: String,
    pub wan: String,
    pub rcv: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Addresses {
    pub snd: Cow<'static, str>,
    pub rcv: Cow<'static, str>,
    pub wan_snd_side: Cow<'static, str>,
    pub wan_rcv_side: Cow<'static, str>,
}

pub fn collect(state: &State) -> Status {
    let n = Names::new(&state.prefix);
    let policing = state.bottleneck == BottleneckKind::Policer && state.rate_bps.is_some();
    let (ns, dev) = match (policing, state.policer_impl) {
        (true, Some(PolicerImpl::Tbf)) => (n.wan.clone(), super::plan::POLICER_IFB),
        (true, _) => (n.wan.clone(), wan::WAN_SND_IF),
        (false, _) => wan::shape_device(&state.prefix, state.shape_at),
    };
    let qdisc = Cmd::new("tc", &["-s", "-j", "qdisc", "show", "dev", dev])
        .in_ns(&ns)
        .run()
        .ok()
        .and_then(|s| RawValue::from_string(s.trim().to_string()).ok());
    let delay_line = std::fs::read_to_string(wan::delay_stats_path(&state.prefix))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    let (kernel, rules) = if state.delay_impl == DelayImpl::Nfqueue {
        (
            Cmd::new("cat", &["/proc/net/netfilter/nfnetlink_queue"])
                .in_ns(&n.wan)
                .run()
                .map(|t| parse_nfnetlink_queue(&t))
                .unwrap_or_default(),
            Cmd::new("iptables", &["-L", "FORWARD", "-v", "-x", "-n"])
                .in_ns(&n.wan)
                .run()
                .map(|t| parse_iptables_counters(&t))
                .unwrap_or_default(),
        )
    } else {
        (vec![], vec![])
    };
    let queue = std::time::Duration::from_micros(state.queue_us);
    let limit = state
        .rate_bps
        .map(|rate_bps| super::plan::Bottleneck { rate_bps, queue });
    let (bottleneck, bucket) = if policing {
        (None, limit)
    } else {
        (limit, None)
    };
    Status {
        prefix: state.prefix.clone(),
        up: n.all().iter().all(|x| wan::netns_exists(x)),
        healthy: wan::healthy(state),
        owner_pid: state.owner_pid,
        owner_alive: wan::process_comm(state.owner_pid).is_some(),
        namespaces: NamespaceNames {
            snd: n.snd.clone(),
            wan: n.wan.clone(),
            rcv: n.rcv.clone(),
        },
        addresses: Addresses {
            snd: wan::SND_ADDR.into(),
            rcv: wan::RCV_ADDR.into(),
            wan_snd_side: wan::WAN_SND_ADDR.into(),
            wan_rcv_side: wan::WAN_RCV_ADDR.into(),
        },
        rtt_ms: state.rtt_us as f64 / 1e3,
        one_way_delay_ms: state.rtt_us as f64 / 2e3,
        rate_bps: state.rate_bps,
        queue_ms: state.queue_us as f64 / 1e3,
        queue_bytes: bottleneck.map(|b| b.limit_bytes()),
        queue_drain_ms: bottleneck.map(|b| b.drain_time().as_secs_f64() * 1e3),
        queue_raised_to_floor: bottleneck.map(|b| b.raised_to_floor()),
        bottleneck: state.bottleneck,
        policer_bucket_bytes: bucket.map(|b| b.bucket_bytes()),
        policer_impl: state.policer_impl.filter(|_| policing),
        shape_at: state.shape_at,
        shape_dev: format!("{ns}:{dev}"),
        delay_impl: state.delay_impl,
        delay_pid: state.delay_pid,
        qdisc,
        delay_line,
        nfnetlink_queue: kernel,
        nfqueue_rules: rules,
    }
}

/// `50000 B queue (200 ms)`, or with the floor: `6056 B queue (484 ms at the rate; 200 ms
/// asked, raised to four full packets)`.
fn queue_text(s: &Status) -> String {
    if let Some(bucket) = s.policer_bucket_bytes {
        return format!(
            "a policer ({}), bucket {bucket} B ({:.0} ms at the rate), nothing queued",
            match s.policer_impl {
                Some(PolicerImpl::Police) => "tc police",
                _ => "token bucket with a one-packet queue: no act_police here",
            },
            s.queue_ms
        );
    }
    match (s.queue_bytes, s.queue_drain_ms) {
        (Some(bytes), Some(ms)) if s.queue_raised_to_floor == Some(true) => format!(
            "{bytes} B queue ({ms:.0} ms at the rate; {:.0} ms asked, raised to four full packets)",
            s.queue_ms
        ),
        (Some(bytes), Some(ms)) => format!("{bytes} B queue ({ms:.0} ms)"),
        _ => format!("{:.0} ms queue", s.queue_ms),
    }
}

/// A few human lines.
pub fn human(s: &Status) -> String {
    let rate = s.rate_bps.map_or("off".into(), |r| {
        crate::units::BitRate(r as f64).to_string()
    });
    let mut out = format!(
        "test bed '{}': {} — owner {} ({})\n  {} ({}) — {} — {} ({})\n  rtt {:.1} ms ({} delay, {:.1} ms each way), bottleneck {} with {} at {}",
        s.prefix,
        if s.healthy { "healthy" } else if s.up { "BROKEN" } else { "down" },
        s.owner_pid,
        if s.owner_alive { "alive" } else { "gone" },
        s.namespaces.snd,
        s.addresses.snd,
        s.namespaces.wan,
        s.namespaces.rcv,
        s.addresses.rcv,
        s.rtt_ms,
        match s.delay_impl {
            DelayImpl::Netem => "netem",
            _ => "sbm-delay",
        },
        s.one_way_delay_ms,
        rate,
        queue_text(s),
        s.shape_dev
    );
    for q in &s.nfnetlink_queue {
        out.push_str(&format!(
            "\n  nfqueue {}: waiting {}, dropped {} (full) + {} (netlink)",
            q.queue, q.queue_total, q.queue_dropped, q.user_dropped
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_queue_counters() {
        let text = "    0  10166     1 1     0     0     0     1390  1\n    1  10166     0 1     0     3     5      612  1\n";
        let q = parse_nfnetlink_queue(text);
        assert_eq!(q.len(), 2);
        assert_eq!(
            (q[0].queue, q[0].portid, q[0].queue_total, q[0].id_sequence),
            (0, 10166, 1, 1390)
        );
        assert_eq!((q[1].queue_dropped, q[1].user_dropped), (3, 5));
    }

    #[test]
    fn iptables_counters() {
        let text = "Chain FORWARD (policy ACCEPT 0 packets, 0 bytes)\n    pkts      bytes target     prot opt in     out     source               destination\n    1391  1520944 NFQUEUE    0    --  ws     *       0.0.0.0/0            0.0.0.0/0            NFQUEUE num 0\n     612    40000 NFQUEUE    0    --  wr     *       0.0.0.0/0            0.0.0.0/0            NFQUEUE num 1\n";
        let r = parse_iptables_counters(text);
        assert_eq!(
            r,
            [
                RuleCounter {
                    in_dev: "ws".into(),
                    packets: 1391,
                    bytes: 1_520_944
                },
                RuleCounter {
                    in_dev: "wr".into(),
                    packets: 612,
                    bytes: 40_000
                },
            ]
        );
    }
}
