//! `sbm-matrix pack` and `unpack`: a run's finished cells as one archive each
//! ([`crate::report::archive`]), so that a committed run is a few files per cell rather than
//! a dozen; and back, to look at a cell's files with ordinary tools. Every reader opens a
//! packed cell as it is, so the report, `compare` and `--resume` need neither.

use std::path::{Path, PathBuf};

use super::run::{file_error, load, rebuild_report, MatrixError};
use crate::report::archive;

/// What packing a run did, for its closing line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PackSummary {
    pub packed: usize,
    pub already: usize,
    /// Cells with a directory but no cell.json: they did not finish (`--resume` runs them
    /// again), so they stay directories.
    pub unfinished: Vec<String>,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// A run directory's matrix.
fn load_run(dir: &Path) -> Result<(super::spec::MatrixSpec, String), MatrixError> {
    let path = dir.join("matrix.toml");
    if !path.is_file() {
        return Err(MatrixError::NotARunDir(dir.to_path_buf()));
    }
    load(&path)
}

/// Packs every finished cell of the run in `dir`, then rebuilds its HTML pages where the run
/// has them (their links to a cell's files become a link to its archive).
pub fn pack_run(dir: &Path) -> Result<PackSummary, MatrixError> {
    let (spec, _) = load_run(dir)?;
    let cells = spec.cells().map_err(MatrixError::Cells)?;
    let mut sum = PackSummary::default();
    let total = cells.len();
    for (i, cell) in cells.iter().enumerate() {
        let cell_dir = dir.join(&cell.name);
        if !cell_dir.is_dir() {
            if archive::archive_path(&cell_dir).is_file() {
                sum.already += 1;
            }
            continue;
        }
        if !cell_dir.join("cell.json").is_file() {
            sum.unfinished.push(cell.name.clone());
            continue;
        }
        let p = archive::pack(&cell_dir).map_err(file_error(&cell_dir))?;
        sum.packed += 1;
        sum.bytes_in += p.bytes_in;
        sum.bytes_out += p.bytes_out;
        crate::say!(
            "[{}/{total}] {}: {} files, {} KB -> {}{} ({} KB)",
            i + 1,
            cell.name,
            p.files,
            p.bytes_in.div_ceil(1000),
            cell.name,
            archive::SUFFIX,
            p.bytes_out.div_ceil(1000)
        );
    }
    if sum.packed > 0 && dir.join("index.html").is_file() {
        rebuild_report(dir, super::run_report::CellPlots::default())?;
    }
    Ok(sum)
}

/// Restores the directories of the run's packed cells (all, or those named).
pub fn unpack_run(dir: &Path, only: &[String]) -> Result<Vec<PathBuf>, MatrixError> {
    let (spec, _) = load_run(dir)?;
    let cells = spec.cells().map_err(MatrixError::Cells)?;
    if let Some(unknown) = only.iter().find(|n| !cells.iter().any(|c| &&c.name == n)) {
        return Err(MatrixError::NoSuchCell(unknown.clone()));
    }
    let mut restored = vec![];
    for cell in &cells {
        if !only.is_empty() && !only.contains(&cell.name) {
            continue;
        }
        let path = archive::archive_path(&dir.join(&cell.name));
        if !path.is_file() {
            continue;
        }
        restored.push(archive::unpack(&path).map_err(file_error(&path))?);
    }
    Ok(restored)
}
