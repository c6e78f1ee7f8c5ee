//! The BPF programs sbm-send starts beside its loop, before any socket exists (they act on
//! the sockets created in their cgroup after them): `--replenish-impl bpf`'s sock_ops
//! program, which the readiness gate reads, and the tracer's program on the connection
//! (`--exact-departures`, `--timestamps bpf`).
//!
//! This is the one place sbm-send's code meets `crate::bpf`: the loop sees only the
//! interfaces in [`super::run::Attached`]. A build without the `bpf` feature (no clang,
//! no libbpf) has neither, and asking for them says in one line how to get them.
//!
//! It is also where `--timestamps auto` settles: bpf when the kernel offers BPF TX
//! timestamping and the program starts, socket otherwise, with the reason kept.

use super::config::{TimestampChoice, TimestampSource};
use super::run::Attached;
use super::SendConfig;

/// What was started; dropping it detaches the programs and removes their cgroup.
pub struct Programs {
    #[cfg(feature = "bpf")]
    _replenish: Option<crate::bpf::replenish::BpfReplenish>,
}

/// Starts what `cfg` asks for (the tap times one connection: the command line refuses it
/// with `-P`), settling `--timestamps auto` on the way.
#[cfg(feature = "bpf")]
pub fn start(cfg: &mut SendConfig) -> Result<(Programs, Attached), String> {
    use crate::bpf::replenish::{BpfReplenish, Settings, SubMss, Wake};
    use crate::bpf::send_tap::{SendTap, TapSettings};
    use crate::replenish::{ReplenishImpl, ThresholdTest};
    if cfg.timestamp_choice == TimestampChoice::AutoOpen {
        let traced = std::env::var_os(crate::trace::TRACED_ENV);
        match crate::bpf::probe::tx_timestamping() {
            // The program's cgroup would take sbm-send out of the one sbm-trace watches.
            _ if traced.is_some() => cfg.settle_timestamps(
                TimestampSource::Socket,
                "run under sbm-trace: BPF timestamps would move sbm-send out of the traced cgroup",
            ),
            Ok(()) => cfg.settle_timestamps(
                TimestampSource::Bpf,
                "root, and the kernel has BPF TX timestamping",
            ),
            Err(why) => cfg.settle_timestamps(TimestampSource::Socket, why),
        }
    }
    if cfg.needs_bpf().is_none() {
        return Ok((Programs { _replenish: None }, Attached::default()));
    }
    let replenish = match cfg
        .replenish
        .as_ref()
        .filter(|r| r.implementation == ReplenishImpl::Bpf)
    {
        Some(r) => Some(
            BpfReplenish::start(&Settings {
                time: r.time,
                wake: match r.test {
                    ThresholdTest::Hysteresis => Wake::AtThreshold,
                    ThresholdTest::Half => Wake::AtHalf,
                },
                sub_mss: match (r.sub_mss_clause, r.clause_under_nodelay) {
                    (false, _) => SubMss::Off,
                    (true, false) => SubMss::WithNagle,
                    (true, true) => SubMss::Always,
                },
                port: Some(cfg.peer.port()),
            })
            .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let rule = match &replenish {
        Some(r) => Some(r.rule().map_err(|e| e.to_string())?),
        None => None,
    };
    let program_tap: Option<Box<dyn crate::tstamp::tap::ProgramTap>> =
        if cfg.exact_departures || cfg.timestamps == Some(TimestampSource::Bpf) {
            let mut settings = TapSettings {
                port: cfg.peer.port(),
                departures: cfg.exact_departures,
                timestamps: cfg.timestamps == Some(TimestampSource::Bpf),
            };
            // On the replenish program's cgroup when there is one: this process has
            // joined it, and a process is in one cgroup.
            let cgroup = replenish.as_ref().map(|b| b.cgroup_fd());
            let tap = match SendTap::start(settings, cgroup) {
                Ok(tap) => Some(tap),
                // `auto` falls back to the error queue; a source named is not second-guessed.
                Err(e) if matches!(cfg.timestamp_choice, TimestampChoice::Auto(_)) => {
                    cfg.settle_timestamps(
                        TimestampSource::Socket,
                        format!("the BPF program did not start: {e}"),
                    );
                    settings.timestamps = false;
                    if cfg.exact_departures {
                        Some(SendTap::start(settings, cgroup).map_err(|e| e.to_string())?)
                    } else {
                        None
                    }
                }
                Err(e) => return Err(e.to_string()),
            };
            tap.map(|t| Box::new(t) as Box<dyn crate::tstamp::tap::ProgramTap>)
        } else {
            None
        };
    Ok((
        Programs {
            _replenish: replenish,
        },
        Attached {
            rule,
            program_tap,
            connected: None,
        },
    ))
}

/// Starts what `cfg` asks for: in a build without BPF, nothing (`auto` settles on socket),
/// and a configuration that needs it is refused.
#[cfg(not(feature = "bpf"))]
pub fn start(cfg: &mut SendConfig) -> Result<(Programs, Attached), String> {
    if cfg.timestamp_choice == TimestampChoice::AutoOpen {
        cfg.settle_timestamps(TimestampSource::Socket, "this build has no BPF");
    }
    match cfg.needs_bpf() {
        Some(flag) => Err(crate::cli::built_without_bpf(flag)),
        None => Ok((Programs {}, Attached::default())),
    }
}
