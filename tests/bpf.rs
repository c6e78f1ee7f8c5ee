//! BPF (root, cgroup v2): `sbm-send --replenish-impl bpf` on the emulated path. The sock_ops
//! program must keep TCP_NOTSENT_LOWAT at 2 × drain rate × T, the kernel's own wakeups must
//! carry the run with sbm's timestamps off (the instrument's wakeups cannot stand in for
//! them), and nothing may stay attached: bpftool's program and link lists and the cgroup
//! hierarchy are compared before and after, on a normal end and on Ctrl-C. One at a time.

#![cfg(feature = "bpf")]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

const PROGRAM: &str = "sbm_replenish";
const T_S: f64 = 0.015;

/// What BPF and cgroup state of ours exists: program ids, link ids, cgroup directories of
/// sbm-send's and sbm-trace's own, and cgroup2 mounts of theirs.
#[derive(Debug, PartialEq, Eq)]
struct Attached {
    programs: Vec<u64>,
    links: Vec<u64>,
    cgroups: Vec<PathBuf>,
    mounts: Vec<PathBuf>,
}

impl Attached {
    /// What is here that was not in `before`. A run may also take away leftovers of
    /// processes killed outright before it (sbm sweeps empty cgroups and mount points whose
    /// owner is gone), so "nothing left" is "nothing new", not "the same as before".
    fn new_since(&self, before: &Attached) -> Attached {
        fn new<T: Clone + PartialEq>(now: &[T], before: &[T]) -> Vec<T> {
            now.iter()
                .filter(|x| !before.contains(x))
                .cloned()
                .collect()
        }
        Attached {
            programs: new(&self.programs, &before.programs),
            links: new(&self.links, &before.links),
            cgroups: new(&self.cgroups, &before.cgroups),
            mounts: new(&self.mounts, &before.mounts),
        }
    }

    fn is_empty(&self) -> bool {
        self.programs.is_empty()
            && self.links.is_empty()
            && self.cgroups.is_empty()
            && self.mounts.is_empty()
    }
}

/// Fails when BPF or cgroup state of ours exists now that did not before `before`.
fn assert_nothing_new(before: &Attached, after_what: &str) {
    let left = attached().new_since(before);
    assert!(
        left.is_empty(),
        "BPF state left after {after_what}: {left:?}"
    );
}

fn bpftool_json(args: &[&str]) -> serde_json::Value {
    let out = run_program("bpftool", args, Duration::from_secs(30));
    assert!(out.status.success(), "bpftool {args:?}: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("bpftool {args:?}: {e}"))
}

fn attached() -> Attached {
    let programs: Vec<u64> = bpftool_json(&["-j", "prog", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == PROGRAM)
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    let links: Vec<u64> = bpftool_json(&["-j", "link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            l["prog_id"]
                .as_u64()
                .is_some_and(|id| programs.contains(&id))
        })
        .map(|l| l["id"].as_u64().unwrap())
        .collect();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let cgroup2 = mountinfo
        .lines()
        .find(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|r| r.starts_with("cgroup2 "))
        })
        .map(|l| PathBuf::from(l.split_whitespace().nth(4).unwrap()));
    let cgroups = cgroup2
        .map(|root| {
            std::fs::read_dir(root)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with("sbm-bpf-")
                        || p.file_name()
                            .unwrap()
                            .to_string_lossy()
                            .starts_with("sbm-trace-")
                        || p.file_name()
                            .unwrap()
                            .to_string_lossy()
                            .starts_with("sbm-depart-")
                })
                .collect()
        })
        .unwrap_or_default();
    let mounts = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("sbm-cgroup2-")
        })
        .collect();
    Attached {
        programs,
        links,
        cgroups,
        mounts,
    }
}

fn bpf_args(extra: &'static [&'static str]) -> Vec<&'static str> {
    let mut a = vec![
        "-t",
        "12s",
        "--warmup",
        "4s",
        "--cc",
        "cubic",
        "-l",
        "4KiB",
        "--replenish-time",
        "15ms",
        "--replenish-impl",
        "bpf",
    ];
    a.extend_from_slice(extra);
    a
}

