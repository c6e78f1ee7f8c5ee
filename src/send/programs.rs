//! The BPF programs sbm-send starts beside its loop, before any socket exists (they act on
//! the sockets created in their cgroup after them): `--replenish-impl bpf`'s sock_ops
//! program, which the readiness gate reads, and the tracer's program on the connection
//! (`--exact-departures`, `--timestamps bpf`).
//!
//! This is the one place sbm-send's code meets `crate::bpf`: the loop sees only the
//! interfaces in [`super::run::Attached`]. A build without the `bpf` feature (no clang,
//! no libbpf) has neither, and asking for them says in one line how to get them.

use super::run::Attached;
use super::SendConfig;

/// What was started; dropping it detaches the programs and removes their cgroup.
pub struct Programs {
    #[cfg(feature = "bpf")]
    _replenish: Option<crate::bpf::replenish::BpfReplenish>,
}

/// Starts what `cfg` asks for (the tap times one connection: the command line refuses it
/// with `-P`).
#[cfg(feature = "bpf")]
pub fn start(cfg: &SendConfig) -> Result<(Programs, Attached), String> {
    use crate::bpf::replenish::{BpfReplenish, Settings, SubMss, Wake};
    use crate::bpf::send_tap::{SendTap, TapSettings};
    use crate::replenish::{ReplenishImpl, ThresholdTest};
    use crate::send::config::TimestampSource;
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
    let bpf_timestamps = cfg.timestamps == Some(TimestampSource::Bpf);
    let program_tap: Option<Box<dyn crate::tstamp::tap::ProgramTap>> =
        if cfg.exact_departures || bpf_timestamps {
            let settings = TapSettings {
                port: cfg.peer.port(),
                departures: cfg.exact_departures,
                timestamps: bpf_timestamps,
            };
            // On the replenish program's cgroup when there is one: this process has
            // joined it, and a process is in one cgroup.
            let tap = SendTap::start(settings, replenish.as_ref().map(|b| b.cgroup_fd()))
                .map_err(|e| e.to_string())?;
            Some(Box::new(tap))
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

/// Starts what `cfg` asks for: in a build without BPF, nothing, and a configuration that
/// needs it is refused.
#[cfg(not(feature = "bpf"))]
pub fn start(cfg: &SendConfig) -> Result<(Programs, Attached), String> {
    match cfg.needs_bpf() {
        Some(flag) => Err(crate::cli::built_without_bpf(flag)),
        None => Ok((Programs {}, Attached::default())),
    }
}
