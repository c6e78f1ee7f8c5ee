//! The test matrix end to end on the emulated path (root): the quick preset reproduces the
//! report's 2 Mb/s ordering; Ctrl-C keeps finished cells and --resume completes the run.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

fn matrix_bin() -> String {
    env!("CARGO_BIN_EXE_sbm-matrix").to_string()
}

fn presets() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/matrices"))
}

fn run_matrix(args: &[&str], timeout: Duration) -> Finished {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    let mut cmd = Command::new(matrix_bin());
    cmd.args(&all).env("SBM_MATRICES", presets());
    common::output_within(cmd, timeout)
}

fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the matrix tests need root: run `sudo cargo test --release`"
    );
}

fn namespaces_with(prefix: &str) -> Vec<String> {
    let out = common::run_program("ip", &["netns", "list"], Duration::from_secs(30));
    out.stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{prefix}-")))
        .map(str::to_string)
        .collect()
}

#[test]
fn quick_matrix_reproduces_the_reports_ordering_at_2mbit() {
    let _g = serial();
    require_root();
    let dir = tempdir("quick");
    let prefix = format!("q{}", std::process::id() % 100_000);
    let res = run_matrix(
        &["quick", "--out", dir.to_str().unwrap(), "--prefix", &prefix],
        Duration::from_secs(300),
    );
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
    assert!(namespaces_with(&prefix).is_empty(), "the test bed is gone");
    // README shows this command's output: the same kinds of lines, in the same order.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let (_, sample) = common::code_blocks(&readme)
        .into_iter()
        .find(|(_, body)| {
            body.first()
                .is_some_and(|l| l.starts_with("sbm-matrix: 3 cells"))
        })
        .expect("README shows the quick matrix's output");
    assert_eq!(
        common::shapes(&res.stdout),
        common::shapes(&sample.join("\n")),
        "README's quick-matrix sample is not what the quick matrix prints now:\n{}",
        res.stdout
    );
    let rows = read_csv(&dir.join("summary.csv"));
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r["status"] == "ok"), "{rows:?}");
    let by = |config: &str| rows.iter().find(|r| r["config"] == config).unwrap();
    let (d, l, r) = (by("default"), by("lowat-165KB"), by("replenish-15ms"));
    let (sd, sl, sr) = (
        f(d, "sojourn_p50_us"),
        f(l, "sojourn_p50_us"),
        f(r, "sojourn_p50_us"),
    );
    assert!(
        sd > sl && sl > sr,
        "default {sd} > lowat {sl} > replenish {sr} (µs)"
    );
    // Goodput counts only bytes that entered the network after the warm-up, so it cannot
    // exceed what the bottleneck carries: 2 Mb/s of 1514-byte frames with 1448 B of payload.
    let payload = sbm::testbed::plan::Bottleneck {
        rate_bps: 2_000_000,
        queue: std::time::Duration::from_millis(200),
    }
    .payload_bps(1448, 66);
    for row in [d, l, r] {
        assert!(
            f(row, "goodput_bps") <= payload,
            "{}: goodput {} above the bottleneck's payload rate {payload:.0}",
            row["config"],
            row["goodput_bps"]
        );
    }
    let gd = f(d, "goodput_bps");
    for row in [l, r] {
        assert!(
            f(row, "goodput_bps") >= 0.95 * gd,
            "{} goodput {} vs default {gd}",
            row["config"],
            row["goodput_bps"]
        );
    }
    let table = std::fs::read_to_string(dir.join("table.md")).unwrap();
    // The first table is the report's layout; the estimators' table follows it.
    let first = table
        .split("\n\n")
        .find(|b| b.starts_with("| sender configuration"))
        .unwrap();
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(lines[0], "| sender configuration | 2 Mb/s |");
    assert_eq!(lines.len(), 2 + 3, "{table}");
    assert!(lines[2].starts_with("| Default (512 KiB sndbuf) | ") && lines[2].contains(" @ "));
    assert!(
        res.stdout.contains("| REPLENISH_TIME = 15 ms |"),
        "the table is printed"
    );
    let cdf = std::fs::read_to_string(dir.join("plots/cdf-2mbit.svg")).unwrap();
    assert_eq!(
        cdf.matches("<polyline").count(),
        3,
        "one CDF series per configuration"
    );
    // Every column and key the matrix writes is documented.
    let readme = common::output_reference();
    let cell = dir.join("2mbit-default");
    let mut undocumented: Vec<String> = csv_headers(&dir.join("summary.csv"))
        .into_iter()
        .filter(|h| !readme.contains(&format!("`{h}`")))
        .collect();
    for file in ["cell.json", "meta.json"] {
        let v = read_json(&cell.join(file));
        for k in v.as_object().unwrap().keys() {
            if !readme.contains(&format!("`{k}`")) {
                undocumented.push(format!("{file}: {k}"));
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "undocumented in docs/output.md: {undocumented:?}"
    );
}

fn tiny_matrix(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.toml");
    std::fs::write(
        &path,
        "name = \"tiny\"\nduration = \"3s\"\nwarmup = \"1s\"\npause = \"0s\"\ndrain_timeout = \"2s\"\n\
         [path]\nrtt = \"20ms\"\n[axes]\nrate = [\"2mbit\"]\nconfig = [\"a\", \"b\"]\n\
         [configs.a]\nargs = [\"--sndbuf\", \"64KiB\"]\n[configs.b]\nargs = [\"--notsent-lowat\", \"16KB\"]\n",
    )
    .unwrap();
    path
}

#[test]
fn ctrl_c_keeps_finished_cells_and_resume_completes_the_run() {
    let _g = serial();
    require_root();
    let dir = tempdir("resume");
    let matrix = tiny_matrix(&dir);
    let out = dir.join("run");
    let prefix = format!("r{}", std::process::id() % 100_000);
    let mut runner = Running::spawn_program(
        &matrix_bin(),
        &[
            "run",
            matrix.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--prefix",
            &prefix,
        ],
    );
    runner.wait_line("  2mbit-a:", Duration::from_secs(60));
    runner.wait_line("[2/2] 2mbit-b", Duration::from_secs(30));
    runner.signal(Signal::SIGINT);
    let res = runner.wait(Duration::from_secs(60));
    assert_eq!(res.code(), Some(130), "{}\n{}", res.stdout, res.stderr);
    assert!(res.stdout.contains("--resume"), "{}", res.stdout);
    assert!(
        namespaces_with(&prefix).is_empty(),
        "Ctrl-C leaves no namespaces"
    );
    let a = read_json(&out.join("2mbit-a/cell.json"));
    assert_eq!(a["status"], "ok");
    let a_summary = std::fs::read(out.join("2mbit-a/summary.json")).unwrap();
    let b = read_json(&out.join("2mbit-b/cell.json"));
    assert_eq!(b["status"], "interrupted");

    let res = run_matrix(
        &[
            matrix.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--resume",
            "--prefix",
            &prefix,
        ],
        Duration::from_secs(120),
    );
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
    assert!(
        res.stdout.contains("1 cells"),
        "only the unfinished cell runs: {}",
        res.stdout
    );
    assert_eq!(read_json(&out.join("2mbit-b/cell.json"))["status"], "ok");
    assert_eq!(
        std::fs::read(out.join("2mbit-a/summary.json")).unwrap(),
        a_summary,
        "finished cells untouched"
    );
    let rows = read_csv(&out.join("summary.csv"));
    assert!(rows.iter().all(|r| r["status"] == "ok"));
    assert!(namespaces_with(&prefix).is_empty());
}

/// Ctrl-C in a terminal reaches the whole foreground group: sbm-matrix, and the sbm-send
/// and sbm-sink of the running cell at the same instant. The finished cell is kept, the
/// interrupted one is marked so with its files flushed, and nothing is left behind.
#[test]
fn ctrl_c_to_the_process_group_mid_cell_keeps_files_and_leaves_nothing() {
    let _g = serial();
    require_root();
    let dir = tempdir("pgint");
    let matrix = tiny_matrix(&dir);
    let out = dir.join("run");
    let prefix = format!("g{}", std::process::id() % 100_000);
    ctrl_c_mid_second_cell(&matrix, &out, &prefix, Duration::from_secs(60));
}

#[test]
fn bad_matrices_fail_with_one_line() {
    let _g = serial();
    let dir = tempdir("badmx");
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[axes]\nrate = [\"2mbyte\"]\n").unwrap();
    let res = run_matrix(
        &[path.to_str().unwrap(), "--dry-run"],
        Duration::from_secs(10),
    );
    assert_eq!(res.code(), Some(1));
    assert!(
        res.stderr.contains("axes.rate") && res.stderr.trim().lines().count() == 1,
        "{}",
        res.stderr
    );
    let res = run_matrix(&["no-such-preset", "--dry-run"], Duration::from_secs(10));
    assert_eq!(res.code(), Some(1));
    assert!(res.stderr.contains("no-such-preset.toml"), "{}", res.stderr);
    let res = run_matrix(&["paper", "--dry-run"], Duration::from_secs(10));
    assert_eq!(res.code(), Some(0));
    assert!(res.stdout.contains("105 cells"), "{}", res.stdout);
}

/// The report is read once and exported by functions of what was read: with the run's
/// directory gone after [`RunReport::read`], every file still comes out, the same bytes as
/// the committed ones (a committed run with pages, plots and packed cells).
#[test]
fn the_exporters_need_nothing_but_the_run_as_read() {
    use sbm::matrix::run_report::{CellPlots, RunReport};
    let committed = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/results/unmodified"));
    let dir = tempdir("read-once");
    let cp = common::run_program(
        "cp",
        &["-r", committed.to_str().unwrap(), dir.to_str().unwrap()],
        Duration::from_secs(60),
    );
    assert!(cp.status.success(), "{}", cp.stderr);
    let copy = dir.join("unmodified");
    let (spec, _) = sbm::matrix::run::load(&copy.join("matrix.toml")).unwrap();
    let cells = spec.cells().unwrap();
    let report = RunReport::read(&copy, &spec, &cells, CellPlots::default());
    std::fs::remove_dir_all(&copy).unwrap();
    let table = sbm::matrix::report::table_md(&spec, &report.rows);
    let files = sbm::matrix::export::files(&report, &table).unwrap();
    assert!(files.len() > 5, "{} files", files.len());
    for (path, bytes) in &files {
        let was = std::fs::read(committed.join(path))
            .unwrap_or_else(|e| panic!("{path}: not committed ({e})"));
        assert!(was == *bytes, "{path} differs from the committed file");
    }
}

/// The committed reproduction's table is what its stored results say: rebuilding it from
/// the cells gives the committed file byte for byte, with one CDF series per configuration.
#[test]
fn committed_paper_table_rebuilds_identically() {
    let _g = serial();
    let committed = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/results/paper"));
    let dir = tempdir("paper-rebuild");
    let cp = common::run_program(
        "cp",
        &["-r", committed.to_str().unwrap(), dir.to_str().unwrap()],
        Duration::from_secs(60),
    );
    assert!(cp.status.success(), "{}", cp.stderr);
    let copy = dir.join("paper");
    std::fs::remove_file(copy.join("table.md")).unwrap();
    let mut cmd = Command::new(matrix_bin());
    cmd.args(["report", copy.to_str().unwrap()]);
    let out = common::output_within(cmd, Duration::from_secs(120));
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(copy.join("table.md")).unwrap(),
        std::fs::read_to_string(committed.join("table.md")).unwrap(),
        "results/paper/table.md is not what its results say"
    );
    for rate in ["100kbit", "2mbit", "86mbit"] {
        let svg = std::fs::read_to_string(copy.join(format!("plots/cdf-{rate}.svg"))).unwrap();
        // Cells are named CONFIG-rN, one per repetition (CONFIG-rN.tar.xz when packed); the
        // CDF pools a configuration's.
        let mut configs: Vec<String> = std::fs::read_dir(&committed)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .map(|name| name.trim_end_matches(".tar.xz").to_string())
            .filter(|name| name.starts_with(&format!("{rate}-")))
            .map(|name| match name.rsplit_once("-r") {
                Some((config, rep)) if rep.bytes().all(|b| b.is_ascii_digit()) => {
                    config.to_string()
                }
                _ => name,
            })
            .collect();
        configs.sort();
        configs.dedup();
        // A configuration with nothing to draw is still in the legend, said in grey.
        let legend = svg.matches(r#"width="12" height="4""#).count()
            + svg.matches(r#"<text class="no-data""#).count();
        assert_eq!(
            legend,
            configs.len(),
            "one CDF series per configuration at {rate}"
        );
        assert_eq!(configs.len(), 5, "{configs:?}");
    }
}

/// Every committed run's table.md is what its stored cells say: each results directory
/// with a matrix.toml, copied, its compressed CSVs unpacked (results/README.md), rebuilt
/// with `sbm-matrix report`, gives its table.md byte for byte.
#[test]
fn every_committed_table_rebuilds_identically() {
    // The cells' per-write files are read as committed (xz-compressed where they are).
    let _g = serial();
    let results = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/results"));
    let scratch = tempdir("tables-rebuild");
    let mut checked = vec![];
    for entry in std::fs::read_dir(&results).unwrap().flatten() {
        let run = entry.path();
        if !run.join("matrix.toml").is_file() || !run.join("table.md").is_file() {
            continue;
        }
        let name = run.file_name().unwrap().to_string_lossy().into_owned();
        let cp = common::run_program(
            "cp",
            &["-r", run.to_str().unwrap(), scratch.to_str().unwrap()],
            Duration::from_secs(60),
        );
        assert!(cp.status.success(), "{}", cp.stderr);
        let copy = scratch.join(&name);
        std::fs::remove_file(copy.join("table.md")).unwrap();
        let mut cmd = Command::new(matrix_bin());
        cmd.args(["report", copy.to_str().unwrap()]);
        let out = common::output_within(cmd, Duration::from_secs(120));
        assert!(out.status.success(), "{name}: {}", out.stderr);
        assert_eq!(
            std::fs::read_to_string(copy.join("table.md")).unwrap(),
            std::fs::read_to_string(run.join("table.md")).unwrap(),
            "{name}/table.md does not rebuild from its cells"
        );
        // A picture only of what ran: a run's section of its configuration's page draws
        // a plot only when the run's directory (or archive) is there (a run still in
        // progress has cells that have not run yet), and every configuration with a
        // finished run draws one.
        let mut drawn = 0;
        for page in std::fs::read_dir(copy.join("cells")).unwrap().flatten() {
            let html = std::fs::read_to_string(page.path()).unwrap();
            for section in html.split("<section id=\"").skip(1) {
                let cell = section.split('"').next().unwrap();
                if section.contains("<div class=\"plot\">") {
                    drawn += 1;
                    assert!(
                        sbm::report::compressed::is_dir(&copy.join(cell)),
                        "{name}: a plot drawn for {cell}, which has not run"
                    );
                }
            }
        }
        assert!(drawn > 0, "{name}: no run's plot drawn");
        checked.push(name);
    }
    assert!(checked.len() >= 5, "only {checked:?} checked");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// For every committed run, each finished cell's figures recomputed from its raw files: the
/// sampled median and p95 from writes.csv against summary.json (which comes from a
/// histogram of three significant digits), and goodput against intervals.csv.
#[test]
fn every_committed_cell_recomputes_from_its_raw_files() {
    let results = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/results"));
    let mut cells = 0;
    for run in std::fs::read_dir(&results)
        .unwrap()
        .flatten()
        .map(|e| e.path())
    {
        if !run.join("matrix.toml").is_file() {
            continue;
        }
        // A packed cell, CELL.tar.xz, is read from its archive as the directory CELL.
        let entries = std::fs::read_dir(&run).unwrap().flatten().map(|e| e.path());
        for cell in entries.map(|p| sbm::report::archive::dir_of(&p).unwrap_or(p)) {
            let summary_path = cell.join("summary.json");
            let finished = sbm::report::compressed::exists(&summary_path)
                && read_json(&cell.join("cell.json"))["status"].as_str() == Some("ok");
            if !finished {
                continue;
            }
            let name = cell.strip_prefix(&results).unwrap().display().to_string();
            let s = read_json(&summary_path);
            let near = |what: &str, ours: u64, theirs: u64| {
                let tol = (theirs as f64 * 0.002).max(2.0);
                assert!(
                    (ours as f64 - theirs as f64).abs() <= tol,
                    "{name}: {what} recomputed {ours} µs, summary.json {theirs} µs"
                );
            };
            if let (Some(p50), Some(p95)) = (
                s["sojourn_sampled"]["p50_us"].as_u64(),
                s["sojourn_sampled"]["p95_us"].as_u64(),
            ) {
                let mut v: Vec<u64> = read_csv(&cell.join("writes.csv"))
                    .iter()
                    .filter(|r| r["warmup"] == "false")
                    .filter_map(|r| r.get("sampled_sojourn_us")?.parse().ok())
                    .collect();
                v.sort_unstable();
                assert!(!v.is_empty(), "{name}: no sampled sojourns in writes.csv");
                near("sampled p50", percentile(&v, 0.50), p50);
                near("sampled p95", percentile(&v, 0.95), p95);
            }
            // Goodput: schema 2 states its bytes and window; those bytes were acknowledged
            // inside the intervals after the warm-up, so they are at most the intervals' sum.
            // Schema 1 counted every byte acknowledged after the warm-up: the intervals' sum
            // over the same time.
            let t = &s["totals"];
            let goodput = t["goodput_bps"].as_f64().unwrap();
            let acked_after: f64 = read_csv(&cell.join("intervals.csv"))
                .iter()
                .filter(|r| r["warmup"] == "false")
                .map(|r| r["bytes_acked"].parse::<f64>().unwrap())
                .sum();
            let window = s["config"]["time_limit_s"].as_f64().unwrap_or(0.0)
                - s["config"]["warmup_s"].as_f64().unwrap_or(0.0);
            if s["schema_version"].as_u64().unwrap_or(0) >= 2 {
                let (bytes, secs) = (
                    t["goodput_bytes"].as_f64().unwrap(),
                    t["goodput_window_s"].as_f64().unwrap(),
                );
                assert!(
                    (goodput - bytes * 8.0 / secs).abs() <= 1e-6 * goodput.max(1.0),
                    "{name}: goodput {goodput} is not goodput_bytes × 8 / window"
                );
                assert!(
                    bytes <= acked_after + 1.0,
                    "{name}: goodput_bytes {bytes} above the bytes acked after the warm-up {acked_after}"
                );
            } else if window > 0.0 && acked_after > 0.0 {
                let from_intervals = acked_after * 8.0 / window;
                assert!(
                    (goodput / from_intervals - 1.0).abs() <= 0.01,
                    "{name}: goodput {goodput:.0} vs {from_intervals:.0} from intervals.csv"
                );
            }
            cells += 1;
        }
    }
    assert!(cells >= 50, "only {cells} cells checked");
}

/// A rate schedule: the bottleneck changes at its instants after the sender connected —
/// read back from tc while the cell runs, not from sbm's own records — meta.json records
/// each change, and the cell's goodput follows the rate.
#[test]
fn a_rate_schedule_changes_the_bottleneck_on_time_and_is_recorded() {
    let _g = serial();
    require_root();
    let dir = tempdir("schedule");
    let prefix = format!("rs{}", std::process::id() % 100_000);
    let matrix = dir.join("sched.toml");
    std::fs::write(
        &matrix,
        r#"name = "sched"
duration = "7s"
warmup = "1s"
pause = "0s"
drain_timeout = "3s"
[path]
rtt = "20ms"
[axes]
rate = ["2mbit-dip"]
config = ["frames"]
[rates."2mbit-dip"]
rate = "2mbit"
schedule = [{ at = "2s", rate = "500kbit" }, { at = "4500ms", rate = "2mbit" }]
[configs.frames]
args = ["--fps", "30", "--frame-size", "6KB", "--stale", "latest", "--notsent-lowat", "16KB"]
"#,
    )
    .unwrap();
    let out = dir.join("run");
    let mut cmd = Command::new(matrix_bin());
    cmd.args([
        "run",
        matrix.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--prefix",
        &prefix,
    ]);
    let probe = MachineProbe::start();
    let mut run = Running::spawn_command(cmd);
    // Read the HTB class rate on the wan namespace's egress toward rcv as fast as tc
    // answers. A change took effect after the previous poll started (that poll still read
    // the old rate) and before the poll that saw it returned: `seen` keeps that bracket, so
    // a slow poll (CPU steal) widens it instead of making the change look late.
    let wan = format!("{prefix}-wan");
    // (earliest, latest, rate): the change to `rate` took effect in [earliest, latest].
    let mut seen: Vec<(u64, u64, u64)> = vec![];
    let mut previous_poll_start = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while run.is_running() && std::time::Instant::now() < deadline {
        let poll_start = sbm::clock::realtime_ns();
        let o = run_program(
            "ip",
            &["netns", "exec", &wan, "tc", "class", "show", "dev", "wr"],
            Duration::from_secs(5),
        );
        let poll_end = sbm::clock::realtime_ns();
        let rate = o
            .stdout
            .split_whitespace()
            .skip_while(|w| *w != "rate")
            .nth(1)
            .and_then(parse_tc_rate);
        if let Some(r) = rate {
            if seen.last().is_none_or(|&(_, _, last)| last != r) {
                seen.push((previous_poll_start, poll_end, r));
            }
            previous_poll_start = poll_start;
        }
    }
    let res = run.wait(Duration::from_secs(60));
    let machine = probe.finish();
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
    assert!(namespaces_with(&prefix).is_empty(), "the test bed is gone");
    let cell = out.join("2mbit-dip-frames");
    let meta = read_json(&cell.join("meta.json"));
    let origin = meta["schedule_origin_unix_ns"]
        .as_u64()
        .expect("origin recorded");
    let changes = meta["rate_changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{meta}");
    let rates: Vec<u64> = seen.iter().map(|s| s.2).collect();
    assert_eq!(rates, [2_000_000, 500_000, 2_000_000], "tc showed {seen:?}");
    let ms = |a: u64, b: u64| (a as i64 - b as i64) as f64 / 1e6;
    for (k, (due_s, change)) in [2.0, 4.5].iter().zip(changes).enumerate() {
        let (earliest, latest, _) = seen[k + 1];
        let due = origin + (due_s * 1e9) as u64;
        // tc's own view: not before it was due. (How late tc shows it is the poller's
        // resolution as much as sbm's: a poll is a process start, slow on a busy host.)
        assert!(
            ms(latest, due) > -5.0,
            "change {k}: tc showed it {:.1} ms before it was due",
            -ms(latest, due)
        );
        // sbm's record: `set` started on time — within 100 ms of the instant, plus what the
        // machine itself did to a waking thread meanwhile (a timer in sbm-matrix wakes no
        // sooner than the test's own control does) — and its bracket overlaps tc's.
        let started = change["started_unix_ns"].as_u64().unwrap();
        let applied = change["applied_unix_ns"].as_u64().unwrap();
        let bound_ms = 100.0 + machine.control_max_us as f64 / 1e3;
        assert!(
            ms(started, due) > -5.0 && ms(started, due) < bound_ms,
            "change {k}: set started {:.1} ms after it was due (bound {bound_ms:.1} ms: {machine})",
            ms(started, due)
        );
        if ms(started, due) >= 100.0 {
            eprintln!(
                "change {k}: set started {:.1} ms after it was due, inside the bound only because {machine}",
                ms(started, due)
            );
        }
        assert!(
            started <= latest && earliest <= applied,
            "change {k}: set from {started} to {applied}, tc saw it in [{earliest}, {latest}]"
        );
        assert!(change["error"].is_null(), "{change}");
    }
    // The sender saw it. The frames' 1.44 Mb/s pass 2 Mb/s whole: some second before the
    // dip and some second after it carry more than 1.2 Mb/s (one such second, not each: a
    // host stall or a loss recovery can empty any one second). The dip's whole seconds,
    // 2 to 4 s, carry at most 500 kb/s less framing, judged together: the drop to 500 kb/s
    // overflows the queue, and the retransmission that fills the hole acknowledges in the
    // next second what arrived in this one (seen: 301 then 660 kb/s).
    let intervals = read_csv(&cell.join("intervals.csv"));
    let goodput = |from: f64, to: f64| -> Vec<f64> {
        intervals
            .iter()
            .filter(|r| f(r, "start_s") >= from && f(r, "start_s") < to)
            .map(|r| f(r, "goodput_bps"))
            .collect()
    };
    let shown: Vec<String> = intervals
        .iter()
        .map(|r| {
            format!(
                "{}-{} s: {} b/s, {} retransmits",
                r["start_s"], r["end_s"], r["goodput_bps"], r["retransmits"]
            )
        })
        .collect();
    let best = |v: Vec<f64>| v.into_iter().fold(0.0, f64::max);
    assert!(best(goodput(0.0, 2.0)) > 1.2e6, "before the dip: {shown:?}");
    let dip = goodput(2.0, 4.0);
    assert_eq!(dip.len(), 2, "{shown:?}");
    assert!(
        dip.iter().sum::<f64>() / 2.0 < 0.55e6,
        "in the dip: {shown:?}"
    );
    assert!(best(goodput(5.0, 7.0)) > 1.2e6, "after it: {shown:?}");
    let summary = read_json(&cell.join("summary.json"));
    assert!(summary["content_age"]["dropped"].as_u64().unwrap() > 0);
}

/// Every preset is a valid matrix whose cells' sender arguments all pass sbm-send's own
/// parser (`--dry-run` checks both and runs nothing).
#[test]
fn every_preset_dry_runs() {
    let mut checked = 0;
    for entry in std::fs::read_dir(presets()).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let res = run_matrix(
            &[path.to_str().unwrap(), "--dry-run"],
            Duration::from_secs(30),
        );
        assert_eq!(res.code(), Some(0), "{}: {}", path.display(), res.stderr);
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} presets found");
}

/// A cell of two flows (`-P 2`, one Reno and one CUBIC) through one 2 Mb/s bottleneck: the
/// cell's goodput is the flows' sum and stays under the bottleneck's payload rate, each flow
/// has its own files, and the table says how fairly they shared it.
#[test]
fn a_two_flow_cell_sums_its_flows_and_says_how_fair_they_were() {
    let _g = serial();
    require_root();
    let dir = tempdir("twoflow");
    let matrix = dir.join("two.toml");
    std::fs::write(
        &matrix,
        r#"
name = "two-flows"
description = "two flows share a bottleneck"
duration = "12s"
warmup = "4s"
pause = "1s"
[path]
rtt = "40ms"
queue = "100ms"
[axes]
config = ["two"]
write_size = ["16KiB"]
cc = ["reno,cubic"]
[configs.two]
label = "Reno and CUBIC"
args = ["-P", "2"]
"#,
    )
    .unwrap();
    let out = dir.join("run");
    let prefix = format!("tf{}", std::process::id() % 100_000);
    let res = run_matrix(
        &[
            matrix.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--prefix",
            &prefix,
        ],
        Duration::from_secs(180),
    );
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
    let rows = read_csv(&out.join("summary.csv"));
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row["status"], "ok", "{row:?}");
    assert_eq!(row["flows"], "2");
    let per_flow: Vec<f64> = row["flow_goodputs_bps"]
        .split(';')
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(per_flow.len(), 2);
    let sum: f64 = per_flow.iter().sum();
    assert!((f(row, "goodput_bps") - sum).abs() < 2.0, "{row:?}");
    let payload = sbm::testbed::plan::Bottleneck {
        rate_bps: 2_000_000,
        queue: Duration::from_millis(100),
    }
    .payload_bps(1448, 66);
    assert!(
        sum <= payload && sum > 0.8 * payload,
        "sum {sum} of {payload}"
    );
    let jain = f(row, "jain_index");
    assert!((0.5..=1.0).contains(&jain), "{jain}");
    for k in 1..=2 {
        let flow = out.join(format!("2mbit-two/flow-{k}"));
        assert!(flow.join("summary.json").is_file(), "{}", flow.display());
        // Stored compressed, as a single flow's are.
        assert!(flow.join("writes.csv.xz").is_file(), "{}", flow.display());
    }
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(
        table.contains("2 flows @ ") && table.contains("Jain's index"),
        "{table}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An installed copy (`cargo install`) has no source tree beside it: its presets come from
/// the binary itself, written out under $SBM_CACHE, and the generator writes man pages.
#[test]
fn an_installed_copy_finds_its_presets_without_the_source_tree() {
    let dir = tempdir("installed");
    let bin_dir = dir.join("prefix/bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let exe = bin_dir.join("sbm-matrix");
    std::fs::copy(matrix_bin(), &exe).unwrap();
    let cache = dir.join("cache");
    let in_dir = |args: &[&str]| {
        let mut cmd = Command::new(&exe);
        cmd.args(args)
            .current_dir(&dir)
            .env_remove("SBM_MATRICES")
            .env("SBM_CACHE", &cache);
        common::output_within(cmd, Duration::from_secs(30))
    };
    let list = in_dir(&["list"]);
    assert_eq!(list.code(), Some(0), "{}", list.stderr);
    assert!(list.stdout.contains("paper "), "{}", list.stdout);
    let dry = in_dir(&["run", "paper", "--dry-run"]);
    assert_eq!(dry.code(), Some(0), "{}", dry.stderr);
    assert!(dry.stdout.contains("105 cells"), "{}", dry.stdout);
    let written: Vec<_> = std::fs::read_dir(cache.join("embedded"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        written.len() == 1 && written[0].starts_with("matrices-"),
        "{written:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `compare` on two stored runs with a known difference: a copy of a committed run against
/// itself with one configuration's delays raised by half and another's settings changed.
/// The raised cell is beyond the spread, the untouched ones within it at +0 %, and the
/// changed configuration is listed as only in one run each way.
#[test]
fn compare_finds_a_known_difference_and_matches_cells_by_identity() {
    let src = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/results/uml-trap-mss1448"
    ));
    let dir = tempdir("compare");
    for name in ["a", "b"] {
        let cp = common::run_program(
            "cp",
            &[
                "-r",
                src.to_str().unwrap(),
                dir.join(name).to_str().unwrap(),
            ],
            Duration::from_secs(60),
        );
        assert!(cp.status.success(), "{}", cp.stderr);
    }
    let b = dir.join("b");
    // A stays as committed (its cells packed, read from their archives); B's cells are
    // unpacked to be edited, which `sbm-matrix unpack` must restore file for file.
    let mut unpack = Command::new(matrix_bin());
    unpack.args(["unpack", b.to_str().unwrap()]);
    let res = common::output_within(unpack, Duration::from_secs(60));
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    assert!(
        b.join("2mbit-kernel-nodelay-r1/summary.json").is_file(),
        "{}",
        res.stdout
    );
    // In B, every run of "kernel, TCP_NODELAY" waits 1.5 × as long.
    for cell in std::fs::read_dir(&b).unwrap().flatten() {
        let name = cell.file_name().to_string_lossy().into_owned();
        if !name.starts_with("2mbit-kernel-nodelay") {
            continue;
        }
        let path = cell.path().join("summary.json");
        let mut v = read_json(&path);
        for key in ["sojourn_sampled", "sojourn"] {
            for q in ["p50_us", "p95_us"] {
                let x = v[key][q].as_u64().unwrap();
                v[key][q] = serde_json::json!(x * 3 / 2);
            }
        }
        // ... and was measured by an sbm of the older goodput definition.
        v["schema_version"] = serde_json::json!(1);
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }
    // And its emulated clause-off configuration runs with other arguments.
    let toml = b.join("matrix.toml");
    let text = std::fs::read_to_string(&toml).unwrap().replace(
        r#""--sub-mss-clause", "off"]"#,
        r#""--sub-mss-clause", "off", "--threshold-test", "half"]"#,
    );
    std::fs::write(&toml, text).unwrap();
    let out = dir.join("compare.md");
    let page = dir.join("compare.html");
    let mut cmd = Command::new(matrix_bin());
    cmd.args([
        "compare",
        dir.join("a").to_str().unwrap(),
        b.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
    ]);
    let res = common::output_within(cmd, Duration::from_secs(60));
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    let md = std::fs::read_to_string(&out).unwrap();
    assert_eq!(md.trim(), res.stdout.trim());
    let html = std::fs::read_to_string(&page).unwrap();
    let row = html
        .lines()
        .find(|l| l.starts_with("<tr><td>kernel, TCP_NODELAY</td>"))
        .unwrap_or_else(|| panic!("no HTML row for kernel, TCP_NODELAY:\n{html}"));
    assert!(
        row.contains("median +50 % (<strong>beyond the spread</strong>)"),
        "{row}"
    );
    let line = |label: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {label} |")))
            .unwrap_or_else(|| panic!("no row {label}:\n{md}"))
            .to_string()
    };
    let nodelay = line("kernel, TCP_NODELAY");
    assert!(
        nodelay.contains("median +50 % (**beyond the spread**)"),
        "{nodelay}"
    );
    assert!(
        nodelay.contains("goodput +0 % (within the spread)"),
        "{nodelay}"
    );
    let untouched = line("kernel, Nagle, sub-MSS clause on");
    assert!(
        untouched.contains("median +0 % (within the spread)") && !untouched.contains("beyond"),
        "{untouched}"
    );
    assert!(
        md.contains("Goodput is not the same quantity in every run (A schema 2, B schema 1 and 2)"),
        "{md}"
    );
    assert!(
        md.contains("- emulated, Nagle, sub-MSS clause off at 2 Mb/s: only in A")
            && md.contains("- emulated, Nagle, sub-MSS clause off at 2 Mb/s: only in B"),
        "{md}"
    );
    // A single finished run has no spread: C keeps one of the five runs of "kernel,
    // TCP_NODELAY" (the others marked failed), and its row gives the change, no verdict.
    let c = dir.join("c");
    let cp = common::run_program(
        "cp",
        &["-r", src.to_str().unwrap(), c.to_str().unwrap()],
        Duration::from_secs(60),
    );
    assert!(cp.status.success(), "{}", cp.stderr);
    // Only the cells to edit are unpacked (by name); the rest stay packed.
    let edited: Vec<String> = (2..=5)
        .map(|r| format!("2mbit-kernel-nodelay-r{r}"))
        .collect();
    let mut unpack = Command::new(matrix_bin());
    unpack.arg("unpack").arg(&c).args(&edited);
    let res = common::output_within(unpack, Duration::from_secs(60));
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    assert!(res.stdout.contains("4 cells unpacked"), "{}", res.stdout);
    assert!(sbm::report::archive::archive_path(&c.join("2mbit-kernel-nodelay-r1")).is_file());
    for r in 2..=5 {
        let path = c.join(format!("2mbit-kernel-nodelay-r{r}/cell.json"));
        let mut v = read_json(&path);
        v["status"] = serde_json::json!("failed");
        std::fs::write(&path, v.to_string()).unwrap();
    }
    let compare_a_with_c = || {
        let mut cmd = Command::new(matrix_bin());
        cmd.args([
            "compare",
            dir.join("a").to_str().unwrap(),
            c.to_str().unwrap(),
        ]);
        common::output_within(cmd, Duration::from_secs(60))
    };
    let res = compare_a_with_c();
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    let one = res
        .stdout
        .lines()
        .find(|l| l.starts_with("| kernel, TCP_NODELAY |"))
        .unwrap_or_else(|| panic!("{}", res.stdout));
    assert!(
        one.contains("n = 1 here: no spread to judge by") && !one.contains("spread**"),
        "{one}"
    );
    // Counted as index.html counts: 25 cells, 21 finished, 5 configurations.
    assert!(
        res.stdout
            .contains("25 cells, 21 finished, 5 configurations"),
        "{}",
        res.stdout
    );
    // Two runs with no cell in common: an error naming what each has, not an empty table.
    let toml = c.join("matrix.toml");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace(r#"rtt = "172ms""#, r#"rtt = "100ms""#);
    std::fs::write(&toml, text).unwrap();
    let res = compare_a_with_c();
    assert_eq!(res.code(), Some(1), "{}{}", res.stdout, res.stderr);
    assert_eq!(res.stderr.trim().lines().count(), 1, "{}", res.stderr);
    assert!(
        res.stderr.contains("no cell in common")
            && res
                .stderr
                .contains("A has kernel, Nagle, sub-MSS clause on at 2 Mb/s")
            && res
                .stderr
                .contains("B has kernel, Nagle, sub-MSS clause on at 2 Mb/s")
            && res.stderr.contains("2 more"),
        "{}",
        res.stderr
    );
    // Fewer than two runs is a usage error.
    let mut cmd = Command::new(matrix_bin());
    cmd.args(["compare", dir.join("a").to_str().unwrap()]);
    let res = common::output_within(cmd, Duration::from_secs(30));
    assert_eq!(res.code(), Some(2), "{}", res.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// scripts/matrix takes paths from where it is called (it does not change directory) and
/// builds only when a binary is missing or older than the sources. Checked on a copy of
/// the script in a scratch tree whose binaries and `cargo` are stand-ins that log what
/// they were asked.
#[test]
fn scripts_matrix_builds_only_when_stale_and_keeps_the_callers_directory() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir("matrix-script");
    let root = dir.join("tree");
    let log = dir.join("log");
    let write_exe = |path: &Path, body: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("bpf")).unwrap();
    for f in ["src/lib.rs", "build.rs", "Cargo.toml", "Cargo.lock"] {
        std::fs::write(root.join(f), "").unwrap();
    }
    std::fs::create_dir_all(root.join("scripts")).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/matrix"),
        root.join("scripts/matrix"),
    )
    .unwrap();
    let logged = log.display().to_string();
    let bins = [
        "sbm-send",
        "sbm-sink",
        "sbm-delay",
        "sbm-testbed",
        "sbm-trace",
    ];
    let make_bins = || {
        write_exe(
            &root.join("target/release/sbm-matrix"),
            &format!("echo \"matrix cwd=$PWD args=$*\" >> {logged}"),
        );
        for b in bins {
            write_exe(&root.join("target/release").join(b), "exit 0");
        }
    };
    // The sources are older than the binaries.
    let touch_old = Command::new("touch")
        .args(["-d", "1 hour ago"])
        .args([
            "src/lib.rs",
            "build.rs",
            "Cargo.toml",
            "Cargo.lock",
            "src",
            "bpf",
        ])
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(touch_old.success());
    make_bins();
    let fake_path = dir.join("path");
    write_exe(
        &fake_path.join("cargo"),
        &format!("echo \"cargo $*\" >> {logged}"),
    );
    let caller = dir.join("elsewhere");
    std::fs::create_dir_all(&caller).unwrap();
    let call = || {
        let mut cmd = Command::new(root.join("scripts/matrix"));
        cmd.args(["compare", "runs/a", "runs/b"])
            .current_dir(&caller)
            .env("PATH", format!("{}:/usr/bin:/bin", fake_path.display()))
            .env_remove("SBM_BIN");
        let res = common::output_within(cmd, Duration::from_secs(30));
        assert_eq!(res.code(), Some(0), "{}", res.stderr);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        std::fs::remove_file(&log).ok();
        text
    };
    let fresh = call();
    assert_eq!(
        fresh.trim(),
        format!("matrix cwd={} args=compare runs/a runs/b", caller.display()),
        "fresh binaries: no build, the caller's directory and arguments as given"
    );
    // A source newer than the binaries: one build of the tree, from wherever it is called.
    std::fs::write(root.join("src/lib.rs"), "// changed").unwrap();
    let stale = call();
    let lines: Vec<&str> = stale.lines().collect();
    assert_eq!(lines.len(), 2, "{stale}");
    assert!(
        lines[0].starts_with("cargo build --release")
            && lines[0].contains(&format!("--manifest-path {}/Cargo.toml", root.display())),
        "{stale}"
    );
    assert!(lines[1].starts_with("matrix cwd="), "{stale}");
    // A missing binary is built too.
    make_bins();
    std::fs::remove_file(root.join("target/release/sbm-trace")).unwrap();
    assert!(call().starts_with("cargo build"));
}

/// results/timestamp-sources' runs.csv and README.md are what its script makes of the runs'
/// committed files (`--check`), and the check fails when a figure in runs.csv is changed.
#[test]
fn the_timestamp_sources_table_is_what_its_script_makes_of_the_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("scripts/timestamp-sources");
    let committed = root.join("results/timestamp-sources");
    let check = |dir: &Path| {
        common::run_program(
            script.to_str().unwrap(),
            &["--check", "--out", dir.to_str().unwrap()],
            Duration::from_secs(300),
        )
    };
    let out = check(&committed);
    assert!(out.status.success(), "{}", out.stderr);
    // A copy with one run's count of exact rows within 50 µs lowered by one.
    let copy = tempdir("timestamp-sources");
    let cp = common::run_program(
        "cp",
        &[
            "-r",
            &format!("{}/.", committed.display()),
            copy.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert!(cp.status.success(), "{}", cp.stderr);
    let runs = std::fs::read_to_string(copy.join("runs.csv")).unwrap();
    let mut lines: Vec<String> = runs.lines().map(str::to_string).collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = header.iter().position(|h| *h == "within_50us").unwrap();
    let mut cells: Vec<String> = lines[1].split(',').map(str::to_string).collect();
    cells[col] = (cells[col].parse::<u64>().unwrap() - 1).to_string();
    lines[1] = cells.join(",");
    std::fs::write(copy.join("runs.csv"), lines.join("\n") + "\n").unwrap();
    let out = check(copy.path());
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("within_50us"), "{}", out.stderr);
}

/// Runs scripts/analysis/SCRIPT on a committed run (RUN_DIR, a CSV path and `more_args`, the
/// table on stdout) and checks that the run's committed `table` and `csv` are what it makes.
fn script_remakes(run: &Path, script: &str, table: &str, csv: &str, more_args: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempdir("script-remakes");
    let made_csv = dir.join(csv);
    let out = common::run_program(
        root.join("scripts/analysis").join(script).to_str().unwrap(),
        &[
            &[run.to_str().unwrap(), made_csv.to_str().unwrap()],
            more_args,
        ]
        .concat(),
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "{script}: {}", out.stderr);
    for (made, file) in [
        (out.stdout, table),
        (std::fs::read_to_string(&made_csv).unwrap(), csv),
    ] {
        assert_eq!(
            made.trim_end(),
            std::fs::read_to_string(run.join(file)).unwrap().trim_end(),
            "{}/{file} is not what {script} makes of the run",
            run.display()
        );
    }
}

/// Each run's writes.md, and the per-run figures its brackets are made of
/// (writes-per-run.csv), are what scripts/analysis/write-anatomy.py makes of the run's cells.
#[test]
fn the_write_anatomy_tables_are_what_their_script_makes_of_the_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for run in ["unmodified", "unmodified-bbr", "python-vs-sbm-send"] {
        script_remakes(
            &root.join("results").join(run),
            "write-anatomy.py",
            "writes.md",
            "writes-per-run.csv",
            &[],
        );
    }
}

/// Each UML stress run's count of lost timer expiries (recoveries.md, recoveries.csv: the
/// guest consoles' kernel/patches/0006 lines) is what scripts/analysis/uml-recoveries.py makes
/// of the run's committed cells.
#[test]
fn the_uml_stress_runs_recoveries_are_what_their_script_makes_of_the_cells() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    script_remakes(
        &root.join("results/uml-hang-stress"),
        "uml-recoveries.py",
        "recoveries.md",
        "recoveries.csv",
        &[],
    );
    // The run on the fixed kernel is compared with the one on 0006 alone.
    let baseline = root.join("results/uml-hang-stress");
    script_remakes(
        &root.join("results/uml-hang-stress-0013"),
        "uml-recoveries.py",
        "recoveries.md",
        "recoveries.csv",
        &["--against", baseline.to_str().unwrap()],
    );
}

/// results/replenish-t-sweep's underrun table and per-run CSV (docs/draft-note.md's
/// questions 2 and 3) are what scripts/analysis/underrun.py makes of the run's rule traces.
#[test]
fn the_t_sweeps_underrun_is_what_its_script_makes_of_the_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    script_remakes(
        &root.join("results/replenish-t-sweep"),
        "underrun.py",
        "underrun.md",
        "underrun.csv",
        &[],
    );
}

/// results/invitation-backlog's table and per-run CSV (docs/draft-note.md's question 1) are
/// what scripts/analysis/invitation-backlog.py makes of the run's committed files.
#[test]
fn the_invitation_backlog_table_is_what_its_script_makes_of_the_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    script_remakes(
        &root.join("results/invitation-backlog"),
        "invitation-backlog.py",
        "backlog.md",
        "invitations.csv",
        &[],
    );
}

