//! Application-limited sources (-b, --fps, --render): the rate they hold, what becomes of
//! every frame, and the content's age at the sink — on loopback and on an emulated path.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use common::*;

const RUN: Duration = Duration::from_secs(120);

/// sbm-send with `extra` against a recording sink: on loopback, or across `bed` (sender
/// in its snd namespace, sink in rcv). Returns (the run's directory, removed when dropped;
/// the sender's dir, the sink's dir, the sender's result).
fn run_against_sink(
    tag: &str,
    bed: Option<&Bed>,
    extra: &[&str],
) -> (TempDir, std::path::PathBuf, std::path::PathBuf, Finished) {
    let dir = tempdir(tag);
    let sink_dir = dir.join("sink");
    let sink_args = ["--out", sink_dir.to_str().unwrap(), "-q"];
    let mut sink = match bed {
        Some(b) => Sink::start_in(&b.ns("rcv"), "198.18.2.1:0", &sink_args),
        None => Sink::start("127.0.0.1:0", &sink_args),
    };
    let ns = bed.map(|b| b.ns("snd"));
    let out = dir.join("send");
    let send = bin("sbm-send");
    let mut args = vec![
        send.to_str().unwrap(),
        "--connect",
        &sink.addr,
        "--out",
        out.to_str().unwrap(),
        "-q",
    ];
    args.extend_from_slice(extra);
    let res = match &ns {
        Some(ns) => {
            let mut all = vec!["netns", "exec", ns.as_str()];
            all.extend_from_slice(&args);
            run_program("ip", &all, RUN)
        }
        None => run_program(args[0], &args[1..], RUN),
    };
    if res.code() == Some(0) {
        sink.proc.wait_line("total from", Duration::from_secs(20));
    }
    sink.stop();
    (dir, out, sink_dir, res)
}

fn count(rows: &[Row], fate: &str) -> u64 {
    rows.iter().filter(|r| r["fate"] == fate).count() as u64
}

/// frames.csv against the sink's messages: every frame generated is written, dropped or
/// left unwritten; the sink got exactly the written ones, in order, each whole.
fn check_frames_reach_the_sink(out: &Path, sink_dir: &Path) -> Vec<Row> {
    let frames = read_csv(&out.join("frames.csv"));
    let numbers: Vec<u64> = frames.iter().map(|r| num(r, "frame").unwrap()).collect();
    assert_eq!(
        numbers,
        (1..=frames.len() as u64).collect::<Vec<_>>(),
        "frames are numbered 1..n with none missing"
    );
    let (written, dropped, unwritten) = (
        count(&frames, "written"),
        count(&frames, "dropped"),
        count(&frames, "unwritten"),
    );
    assert_eq!(written + dropped + unwritten, frames.len() as u64);
    let summary = read_json(&out.join("summary.json"));
    let c = &summary["content_age"];
    let after: Vec<&Row> = frames.iter().filter(|r| r["warmup"] == "false").collect();
    for (key, fate) in [
        ("written", "written"),
        ("dropped", "dropped"),
        ("unwritten", "unwritten"),
    ] {
        assert_eq!(
            c[key].as_u64().unwrap(),
            after.iter().filter(|r| r["fate"] == fate).count() as u64,
            "summary {key} = frames.csv after the warm-up"
        );
    }
    let sink_msgs = read_csv(&sink_dir.join("sink-messages.csv"));
    let seqs: Vec<u64> = sink_msgs.iter().map(|m| num(m, "seq").unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=written).collect::<Vec<_>>(),
        "the sink read every written frame, in order"
    );
    let by_message: HashMap<u64, &Row> = frames
        .iter()
        .filter(|r| r["fate"] == "written")
        .map(|r| (num(r, "message").unwrap(), r))
        .collect();
    for m in &sink_msgs {
        let f = by_message[&num(m, "seq").unwrap()];
        assert_eq!(m["bytes"], f["bytes"], "message {} is its frame", m["seq"]);
        // The sink's content age (from the header) is the sender's, to the µs rounding.
        let sink_age = m["content_age_us"].parse::<i64>().unwrap();
        let sender_age = num(f, "age_sink_us").unwrap() as i64;
        assert!(
            (sink_age - sender_age).abs() <= 1,
            "frame {}: sink says {sink_age} µs, sender {sender_age} µs",
            f["frame"]
        );
    }
    frames
}

