//! sbm-sink: the discard receiver.

pub mod cli;
mod run;
pub mod stream;

pub use run::{run, SinkConfig, SinkError};

use clap::Parser;

/// The whole of `main` for bin/sbm-sink.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args = match cli::SinkArgs::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let listen = match crate::addr::resolve(&args.listen) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sbm-sink: {e}");
            return 2;
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
    };
    match run(&cfg) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sbm-sink: {e}");
            1
        }
    }
}
