//! A run's files from its cells' stored results: the run is read once
//! ([`RunReport::read`]), every file is a function of that value — summary.csv (one row per
//! cell run), aggregates.csv (one row per table cell over its runs), table.md, the plots and
//! the HTML report — and writing them is one step after all are made. Rebuilt by
//! `scripts/matrix report DIR` at any time; the same inputs give the same bytes.

use std::path::Path;

use super::aggregate;
use super::report::{is_report_plot, table_md};
use super::run_report::{CellPlots, RunReport};
use super::spec::{Cell, MatrixSpec};
use super::svg;
use crate::report::compressed;

/// summary.csv: one row per run.
pub fn summary_csv(r: &RunReport<'_>) -> Result<Vec<u8>, String> {
    let mut w = csv::Writer::from_writer(vec![]);
    for row in &r.rows {
        w.serialize(row).map_err(|e| e.to_string())?;
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// aggregates.csv: one row per table cell, over its runs.
pub fn aggregates_csv(r: &RunReport<'_>) -> Result<Vec<u8>, String> {
    let mut w = csv::Writer::from_writer(vec![]);
    for g in aggregate::groups(r.spec, &r.rows) {
        w.serialize(aggregate::aggregate_row(r.spec, &g))
            .map_err(|e| e.to_string())?;
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// table.md: the run's name and description before `table` (the table and its notes).
pub fn table_file(r: &RunReport<'_>, table: &str) -> String {
    format!(
        "# {}\n\n{}\n\n{table}",
        r.spec.name.clone().unwrap_or_default(),
        r.spec.description.trim(),
    )
}

/// Every file of the report as (path in the run directory, bytes); `table` is
/// [`table_md`]'s of the run.
pub fn files(r: &RunReport<'_>, table: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut out = vec![
        ("summary.csv".to_string(), summary_csv(r)?),
        ("aggregates.csv".to_string(), aggregates_csv(r)?),
        ("table.md".to_string(), table_file(r, table).into_bytes()),
    ];
    for (name, charts) in &r.run_plots {
        if let Some(charts) = charts {
            out.push((format!("plots/{name}"), svg::render(charts).into_bytes()));
        }
    }
    for (path, text) in super::html::site(r) {
        out.push((path, text.into_bytes()));
    }
    Ok(out)
}

/// Writes summary.csv, aggregates.csv, table.md, the plots and the HTML report (index.html,
/// cells/) into `run_dir`, and removes what an older report wrote that this one does not
/// (its plots with nothing to draw now, per-run plots and pages); `plots` says whose plots
/// over time the pages draw. Returns the table (table.md without its title).
pub fn write_all(
    run_dir: &Path,
    spec: &MatrixSpec,
    cells: &[Cell],
    plots: CellPlots,
) -> Result<String, String> {
    let report = RunReport::read(run_dir, spec, cells, plots);
    let table = table_md(spec, &report.rows);
    let files = files(&report, &table)?;
    for dir in ["plots", "cells"] {
        let dir = run_dir.join(dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    for (path, bytes) in &files {
        let path = run_dir.join(path);
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let written: std::collections::BTreeSet<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    let stale = compressed::files_in(&run_dir.join("plots"))
        .into_iter()
        .filter(|n| is_report_plot(n))
        .map(|n| format!("plots/{n}"))
        .chain(
            compressed::files_in(&run_dir.join("cells"))
                .into_iter()
                .filter(|n| n.ends_with(".html"))
                .map(|n| format!("cells/{n}")),
        )
        .filter(|p| !written.contains(p.as_str()));
    for path in stale {
        let path = run_dir.join(path);
        std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(table)
}
