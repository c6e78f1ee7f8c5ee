//! sbm-sink: the discard receiver.

pub mod cli;
mod run;
pub mod stream;

pub use run::{run, SinkConfig, SinkError};

/// The whole of `main` for bin/sbm-sink.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: cli::SinkArgs = match crate::cli::parse(args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let listen = match crate::addr::resolve(&args.listen) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sbm-sink: {e}");
            return if e.is_usage() { 2 } else { 1 };
        }
    };
    let cfg = SinkConfig {
        listen,
        interval: args.interval,
        once: args.once,
        out_dir: args.out,
        rcvbuf: args.rcvbuf,
        expect_trip_times: args.expect_trip_times,
        quiet: args.quiet,
        max_conns: args.max_conns as usize,
        idle_timeout: (!args.idle_timeout.is_zero()).then_some(args.idle_timeout),
    };
    match run(&cfg) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sbm-sink: {e}");
            1
        }
    }
}
