//! What every sbm binary's `main` shares: parse the command line the clap way (help and
//! version to stdout with status 0), a bad flag as exactly one line on stderr with status
//! 2 — scripts and matrices read that line, so clap's multi-line usage block is folded.

use std::ffi::OsString;

/// Why a binary ends unsuccessfully: its exit status and the one line that says why.
#[derive(Debug)]
pub struct Failure {
    pub status: i32,
    pub message: String,
}

impl Failure {
    /// Bad input: status 2.
    pub fn usage(message: impl std::fmt::Display) -> Failure {
        Failure {
            status: 2,
            message: message.to_string(),
        }
    }

    /// The environment failed (a resolver, the kernel, the file system, the peer): status 1.
    pub fn env(message: impl std::fmt::Display) -> Failure {
        Failure {
            status: 1,
            message: message.to_string(),
        }
    }
}

/// What a build without the `bpf` feature says when `flag` asks for a BPF program.
#[cfg(not(feature = "bpf"))]
pub fn built_without_bpf(flag: &str) -> String {
    format!(
        "{flag} needs sbm's BPF programs, and this sbm was built without them (no `bpf` feature): install clang, libelf-dev, zlib1g-dev and pkg-config, then build with the default features (cargo install --path . or cargo build --release)"
    )
}

/// The whole of a binary's `main`: parse `args` as `T`, run, and print a failure as one
/// line on stderr prefixed with the program's name; returns the exit status.
pub fn main_with<T, I, A>(args: I, run: impl FnOnce(T) -> Result<i32, Failure>) -> i32
where
    T: clap::Parser,
    I: IntoIterator<Item = A>,
    A: Into<OsString> + Clone,
{
    let parsed: T = match parse(args) {
        Ok(t) => t,
        Err(code) => return code,
    };
    match run(parsed) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("{}: {}", T::command().get_name(), f.message);
            f.status
        }
    }
}

/// Parses `args`, or returns the exit status after printing clap's message.
pub fn parse<T, I, A>(args: I) -> Result<T, i32>
where
    T: clap::Parser,
    I: IntoIterator<Item = A>,
    A: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    T::try_parse_from(&args).map_err(|e| {
        if !e.use_stderr() {
            let _ = e.print();
            return 0;
        }
        let cmd = T::command();
        let name = cmd.get_name().to_string();
        let line = if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            missing_subcommand(&cmd, &args)
        } else {
            one_line(&name, &e.render().to_string())
        };
        eprintln!("{line}");
        2
    })
}

/// "which subcommand?" as one line: clap would print the whole help.
fn missing_subcommand(cmd: &clap::Command, args: &[OsString]) -> String {
    let mut cmd = cmd;
    let mut path = vec![cmd.get_name().to_string()];
    for a in args.iter().skip(1) {
        match cmd.find_subcommand(a) {
            Some(sub) => {
                path.push(sub.get_name().to_string());
                cmd = sub;
            }
            None => break,
        }
    }
    let names: Vec<&str> = cmd
        .get_subcommands()
        .map(clap::Command::get_name)
        .filter(|n| *n != "help")
        .collect();
    let path = path.join(" ");
    format!(
        "{}: {path} needs a subcommand: {} (see {path} --help)",
        path.split(' ').next().unwrap_or(""),
        names.join(", ")
    )
}

/// clap's message as one line: the error and its details, without the usage block and
/// the "For more information" footer, ending with where to look.
pub fn one_line(program: &str, rendered: &str) -> String {
    let body: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect();
    let text = body.join(" ");
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    format!("{program}: {text} (see {program} --help)")
}

