//! sbm-matrix: runs a matrix of sender configurations × path rates on the emulated path and
//! builds the report's table from the results (`scripts/matrix` wraps it).

// The model: the matrix file and its cells, and the records a run keeps.
pub mod record;
pub mod spec;
// The runners: one cell on the emulated path or in a guest (run), an unmodified server's cell
// (command), cells on real hosts (hosts); below them the helpers they share.
pub mod argv;
pub mod command;
pub mod hosts;
pub mod process;
pub mod run;
pub mod schedule;
pub mod store;
// The report: pure functions of the stored records, then one step that writes the files.
pub mod aggregate;
pub mod cell_series;
pub mod compare;
pub mod doc;
pub mod export;
pub mod format;
pub mod html;
pub mod pack;
pub mod recovery;
pub mod report;
pub mod run_report;
pub mod svg;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "sbm-matrix",
    version,
    about = "Run a test matrix on the emulated path; build summary.csv, table.md and plots",
    after_help = "Examples:\n  scripts/matrix run quick                      # CI-sized: 2 Mb/s, three configurations\n  scripts/matrix run paper --dry-run            # list the cells and the wall time\n  scripts/matrix run paper --only 2mbit         # one column\n  scripts/matrix run paper --out results/p1 --resume   # finish an interrupted run\n  scripts/matrix report results/paper-20261129T193000Z\n  scripts/matrix report results/p1 --every-plot  # every run's plot over time, not one per configuration\n  scripts/matrix compare results/python-vs-sbm-send results/python-vs-sbm-send-reader\n  scripts/matrix pack results/paper-20261129T193000Z     # one archive per cell, before committing\n\nA MATRIX is a TOML file or a preset name from scripts/matrices (see example.toml there)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the cells of a matrix (root: it builds the emulated path).
    Run {
        /// A matrix file or a preset name (quick, paper, nagle-trap, …).
        matrix: String,
        /// Run directory (default results/<name>-<UTC time>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only cells whose name contains one of these comma-separated strings.
        #[arg(long)]
        only: Option<String>,
        /// Run only the cells of --out DIR that did not finish.
        #[arg(long, requires = "out")]
        resume: bool,
        /// List the cells and the estimated wall time; run nothing.
        #[arg(long)]
        dry_run: bool,
        /// Test-bed prefix (default mx<pid>).
        #[arg(long, value_parser = crate::testbed::parse_prefix)]
        prefix: Option<String>,
    },
    /// Rebuild summary.csv, aggregates.csv, table.md, the plots and the HTML pages of a run
    /// directory from its stored results.
    Report {
        dir: PathBuf,
        /// Draw every run's plot over time on the configuration pages (by default each
        /// configuration's representative run: its median sojourn).
        #[arg(long)]
        every_plot: bool,
    },
    /// Compare runs: their cells side by side, matched by what each cell does, every figure
    /// with its spread, marked where two runs' ranges are apart. The first run is the
    /// baseline.
    Compare {
        /// Run directories (two or more).
        #[arg(required = true, num_args = 2..)]
        runs: Vec<PathBuf>,
        /// Also write the comparison to FILE (markdown).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Also write it as a web page to FILE (self-contained HTML).
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
    /// Pack each finished cell of a run into one archive, CELL.tar.xz, in place of its
    /// directory (every reader, the report included, opens either form; do it before
    /// committing a run).
    Pack {
        /// Run directories.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// Restore the directories of a run's packed cells (all of them, or those named).
    Unpack {
        /// The run directory.
        dir: PathBuf,
        /// Cell names (default: every packed cell).
        cells: Vec<String>,
    },
    /// List the presets.
    List,
}

/// Where presets live: $SBM_MATRICES, else scripts/matrices of the source tree the binary
/// was built in (or of the current directory), else the copies built into the binary.
pub fn presets_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SBM_MATRICES") {
        return PathBuf::from(d);
    }
    let from_exe = std::env::current_exe().ok().and_then(|p| {
        p.parent()?
            .parent()?
            .parent()
            .map(|root| root.join("scripts/matrices"))
    });
    let tree = match from_exe {
        Some(d) if d.is_dir() => d,
        _ => PathBuf::from("scripts/matrices"),
    };
    crate::embedded::tree_or_embedded(tree, crate::embedded::Set::Presets)
}

/// A path as given, or a preset by name.
pub fn resolve_matrix(arg: &str) -> PathBuf {
    let p = PathBuf::from(arg);
    if p.exists() || arg.contains('/') || arg.ends_with(".toml") {
        p
    } else {
        presets_dir().join(format!("{arg}.toml"))
    }
}

fn main_inner(cli: Cli) -> Result<i32, run::MatrixError> {
    match cli.cmd {
        Cmd::Run {
            matrix,
            out,
            only,
            resume,
            dry_run,
            prefix,
        } => {
            let opts = run::RunOptions {
                matrix: resolve_matrix(&matrix),
                out,
                only,
                resume,
                dry_run,
                prefix,
            };
            run::run(&opts)
        }
        Cmd::Report { dir, every_plot } => {
            let plots = if every_plot {
                run_report::CellPlots::Every
            } else {
                run_report::CellPlots::Representative
            };
            let table = run::rebuild_report(&dir, plots)?;
            crate::say!("{table}");
            Ok(0)
        }
        Cmd::Pack { dirs } => {
            for dir in &dirs {
                let s = pack::pack_run(dir)?;
                let mut line = format!(
                    "{}: {} cells packed ({} KB -> {} KB), {} already packed",
                    dir.display(),
                    s.packed,
                    s.bytes_in.div_ceil(1000),
                    s.bytes_out.div_ceil(1000),
                    s.already
                );
                if !s.unfinished.is_empty() {
                    line += &format!(
                        "; left as directories, not finished (no cell.json): {}",
                        s.unfinished.join(", ")
                    );
                }
                crate::say!("{line}");
            }
            Ok(0)
        }
        Cmd::Unpack { dir, cells } => {
            let restored = pack::unpack_run(&dir, &cells)?;
            crate::say!("{}: {} cells unpacked", dir.display(), restored.len());
            Ok(0)
        }
        Cmd::Compare { runs, out, html } => {
            let read: Vec<compare::Run> = runs
                .iter()
                .map(|d| compare::Run::read(d))
                .collect::<Result<_, _>>()
                .map_err(run::MatrixError::Compare)?;
            let doc = compare::compare(&read).map_err(run::MatrixError::Compare)?;
            let md = doc.md();
            let page = html.map(|path| (path, compare::compare_html(&doc)));
            for (path, text) in out.map(|p| (p, md.clone())).into_iter().chain(page) {
                std::fs::write(&path, text).map_err(|source| run::MatrixError::File {
                    path: path.clone(),
                    source,
                })?;
            }
            crate::say!("{md}");
            Ok(0)
        }
        Cmd::List => {
            let dir = presets_dir();
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .map_err(|source| run::MatrixError::File {
                    path: dir.clone(),
                    source,
                })?
                .filter_map(|e| {
                    e.ok()?
                        .file_name()
                        .to_str()?
                        .strip_suffix(".toml")
                        .map(str::to_string)
                })
                .collect();
            names.sort();
            for n in names {
                let desc = run::load(&dir.join(format!("{n}.toml")))
                    .map(|(s, _)| s.description)
                    .unwrap_or_default();
                crate::say!("{n:<14} {}", desc.lines().next().unwrap_or(""));
            }
            Ok(0)
        }
    }
}

/// The whole of `main` for bin/sbm-matrix.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    crate::cli::main_with(args, |cli: Cli| {
        main_inner(cli).map_err(crate::cli::Failure::env)
    })
}
