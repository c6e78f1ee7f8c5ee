//! sbm-send: the instrument.

pub mod cli;
pub mod config;
mod content_age;
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
        let cfg = args.into_config().map_err(|e| crate::cli::Failure {
            status: e.exit_status(),
            message: e.to_string(),
        })?;
        let outcome = run(&cfg).map_err(crate::cli::Failure::env)?;
        crate::say!(
            "{}",
            crate::report::human::send_summary_text(&outcome.summary)
        );
        Ok(outcome.exit_code)
    })
}
