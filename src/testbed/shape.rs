//! Shaping one interface of a real host: egress HTB, or ingress HTB through an IFB device
//! (the report's receiver-side set-up), with an optional netem delay as the HTB leaf.

use std::time::Duration;

use super::cmd::Cmd;
use super::plan::{self, Bottleneck};

/// The commands that shape `dev`.
pub fn apply_commands(
    dev: &str,
    b: &Bottleneck,
    ingress: bool,
    delay: Option<Duration>,
) -> Vec<Cmd> {
    let mut cmds = vec![];
    let target = if ingress {
        let ifb = plan::ifb_name(dev);
        cmds.extend(plan::ingress_redirect(dev, &ifb));
        ifb
    } else {
        dev.to_string()
    };
    let mut htb = plan::htb(&target, b);
    if let Some(d) = delay {
        let pkts = (b.limit_bytes() / plan::FULL_PACKET).max(4).to_string();
        let d = format!("{}us", d.as_micros());
        htb[2] = Cmd::new(
            "tc",
            &[
                "qdisc", "replace", "dev", &target, "parent", "1:1", "handle", "10:", "netem",
                "delay", &d, "limit", &pkts,
            ],
        );
    }
    cmds.extend(htb);
    cmds
}

/// The commands that remove what `apply_commands` installed.
pub fn clear_commands(dev: &str, ingress: bool) -> Vec<Cmd> {
    if ingress {
        vec![
            Cmd::new("tc", &["qdisc", "del", "dev", dev, "ingress"]),
            Cmd::new("ip", &["link", "del", &plan::ifb_name(dev)]),
        ]
    } else {
        vec![Cmd::new("tc", &["qdisc", "del", "dev", dev, "root"])]
    }
}

pub fn show_commands(dev: &str) -> Vec<Cmd> {
    vec![
        Cmd::new("tc", &["-s", "qdisc", "show", "dev", dev]),
        Cmd::new("tc", &["-s", "class", "show", "dev", dev]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingress_shaping_goes_through_an_ifb() {
        let b = Bottleneck {
            rate_bps: 2_000_000,
            queue: Duration::from_millis(200),
        };
        let lines: Vec<String> = apply_commands("eth1", &b, true, None)
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(lines[0], "ip link add ifb-eth1 type ifb");
        assert!(
            lines[3].ends_with("action mirred egress redirect dev ifb-eth1"),
            "{}",
            lines[3]
        );
        assert!(lines[4].starts_with("tc qdisc replace dev ifb-eth1 root handle 1: htb"));
        assert_eq!(lines.len(), 7);
    }

    #[test]
    fn delay_replaces_the_fifo_leaf() {
        let b = Bottleneck {
            rate_bps: 2_000_000,
            queue: Duration::from_millis(200),
        };
        let lines: Vec<String> = apply_commands("eth1", &b, false, Some(Duration::from_millis(86)))
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(
            lines[2],
            "tc qdisc replace dev eth1 parent 1:1 handle 10: netem delay 86000us limit 33"
        );
    }

    #[test]
    fn clear_undoes_apply() {
        let c: Vec<String> = clear_commands("eth1", true)
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(c, ["tc qdisc del dev eth1 ingress", "ip link del ifb-eth1"]);
    }
}