#[test]
fn bpf_replenish_keeps_lowat_at_twice_rate_times_t_with_and_without_timestamps() {
    let _g = serial();
    require_root();
    let before = attached();
    let bed = Bed::up("b", &["--rate", "2mbit", "--rtt", "40ms"]);
    for extra in [&[][..], &["--no-timestamps"][..]] {
        let (s, out) = bed.transfer_to(&bpf_args(extra));
        let what = if extra.is_empty() {
            "with timestamps"
        } else {
            "--no-timestamps"
        };
        assert_eq!(s["policy"]["implementation"], "bpf", "{what}: {s}");
        let b = &s["bpf"];
        assert!(b.is_object(), "{what}: no bpf view in the summary: {s}");
        assert_eq!(b["setsockopt_errors"], 0, "{what}: {b}");
        assert!(b["samples"].as_u64().unwrap() > 10, "{what}: {b}");
        // A delivery-rate sample (the run's last ones may be app-limited: writing stopped).
        assert!(
            b["rate_source"] == "sample" || b["rate_source"] == "app-limited-sample",
            "{what}: {b}"
        );
        // The estimate is the bottleneck's payload rate; the lowat twice rate × T.
        let payload = payload_rate(&s, 2e6) / 8.0;
        let rate = b["rate_bytes_per_s"].as_f64().unwrap();
        assert!(
            (0.7..=1.3).contains(&(rate / payload)),
            "{what}: drain rate {rate} B/s against a payload rate of {payload} B/s"
        );
        let threshold = b["threshold_bytes"].as_u64().unwrap();
        assert_eq!(threshold, (rate * T_S) as u64, "{what}: {b}");
        assert_eq!(
            b["lowat_bytes"].as_u64().unwrap(),
            2 * threshold,
            "{what}: {b}"
        );
        // The kernel's wakeups alone keep the link busy.
        let share = s["totals"]["goodput_bps"].as_f64().unwrap() / (payload * 8.0);
        assert!(
            share > 0.85,
            "{what}: goodput {share:.3} of the payload rate"
        );
        // Every interval after the warm-up: the socket's lowat (getsockopt, not the
        // program's word) follows the rate, and the backlog stays near it — the default
        // rule would park hundreds of KB here.
        let rows = read_csv(&out.join("intervals.csv"));
        let after: Vec<_> = rows.iter().filter(|r| r["warmup"] == "false").collect();
        assert!(after.len() >= 7, "{what}: {} intervals", after.len());
        let want = 2.0 * payload * T_S;
        for r in &after {
            let lowat = f(r, "lowat_bytes");
            assert!(
                (0.6 * want..=1.4 * want).contains(&lowat),
                "{what}: lowat {lowat} against 2 × rate × T = {want:.0}: {r:?}"
            );
            assert!(
                f(r, "notsent_bytes") <= lowat + 4096.0 + 1448.0,
                "{what}: backlog above lowat + one write: {r:?}"
            );
            assert!(f(r, "threshold_bytes") > 0.0, "{what}: {r:?}");
        }
        if extra.is_empty() {
            // Per-write sojourn, every write's sampled departure (TX_SCHED thins out under
            // coalescing of 4 KiB writes): a backlog of at most ~2T plus one write (16 ms).
            let p95 = s["sojourn_sampled"]["p95_us"].as_f64().unwrap();
            assert!(p95 < 100_000.0, "sampled sojourn p95 {p95} us");
        }
    }
    drop(bed);
    assert_nothing_new(&before, "the runs");
}

#[test]
fn bpf_replenish_is_detached_when_interrupted() {
    let _g = serial();
    require_root();
    let before = attached();
    let bed = Bed::up("i", &["--rate", "10mbit", "--rtt", "20ms"]);
    let sink = Sink::start_in(&bed.ns("rcv"), "198.18.2.1:5301", &["-q"]);
    let send = bin("sbm-send");
    let snd = bed.ns("snd");
    let mut args = vec![
        "netns",
        "exec",
        &snd,
        send.to_str().unwrap(),
        "--connect",
        &sink.addr,
    ];
    args.extend(
        bpf_args(&[])
            .iter()
            .map(|s| if *s == "12s" { "60s" } else { s }),
    );
    let mut run = Running::spawn_program("ip", &args);
    run.wait_line("policy:", Duration::from_secs(20));
    // Attached while it runs: the instrument's own check that `attached` can see it.
    let during = attached().new_since(&before);
    assert_eq!(during.programs.len(), 1, "{during:?}");
    assert_eq!(during.cgroups.len(), 1, "{during:?}");
    run.wait_line("1.00-2.00 s", Duration::from_secs(20));
    run.signal(Signal::SIGINT);
    let res = run.wait(Duration::from_secs(30));
    assert_ne!(res.code(), None, "sbm-send did not end after SIGINT");
    sink.stop();
    drop(bed);
    assert_nothing_new(&before, "Ctrl-C");
}

