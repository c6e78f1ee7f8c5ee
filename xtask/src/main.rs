//! `cargo xtask`: sbm's own build tasks, kept out of the programs users run.
//!
//! ```text
//! cargo xtask man /usr/local/share/man/man1          # a man page per program and subcommand
//! cargo xtask completions bash DIR                   # one completion script per program
//! source <(cargo xtask completions zsh)              # or print them
//! ```

mod docs;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    about = "sbm's build tasks: man pages and shell completions from the programs' own command-line definitions",
    after_help = "Examples:\n  cargo xtask man /usr/local/share/man/man1\n  cargo xtask completions bash /usr/local/share/bash-completion/completions\n  source <(cargo xtask completions zsh)"
)]
enum Task {
    /// Write a man page per program and subcommand (sbm-send.1, sbm-testbed-wan-up.1, …)
    /// into DIR, e.g. /usr/local/share/man/man1.
    Man {
        /// Directory (created if missing).
        dir: PathBuf,
    },
    /// Print every program's completion script for SHELL, or write one file per program
    /// into DIR (e.g. /usr/local/share/bash-completion/completions).
    Completions {
        shell: clap_complete::Shell,
        /// Directory (created if missing); without it the scripts go to stdout.
        dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let task = match Task::try_parse() {
        Ok(t) => t,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let (dir, written) = match task {
        Task::Man { dir } => {
            let w = docs::write_man_pages(&dir);
            (dir, w)
        }
        Task::Completions { shell, dir: None } => {
            // Into memory first: clap_complete panics on a closed pipe (`… | head`).
            let mut text = Vec::new();
            docs::print_completions(shell, &mut text);
            use std::io::Write as _;
            let _ = std::io::stdout().lock().write_all(&text);
            return ExitCode::SUCCESS;
        }
        Task::Completions {
            shell,
            dir: Some(dir),
        } => {
            let w = docs::write_completions(shell, &dir);
            (dir, w)
        }
    };
    match written {
        Ok(files) => {
            println!("{} files in {}", files.len(), dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cargo xtask: cannot write {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}
