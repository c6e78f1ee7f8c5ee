//! External commands (ip, tc, iptables, ethtool), optionally inside a network namespace,
//! printable exactly as they run (for `--dry-run`) and failing with the command named.

use std::fmt;
use std::process::{Command, Stdio};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    pub netns: Option<String>,
    pub program: &'static str,
    pub args: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    #[error("'{program}' not found: install the Debian package {package}")]
    Missing {
        program: &'static str,
        package: &'static str,
    },
    #[error("`{cmd}` failed: {stderr}")]
    Failed { cmd: String, stderr: String },
    #[error("`{cmd}` could not start: {source}")]
    Spawn {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
}

/// The Debian package that provides a program the test bed runs.
pub fn package_of(program: &str) -> &'static str {
    match program {
        "ip" | "tc" => "iproute2",
        "iptables" => "iptables",
        "ethtool" => "ethtool",
        "modprobe" => "kmod",
        "sysctl" => "procps",
        _ => "coreutils",
    }
}

impl Cmd {
    pub fn new(program: &'static str, args: &[&str]) -> Cmd {
        Cmd {
            netns: None,
            program,
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    pub fn in_ns(mut self, ns: &str) -> Cmd {
        self.netns = Some(ns.to_string());
        self
    }

    fn command(&self) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, self.program]).args(&self.args);
                c
            }
            None => {
                let mut c = Command::new(self.program);
                c.args(&self.args);
                c
            }
        }
    }

    /// Runs the command; its stdout on success.
    pub fn run(&self) -> Result<String, CmdError> {
        let out = self
            .command()
            .stdin(Stdio::null())
            .output()
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::NotFound => {
                    let program = if self.netns.is_some() {
                        "ip"
                    } else {
                        self.program
                    };
                    CmdError::Missing {
                        program,
                        package: package_of(program),
                    }
                }
                _ => CmdError::Spawn {
                    cmd: self.to_string(),
                    source,
                },
            })?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        // `ip netns exec` reports a missing program as exec failure.
        if stderr.contains("exec of") && stderr.contains("No such file") {
            return Err(CmdError::Missing {
                program: self.program,
                package: package_of(self.program),
            });
        }
        Err(CmdError::Failed {
            cmd: self.to_string(),
            stderr: stderr
                .trim()
                .lines()
                .last()
                .unwrap_or("no message")
                .to_string(),
        })
    }
}

fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(ns) = &self.netns {
            write!(f, "ip netns exec {} ", quote(ns))?;
        }
        write!(f, "{}", self.program)?;
        for a in &self.args {
            write!(f, " {}", quote(a))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_a_runnable_shell_line() {
        let c = Cmd::new("sh", &["-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]).in_ns("sbm-wan");
        assert_eq!(
            c.to_string(),
            "ip netns exec sbm-wan sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'"
        );
        let c = Cmd::new("tc", &["qdisc", "del", "dev", "eth0", "root"]);
        assert_eq!(c.to_string(), "tc qdisc del dev eth0 root");
    }

    #[test]
    fn failures_name_the_command() {
        let e = Cmd::new("sh", &["-c", "echo nope >&2; exit 3"])
            .run()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "`sh -c 'echo nope >&2; exit 3'` failed: nope"
        );
        let e = Cmd::new("tc", &[]).run();
        if let Err(CmdError::Missing { package, .. }) = e {
            assert_eq!(package, "iproute2");
        }
    }
}