/// scripts/analysis/underrun.py on a made-up run whose times are known: a socket dry (nothing
/// unsent, the window with room) for 0.3 s and, up to the end of the writing, 0.1 s of a 2 s
/// window; idle 0.1 s of it; a Nagle-held tail with room 0.05 s; a stretch with nothing
/// unsent but a full window is not dry, nor is anything before the warm-up ends or after
/// the writing stops. A run without rule-trace.csv and a failed run get empty figures.
#[test]
fn underrun_times_the_dry_socket_from_its_rule_trace() {
    /// A rule-trace.csv row: seconds from the start, notsent, unacked, cwnd, sub_mss_tail.
    type TraceRow = (f64, u32, u32, u32, bool);
    let dir = tempdir("underrun");
    let run = dir.join("run");
    let t0: u64 = 1_000_000_000_000;
    let s = |secs: f64| t0 + (secs * 1e9).round() as u64;
    let cell = |name: &str, trace: Option<&[TraceRow]>| {
        let c = run.join(name);
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(
            c.join("summary.json"),
            format!(
                r#"{{"started_unix_ns": {t0}, "config": {{"warmup_s": 1.0, "time_limit_s": 3.0}}}}"#
            ),
        )
        .unwrap();
        std::fs::write(
            c.join("meta.json"),
            r#"{"send_command": ["sbm-send", "--rule-trace", "1ms"]}"#,
        )
        .unwrap();
        if let Some(rows) = trace {
            let mut csv = String::from("t_ns,notsent,unacked,mss,cwnd,sub_mss_tail\n");
            for &(t, notsent, unacked, cwnd, tail) in rows {
                csv += &format!("{},{notsent},{unacked},1448,{cwnd},{tail}\n", s(t));
            }
            std::fs::write(c.join("rule-trace.csv"), csv).unwrap();
        }
    };
    cell(
        "2mbit-a-r1",
        Some(&[
            (0.5, 0, 0, 10, false), // before the window: dry and idle, not counted
            (0.9, 100, 5, 10, false),
            (1.5, 0, 5, 10, false), // dry
            (1.7, 0, 0, 10, false), // dry and idle
            (1.8, 500, 10, 10, false),
            (2.5, 300, 2, 10, true), // held
            (2.6, 0, 10, 10, false), // nothing unsent, but no room
            (2.9, 0, 3, 10, false),  // dry to the end of the writing
            (3.5, 0, 0, 10, false),  // after it
        ]),
    );
    cell("2mbit-a-r2", None);
    cell("2mbit-a-r3", Some(&[(0.5, 0, 0, 10, false)]));
    std::fs::write(
        run.join("summary.csv"),
        "cell,rate,config,repetition,status,goodput_bps\n\
         2mbit-a-r1,2mbit,a,1,ok,1900000\n\
         2mbit-a-r2,2mbit,a,2,ok,1900000\n\
         2mbit-a-r3,2mbit,a,3,failed,\n",
    )
    .unwrap();
    let csv_path = dir.join("underrun.csv");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = common::run_program(
        root.join("scripts/analysis/underrun.py").to_str().unwrap(),
        &[run.to_str().unwrap(), csv_path.to_str().unwrap()],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", out.stderr);
    let rows = read_csv(&csv_path);
    let r1 = &rows[0];
    for (column, want) in [
        ("trace_every_ms", "1"),
        ("window_s", "2.000"),
        ("dry_share", "0.2000"),
        ("dry_stretches", "2"),
        ("dry_longest_ms", "300.0"),
        ("idle_share", "0.0500"),
        ("held_share", "0.0500"),
    ] {
        assert_eq!(r1[column], want, "{column}: {r1:?}");
    }
    for r in &rows[1..] {
        assert_eq!(r["dry_share"], "", "{r:?}");
    }
    assert!(
        out.stdout
            .contains("| a | 1 of 3 | 20.0 % | 2 | 300.0 ms | 5.0 % | 5.0 % | 1.90 Mb/s |"),
        "{}",
        out.stdout
    );
}