/// sbm-send with `args`, run as nobody.
fn send_as_nobody(args: &[&str]) -> Finished {
    let send = bin("sbm-send");
    let mut all = vec![
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        send.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    run_program("setpriv", &all, Duration::from_secs(30))
}

#[test]
fn bpf_replenish_needs_root_and_says_so() {
    let out = send_as_nobody(&[
        "--connect",
        "127.0.0.1:9",
        "--replenish-time",
        "15ms",
        "--replenish-impl",
        "bpf",
    ]);
    assert_eq!(out.code(), Some(1), "{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {}", out.stderr);
    assert!(lines[0].contains("need root"), "{}", out.stderr);
    // And a user lowat cannot stand beside the program's.
    let out = run(
        "sbm-send",
        &[
            "--connect",
            "127.0.0.1:9",
            "--replenish-time",
            "15ms",
            "--replenish-impl",
            "bpf",
            "--notsent-lowat",
            "16384",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("sets TCP_NOTSENT_LOWAT itself"),
        "{}",
        out.stderr
    );
}

/// sbm-trace run in the sender's namespace around `command`; its output directory.
fn trace_in(bed: &Bed, out: &std::path::Path, extra: &[&str], command: &[&str]) -> Finished {
    let trace = bin("sbm-trace");
    let snd = bed.ns("snd");
    let out_s = out.to_str().unwrap().to_string();
    let mut args = vec![
        "netns",
        "exec",
        &snd,
        trace.to_str().unwrap(),
        "-q",
        "-o",
        &out_s,
    ];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    Running::spawn_program("ip", &args).wait(Duration::from_secs(120))
}

fn by_end_offset(rows: &[Row]) -> std::collections::HashMap<u64, &Row> {
    rows.iter()
        .map(|r| (num(r, "end_offset").unwrap(), r))
        .collect()
}

/// sbm-send's own writes.csv (in `send_out`) against the tracer's record of the same run:
/// the same writes at the same stream offsets; the tracer's BPF TX_SCHED equal to sbm-send's
/// SO_TIMESTAMPING TX_SCHED (the same hook, two interfaces: ≥ 99 % within 50 µs); and the
/// traced departure (TCP handing the last byte's segment to IP) held to [`check_departures`],
/// with the writes the tracer marks `displaced` as the ones whose TX_SCHED is a later
/// segment's.
///
/// Measured here before the tracer marked them: for 2–8 % of 64 KiB writes at 2 Mb/s the
/// departure preceded TX_SCHED by 10–12 ms (one send opportunity), deterministic at the same
/// stream offsets, with and without any BPF program. The tracer then saw, for exactly those
/// writes, the segment carrying the timestamp request leave without the key byte: the kernel
/// had moved the byte into the segment before (tcp_grow_skb() tops a segment up from the
/// next one and leaves the request where it was).
fn compare_departures(send_out: &std::path::Path, trace_out: &std::path::Path, what: &str) {
    let trace = read_json(&trace_out.join("trace.json"));
    assert_eq!(trace["connections"].as_array().unwrap().len(), 1, "{trace}");
    assert_eq!(trace["events_lost"], 0, "{trace}");
    let mine = read_csv(&send_out.join("writes.csv"));
    let traced = read_csv(&trace_out.join("conn-0/writes.csv"));
    assert_eq!(mine.len(), traced.len(), "{what}: rows");
    let traced_at = by_end_offset(&traced);
    let (mut both_sched, mut same_sched) = (0, 0);
    for r in &mine {
        let end = num(r, "end_offset").unwrap();
        let t = traced_at
            .get(&end)
            .unwrap_or_else(|| panic!("{what}: no traced write ends at {end}"));
        if r["attribution"] == "exact" && t["attribution"] == "exact" {
            both_sched += 1;
            if num(t, "sched_ns")
                .unwrap()
                .abs_diff(num(r, "sched_ns").unwrap())
                <= 50_000
            {
                same_sched += 1;
            }
        }
    }
    eprintln!("{what}: {same_sched}/{both_sched} TX_SCHED equal");
    assert!(both_sched >= 10, "{what}: {both_sched} rows exact in both");
    assert!(
        // ≥ 99 %, and with the few dozen rows of a short run one outlier is allowed (a CI
        // run had 37 of 38 within 50 µs; the odd one's cause is not known).
        same_sched + 1 >= both_sched && same_sched as f64 >= 0.97 * both_sched as f64
            || same_sched as f64 >= 0.99 * both_sched as f64,
        "{what}: {same_sched} of {both_sched} BPF TX_SCHED times within 50 us of SO_TIMESTAMPING's"
    );
    let traced_row = |r: &Row| traced_at[&num(r, "end_offset").unwrap()];
    check_departures(
        &mine,
        &|r| num(traced_row(r), "depart_lo_ns"),
        &|r| traced_row(r)["attribution"] == "displaced",
        what,
    );
}

/// How far apart a departure and a TX report of the same transmission may be. The departure
/// is taken where TCP hands the segment to IP, TX_SCHED where the qdisc takes it: one call
/// chain on one CPU, no queue between, but the IP output path (routing, netfilter, the veth)
/// and whatever interrupts it. Measured on these 2-core VMs (perf, CLOCK_MONOTONIC, the
/// test's own 2 Mb/s runs): the path takes 9–46 µs (median 22 µs) undisturbed; a local
/// timer interrupt inside it adds ~18 µs, and in 5 of 6 runs one or two writes of the few
/// dozen with their own report came out at 51–120 µs — the old 50 µs bound failed 4 of 5
/// runs on noise. What the check must tell apart is another transmission: a displaced write's
/// report is one send opportunity later (≥ 9.8 ms at 2 Mb/s, measured), so 1 ms separates
/// them with room on both sides. The path's own time is still held to its size: the median
/// gap within [`MEDIAN_PATH_US`], about four times the medians measured (22–29 µs).
const SAME_TRANSMISSION_NS: u64 = 1_000_000;
const MEDIAN_PATH_US: i64 = 100;
/// Reported, not held: how many gaps were within the old 50 µs.
const CLOSE_US: i64 = 50;

/// An exact per-packet departure (`depart_of` each of sbm-send's rows) against sbm-send's
/// exact TX_SCHED reports and its snd_nxt sampler's bracket. Writes whose reports were a later
/// segment's (`displaced`, or sbm-send's own attribution `displaced`) have their TX_SCHED no
/// earlier than the departure (one send opportunity later: 10–16 ms at 2 Mb/s, microseconds
/// on loopback); every other exact write's TX_SCHED follows its departure within
/// [`SAME_TRANSMISSION_NS`] (the median within [`MEDIAN_PATH_US`]), none departs after it, and every
/// departure lies inside the sampler's bracket: no later than its upper end (± 50 µs of clock
/// reads) and no more than one transmission's path before its lower end (snd_nxt moves only
/// after the segment has been through that path, so a sample between the two still sees it
/// unsent).
fn check_departures(
    mine: &[Row],
    depart_of: &dyn Fn(&Row) -> Option<u64>,
    displaced: &dyn Fn(&Row) -> bool,
    what: &str,
) {
    let (mut exact, mut close, mut late, mut far, mut gaps) = (0, 0, vec![], vec![], vec![]);
    let (mut in_bracket, mut near_bracket, mut outside, mut bracketed) = (0, 0, vec![], 0);
    let (mut moved, mut moved_later, mut moved_not_before) = (0, 0, 0);
    for r in mine {
        let end = num(r, "end_offset").unwrap();
        let Some(depart) = depart_of(r) else {
            continue;
        };
        let sched = num(r, "sched_ns");
        if r["attribution"] == "displaced" || (r["attribution"] == "exact" && displaced(r)) {
            moved += 1;
            if sched.is_some_and(|s| s >= depart + 1_000_000) {
                moved_later += 1;
            }
            if sched.is_some_and(|s| s + 50_000 >= depart) {
                moved_not_before += 1;
            }
        } else if r["attribution"] == "exact" {
            exact += 1;
            let sched = sched.unwrap();
            let gap = sched as i64 - depart as i64;
            gaps.push(gap);
            if gap.unsigned_abs() <= CLOSE_US as u64 * 1000 {
                close += 1;
            }
            if depart > sched + 50_000 {
                late.push((end, depart - sched));
            } else if gap.unsigned_abs() > SAME_TRANSMISSION_NS {
                far.push((end, gap));
            }
        }
        if let (Some(lo), Some(hi)) = (num(r, "depart_lo_ns"), num(r, "depart_hi_ns")) {
            bracketed += 1;
            if depart + 50_000 >= lo && depart <= hi + 50_000 {
                in_bracket += 1;
            } else if depart + SAME_TRANSMISSION_NS >= lo && depart <= hi + 50_000 {
                near_bracket += 1;
            } else {
                outside.push((end, depart as i64 - lo as i64, depart as i64 - hi as i64));
            }
        }
    }
    gaps.sort_unstable();
    let median_gap = gaps.get(gaps.len() / 2).copied().unwrap_or_default();
    let slow: Vec<String> = gaps
        .iter()
        .filter(|g| g.unsigned_abs() > CLOSE_US as u64 * 1000)
        .map(|g| format!("{:.1}", *g as f64 / 1000.0))
        .collect();
    eprintln!(
        "{what}: {close}/{exact} departures within {CLOSE_US} us of TX_SCHED (median {:.1} us; slower, us: [{}]), {moved} displaced ({moved_later} of them ≥ 1 ms later), {in_bracket}/{bracketed} inside the sampler's bracket ± 50 us and {near_bracket} within one path before it",
        median_gap as f64 / 1000.0,
        slow.join(", ")
    );
    assert!(exact >= 10, "{what}: {exact} exact rows");
    // A displaced write's reports are the next segment's: never before its own byte left,
    // and one send opportunity later — milliseconds on a shaped path, microseconds on
    // loopback (so only counted).
    assert_eq!(
        moved_not_before, moved,
        "{what}: displaced writes whose TX_SCHED precedes their departure"
    );
    assert!(
        late.is_empty(),
        "{what}: departures after TX_SCHED: {late:?}"
    );
    assert!(
        far.is_empty(),
        "{what}: TX_SCHED more than {SAME_TRANSMISSION_NS} ns from a departure not marked displaced (end offset, ns): {far:?}"
    );
    assert!(
        median_gap.abs() <= MEDIAN_PATH_US * 1000,
        "{what}: median TX_SCHED − departure {median_gap} ns"
    );
    assert!(
        outside.is_empty(),
        "{what}: departures outside the sampler's bracket (end offset, − lower, − upper, ns): {outside:?}"
    );
}

/// sbm-trace (with `trace_args`) around 3 000 of sbm-send's 64 KiB writes to a sink on
/// loopback: sbm-send's output directory and sbm-trace's.
fn trace_send_on_loopback(tag: &str, trace_args: &[&str]) -> (TempDir, TempDir) {
    let sink = Sink::start("127.0.0.1:0", &["-q"]);
    let send_out = tempdir(&format!("{tag}-send"));
    let trace_out = tempdir(tag);
    let send = bin("sbm-send");
    let port = sink.addr.rsplit_once(':').unwrap().1.to_string();
    let mut args = vec!["-q", "-o", trace_out.to_str().unwrap(), "--port", &port];
    args.extend_from_slice(trace_args);
    args.extend([
        "--",
        send.to_str().unwrap(),
        "--connect",
        &sink.addr,
        "--writes",
        "3000",
        "-q",
        "--out",
        send_out.to_str().unwrap(),
    ]);
    let res = run("sbm-trace", &args, Duration::from_secs(120));
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
    sink.stop();
    (send_out, trace_out)
}

#[test]
fn traced_departures_agree_with_sbm_sends_own_reports_on_loopback() {
    let _g = serial();
    require_root();
    let before = attached();
    let (send_out, trace_out) = trace_send_on_loopback("trace-lo", &[]);
    // `--timestamps auto` stays in the traced cgroup: the error queue, and why.
    let config = &read_json(&send_out.join("summary.json"))["config"];
    assert_eq!(config["timestamp_source"], "socket", "{config}");
    assert!(
        config["timestamp_note"]
            .as_str()
            .is_some_and(|n| n.contains("run under sbm-trace")),
        "{config}"
    );
    compare_departures(&send_out, &trace_out, "loopback");
    assert_nothing_new(&before, "tracing");
}

#[test]
fn traced_departures_agree_with_sbm_sends_own_reports() {
    let _g = serial();
    require_root();
    let before = attached();
    let bed = Bed::up("t", &["--rate", "2mbit", "--rtt", "40ms"]);
    for size in ["64KiB", "4KiB"] {
        let sink = Sink::start_in(&bed.ns("rcv"), "198.18.2.1:5301", &["-q"]);
        let send_out = tempdir(&format!("{}-send-{size}", bed.prefix));
        let trace_out = tempdir(&format!("{}-trace-{size}", bed.prefix));
        let send = bin("sbm-send");
        let res = trace_in(
            &bed,
            &trace_out,
            &["--port", "5301"],
            &[
                send.to_str().unwrap(),
                "--connect",
                &sink.addr,
                "-t",
                "10s",
                "-l",
                size,
                "-q",
                "--out",
                send_out.to_str().unwrap(),
            ],
        );
        assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
        sink.stop();
        compare_departures(&send_out, &trace_out, size);
    }
    drop(bed);
    assert_nothing_new(&before, "tracing");
}

/// `sbm-send --exact-departures`: the third estimator in sbm-send's own rows, held to the
/// tracer's standard against its TX_SCHED reports and its sampler, on every write; nothing
/// stays attached.
#[test]
fn sbm_sends_exact_departures_agree_with_its_other_estimators() {
    let _g = serial();
    require_root();
    let before = attached();
    let bed = Bed::up("x", &["--rate", "2mbit", "--rtt", "40ms"]);
    let (summary, out) = bed.transfer_to(&[
        "-t",
        "10s",
        "--warmup",
        "2s",
        "-l",
        "4KiB",
        "--exact-departures",
    ]);
    let x = &summary["exact_departures"];
    assert_eq!(x["events_lost"], 0, "{x}");
    assert!(x["departures"].as_u64().unwrap() > 100, "{x}");
    let rows = read_csv(&out.join("writes.csv"));
    // Every write whose last byte was acknowledged has its exact departure, after its write.
    let acked: Vec<&Row> = rows.iter().filter(|r| !r["ack_ns"].is_empty()).collect();
    let with = acked
        .iter()
        .filter(|r| num(r, "depart_exact_ns").is_some_and(|d| d >= num(r, "write_ns").unwrap()))
        .count();
    assert!(
        with as f64 >= 0.99 * acked.len() as f64 && acked.len() > 100,
        "{with} of {} acknowledged writes with an exact departure",
        acked.len()
    );
    assert_eq!(
        summary["sojourn_depart"]["count"].as_u64().unwrap(),
        rows.iter()
            .filter(|r| r["warmup"] == "false" && !r["depart_exact_ns"].is_empty())
            .count() as u64
    );
    check_departures(
        &rows,
        &|r| num(r, "depart_exact_ns"),
        &|_| false,
        "--exact-departures",
    );
    drop(bed);
    assert_nothing_new(&before, "--exact-departures");
}

/// `sbm-send --timestamps bpf`: every write timed from BPF TX timestamping, with no
/// SO_TIMESTAMPING on the socket. First run: every write gets its reports (its own or,
/// coalesced, a later write's, as with the error queue), none lost, and they are read while
/// the run goes on — on the loop's own turns, since the program never wakes it (a loop that
/// read them only at the end would leave every interval without a SCHED report). Second run,
/// with `--exact-departures`: its TX_SCHED held to the standard the error queue's is held to,
/// against the exact departure of each write's last byte (another hook of the program) and
/// the snd_nxt sampler's bracket (read by ioctl). Nothing stays attached.
#[test]
fn sbm_sends_bpf_timestamps_time_every_write() {
    let _g = serial();
    require_root();
    let before = attached();
    let bed = Bed::up("bt", &["--rate", "2mbit", "--rtt", "40ms"]);
    let timed = [
        "-t",
        "10s",
        "--warmup",
        "2s",
        "-l",
        "4KiB",
        "--timestamps",
        "bpf",
    ];
    let mut args = timed.to_vec();
    args.extend(["--drain-timeout", "5s"]);
    let (summary, out) = bed.transfer_to(&args);
    assert_eq!(summary["config"]["timestamp_source"], "bpf", "{summary}");
    assert!(
        summary["timestamping"].is_null(),
        "SO_TIMESTAMPING was enabled: {summary}"
    );
    let b = &summary["bpf_timestamps"];
    assert_eq!(b["events_lost"], 0, "{b}");
    assert_eq!(b["events_malformed"], 0, "{b}");
    let a = &summary["attribution"];
    assert_eq!((&a["missing"], &a["unsent"]), (&0.into(), &0.into()), "{a}");
    let own = a["exact"].as_u64().unwrap();
    let rows = read_csv(&out.join("writes.csv"));
    assert!(rows.len() > 100, "{} writes", rows.len());
    assert!(
        rows.iter()
            .all(|r| !r["sched_ns"].is_empty() && !r["ack_ns"].is_empty()),
        "writes without TX_SCHED or TX_ACK"
    );
    // Three reports per write that kept its own request: SCHED, SND and ACK.
    assert!(
        b["reports"].as_u64().unwrap() == 3 * own && own >= 10,
        "{b}: {own} writes with their own reports"
    );
    let intervals = read_csv(&out.join("intervals.csv"));
    let full = &intervals[..intervals.len() - 1];
    assert!(
        full.iter().all(|r| num(r, "sched_reports").unwrap() > 0),
        "an interval without a SCHED report read: the reports were not read during the run"
    );

    let mut args = timed.to_vec();
    args.push("--exact-departures");
    let (_, out) = bed.transfer_to(&args);
    check_departures(
        &read_csv(&out.join("writes.csv")),
        &|r| num(r, "depart_exact_ns"),
        &|_| false,
        "--timestamps bpf",
    );
    drop(bed);
    assert_nothing_new(&before, "--timestamps bpf");
}

#[test]
fn an_unmodified_python_sender_is_traced_write_by_write() {
    let _g = serial();
    require_root();
    let before = attached();
    let bed = Bed::up("p", &["--rate", "10mbit", "--rtt", "20ms"]);
    let sink_out = tempdir(&format!("{}-py-sink", bed.prefix));
    let sink = Sink::start_in(
        &bed.ns("rcv"),
        "198.18.2.1:5301",
        &["-q", "--out", sink_out.to_str().unwrap()],
    );
    let out = tempdir(&format!("{}-py", bed.prefix));
    // Plain blocking sends, no socket options: 300 writes of 4096 bytes.
    let script = "import socket,sys\n\
        s=socket.create_connection((sys.argv[1],int(sys.argv[2])))\n\
        b=b'x'*4096\n\
        for i in range(300):\n    s.sendall(b)\n\
        s.shutdown(socket.SHUT_WR)\n\
        s.recv(1)\n";
    let (host, port) = sink.addr.rsplit_once(':').unwrap();
    let res = trace_in(&bed, &out, &[], &["python3", "-c", script, host, port]);
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
    sink.stop();
    let received = sink_total_bytes(&sink_out);
    let trace = read_json(&out.join("trace.json"));
    let c = &trace["connections"][0];
    assert_eq!(c["bytes_written"], 300 * 4096, "{trace}");
    assert_eq!(c["bytes_acked"], 300 * 4096, "{trace}");
    assert_eq!(received, 300 * 4096);
    let rows = read_csv(&out.join("conn-0/writes.csv"));
    assert!(
        (290..=300).contains(&rows.len()),
        "{} rows for 300 sendall calls of one page each",
        rows.len()
    );
    assert_eq!(
        rows.iter()
            .map(|r| num(r, "bytes_accepted").unwrap())
            .sum::<u64>(),
        300 * 4096
    );
    // Every write departed, after it was written, in order.
    let mut last = 0;
    for r in &rows {
        let (w, d) = (num(r, "write_ns").unwrap(), num(r, "depart_lo_ns").unwrap());
        assert!(d >= w && d >= last, "{r:?}");
        last = d;
    }
    assert!(c["sojourn_depart"]["count"].as_u64().unwrap() >= 290, "{c}");
    drop(bed);
    assert_nothing_new(&before, "tracing");
}

/// The report's §6 for the BPF rule: at 100 kb/s and 15 ms the threshold is ~187 B, under
/// one MSS. With Nagle on the program floors the lowat at 2 × MSS (writable while less than
/// one MSS waits); under TCP_NODELAY it does not.
#[test]
fn bpf_replenish_floors_lowat_at_two_mss_under_nagle_only() {
    let _g = serial();
    require_root();
    let bed = Bed::up("m", &["--rate", "100kbit", "--rtt", "40ms"]);
    for nodelay in [false, true] {
        let mut args = vec![
            "-t",
            "8s",
            "--warmup",
            "2s",
            "-l",
            "512B",
            "--cc",
            "cubic",
            "--replenish-time",
            "15ms",
            "--replenish-impl",
            "bpf",
        ];
        if nodelay {
            args.push("--nodelay");
        }
        let s = bed.transfer(&args);
        let b = &s["bpf"];
        let mss = s["mss"].as_u64().unwrap();
        let threshold = b["threshold_bytes"].as_u64().unwrap();
        let lowat = b["lowat_bytes"].as_u64().unwrap();
        assert!(
            threshold > 0 && 2 * threshold < 2 * mss,
            "nodelay {nodelay}: a sub-MSS threshold expected at 100 kb/s: {b}"
        );
        if nodelay {
            assert_eq!(lowat, (2 * threshold).max(2), "NODELAY: no floor: {b}");
        } else {
            assert_eq!(lowat, 2 * mss, "Nagle: the 2 × MSS floor: {b}");
        }
        assert_eq!(s["policy"]["sub_mss_clause"], !nodelay, "{}", s["policy"]);
    }
}

/// `sbm-trace --replenish-time`: the BPF rule on an unmodified program's connection. A
/// Python sender pushes 2 MB in blocking 64 KiB `sendall`s into a 2 Mb/s path: by default
/// the kernel queues hundreds of KB in its socket; with the rule the backlog after each send
/// call stays within a lowat (~7.5 KB) plus one skb, and the writes' last bytes leave sooner.
#[test]
fn sbm_trace_steers_an_unmodified_sender_with_bpf_replenish() {
    let _g = serial();
    require_root();
    let before = attached();
    let bed = Bed::up("r", &["--rate", "2mbit", "--rtt", "40ms"]);
    let script = "import socket,sys\n\
        s=socket.create_connection((sys.argv[1],int(sys.argv[2])))\n\
        b=b'x'*65536\n\
        for i in range(32):\n    s.sendall(b)\n\
        s.shutdown(socket.SHUT_WR)\n\
        s.recv(1)\n";
    let mut medians = vec![];
    for extra in [&[][..], &["--replenish-time", "15ms"][..]] {
        let sink = Sink::start_in(&bed.ns("rcv"), "198.18.2.1:5301", &["-q"]);
        let out = tempdir(&format!("{}-steer", bed.prefix));
        let (host, port) = sink.addr.rsplit_once(':').unwrap();
        let res = trace_in(&bed, &out, extra, &["python3", "-c", script, host, port]);
        assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
        sink.stop();
        let trace = read_json(&out.join("trace.json"));
        assert_eq!(
            trace["connections"][0]["bytes_acked"],
            32 * 65536,
            "{trace}"
        );
        let mut notsent: Vec<u64> = read_csv(&out.join("conn-0/writes.csv"))
            .iter()
            .map(|r| num(r, "notsent_after").unwrap())
            .collect();
        notsent.sort_unstable();
        let median = notsent[notsent.len() / 2];
        eprintln!(
            "{extra:?}: median backlog after a send call {median} B; {}",
            trace["connections"][0]["sojourn_depart"]
        );
        medians.push(median);
    }
    assert!(
        medians[0] > 3 * medians[1],
        "default {} B against BPF REPLENISH_TIME {} B",
        medians[0],
        medians[1]
    );
    assert!(
        medians[1] < 65_536 + 16_384,
        "with BPF REPLENISH_TIME: median backlog {} B",
        medians[1]
    );
    drop(bed);
    assert_nothing_new(&before, "tracing");
}

/// A matrix of `workload = "command"` cells: Debian's nginx, unmodified, serving curl across
/// the 2 Mb/s path under sbm-trace, with the system default, with a sysctl NOTSENT_LOWAT in
/// the sender's namespace, and with the BPF REPLENISH_TIME. Each cell records the server's
/// writes with exact departures; the sysctl and the BPF rule each cut the writes' delay
/// (measured here: ~2.4 s by default, ~0.3 s with either), the sysctl is put back, and
/// nothing of the cells stays behind.
#[test]
fn a_command_cell_traces_an_unmodified_server_and_applies_its_settings() {
    let _g = serial();
    require_root();
    for tool in ["nginx", "curl"] {
        assert!(
            run_program(
                "sh",
                &["-c", &format!("command -v {tool}")],
                Duration::from_secs(10)
            )
            .status
            .success(),
            "{tool} is needed (scripts/setup installs nginx-light and curl)"
        );
    }
    let before = attached();
    let scratch_before = cell_scratch_dirs();
    let dir = tempdir("command-cells");
    let matrix = dir.join("unmodified.toml");
    let command = r#"workload = "command"
server = ["scripts/unmodified/nginx-serve", "{addr}", "{port}", "{tmp}", "{bytes}"]
client = ["scripts/unmodified/http-get", "http://{addr}:{port}/file", "{seconds}", "{dir}"]
"#;
    std::fs::write(
        &matrix,
        format!(
            "duration = \"12s\"\nwarmup = \"4s\"\npause = \"0s\"\n[axes]\nrate = [\"2mbit\"]\n\
             config = [\"plain\", \"lowat\", \"bpf\"]\n\
             [configs.plain]\n{command}\
             [configs.lowat]\nsysctls = [\"net.ipv4.tcp_notsent_lowat=16384\"]\n{command}\
             [configs.bpf]\nargs = [\"--replenish-time\", \"20ms\"]\n{command}"
        ),
    )
    .unwrap();
    let prefix = format!("cm{}", std::process::id() % 100_000);
    let out = dir.join("run");
    let mut cmd = std::process::Command::new(bin("sbm-matrix"));
    cmd.args([
        "run",
        matrix.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .args(["--prefix", &prefix]);
    let res = output_within(cmd, Duration::from_secs(240));
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);

    let rows = read_csv(&out.join("summary.csv"));
    let row = |config: &str| rows.iter().find(|r| r["config"] == config).unwrap();
    let mut p50 = std::collections::HashMap::new();
    for config in ["plain", "lowat", "bpf"] {
        let r = row(config);
        assert_eq!(r["status"], "ok", "{r:?}");
        let cell = out.join(format!("2mbit-{config}"));
        let trace = read_json(&cell.join("trace.json"));
        let conn = &trace["connections"][0];
        assert_eq!(
            conn["remote"].as_str().unwrap().split(':').next(),
            Some("198.18.2.1")
        );
        // Every write after the warm-up that left the socket has its exact departure.
        let writes = read_csv(&cell.join("conn-0/writes.csv"));
        let departed_rows = writes
            .iter()
            .filter(|w| w["warmup"] == "false" && !w["depart_lo_ns"].is_empty())
            .count() as u64;
        assert_eq!(num(r, "departed"), Some(departed_rows), "{r:?}");
        // A coalesced TX_SCHED time stands only within 1 ms of the write's exact departure
        // (later ones are another segment's: the row says `missing`).
        for w in writes.iter().filter(|w| w["attribution"] == "coalesced") {
            let (Some(sched), Some(depart)) = (num(w, "sched_ns"), num(w, "depart_exact_ns"))
            else {
                continue;
            };
            assert!(
                sched <= depart + sbm::tstamp::ledger::COALESCED_SLACK_NS,
                "{config}: coalesced {sched} against departure {depart}: {w:?}"
            );
        }
        assert!(
            departed_rows >= 3,
            "{config}: {departed_rows} writes departed"
        );
        let goodput = f(r, "goodput_bps");
        assert!(
            (1.5e6..2.0e6).contains(&goodput),
            "{config}: goodput {goodput} on a 2 Mb/s path"
        );
        p50.insert(config, num(r, "departure_p50_us").unwrap());
        // curl's own account: it ran to its time limit.
        let client = read_json(&cell.join("client.json"));
        assert_eq!(client["exitcode"], 28, "{client}");
    }
    eprintln!("median delay of nginx's writes, µs: {p50:?}");
    for config in ["lowat", "bpf"] {
        assert!(
            p50["plain"] > 3 * p50[config],
            "{config} {} µs against the default {} µs",
            p50[config],
            p50["plain"]
        );
    }
    assert_eq!(row("bpf")["policy"], "traced+replenish-time/bpf");
    let meta = read_json(&out.join("2mbit-lowat/meta.json"));
    assert_eq!(meta["ns_sysctls"][0]["value"], "16384", "{meta}");
    // The unmodified server chooses no congestion control: sbm-trace gives its connections
    // the row's (cubic, the default axis), whatever the namespace's default is.
    for cell in ["2mbit-plain", "2mbit-lowat", "2mbit-bpf"] {
        let trace = read_json(&out.join(cell).join("trace.json"));
        assert_eq!(trace["congestion"], "cubic", "{cell}: {trace}");
        for c in trace["connections"].as_array().unwrap() {
            assert!(c["congestion_error"].is_null(), "{cell}: {c}");
        }
    }
    assert_eq!(meta["workload"], "command");
    assert!(
        std::fs::read_to_string(out.join("table.md"))
            .unwrap()
            .contains("(departure)"),
        "table.md marks the traced cells' estimator"
    );
    // Nothing left: the path's namespaces, the cells' scratch directories, BPF state.
    let netns = run_program("ip", &["netns", "list"], Duration::from_secs(30)).stdout;
    assert!(!netns.contains(&format!("{prefix}-")), "{netns}");
    // Only this run's: a run killed by SIGKILL elsewhere on the machine leaves its own.
    let scratch: Vec<_> = cell_scratch_dirs()
        .difference(&scratch_before)
        .cloned()
        .collect();
    assert!(scratch.is_empty(), "{scratch:?}");
    assert_nothing_new(&before, "the cells");
}

/// The command cells' scratch directories (`sbm-cell-PID-2mbit-CONFIG`) in the temp dir.
fn cell_scratch_dirs() -> std::collections::BTreeSet<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("sbm-cell-")
                && ["plain", "lowat", "bpf"]
                    .iter()
                    .any(|c| name.ends_with(&format!("-2mbit-{c}")))
        })
        .collect()
}

