//! sbm-send: the instrument.

pub mod cli;
pub mod config;
pub mod gate;
mod output;
mod run;
pub mod trip;

pub use config::{EpollMode, Limits, SendConfig};
pub use run::{run, SendOutcome, SetupError};

/// The whole of `main` for bin/sbm-send: parse, run, print, exit status.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: cli::SendArgs = match crate::cli::parse(args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let cfg = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sbm-send: {e}");
            return e.exit_status();
        }
    };
    match run(&cfg) {
        Ok(outcome) => {
            crate::say!(
                "{}",
                crate::report::human::send_summary_text(&outcome.summary)
            );
            outcome.exit_code
        }
        Err(e) => {
            eprintln!("sbm-send: {e}");
            1
        }
    }
}
