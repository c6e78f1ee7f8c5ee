//! sbm-send's and sbm-sink's command lines for a cell, the same on every path (emulated,
//! guest, real hosts): the cell's settings as flags, the output directory and the sink.

use super::spec::{Cell, MatrixSpec, SINK_PORT};
use crate::testbed::wan;

/// Where the emulated path's sink listens.
pub(super) fn emulated_sink() -> String {
    format!("{}:{SINK_PORT}", wan::RCV_ADDR)
}

/// sbm-send's arguments for `cell` (without the program), connecting to `sink` and
/// writing into `out`.
pub(super) fn send_args(spec: &MatrixSpec, cell: &Cell, out: &str, sink: &str) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--connect".into(),
        sink.into(),
        "-t".into(),
        format!("{}ms", cell.duration.as_millis()),
        "--warmup".into(),
        format!("{}ms", cell.warmup.as_millis()),
        "-i".into(),
        spec.interval.clone(),
        "--out".into(),
        out.into(),
        "--label".into(),
        cell.label.clone(),
        "-l".into(),
        cell.write_size.clone(),
        "--cc".into(),
        cell.cc.clone(),
    ];
    if cell.nodelay {
        args.push("--nodelay".into());
    }
    if let Some(d) = cell.drain_timeout {
        args.extend(["--drain-timeout".into(), format!("{}ms", d.as_millis())]);
    }
    args.extend(cell.args.iter().cloned());
    args
}

/// How many connections the cell's sbm-send opens (`-P N`; 1 if its arguments do not parse,
/// which check_send_args has reported before any cell runs).
pub(super) fn send_flows(spec: &MatrixSpec, cell: &Cell) -> u16 {
    use clap::Parser as _;
    let mut argv = vec!["sbm-send".to_string()];
    argv.extend(send_args(spec, cell, "OUT", &emulated_sink()));
    crate::send::cli::SendArgs::try_parse_from(&argv).map_or(1, |a| a.parallel)
}
