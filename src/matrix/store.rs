//! What a cell leaves in its directory besides the programs' own files: meta.json (how it
//! ran: versions, sysctls, command lines, the test bed before and after) and cell.json (how
//! it ended), its per-write files compressed, and its one-line result. Every runner
//! (emulated path, guest, hosts, command cells) stores its cells through here.

use std::path::Path;

use super::format::{fmt_delay, fmt_rate};
use super::process::git_commit;
use super::record::{CellStatus, Headline, Meta, Status};
use super::report;
use super::spec::{Cell, Workload};
use crate::sysinfo;

impl Meta {
    /// A cell's meta.json with what every path records.
    pub(super) fn new(cell: &Cell, sink_command: Vec<String>, send_command: Vec<String>) -> Meta {
        Meta {
            sbm_version: env!("CARGO_PKG_VERSION").into(),
            git_commit: git_commit(),
            kernel_release: sysinfo::kernel_release(),
            sysctls: sysinfo::relevant_sysctls(),
            cell: cell.name.clone(),
            rate: cell.rate.clone(),
            config: cell.config.clone(),
            label: cell.label.clone(),
            write_size: cell.write_size.clone(),
            nodelay: cell.nodelay,
            cc: cell.cc.clone(),
            sender_kernel: cell.sender_kernel.to_string(),
            cpu_quota: cell.cpu_quota,
            cpu_slices: cell.cpu_slices,
            guest_sysctls: cell.guest_sysctls.clone(),
            ns_sysctls: vec![],
            workload: match cell.workload {
                Workload::Send => None,
                Workload::Command { .. } => Some("command".into()),
            },
            repetition: cell.repetition,
            sink_command,
            send_command,
            testbed_before: None,
            testbed_after: None,
            schedule_origin_unix_ns: None,
            rate_changes: vec![],
            hosts: None,
        }
    }

    pub(super) fn write(&self, dir: &Path) {
        let _ = std::fs::write(
            dir.join("meta.json"),
            serde_json::to_string_pretty(self).unwrap_or_default() + "\n",
        );
    }
}

/// After a cell: its cell.json, its per-write files compressed, and its one-line result.
pub(super) fn store_cell(cell: &Cell, dir: &Path, st: &CellStatus) -> String {
    let _ = std::fs::write(
        dir.join("cell.json"),
        serde_json::to_string_pretty(&st).unwrap_or_default() + "\n",
    );
    // Between cells, never beside a measurement: the per-write files are stored
    // compressed (readers open them by the plain name either way).
    // A cell of several flows (`-P N`) has them per flow, in flow-K/; a command cell per
    // traced connection, in conn-N/.
    let flow_dirs = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_dir()
                        && p.file_name().is_some_and(|n| {
                            let n = n.to_string_lossy();
                            n.starts_with("flow-") || n.starts_with("conn-")
                        })
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for d in std::iter::once(dir.to_path_buf()).chain(flow_dirs) {
        for name in crate::report::compressed::PER_WRITE_FILES {
            if let Err(e) = crate::report::compressed::compress(&d.join(name)) {
                crate::say!(
                    "sbm-matrix: {}: left uncompressed: {e}",
                    d.join(name).display()
                );
            }
        }
    }
    let row = report::summary_row(cell, &report::CellFiles::read(dir));
    // The same estimator as table.md.
    let headline = Headline::of([&row]);
    let (p50, p95) = (headline.p50(&row), headline.p95(&row));
    match (p50, p95, row.goodput_bps) {
        _ if st.status != Status::Ok => {
            format!(
                "{}: {}",
                st.status.name(),
                st.error.clone().unwrap_or_default()
            )
        }
        (_, _, Some(g)) if row.flows.is_some() => format!(
            "{} flows @ {} in all{}",
            row.flows.unwrap_or(0),
            fmt_rate(g),
            row.jain_index
                .map_or(String::new(), |j| format!(", Jain's index {j:.3}"))
        ),
        (Some(a), Some(b), Some(g)) => {
            format!("{} / {} @ {}", fmt_delay(a), fmt_delay(b), fmt_rate(g))
        }
        (_, _, Some(g)) => format!("no sojourn measured @ {}", fmt_rate(g)),
        _ => "no sojourn measured".into(),
    }
}
