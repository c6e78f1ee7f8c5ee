//! sbm-testbed: the emulated WAN path (`wan`) and shaping for real hosts (`shape`).
//! `testbed/wan` and `testbed/shape` are thin wrappers around it.

pub mod cmd;
pub mod plan;
pub mod shape;
pub mod status;
pub mod wan;

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::units;
use wan::{DelayImpl, ShapeAt, WanSpec};

#[derive(Debug, Parser)]
#[command(
    name = "sbm-testbed",
    version,
    about = "The report's WAN path on one machine, and shaping for real hosts"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Top,
}

#[derive(Debug, Subcommand)]
pub enum Top {
    /// The emulated path: namespaces snd — wan — rcv with delay and bottleneck.
    #[command(subcommand)]
    Wan(WanCmd),
    /// Shape one interface of a real host.
    #[command(subcommand)]
    Shape(ShapeCmd),
}

/// A bottleneck rate in bit/s; None = no bottleneck (`off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateArg(pub Option<u64>);

/// A bottleneck rate: `2mbit`, `100kbit`, `86mbit` or `off`.
fn parse_rate(s: &str) -> Result<RateArg, String> {
    if s == "off" {
        Ok(RateArg(None))
    } else {
        units::parse_rate_bps(s)
            .map(|r| RateArg(Some(r)))
            .map_err(|e| e.to_string())
    }
}

#[derive(Debug, Args)]
pub struct PrefixArg {
    /// Names the bed: namespaces PREFIX-snd, PREFIX-wan, PREFIX-rcv.
    #[arg(long, default_value = "sbm")]
    pub prefix: String,
}

#[derive(Debug, Subcommand)]
pub enum WanCmd {
    /// Build the path (reclaims a bed whose owner is gone).
    #[command(
        after_help = "Examples:\n  testbed/wan up --rtt 172ms --rate 2mbit --queue 200ms\n  testbed/wan up --rate 100kbit --shape-at ingress --prefix slow\n  ip netns exec sbm-rcv target/release/sbm-sink --listen 198.18.2.1:5301 &\n  ip netns exec sbm-snd target/release/sbm-send --connect 198.18.2.1 -t 40s"
    )]
    Up {
        /// Round-trip time, split evenly between the directions.
        #[arg(long, default_value = "172ms", value_parser = units::parse_duration_or_zero)]
        rtt: Duration,
        /// Bottleneck rate toward rcv, or off.
        #[arg(long, default_value = "2mbit", value_parser = parse_rate)]
        rate: RateArg,
        /// Bottleneck queue in time (bfifo of rate × queue bytes, at least 4 packets).
        #[arg(long, default_value = "200ms", value_parser = units::parse_duration)]
        queue: Duration,
        #[arg(long, value_enum, default_value_t = ShapeAt::Wan)]
        shape_at: ShapeAt,
        #[arg(long, value_enum, default_value_t = DelayImpl::Auto)]
        delay_impl: DelayImpl,
        #[command(flatten)]
        prefix: PrefixArg,
        /// The process that owns the bed (default: the caller); a bed whose owner is gone
        /// is reclaimed by the next `up`.
        #[arg(long)]
        owner: Option<u32>,
    },
    /// Change the bottleneck in place.
    Set {
        /// New rate, or off.
        #[arg(long, value_parser = parse_rate)]
        rate: RateArg,
        #[arg(long, value_parser = units::parse_duration)]
        queue: Option<Duration>,
        #[command(flatten)]
        prefix: PrefixArg,
    },
    /// Remove everything under the prefix (always succeeds).
    Down {
        #[command(flatten)]
        prefix: PrefixArg,
    },
    /// Topology, addresses, qdisc counters, delay-line statistics.
    Status {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        prefix: PrefixArg,
    },
}

#[derive(Debug, Subcommand)]
pub enum ShapeCmd {
    /// Install HTB (egress, or ingress through an IFB) on DEV.
    #[command(
        after_help = "Example (receiver of the report's experiment):\n  testbed/shape apply eth0 --rate 2mbit --queue 200ms --ingress --dry-run"
    )]
    Apply {
        dev: String,
        #[arg(long, value_parser = units::parse_rate_bps)]
        rate: u64,
        #[arg(long, default_value = "200ms", value_parser = units::parse_duration)]
        queue: Duration,
        #[arg(long)]
        ingress: bool,
        /// Add a netem delay as the HTB leaf (kernels with sch_netem).
        #[arg(long, value_parser = units::parse_duration)]
        delay: Option<Duration>,
        /// Print the commands instead of running them.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove what apply installed.
    Clear {
        dev: String,
        #[arg(long)]
        ingress: bool,
        #[arg(long)]
        dry_run: bool,
    },
    /// Show qdiscs and classes with counters.
    Show { dev: String },
}

