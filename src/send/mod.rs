//! sbm-send: the instrument.

pub mod cli;
pub mod config;
mod content_age;
pub mod flows;
mod output;
mod run;
pub mod source;
pub mod source_cli;
pub mod trip;

pub use config::{EpollMode, Limits, SendConfig};
pub use run::{run, SendOutcome, SetupError};

/// The whole of `main` for bin/sbm-send: parse, run, print, exit status.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    crate::cli::main_with(args, |args: cli::SendArgs| {
        let json = args.json;
        let parallel = usize::from(args.parallel);
        if json {
            crate::cli::move_human_text_to_stderr();
        }
        let cfg = args.into_config().map_err(|e| crate::cli::Failure {
            status: e.exit_status(),
            message: e.to_string(),
        })?;
        // Before any socket exists: the program acts on sockets created in its cgroup.
        let bpf = start_bpf_replenish(&cfg).map_err(crate::cli::Failure::env)?;
        if parallel > 1 {
            return run_parallel(&cfg, parallel, json);
        }
        let departures = if cfg.exact_departures {
            Some(
                crate::bpf::departures::ExactDepartures::start(
                    cfg.peer.port(),
                    bpf.as_ref().map(|b| b.cgroup_fd()),
                )
                .map_err(crate::cli::Failure::env)?,
            )
        } else {
            None
        };
        let outcome =
            run::run_with_departures(&cfg, departures).map_err(crate::cli::Failure::env)?;
        if json {
            crate::cli::print_json_document(&outcome.summary);
        } else {
            crate::say!(
                "{}",
                crate::report::human::send_summary_text(&outcome.summary)
            );
        }
        Ok(outcome.exit_code)
    })
}

/// `--replenish-impl bpf`: the sock_ops program, attached to a fresh cgroup this process
/// joins, looking after connections to the sink's port; detached when dropped.
fn start_bpf_replenish(
    cfg: &SendConfig,
) -> Result<Option<crate::bpf::replenish::BpfReplenish>, crate::bpf::BpfError> {
    use crate::bpf::replenish::{BpfReplenish, Settings, SubMss, Wake};
    use crate::replenish::{ReplenishImpl, ThresholdTest};
    let Some(r) = cfg
        .replenish
        .as_ref()
        .filter(|r| r.implementation == ReplenishImpl::Bpf)
    else {
        return Ok(None);
    };
    let settings = Settings {
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
    };
    BpfReplenish::start(&settings).map(Some)
}

/// `-P N`: the flows, their totals (or `-J`'s document) and flows.json beside their
/// directories.
fn run_parallel(cfg: &SendConfig, n: usize, json: bool) -> Result<i32, crate::cli::Failure> {
    let outcome = flows::run_flows(cfg, n).map_err(crate::cli::Failure::env)?;
    if let Some(dir) = &cfg.out_dir {
        let path = dir.join("flows.json");
        let text = serde_json::to_string_pretty(&outcome.summary).expect("the schema serializes");
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&path, text + "\n"))
            .map_err(|e| {
                crate::cli::Failure::env(format!("cannot write {}: {e}", path.display()))
            })?;
    }
    if json {
        crate::cli::print_json_document(&outcome.summary);
    } else {
        crate::say!("{}", flows::totals_text(&outcome.summary));
    }
    Ok(outcome.exit_code)
}