/// `--timestamps auto`, the default: as root on this kernel (which has BPF TX timestamping)
/// a lone run takes its times from the BPF program and says why; what the command line
/// asks that only the error queue can give keeps socket, and says which flag; a source
/// named is not second-guessed and carries no note; without root it is socket, said in
/// the banner.
#[test]
fn sbm_send_chooses_bpf_timestamps_where_it_can() {
    let _g = serial();
    require_root();
    let before = attached();
    let bed = Bed::up("ta", &["--rate", "20mbit", "--rtt", "10ms"]);
    let quick = ["-t", "2s", "-l", "16KiB"];

    let (s, _out) = bed.transfer_to(&quick);
    let c = &s["config"];
    assert_eq!(c["timestamp_source"], "bpf", "{c}");
    assert_eq!(
        c["timestamp_note"], "auto: bpf (root, and the kernel has BPF TX timestamping)",
        "{c}"
    );
    assert!(
        s["timestamping"].is_null(),
        "SO_TIMESTAMPING was enabled: {s}"
    );
    assert!(s["bpf_timestamps"]["reports"].as_u64().unwrap() > 0, "{s}");

    let mut args = quick.to_vec();
    args.extend(["--errqueue-rcvbuf", "4MiB"]);
    let (s, _out) = bed.transfer_to(&args);
    let c = &s["config"];
    assert_eq!(c["timestamp_source"], "socket", "{c}");
    let note = c["timestamp_note"].as_str().unwrap();
    assert!(
        note.starts_with("auto: socket (") && note.contains("--errqueue-rcvbuf"),
        "{note}"
    );
    assert!(
        s["bpf_timestamps"].is_null() && !s["timestamping"].is_null(),
        "{s}"
    );

    let mut args = quick.to_vec();
    args.extend(["--timestamps", "socket"]);
    let (s, _out) = bed.transfer_to(&args);
    assert_eq!(s["config"]["timestamp_source"], "socket", "{s}");
    assert!(s["config"]["timestamp_note"].is_null(), "{s}");
    drop(bed);
    assert_nothing_new(&before, "--timestamps auto");

    let sink = Sink::start("127.0.0.1:0", &["-q"]);
    let out = send_as_nobody(&["--connect", &sink.addr, "-t", "1s"]);
    sink.stop();
    assert_eq!(out.code(), Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("timestamp source: auto: socket (not root: BPF programs need it)"),
        "{}",
        out.stdout
    );
}