fn run_or_print(cmds: &[cmd::Cmd], dry_run: bool, keep_going: bool) -> Result<(), String> {
    for c in cmds {
        if dry_run {
            crate::say!("{c}");
            continue;
        }
        match c.run() {
            Ok(out) => crate::say_partial!("{out}"),
            Err(e) if keep_going => eprintln!("sbm-testbed: {e}"),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Top::Wan(WanCmd::Up {
            rtt,
            rate,
            queue,
            shape_at,
            delay_impl,
            prefix,
            owner,
        }) => {
            let spec = WanSpec {
                prefix: prefix.prefix,
                rtt,
                rate_bps: rate.0,
                queue,
                shape_at,
                delay_impl,
                owner: owner.unwrap_or_else(|| nix::unistd::getppid().as_raw() as u32),
            };
            let state = wan::up(&spec).map_err(|e| e.to_string())?;
            crate::say!("{}", status::human(&status::collect(&state)));
            Ok(())
        }
        Top::Wan(WanCmd::Set {
            rate,
            queue,
            prefix,
        }) => {
            let state = wan::set(&prefix.prefix, rate.0, queue).map_err(|e| e.to_string())?;
            crate::say!("{}", status::human(&status::collect(&state)));
            Ok(())
        }
        Top::Wan(WanCmd::Down { prefix }) => {
            wan::validate_prefix(&prefix.prefix).map_err(|e| e.to_string())?;
            for p in wan::down(&prefix.prefix) {
                eprintln!("sbm-testbed: {p}");
            }
            Ok(())
        }
        Top::Wan(WanCmd::Status { json, prefix }) => {
            wan::validate_prefix(&prefix.prefix).map_err(|e| e.to_string())?;
            let state = wan::load_state(&prefix.prefix)
                .ok_or_else(|| wan::TestbedError::NotUp(prefix.prefix.clone()).to_string())?;
            let s = status::collect(&state);
            if json {
                crate::say!(
                    "{}",
                    serde_json::to_string_pretty(&s).expect("status serializes")
                );
            } else {
                crate::say!("{}", status::human(&s));
            }
            Ok(())
        }
        Top::Shape(ShapeCmd::Apply {
            dev,
            rate,
            queue,
            ingress,
            delay,
            dry_run,
        }) => {
            let b = plan::Bottleneck {
                rate_bps: rate,
                queue,
            };
            run_or_print(
                &shape::apply_commands(&dev, &b, ingress, delay),
                dry_run,
                false,
            )
        }
        Top::Shape(ShapeCmd::Clear {
            dev,
            ingress,
            dry_run,
        }) => run_or_print(&shape::clear_commands(&dev, ingress), dry_run, true),
        Top::Shape(ShapeCmd::Show { dev }) => {
            run_or_print(&shape::show_commands(&dev), false, false)
        }
    }
}

/// The whole of `main` for bin/sbm-testbed.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli: Cli = match crate::cli::parse(args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sbm-testbed: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_lines_are_consistent() {
        Cli::command().debug_assert();
        crate::send::cli::SendArgs::command().debug_assert();
        crate::sink::cli::SinkArgs::command().debug_assert();
        crate::delay::DelayArgs::command().debug_assert();
    }

    #[test]
    fn rates_and_off() {
        let c = Cli::try_parse_from(["t", "wan", "set", "--rate", "off"]).unwrap();
        assert!(matches!(
            c.cmd,
            Top::Wan(WanCmd::Set {
                rate: RateArg(None),
                ..
            })
        ));
        let c = Cli::try_parse_from(["t", "wan", "up", "--rate", "100kbit"]).unwrap();
        assert!(matches!(
            c.cmd,
            Top::Wan(WanCmd::Up {
                rate: RateArg(Some(100_000)),
                ..
            })
        ));
        assert!(Cli::try_parse_from(["t", "wan", "up", "--rate", "fast"]).is_err());
        assert!(Cli::try_parse_from(["t", "wan", "set"]).is_err());
    }
}
