//! sbm-sink: the discard receiver.

pub mod cli;
mod run;
pub mod stream;

pub use run::{run, SinkConfig, SinkError};

use crate::cli::Failure;

/// The whole of `main` for bin/sbm-sink.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    crate::cli::main_with(args, run_args)
}

fn run_args(args: cli::SinkArgs) -> Result<i32, Failure> {
    if let Some(f) = args.format {
        crate::units::set_rate_format(f);
    }
    if args.json {
        crate::cli::move_human_text_to_stderr();
    }
    let (spec, port) = args.listen_spec().map_err(Failure::usage)?;
    let listen = crate::addr::resolve_with_port(&spec, port).map_err(|e| {
        if e.is_usage() {
            Failure::usage(e)
        } else {
            Failure::env(e)
        }
    })?;
    let cfg = SinkConfig {
        listen,
        interval: args.interval,
        exit_after: if args.once { Some(1) } else { args.conns },
        out_dir: args.out,
        rcvbuf: args.rcvbuf,
        expect_trip_times: args.expect_trip_times,
        ack: args.ack,
        quiet: args.quiet,
        keep_totals: args.json,
        max_conns: args.max_conns as usize,
        idle_timeout: (!args.idle_timeout.is_zero()).then_some(args.idle_timeout),
        copy_reads: args.copy_reads,
        read_size: args.read_size as usize,
    };
    let totals = run(&cfg).map_err(Failure::env)?;
    if args.json {
        crate::cli::print_json_document(&SinkDocument {
            listen: cfg.listen.to_string(),
            connections: totals,
        });
    }
    Ok(0)
}

/// `sbm-sink -J`'s document: every connection's total (sink-intervals.csv's `total` rows).
#[derive(serde::Serialize)]
struct SinkDocument {
    listen: String,
    connections: Vec<crate::report::schema::SinkIntervalRow>,
}
