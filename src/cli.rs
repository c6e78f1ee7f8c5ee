//! What every sbm binary's `main` shares: parse the command line the clap way (help and
//! version to stdout with status 0, a bad flag as one message with status 2).

use std::ffi::OsString;

/// Parses `args`, or returns the exit status after printing clap's message.
pub fn parse<T, I, A>(args: I) -> Result<T, i32>
where
    T: clap::Parser,
    I: IntoIterator<Item = A>,
    A: Into<OsString> + Clone,
{
    T::try_parse_from(args).map_err(|e| {
        let code = if e.use_stderr() { 2 } else { 0 };
        let _ = e.print();
        code
    })
}

/// `println!` that never panics: a closed stdout (`sbm-sink | head`) must not crash a
/// measurement whose real output is its files.
#[macro_export]
macro_rules! say {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `print!` that never panics.
#[macro_export]
macro_rules! say_partial {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}