#[test]
fn a_paced_source_holds_its_rate_and_every_chunk_is_followed() {
    let _g = serial();
    let (_dir, out, sink_dir, res) = run_against_sink(
        "paced",
        None,
        &[
            "-b",
            "20mbit",
            "-l",
            "8KiB",
            "-t",
            "6s",
            "--warmup",
            "1s",
            "--trip-times",
        ],
    );
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    assert!(
        res.stdout
            .contains("source: paced: 8192 B writes at 20.00 Mbit/s"),
        "{}",
        res.stdout
    );
    let summary = read_json(&out.join("summary.json"));
    let goodput = summary["totals"]["goodput_bps"].as_f64().unwrap();
    assert!(
        (goodput / 20e6 - 1.0).abs() < 0.02,
        "paced at 20 Mb/s, the path allowing: goodput {goodput}"
    );
    assert_eq!(summary["content_age"]["source"], "paced");
    let frames = check_frames_reach_the_sink(&out, &sink_dir);
    // On loopback nothing holds a chunk back: written within milliseconds of its time.
    let late = frames
        .iter()
        .filter(|r| num(r, "age_write_start_us").is_some_and(|a| a > 20_000))
        .count();
    assert!(
        late * 100 <= frames.len(),
        "{late} of {} chunks late",
        frames.len()
    );
    // One write per chunk; its content age is in the trip-times header.
    assert!(frames
        .iter()
        .filter(|r| r["fate"] == "written")
        .all(|r| r["writes"] == "1"));
    let readme = common::output_reference();
    for file in ["frames.csv", "content-age.csv"] {
        for h in csv_headers(&out.join(file)) {
            assert!(
                readme.contains(&format!("`{h}`")),
                "{file}: {h} undocumented"
            );
        }
    }
    for k in summary["content_age"].as_object().unwrap().keys() {
        assert!(
            readme.contains(&format!("`content_age.{k}`")),
            "summary.json content_age.{k} undocumented"
        );
    }
    assert!(readme.contains("`content_age`") && readme.contains("`content_age_us`"));
}

/// Frames offered at 2.9 Mb/s to a 2 Mb/s bottleneck: with `latest` stale frames are
/// dropped and the content stays young; with `queue` every frame goes, ageing.
#[test]
fn frames_over_a_bottleneck_are_written_or_dropped_and_arrive_in_order() {
    let _g = serial();
    let bed = Bed::up("src", &["--rtt", "40ms", "--rate", "2mbit"]);
    let frames_args = |stale: &'static str| {
        vec![
            "--fps",
            "30",
            "--frame-size",
            "12KB",
            "--frame-dist",
            "uniform:25%",
            "--stale",
            stale,
            "--notsent-lowat",
            "8KB",
            "-t",
            "8s",
            "--warmup",
            "2s",
        ]
    };
    let mut p95 = HashMap::new();
    for stale in ["latest", "queue"] {
        let (_dir, out, sink_dir, res) = run_against_sink(stale, Some(&bed), &frames_args(stale));
        assert_eq!(res.code(), Some(0), "{stale}: {}", res.stderr);
        let frames = check_frames_reach_the_sink(&out, &sink_dir);
        let dropped = count(&frames, "dropped");
        if stale == "latest" {
            assert!(dropped > 0, "2.9 Mb/s of frames into 2 Mb/s dropped none");
        } else {
            assert_eq!(dropped, 0, "queue drops nothing");
        }
        // No content arrives younger than the path's one-way delay (20 ms).
        for r in frames.iter().filter(|r| r["fate"] == "written") {
            let age = num(r, "age_sink_us").unwrap();
            assert!(age >= 20_000, "frame {} arrived {age} µs old", r["frame"]);
        }
        let summary = read_json(&out.join("summary.json"));
        p95.insert(
            stale,
            summary["content_age"]["at_sink"]["p95_us"]
                .as_u64()
                .unwrap(),
        );
        // The same frames, seed for seed: uniform sizes within ± 25 % of 12 KB.
        assert!(frames.iter().all(|r| {
            let b = num(r, "bytes").unwrap();
            (9_000..=15_000).contains(&b)
        }));
    }
    assert!(
        p95["queue"] > 2 * p95["latest"],
        "queueing stale frames ages the content: {p95:?}"
    );
}

/// Render on invitation: a frame exists only once the socket invites a write, at most one
/// per 1/FPS, sized by the target rate × the time since the previous frame.
#[test]
fn rendered_frames_follow_the_invitations_and_the_target_rate() {
    let _g = serial();
    let (_dir, out, sink_dir, res) = run_against_sink(
        "render",
        None,
        &[
            "--fps", "50", "--render", "4mbit", "-t", "4s", "--warmup", "1s",
        ],
    );
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    let frames = check_frames_reach_the_sink(&out, &sink_dir);
    // Loopback invites at once: 50 frames a second of 4 Mb/s × 20 ms = 10 000 B, give or
    // take the loop's lateness.
    let n = frames.len() as f64;
    assert!(
        (180.0..=201.0).contains(&n),
        "{n} frames in 4 s at ≤ 50 fps"
    );
    let sizes: Vec<u64> = frames.iter().map(|r| num(r, "bytes").unwrap()).collect();
    let mut sorted = sizes.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    assert!(
        (10_000..=10_500).contains(&median),
        "median frame {median} B"
    );
    // Never generated ahead of an invitation: written the instant it exists.
    assert!(frames
        .iter()
        .all(|r| num(r, "age_write_start_us").is_some_and(|a| a < 5_000)));
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["content_age"]["source"], "render");
    assert_eq!(summary["content_age"]["dropped"], 0);
    let goodput = summary["totals"]["goodput_bps"].as_f64().unwrap();
    assert!((goodput / 4e6 - 1.0).abs() < 0.05, "goodput {goodput}");
}
