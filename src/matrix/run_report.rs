//! A run directory read once into one value, [`RunReport`]: the cells' summary rows, their
//! meta.json and cell.json, what each cell directory (or archive) holds, and the charts the
//! report draws — the run's plots and, per cell, its plot over time where its page shows
//! one. The exporters (export.rs) are functions of this value; nothing after
//! [`RunReport::read`] opens a file of the run.

use std::path::Path;

use super::aggregate;
use super::record::{CellStatus, Meta, SummaryRow};
use super::report::{self, is_report_plot, summary_row, CellFiles};
use super::spec::{Cell, MatrixSpec};
use super::svg::Chart;
use crate::report::compressed::{self, Listing};

/// Which runs' plots over time the configuration pages draw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CellPlots {
    /// One per configuration: its [`representative`] run (what a committed run keeps).
    #[default]
    Representative,
    /// Every run's (`sbm-matrix report --every-plot`).
    Every,
}

/// Everything the report's files are made from.
pub struct RunReport<'a> {
    pub spec: &'a MatrixSpec,
    pub cells: &'a [Cell],
    /// summary.csv's row of each cell, in the cells' order.
    pub rows: Vec<SummaryRow>,
    pub metas: Vec<Option<Meta>>,
    pub statuses: Vec<Option<CellStatus>>,
    /// What each cell's directory or archive holds.
    pub listings: Vec<Listing>,
    /// The report's plots of the run as a whole: file name and charts, None where there is
    /// nothing to draw (a file of that name an older report wrote is removed).
    pub run_plots: Vec<(String, Option<Vec<Chart>>)>,
    /// SVGs in plots/ that are not the report's (an analysis script's): the index shows them.
    pub other_plots: Vec<String>,
    /// Per cell, its charts over time where its configuration's page draws them (empty
    /// where it draws none, or there is nothing to draw).
    pub cell_charts: Vec<Vec<Chart>>,
    /// Whose plots over time the pages draw.
    pub plots: CellPlots,
}

impl<'a> RunReport<'a> {
    /// Reads `run_dir`'s cells: the one step of the report that opens the run's files.
    pub fn read(
        run_dir: &Path,
        spec: &'a MatrixSpec,
        cells: &'a [Cell],
        plots: CellPlots,
    ) -> RunReport<'a> {
        let dirs: Vec<_> = cells.iter().map(|c| run_dir.join(&c.name)).collect();
        let rows: Vec<SummaryRow> = cells
            .iter()
            .zip(&dirs)
            .map(|(c, d)| summary_row(c, &CellFiles::read(d)))
            .collect();
        // The runs whose plots the pages draw: every run's, or each configuration's
        // representative.
        let mut drawn = vec![plots == CellPlots::Every; cells.len()];
        for g in aggregate::groups(spec, &rows) {
            let shown = g.representative();
            if let Some(i) = rows.iter().position(|r| std::ptr::eq(r, shown)) {
                drawn[i] = true;
            }
        }
        let cell_charts = cells
            .iter()
            .zip(&drawn)
            .map(|(c, &d)| {
                if d {
                    report::cell_charts(run_dir, c)
                } else {
                    vec![]
                }
            })
            .collect();
        let run_plots = report::run_charts(run_dir, spec, cells, &rows);
        let other_plots = compressed::files_in(&run_dir.join("plots"))
            .into_iter()
            .filter(|p| p.ends_with(".svg") && !is_report_plot(p))
            .collect();
        RunReport {
            spec,
            cells,
            metas: dirs.iter().map(|d| Meta::read(d)).collect(),
            statuses: dirs.iter().map(|d| CellStatus::read(d)).collect(),
            listings: dirs.iter().map(|d| compressed::list_cell(d)).collect(),
            rows,
            run_plots,
            other_plots,
            cell_charts,
            plots,
        }
    }

    /// The SVGs plots/ will hold once the report is written, sorted as a listing is.
    pub fn plot_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .run_plots
            .iter()
            .filter(|(_, charts)| charts.is_some())
            .map(|(name, _)| name.clone())
            .chain(self.other_plots.iter().cloned())
            .collect();
        names.sort();
        names
    }
}
