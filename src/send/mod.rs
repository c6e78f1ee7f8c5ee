//! sbm-send: the instrument.

pub mod cli;
pub mod config;
mod content_age;
pub mod flows;
mod output;
mod programs;
pub mod reverse;
mod run;
pub mod source;
pub mod source_cli;
pub mod trip;

use config::TimestampSource;
pub use config::{EpollMode, Limits, SendConfig};
pub use run::{run, SendOutcome, SetupError};

/// The whole of `main` for bin/sbm-send: parse, run, print, exit status.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let argv: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    crate::cli::main_with(argv.clone(), |args: cli::SendArgs| {
        let json = args.json;
        let json_stream = args.json_stream;
        if let Some(f) = args.format {
            crate::units::set_rate_format(f);
        }
        if let Some(path) = &args.logfile {
            crate::cli::log_to_file(path)?;
        }
        if json || json_stream {
            crate::cli::move_human_text_to_stderr();
        }
        let result = if args.reverse || args.bidir {
            run_reverse(args, &argv)
        } else {
            run_from_args(args)
        };
        // As iperf3: a failure is also said in the JSON a script is reading.
        if let Err(f) = &result {
            if json {
                crate::cli::print_json_document(&ErrorDocument { error: &f.message });
            } else if json_stream {
                crate::cli::print_json_event("error", None, &f.message);
            }
        }
        result
    })
}

fn run_from_args(args: cli::SendArgs) -> Result<i32, crate::cli::Failure> {
    let json = args.json;
    let parallel = usize::from(args.parallel);
    let mut cfg = args.into_config().map_err(|e| crate::cli::Failure {
        status: e.exit_status(),
        message: e.to_string(),
    })?;
    // Before any socket exists: the programs act on sockets created in their cgroup.
    let (_programs, attached) = programs::start(&mut cfg).map_err(crate::cli::Failure::env)?;
    if parallel > 1 {
        return run_parallel(&cfg, parallel, json, attached);
    }
    let outcome = run::run_attached(&cfg, attached).map_err(crate::cli::Failure::env)?;
    if json {
        crate::cli::print_json_document(&json_document(&outcome.summary, &outcome.intervals));
    } else {
        if cfg.json_stream {
            crate::cli::print_json_event("end", None, &outcome.summary);
        }
        crate::say!(
            "{}",
            crate::report::human::send_summary_text(&outcome.summary)
        );
    }
    Ok(outcome.exit_code)
}

/// `-J`'s document: summary.json's fields and, as iperf3's `-J` has them, `intervals`:
/// every interval row (intervals.csv's).
#[derive(serde::Serialize)]
pub(crate) struct JsonDocument<'a> {
    #[serde(flatten)]
    summary: &'a crate::report::schema::SendSummary,
    intervals: &'a [crate::report::schema::IntervalRow],
}

/// `-J`'s document of a run that failed, as iperf3's: `{"error": "…"}`.
#[derive(serde::Serialize)]
struct ErrorDocument<'a> {
    error: &'a str,
}

/// `--bidir -J`'s document: each direction's `-J` document.
#[derive(serde::Serialize)]
pub(crate) struct BidirDocument<'a> {
    pub tx: JsonDocument<'a>,
    pub rx: JsonDocument<'a>,
}

pub(crate) fn json_document<'a>(
    summary: &'a crate::report::schema::SendSummary,
    intervals: &'a [crate::report::schema::IntervalRow],
) -> JsonDocument<'a> {
    JsonDocument { summary, intervals }
}

/// `-R`: the sink sends; this side receives and prints the sender's summary. `--bidir`:
/// that and this side's own run at once.
fn run_reverse(
    args: cli::SendArgs,
    argv: &[std::ffi::OsString],
) -> Result<i32, crate::cli::Failure> {
    let json = args.json;
    let parallel = args.parallel;
    let bidir = args.bidir;
    let mut cfg = args.into_config().map_err(|e| crate::cli::Failure {
        status: e.exit_status(),
        message: e.to_string(),
    })?;
    cfg.settle_timestamps(
        TimestampSource::Socket,
        "-R and --bidir: the BPF programs act on sockets sbm-send creates in its own cgroup",
    );
    if let Some(why) = reverse::refusal(&cfg, parallel) {
        return Err(crate::cli::Failure::usage(why));
    }
    let forwarded = reverse::forwarded_args(argv).map_err(crate::cli::Failure::usage)?;
    if bidir {
        reverse::run_bidir(&cfg, forwarded, json)
    } else {
        reverse::run_client(&cfg, forwarded, json)
    }
}

/// `-P N`: the flows, their totals (or `-J`'s document) and flows.json beside their
/// directories.
fn run_parallel(
    cfg: &SendConfig,
    n: usize,
    json: bool,
    attached: run::Attached,
) -> Result<i32, crate::cli::Failure> {
    let outcome = flows::run_flows(cfg, n, attached.rule).map_err(crate::cli::Failure::env)?;
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
        if cfg.json_stream {
            crate::cli::print_json_event("end", None, &outcome.summary);
        }
        crate::say!("{}", flows::totals_text(&outcome.summary));
    }
    Ok(outcome.exit_code)
}
