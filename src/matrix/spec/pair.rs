//! `[[path.hosts]]`: the sender/receiver pairs of a matrix on real hosts, as written in the
//! matrix file, and checked into [`Pair`]s before anything runs.

use std::net::IpAddr;

use serde::Deserialize;

use super::SpecError;
use crate::remote::Endpoint;

/// One sender/receiver pair as the matrix file gives it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HostPairSpec {
    /// Names the pair in the run's output (default `pair-K`, counted from 1).
    pub name: Option<String>,
    /// `local` or `ssh://[user@]host[:port]`: where sbm-send runs.
    pub sender: String,
    /// `local` or `ssh://[user@]host[:port]`: where sbm-sink runs (and, by default, the
    /// shaping).
    pub receiver: String,
    /// The receiver's measurement address: what the sender connects to and the only
    /// address the sink binds (default: the receiver's ssh host, when that is an address).
    pub address: Option<String>,
    /// The sink's port (default 5301).
    pub port: Option<u16>,
    /// The receiver's interface toward the sender (shape_at = "receiver-ingress").
    pub receiver_dev: Option<String>,
    /// The sender's interface toward the receiver (shape_at = "sender-egress").
    pub sender_dev: Option<String>,
    /// Extra ssh arguments for both hosts, e.g. `["-i", "/root/.ssh/lab", "-o",
    /// "UserKnownHostsFile=/root/.ssh/lab_known_hosts"]`.
    pub ssh_options: Vec<String>,
    /// On a remote host: where sbm's binaries are cached (by build) and cells write their
    /// outputs before they are brought back; relative to the login's home.
    pub remote_dir: String,
}

impl Default for HostPairSpec {
    fn default() -> Self {
        HostPairSpec {
            name: None,
            sender: "local".into(),
            receiver: String::new(),
            address: None,
            port: None,
            receiver_dev: None,
            sender_dev: None,
            ssh_options: vec![],
            remote_dir: ".cache/sbm".into(),
        }
    }
}

/// Where a real path's bottleneck goes (as meta.json's `hosts.shaping.at` writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostShaping {
    /// An IFB on the receiver's interface, as the report did.
    ReceiverIngress,
    /// HTB on the sender's own interface.
    SenderEgress,
}

/// A checked pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub name: String,
    pub sender: Endpoint,
    pub receiver: Endpoint,
    pub address: IpAddr,
    pub port: u16,
    /// The interface shaped and where it is (`None`: this pair's cells run unshaped only).
    pub shaped_dev: Option<String>,
    pub receiver_dev: Option<String>,
    pub sender_dev: Option<String>,
    pub ssh_options: Vec<String>,
    pub remote_dir: String,
}

impl Pair {
    /// `host:port` of the sink, as sbm-send's --connect and sbm-sink's --listen take it.
    pub fn sink_addr(&self) -> String {
        std::net::SocketAddr::new(self.address, self.port).to_string()
    }
}

impl HostPairSpec {
    /// Checks the pair (`k` counts from 0) for a path shaped at `shaping`; `shaped` says
    /// whether any cell has a bottleneck rate.
    pub fn check(&self, k: usize, shaping: HostShaping, shaped: bool) -> Result<Pair, SpecError> {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| format!("pair-{}", k + 1));
        let bad = |what: String| SpecError::Invalid(format!("path.hosts '{name}': {what}"));
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad("a name is letters, digits, '-', '_' and '.'".into()));
        }
        let sender = Endpoint::parse(&self.sender).map_err(|e| bad(format!("sender {e}")))?;
        if self.receiver.is_empty() {
            return Err(bad(
                "receiver missing (local or ssh://[user@]host[:port])".into()
            ));
        }
        let receiver = Endpoint::parse(&self.receiver).map_err(|e| bad(format!("receiver {e}")))?;
        let address = match (&self.address, receiver.host()) {
            (Some(a), _) => a
                .parse::<IpAddr>()
                .map_err(|_| bad(format!("address '{a}' is not an IP address")))?,
            (None, Some(h)) => h.parse::<IpAddr>().map_err(|_| {
                bad(format!(
                    "the receiver '{h}' is a name: give its measurement address as address = \"…\""
                ))
            })?,
            (None, None) => {
                return Err(bad(
                    "a local receiver needs its measurement address (address = \"…\")".into(),
                ))
            }
        };
        let shaped_dev = match shaping {
            HostShaping::ReceiverIngress => self.receiver_dev.clone(),
            HostShaping::SenderEgress => self.sender_dev.clone(),
        };
        if shaped && shaped_dev.is_none() {
            return Err(bad(match shaping {
                HostShaping::ReceiverIngress => {
                    "shaping at the receiver's ingress needs receiver_dev (its interface toward the sender)".into()
                }
                HostShaping::SenderEgress => {
                    "shaping at the sender's egress needs sender_dev (its interface toward the receiver)".into()
                }
            }));
        }
        for d in [&self.receiver_dev, &self.sender_dev].into_iter().flatten() {
            if d.is_empty() || d.len() > 15 || d.contains(['/', ' ']) {
                return Err(bad(format!("'{d}' is not an interface name")));
            }
        }
        if self.remote_dir.is_empty() || self.remote_dir.contains('\n') {
            return Err(bad("remote_dir is empty".into()));
        }
        Ok(Pair {
            name,
            sender,
            receiver,
            address,
            port: self.port.unwrap_or(super::SINK_PORT),
            shaped_dev,
            receiver_dev: self.receiver_dev.clone(),
            sender_dev: self.sender_dev.clone(),
            ssh_options: self.ssh_options.clone(),
            remote_dir: self.remote_dir.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(receiver: &str) -> HostPairSpec {
        HostPairSpec {
            receiver: receiver.into(),
            receiver_dev: Some("eth0".into()),
            ..HostPairSpec::default()
        }
    }

    #[test]
    fn the_receivers_address_defaults_to_its_ssh_host() {
        let p = pair("ssh://root@198.18.2.1")
            .check(0, HostShaping::ReceiverIngress, true)
            .unwrap();
        assert_eq!(p.name, "pair-1");
        assert_eq!(p.sink_addr(), "198.18.2.1:5301");
        assert_eq!(p.shaped_dev.as_deref(), Some("eth0"));
        assert_eq!(p.sender, Endpoint::Local);
    }

    #[test]
    fn what_a_pair_cannot_do_is_said() {
        let cases = [
            (pair("ssh://rcv.example"), "is a name"),
            (pair(""), "receiver missing"),
            (pair("local"), "needs its measurement address"),
            (
                HostPairSpec {
                    receiver_dev: None,
                    ..pair("ssh://198.18.2.1")
                },
                "needs receiver_dev",
            ),
            (
                HostPairSpec {
                    sender: "scp://x".into(),
                    ..pair("ssh://198.18.2.1")
                },
                "sender 'scp://x'",
            ),
        ];
        for (p, want) in cases {
            let e = p
                .check(0, HostShaping::ReceiverIngress, true)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        }
        // Unshaped cells need no interface.
        let p = HostPairSpec {
            receiver_dev: None,
            ..pair("ssh://198.18.2.1")
        };
        assert!(p.check(0, HostShaping::ReceiverIngress, false).is_ok());
        assert!(p.check(0, HostShaping::SenderEgress, true).is_err());
    }
}