/// `sbm-trace --no-departures`: no per-packet callback, so no departure on any row, and the
/// TX timestamps still come: each write's BPF TX_SCHED is the one sbm-send's own error
/// queue reported for the same byte (within 50 µs, ≥ 99 % of the writes exact in both).
#[test]
fn sbm_trace_without_departures_keeps_the_tx_timestamps() {
    let _g = serial();
    require_root();
    let before = attached();
    let (send_out, trace_out) = trace_send_on_loopback("trace-nd", &["--no-departures"]);
    let trace = read_json(&trace_out.join("trace.json"));
    assert_eq!(trace["departures"], false, "{trace}");
    let conn = &trace["connections"][0];
    assert_eq!(conn["departures"], 0, "{conn}");
    assert!(conn["sched_reports"].as_u64().unwrap() > 100, "{conn}");
    let traced = read_csv(&trace_out.join("conn-0/writes.csv"));
    assert!(
        traced.iter().all(|r| r["depart_exact_ns"].is_empty()),
        "a departure without the per-packet callback"
    );
    let by_offset: std::collections::HashMap<&str, &Row> = traced
        .iter()
        .filter(|r| r["attribution"] == "exact")
        .map(|r| (r["end_offset"].as_str(), r))
        .collect();
    let own = read_csv(&send_out.join("writes.csv"));
    let both: Vec<(u64, u64)> = own
        .iter()
        .filter(|r| r["attribution"] == "exact")
        .filter_map(|r| {
            let t = by_offset.get(r["end_offset"].as_str())?;
            Some((num(r, "sched_ns")?, num(t, "sched_ns")?))
        })
        .collect();
    let close = both
        .iter()
        .filter(|(a, b)| a.abs_diff(*b) <= 50_000)
        .count();
    assert!(
        both.len() > 1000 && close as f64 >= 0.99 * both.len() as f64,
        "{close} of {} writes with both TX_SCHEDs within 50 µs",
        both.len()
    );
    assert_nothing_new(&before, "tracing without departures");
}
