//! A run's files from its cells' stored results, in one step after everything is computed:
//! summary.csv (one row per cell run), aggregates.csv (one row per table cell over its
//! runs), table.md, the plots and the HTML report. Rebuilt by `scripts/matrix report DIR`
//! at any time; the same inputs give the same bytes.

use std::path::Path;

use super::aggregate;
use super::html::CellPlots;
use super::report::{summary_row, table_md, write_plots, CellFiles};
use super::spec::{Cell, MatrixSpec};

/// Writes summary.csv (one row per run), aggregates.csv (one row per table cell, over its
/// runs), table.md, the plots and the HTML report (index.html, cells/) into `run_dir`;
/// `plots` says whose plots over time the pages draw.
pub fn write_all(
    run_dir: &Path,
    spec: &MatrixSpec,
    cells: &[Cell],
    plots: CellPlots,
) -> Result<String, String> {
    let mut rows = vec![];
    for c in cells {
        rows.push(summary_row(c, &CellFiles::read(&run_dir.join(&c.name))));
    }
    let mut w = csv::Writer::from_path(run_dir.join("summary.csv")).map_err(|e| e.to_string())?;
    for r in &rows {
        w.serialize(r).map_err(|e| e.to_string())?;
    }
    w.flush().map_err(|e| e.to_string())?;
    let mut w =
        csv::Writer::from_path(run_dir.join("aggregates.csv")).map_err(|e| e.to_string())?;
    for g in aggregate::groups(spec, &rows) {
        w.serialize(aggregate::aggregate_row(spec, &g))
            .map_err(|e| e.to_string())?;
    }
    w.flush().map_err(|e| e.to_string())?;
    let table = table_md(spec, &rows);
    let title = format!(
        "# {}\n\n{}\n\n",
        spec.name.clone().unwrap_or_default(),
        spec.description.trim()
    );
    std::fs::write(run_dir.join("table.md"), format!("{title}{table}"))
        .map_err(|e| e.to_string())?;
    write_plots(run_dir, spec, cells, &rows)?;
    super::html::write_site(run_dir, spec, cells, &rows, plots)?;
    Ok(table)
}