/// Where the human text goes. Normally stdout; with `-J/--json` stdout carries one JSON
/// document and nothing else (a script reads it whole), so everything `say!` prints —
/// banners, interval lines, where the files went — moves to stderr. Set once, before the
/// run starts, by the binary's `main`; a process-wide switch because every module of a
/// run prints through `say!` and none of them should need to know about `--json`.
static HUMAN_TEXT_ON_STDERR: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// From now on `say!` and `say_partial!` print to stderr (`-J/--json`).
pub fn move_human_text_to_stderr() {
    HUMAN_TEXT_ON_STDERR.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// `--logfile FILE`: what would go to stdout goes there instead (set once, by `main`).
static LOGFILE: std::sync::OnceLock<std::sync::Mutex<std::fs::File>> = std::sync::OnceLock::new();

/// From now on what would go to stdout is appended to `path` (iperf3's `--logfile`).
pub fn log_to_file(path: &std::path::Path) -> Result<(), Failure> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Failure::env(format!("cannot open --logfile {}: {e}", path.display())))?;
    LOGFILE
        .set(std::sync::Mutex::new(file))
        .map_err(|_| Failure::env("--logfile was set twice"))
}

/// Writes `text` where stdout's output goes: the log file, else stdout. Never panics.
/// Writes `args` (and a newline) to `w` and flushes; errors are dropped: a closed stdout
/// must not end a measurement.
fn put(mut w: impl std::io::Write, args: std::fmt::Arguments<'_>, newline: bool) {
    let _ = w.write_fmt(args);
    if newline {
        let _ = w.write_all(b"\n");
    }
    let _ = w.flush();
}

fn to_stdout_or_log(text: std::fmt::Arguments<'_>, newline: bool) {
    match LOGFILE.get() {
        Some(file) => {
            let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
            put(&mut *f, text, newline);
        }
        None => put(std::io::stdout().lock(), text, newline),
    }
}

/// `say!`'s and `say_partial!`'s body: writes and never panics — a closed stdout
/// (`sbm-sink | head`) must not crash a measurement whose real output is its files.
pub fn say_fmt(args: std::fmt::Arguments<'_>, newline: bool) {
    if HUMAN_TEXT_ON_STDERR.load(std::sync::atomic::Ordering::Relaxed) {
        put(std::io::stderr().lock(), args, newline);
    } else {
        to_stdout_or_log(args, newline);
    }
}

/// The one JSON document of `-J/--json` on stdout, pretty-printed with a final newline.
/// Nothing else is on stdout in that mode (see [`move_human_text_to_stderr`]).
pub fn print_json_document(value: &impl serde::Serialize) {
    let text = serde_json::to_string_pretty(value).expect("the schema serializes");
    to_stdout_or_log(format_args!("{text}"), true);
}

/// One line of `--json-stream` on stdout, as iperf3 writes them:
/// `{"event": EVENT, "data": DATA}`, with `"flow": K` for one flow of several.
pub fn print_json_event(event: &str, flow: Option<usize>, data: &impl serde::Serialize) {
    // Written by hand so that "event" comes first, as in iperf3's lines (a JSON map here
    // would sort its keys).
    let event = serde_json::to_string(event).expect("a string serializes");
    let data = serde_json::to_string(data).expect("the schema serializes");
    match flow {
        Some(k) => to_stdout_or_log(
            format_args!("{{\"event\":{event},\"flow\":{k},\"data\":{data}}}"),
            true,
        ),
        None => to_stdout_or_log(format_args!("{{\"event\":{event},\"data\":{data}}}"), true),
    }
}

/// `println!` for human text (stdout, or stderr under `-J`); never panics.
#[macro_export]
macro_rules! say {
    () => {
        $crate::cli::say_fmt(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::cli::say_fmt(format_args!($($arg)*), true)
    };
}

/// `print!` for human text (stdout, or stderr under `-J`); never panics.
#[macro_export]
macro_rules! say_partial {
    ($($arg:tt)*) => {
        $crate::cli::say_fmt(format_args!($($arg)*), false)
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn clap_messages_become_one_line() {
        let rendered = "error: the following required arguments were not provided:\n  \
                        --connect <HOST:PORT>\n\nUsage: sbm-send --connect <HOST:PORT>\n\n\
                        For more information, try '--help'.\n";
        assert_eq!(
            super::one_line("sbm-send", rendered),
            "sbm-send: the following required arguments were not provided: \
             --connect <HOST:PORT> (see sbm-send --help)"
        );
    }
}
