//! Man pages and shell completions for every sbm program, generated from the same clap
//! definitions that parse their command lines (clap_mangen, clap_complete), so they cannot
//! drift from `--help`. `cargo xtask man|completions` writes them; scripts/setup installs them.

use std::io;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

/// Every program's command-line definition, under its program name.
pub fn commands() -> Vec<clap::Command> {
    vec![
        sbm::send::cli::SendArgs::command(),
        sbm::sink::cli::SinkArgs::command(),
        sbm::delay::DelayArgs::command(),
        sbm::testbed::Cli::command(),
        sbm::matrix::Cli::command(),
        sbm::rpm::client::ClientArgs::command(),
        sbm::rpm::server::ServerArgs::command(),
        #[cfg(feature = "bpf")]
        sbm::trace::cli::TraceArgs::command(),
    ]
}

/// Writes one man page (section 1) per program and per subcommand (`sbm-testbed-wan.1`,
/// `sbm-testbed-wan-up.1`, …) into `dir`, created if missing; returns the files written.
pub fn write_man_pages(dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for cmd in commands() {
        let mut cmd = cmd.disable_help_subcommand(true);
        cmd.build();
        man_pages_of(cmd, dir, &mut written)?;
    }
    Ok(written)
}

fn man_pages_of(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages_of(sub.clone(), dir, written)?;
    }
    let man = clap_mangen::Man::new(cmd).source(format!("sbm {}", env!("CARGO_PKG_VERSION")));
    written.push(man.generate_to(dir)?);
    Ok(())
}

/// Writes `shell`'s completion script for every program into `dir` (created if missing),
/// named as that shell looks them up (`sbm-send.bash`, `_sbm-send`, `sbm-send.fish`, …).
pub fn write_completions(shell: clap_complete::Shell, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    commands()
        .into_iter()
        .map(|mut cmd| {
            let name = cmd.get_name().to_string();
            clap_complete::generate_to(shell, &mut cmd, name, dir)
        })
        .collect()
}

/// Every program's completion script for `shell`, one after the other (for
/// `source <(cargo xtask completions bash)`).
pub fn print_completions(shell: clap_complete::Shell, out: &mut dyn io::Write) {
    for mut cmd in commands() {
        let name = cmd.get_name().to_string();
        clap_complete::generate(shell, &mut cmd, name, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_man_page_per_program_and_subcommand_naming_every_flag() {
        let dir = std::env::temp_dir().join(format!("sbm-man-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let written = write_man_pages(&dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into())
            .collect();
        for want in [
            "sbm-send.1",
            "sbm-sink.1",
            "sbm-delay.1",
            "sbm-testbed.1",
            "sbm-testbed-wan-up.1",
            "sbm-matrix.1",
            "sbm-matrix-run.1",
            "sbm-matrix-report.1",
            "sbm-rpm.1",
            "sbm-rpm-server.1",
            #[cfg(feature = "bpf")]
            "sbm-trace.1",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
        let send = std::fs::read_to_string(dir.join("sbm-send.1")).unwrap();
        assert!(send.starts_with(".ie") || send.contains(".TH"), "not roff");
        for arg in sbm::send::cli::SendArgs::command().get_arguments() {
            if let Some(long) = arg.get_long() {
                // roff escapes '-' as '\-'.
                let escaped = format!("\\-\\-{}", long.replace('-', "\\-"));
                assert!(send.contains(&escaped), "sbm-send.1 lacks --{long}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn completions_name_the_programs_flags() {
        let mut bash = Vec::new();
        print_completions(clap_complete::Shell::Bash, &mut bash);
        let bash = String::from_utf8(bash).unwrap();
        for needle in [
            "sbm-send",
            "sbm-sink",
            "sbm-matrix",
            "--replenish-time",
            "--json",
        ] {
            assert!(bash.contains(needle), "bash completions lack {needle}");
        }
    }
}
