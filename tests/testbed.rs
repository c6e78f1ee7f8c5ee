//! The emulated WAN path, in network namespaces (root). Every bed has a unique prefix
//! and is torn down by a guard on success and failure; tests run one at a time.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

/// Nothing with this prefix: no namespace, no state, no delay line.
fn assert_nothing_left(prefix: &str) {
    let list = run_program("ip", &["netns", "list"], Duration::from_secs(30)).stdout;
    assert!(
        !list.lines().any(|l| l.starts_with(&format!("{prefix}-"))),
        "namespaces left: {list}"
    );
    assert!(
        !Path::new("/run/sbm-testbed").join(prefix).exists(),
        "state dir left"
    );
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        assert!(
            !(cmdline.contains("sbm-delay") && cmdline.contains(&format!("/{prefix}/"))),
            "delay line left: {cmdline}"
        );
    }
}

fn min_rtt_ms(bed: &Bed) -> f64 {
    // A few small NODELAY writes on an idle path.
    let s = bed.transfer(&["--writes", "20", "-l", "100B", "--nodelay"]);
    assert_eq!(s["totals"]["writes"], 20);
    s["min_rtt_us"]
        .as_f64()
        .map_or_else(|| panic!("no min_rtt_us in summary: {s}"), |v| v / 1000.0)
}

/// The path's RTT floor: the least min RTT of up to three short transfers, the first within
/// 2 % of `want` ending it. A busy 2-core machine can hold one short transfer's every packet
/// back a few milliseconds (seen: 41.8 ms at 40, 105.9 at 100); a delay line or qdisc that
/// adds delay adds it to all three. Every retry is said, with what the machine did meanwhile.
fn path_floor_ms(bed: &Bed, want: f64) -> f64 {
    let mut got = f64::INFINITY;
    for attempt in 1..=3 {
        let probe = MachineProbe::start();
        let this = min_rtt_ms(bed);
        let machine = probe.finish();
        got = got.min(this);
        if (got - want).abs() <= want * 0.02 {
            break;
        }
        let said = format!(
            "path floor: transfer {attempt} of 3 showed min RTT {this:.1} ms for {want} ms ({machine})"
        );
        if attempt < 3 {
            say_retry(&format!("{said}; asking again"));
        } else {
            eprintln!("{said}; giving up");
        }
    }
    got
}

#[test]
fn idle_path_rtt_matches_the_request_and_both_directions_are_delayed() {
    let _g = serial();
    for (tag, rtt, want) in [("a", "172ms", 172.0), ("b", "40ms", 40.0)] {
        let bed = Bed::up(tag, &["--rtt", rtt, "--rate", "off"]);
        let got = path_floor_ms(&bed, want);
        assert!(
            (got - want).abs() <= want * 0.02,
            "min_rtt {got} ms for --rtt {rtt}"
        );
        // The stats file is rewritten every 250 ms: wait for it to show the transfer.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let st = bed.status();
            let dirs = st["delay_line"]["directions"].as_array().unwrap().clone();
            assert_eq!(dirs.len(), 2);
            if dirs.iter().all(|d| d["received"].as_u64().unwrap() > 0) {
                for d in &dirs {
                    assert_eq!(d["delay_us"].as_u64().unwrap() as f64, want * 500.0);
                }
                break;
            }
            assert!(
                Instant::now() < deadline,
                "a direction was never delayed: {dirs:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Goodput after the warm-up as a share of the payload rate the HTB allows.
fn share_of_bottleneck(summary: &serde_json::Value, rate_bps: f64) -> f64 {
    summary["totals"]["goodput_bps"].as_f64().unwrap() / payload_rate(summary, rate_bps)
}

#[test]
fn shaped_path_reaches_the_bottleneck_rate_and_set_changes_it() {
    let _g = serial();
    let bed = Bed::up("c", &["--rate", "2mbit"]);
    assert_eq!(
        bed.installed_bottleneck("wan", "wr"),
        (2_000_000, "bfifo".into(), 50_000)
    );
    let s = bed.transfer(&["-t", "13s", "--warmup", "5s", "--cc", "cubic"]);
    let share = share_of_bottleneck(&s, 2e6);
    assert!(
        (0.90..=1.0).contains(&share),
        "2 Mb/s: {share:.3} of the payload rate"
    );

    bed.set(&["--rate", "100kbit"]);
    // Goodput leaves out the bytes in flight when the warm-up ends (README,
    // `totals.goodput_bps`): at 100 kb/s with its 6 KB queue that is ~8 KB, 0.65 s of the
    // link, so the window is 20 s and the bound allows that flight (about 3 %).
    let s = bed.transfer(&["-t", "25s", "--warmup", "5s", "--cc", "cubic"]);
    let share = share_of_bottleneck(&s, 1e5);
    assert!(
        (0.87..=1.0).contains(&share),
        "100 kb/s after set: {share:.3} of the payload rate"
    );
    // What the kernel runs, from tc: the new rate, and the queue raised to its floor of
    // four full-size packets (200 ms at 100 kb/s would be 2 500 B).
    assert_eq!(
        bed.installed_bottleneck("wan", "wr"),
        (100_000, "bfifo".into(), 4 * 1514)
    );
}

#[test]
fn ingress_shaping_through_ifb_reaches_the_bottleneck_rate() {
    let _g = serial();
    let bed = Bed::up("d", &["--rate", "2mbit", "--shape-at", "ingress"]);
    let s = bed.transfer(&["-t", "13s", "--warmup", "5s", "--cc", "cubic"]);
    let share = share_of_bottleneck(&s, 2e6);
    assert!(
        (0.90..=1.02).contains(&share),
        "2 Mb/s at rcv ingress: {share:.3} of the payload rate"
    );
    let st = bed.status();
    assert!(st["shape_dev"].as_str().unwrap().ends_with(":ifb0"));
    assert_eq!(
        bed.installed_bottleneck("rcv", "ifb0"),
        (2_000_000, "bfifo".into(), 50_000)
    );
    let htb = st["qdisc"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["kind"] == "htb")
        .expect("htb on ifb0");
    assert!(htb["packets"].as_u64().unwrap() > 1000, "{htb}");
}

#[test]
fn a_policer_drops_what_exceeds_its_rate_and_set_turns_it_back_into_a_shaper() {
    let _g = serial();
    let bed = Bed::up(
        "pol",
        &[
            "--rtt",
            "40ms",
            "--rate",
            "10mbit",
            "--queue",
            "20ms",
            "--bottleneck",
            "policer",
        ],
    );
    let st = bed.status();
    assert_eq!(st["bottleneck"], "policer", "{st}");
    assert_eq!(st["policer_bucket_bytes"], 25_000);
    let how = st["policer_impl"].as_str().unwrap().to_string();
    // Nothing shapes on wr: the policer is the only limit.
    let wr = bed.tc("wan", &["qdisc", "show", "dev", "wr"]);
    assert!(!wr.contains("htb"), "{wr}");
    let s = bed.transfer(&["-t", "12s", "--warmup", "3s", "--cc", "cubic"]);
    let share = share_of_bottleneck(&s, 10e6);
    assert!(
        (0.2..=1.02).contains(&share),
        "through a 10 Mb/s policer: {share:.3} of the payload rate"
    );
    let dropped = if how == "tbf" {
        let q = bed.status()["qdisc"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["kind"] == "tbf")
            .cloned()
            .expect("tbf on ifbp0");
        q["drops"].as_u64().unwrap()
    } else {
        assert_eq!(how, "police");
        let f = bed.tc("wan", &["-s", "filter", "show", "dev", "ws", "ingress"]);
        f.split("dropped ")
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no police counters: {f}"))
    };
    assert!(dropped > 0, "the policer dropped nothing ({how})");
    assert!(
        s["totals"]["retransmits"].as_u64().unwrap_or(0) > 0,
        "the sender retransmitted what the policer dropped: {}",
        s["totals"]
    );

    bed.set(&["--rate", "10mbit", "--bottleneck", "shaper"]);
    assert_eq!(
        bed.installed_bottleneck("wan", "wr"),
        (10_000_000, "bfifo".into(), 25_000)
    );
    let links = run_program(
        "ip",
        &["-n", &bed.ns("wan"), "-o", "link", "show"],
        Duration::from_secs(10),
    );
    assert!(!links.stdout.contains("ifbp0"), "{}", links.stdout);
    let ingress = bed.tc("wan", &["qdisc", "show", "dev", "ws"]);
    assert!(!ingress.contains("ingress"), "{ingress}");
    assert_eq!(bed.status()["bottleneck"], "shaper");
}

/// What one 86 Mb/s transfer through a fresh delay line showed of its punctuality, with
/// what the machine did to wakeups meanwhile.
struct Punctuality {
    /// The forward direction's late release (µs), median and p99, from its final statistics.
    late_p50_us: u64,
    late_p99_us: u64,
    /// The p99 lateness of a control beside it: a thread of this process waking every
    /// millisecond during the transfer.
    control_p99_us: u64,
    /// CPU time the hypervisor took from this VM during the transfer (/proc/stat steal), as
    /// a share of all CPUs' time.
    steal_share: f64,
    /// Goodput as a share of the bottleneck's payload rate.
    share: f64,
}

impl Punctuality {
    /// A run in which the machine itself kept time: the control woke within 1 ms at p99 and
    /// under 0.5 % of the CPU time was stolen. Only such a run can judge the delay line's
    /// tail; elsewhere its backlog after every stolen stretch makes the tail.
    fn machine_kept_time(&self) -> bool {
        self.control_p99_us < 1000 && self.steal_share < 0.005
    }

    /// The line's own budget, 1 ms, plus twice the machine's p99 wakeup delay. Measured on a
    /// 2-core Xeon with no steal: the line's p99 at 1.6–2.1 ms beside a control at
    /// 0.64–0.86 ms, the same with the line at SCHED_FIFO, so that tail is the machine's, not
    /// the line's scheduling (a released batch runs the path's downstream stack inside the
    /// line's own verdict call; whether that is all of it is not known). A stalled line —
    /// the stats write that held it 0.99 s — fails this on any machine.
    fn tail_bound_us(&self) -> u64 {
        1000 + 2 * self.control_p99_us
    }
}

/// One 86 Mb/s transfer through a fresh delay line: lossless, at the rate; returns what it
/// showed of its punctuality.
fn fast_transfer_punctuality(tag: &str) -> Punctuality {
    let bed = Bed::up(tag, &["--rate", "86mbit"]);
    let probe = MachineProbe::start();
    let s = bed.transfer(&["-t", "13s", "--warmup", "5s", "--cc", "cubic"]);
    let machine = probe.finish();
    let share = share_of_bottleneck(&s, 86e6);
    let st = bed.status();
    for q in st["nfnetlink_queue"].as_array().unwrap() {
        assert_eq!(q["queue_dropped"], 0, "{q}");
        assert_eq!(q["user_dropped"], 0, "{q}");
    }
    // Final statistics: SIGTERM, then the stats file says exited.
    let pid = st["delay_pid"].as_u64().unwrap() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    let stats = wait_delay_exit(&bed);
    let fwd = &stats["directions"][0];
    assert!(fwd["received"].as_u64().unwrap() > 50_000, "{fwd}");
    Punctuality {
        late_p50_us: fwd["late_p50_us"].as_u64().unwrap(),
        late_p99_us: fwd["late_p99_us"].as_u64().unwrap(),
        control_p99_us: machine.control_p99_us,
        steal_share: machine.steal_share,
        share,
    }
}

/// Lossless every time, at 85 % of the payload rate in a run where the machine kept time,
/// and punctual: the median release under 0.5 ms in every run (a
/// systematically late line — a coarse timer, batching — shows there whatever the host
/// does), and the p99 within `tail_bound_us` in a run where the machine kept time (see
/// `machine_kept_time`), at most three runs, the first within its bound ending it. On this
/// 2-core VM the host sometimes takes the CPUs for milliseconds (CPU steal: CI saw a timer
/// thread's p99 at 2.7–5.2 ms beside a line at 13–15 ms); when no run kept time the tail is
/// not judged, and the test says so.
#[test]
fn fast_path_delay_line_is_lossless_and_punctual() {
    let _g = serial();
    let shown = |p: &Punctuality| {
        format!(
            "p99 late release {} us (bound {} us; timer thread beside it {} us, {:.2} % of CPU time stolen)",
            p.late_p99_us,
            p.tail_bound_us(),
            p.control_p99_us,
            p.steal_share * 100.0
        )
    };
    let mut runs = vec![];
    for tag in ["e", "e2", "e3"] {
        let p = fast_transfer_punctuality(tag);
        assert!(
            p.late_p50_us < 500,
            "median late release {} us at 86 Mb/s",
            p.late_p50_us
        );
        eprintln!(
            "run {tag}: {:.3} of the payload rate, {}",
            p.share,
            shown(&p)
        );
        // The rate is judged as the tail is: a userspace line on stolen CPUs falls behind
        // (CI: 0.226 of the rate in a run after one with 6.99 % stolen), so a slow run
        // fails only where the machine kept time, and is otherwise retried.
        if p.share < 0.85 {
            assert!(
                !p.machine_kept_time(),
                "86 Mb/s: {:.3} of the payload rate ({})",
                p.share,
                shown(&p)
            );
            if tag != "e3" {
                say_retry(&format!(
                    "86 Mb/s: {:.3} of the payload rate: {}",
                    p.share,
                    shown(&p)
                ));
            }
            runs.push(p);
            continue;
        }
        let within = p.machine_kept_time() && p.late_p99_us < p.tail_bound_us();
        if within {
            return;
        }
        if tag != "e3" {
            say_retry(&format!(
                "86 Mb/s delay-line tail not within its bound: {}",
                shown(&p)
            ));
        }
        runs.push(p);
    }
    let judged: Vec<String> = runs
        .iter()
        .filter(|p| p.machine_kept_time())
        .map(shown)
        .collect();
    assert!(
        judged.is_empty(),
        "86 Mb/s: no run's tail within its bound: {}",
        judged.join("; ")
    );
    say_unjudged(&format!(
        "86 Mb/s delay-line tail: the machine did not keep time in any of {} runs: {}",
        runs.len(),
        runs.iter().map(shown).collect::<Vec<_>>().join("; ")
    ));
}

fn wait_delay_exit(bed: &Bed) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = bed.status();
        if st["delay_line"]["state"] == "exited" {
            return st["delay_line"].clone();
        }
        assert!(Instant::now() < deadline, "sbm-delay did not exit: {st}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn delay_line_stopped_mid_transfer_releases_everything_it_held() {
    let _g = serial();
    let bed = Bed::up("f", &["--rate", "2mbit"]);
    let sink = Sink::start_in(&bed.ns("rcv"), "198.18.2.1:5301", &["-q"]);
    let send = bin("sbm-send");
    let sender = Running::spawn_program(
        "ip",
        &[
            "netns",
            "exec",
            &bed.ns("snd"),
            send.to_str().unwrap(),
            "--connect",
            &sink.addr,
            "-t",
            "30s",
            "-i",
            "500ms",
        ],
    );
    let mut sender = sender;
    sender.wait_line("1.00-1.50 s", Duration::from_secs(20));
    // Stop new packets reaching the NFQUEUE rules, so the rule counters freeze while the
    // delay line still holds packets, then stop it.
    let wan = bed.ns("wan");
    let ipt = |args: &[&str]| {
        let mut a = vec!["netns", "exec", &wan, "iptables"];
        a.extend_from_slice(args);
        let out = run_program("ip", &a, Duration::from_secs(30));
        assert!(out.status.success(), "{}", out.stderr);
        out.stdout
    };
    ipt(&["-I", "FORWARD", "1", "-j", "DROP"]);
    let st = bed.status();
    let pid = st["delay_pid"].as_u64().unwrap() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    let stats = wait_delay_exit(&bed);
    let counters =
        sbm::testbed::status::parse_iptables_counters(&ipt(&["-L", "FORWARD", "-v", "-x", "-n"]));
    let dirs = stats["directions"].as_array().unwrap();
    for (d, dev) in dirs.iter().zip(["ws", "wr"]) {
        assert_eq!(d["received"], d["released"], "{d}");
        assert_eq!(d["held"], 0);
        let rule = counters.iter().find(|c| c.in_dev == dev).unwrap();
        assert_eq!(
            rule.packets,
            d["received"].as_u64().unwrap(),
            "iptables and sbm-delay agree for {dev}"
        );
    }
    assert!(dirs[0]["peak_held"].as_u64().unwrap() > 0);
    sender.signal(Signal::SIGINT);
    let _ = sender.wait(Duration::from_secs(30));
    sink.stop();
}

#[test]
fn a_live_owner_keeps_its_bed_a_dead_one_loses_it_and_down_leaves_nothing() {
    let _g = serial();
    require_root();
    let p = prefix("g");
    // Owned by this (live) test process: a second up is refused, naming the owner.
    let me = std::process::id().to_string();
    let first = testbed(&[
        "wan", "up", "--prefix", &p, "--owner", &me, "--rtt", "20ms", "--rate", "off",
    ]);
    assert_eq!(first.code(), Some(0), "{}", first.stderr);
    let second = testbed(&["wan", "up", "--prefix", &p, "--owner", &me, "--rtt", "20ms"]);
    assert_eq!(second.code(), Some(1));
    assert!(
        second
            .stderr
            .contains(&format!("in use by live process {me}")),
        "{}",
        second.stderr
    );

    // Owned by a process that then dies (a test killed half-way): reclaimed.
    let mut owner = Command::new("sleep").arg("600").spawn().unwrap();
    let owner_pid = owner.id().to_string();
    testbed(&["wan", "down", "--prefix", &p]);
    let res = testbed(&[
        "wan", "up", "--prefix", &p, "--owner", &owner_pid, "--rtt", "20ms", "--rate", "off",
    ]);
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    owner.kill().unwrap();
    owner.wait().unwrap();
    let res = testbed(&[
        "wan", "up", "--prefix", &p, "--owner", &me, "--rtt", "20ms", "--rate", "off",
    ]);
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    assert!(res.stderr.contains("reclaiming"), "{}", res.stderr);
    testbed(&["wan", "down", "--prefix", &p]);
    assert_nothing_left(&p);

    // Leftover namespaces without a state file (killed during up) are removed too.
    run_program(
        "ip",
        &["netns", "add", &format!("{p}-wan")],
        Duration::from_secs(30),
    );
    let res = testbed(&[
        "wan", "up", "--prefix", &p, "--owner", &me, "--rtt", "20ms", "--rate", "off",
    ]);
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    let down = testbed(&["wan", "down", "--prefix", &p]);
    assert_eq!(down.code(), Some(0));
    assert_nothing_left(&p);
    // down on nothing still succeeds.
    assert_eq!(testbed(&["wan", "down", "--prefix", &p]).code(), Some(0));
}

#[test]
fn user_errors_are_one_clear_line() {
    let _g = serial();
    let res = testbed(&["wan", "up", "--rate", "2mbyte"]);
    assert_eq!(res.code(), Some(2));
    let res = testbed(&["wan", "up", "--prefix", "Bad/Prefix"]);
    assert_eq!(res.code(), Some(2));
    assert!(res.stderr.contains("invalid prefix"), "{}", res.stderr);
    let res = testbed(&["wan", "set", "--rate", "1mbit", "--prefix", &prefix("z")]);
    assert_eq!(res.code(), Some(1));
    assert!(res.stderr.contains("no test bed"), "{}", res.stderr);
}

#[test]
fn shape_apply_installs_what_dry_run_prints_and_clear_removes_it() {
    let _g = serial();
    require_root();
    let ns = format!("{}-shp", prefix("h"));
    struct Ns(String);
    impl Drop for Ns {
        fn drop(&mut self) {
            run_program("ip", &["netns", "del", &self.0], Duration::from_secs(30));
        }
    }
    let _guard = Ns(ns.clone());
    let ip = |args: &[&str]| {
        let out = run_program("ip", args, Duration::from_secs(30));
        assert!(out.status.success(), "ip {args:?}: {}", out.stderr);
    };
    ip(&["netns", "add", &ns]);
    ip(&[
        "-n", &ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
    ]);
    ip(&["-n", &ns, "link", "set", "v0", "up"]);
    ip(&["-n", &ns, "link", "set", "v1", "up"]);
    let wrapper = concat!(env!("CARGO_MANIFEST_DIR"), "/testbed/shape");
    let bin_dir = testbed_bin().parent().unwrap().to_path_buf();
    let shape = |args: &[&str]| {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns, wrapper])
            .args(args)
            .env("SBM_BIN", &bin_dir);
        let out = output_within(cmd, Duration::from_secs(60));
        (out.status.code(), out.stdout + "\n")
    };
    let tc = |args: &[&str]| {
        let mut a = vec!["netns", "exec", &ns, "tc"];
        a.extend_from_slice(args);
        run_program("ip", &a, Duration::from_secs(30)).stdout + "\n"
    };
    for ingress in [false, true] {
        let mut args = vec!["apply", "v0", "--rate", "2mbit", "--queue", "200ms"];
        if ingress {
            args.push("--ingress");
        }
        let mut dry = args.clone();
        dry.push("--dry-run");
        let (code, printed) = shape(&dry);
        assert_eq!(code, Some(0));
        assert!(
            tc(&["qdisc", "show", "dev", "v0"])
                .lines()
                .all(|l| !l.contains("htb")),
            "dry run changed nothing"
        );
        let (code, _) = shape(&args);
        assert_eq!(code, Some(0));
        let dev = if ingress { "ifb-v0" } else { "v0" };
        assert!(printed.contains(&format!(
            "tc qdisc replace dev {dev} parent 1:1 handle 10: bfifo limit 50000b"
        )));
        let classes = tc(&["class", "show", "dev", dev]);
        assert!(classes.contains("rate 2Mbit"), "{classes}");
        let qdiscs = tc(&["qdisc", "show", "dev", dev]);
        assert!(
            qdiscs.contains("bfifo 10:") && qdiscs.contains("limit 50000b"),
            "{qdiscs}"
        );
        if ingress {
            assert!(tc(&["qdisc", "show", "dev", "v0"]).contains("ingress ffff:"));
            assert!(tc(&["filter", "show", "dev", "v0", "parent", "ffff:"]).contains("ifb-v0"));
        }
        let mut clear = vec!["clear", "v0"];
        if ingress {
            clear.push("--ingress");
        }
        assert_eq!(shape(&clear).0, Some(0));
        let after = tc(&["qdisc", "show", "dev", "v0"]);
        assert!(
            !after.contains("htb") && !after.contains("ingress"),
            "{after}"
        );
    }
}

/// Writes per round trip after the warm-up.
fn writes_per_rtt(summary: &serde_json::Value, out: &Path) -> f64 {
    let rows = read_csv(&out.join("writes.csv"));
    let after: Vec<&Row> = rows.iter().filter(|r| r["warmup"] == "false").collect();
    let first = num(after[0], "write_ns").unwrap() as f64;
    let last = num(after[after.len() - 1], "write_ns").unwrap() as f64;
    let rtt_ns = summary["min_rtt_us"].as_f64().unwrap() * 1e3;
    (after.len() - 1) as f64 / ((last - first) / rtt_ns)
}

/// The report's §6 byte-threshold trap and its NODELAY fix, at 100 kb/s.
#[test]
fn sub_mss_notsent_lowat_traps_under_nagle_and_nodelay_frees_it() {
    let _g = serial();
    let bed = Bed::up("i", &["--rate", "100kbit"]);
    let common = [
        "-t",
        "20s",
        "--warmup",
        "8s",
        "--cc",
        "cubic",
        "-l",
        "512B",
        "--notsent-lowat",
        "187",
    ];
    let (s, out) = bed.transfer_to(&common);
    let share = share_of_bottleneck(&s, 1e5);
    let per_rtt = writes_per_rtt(&s, &out);
    assert!(
        share < 0.30,
        "Nagle + sub-MSS lowat: {share:.3} of the bottleneck"
    );
    assert!(per_rtt <= 1.2, "{per_rtt:.2} writes per RTT");
    let mut nodelay = common.to_vec();
    nodelay.push("--nodelay");
    let s = bed.transfer(&nodelay);
    let share = share_of_bottleneck(&s, 1e5);
    assert!(share >= 0.80, "with NODELAY: {share:.3} of the bottleneck");
}

/// `--paced-start`: during the phase exactly one write per smoothed RTT whatever the rule
/// says (the forced entry into the §6 state), after it the rule's own invitations; with the
/// sub-MSS clause on the flow leaves the one-write-per-RTT pace and fills the bottleneck.
#[test]
fn paced_start_writes_once_per_rtt_then_the_rule_takes_over() {
    let _g = serial();
    let bed = Bed::up("ps", &["--rate", "2mbit"]);
    let (s, out) = bed.transfer_to(&[
        "-t",
        "16s",
        "--warmup",
        "10s",
        "--cc",
        "cubic",
        "-l",
        "4KiB",
        "--replenish-time",
        "15ms",
        "--sub-mss-clause",
        "on",
        "--paced-start",
        "6s",
    ]);
    assert_eq!(s["config"]["paced_start_s"].as_f64(), Some(6.0));
    let rows = read_csv(&out.join("writes.csv"));
    let t0 = num(&rows[0], "write_ns").unwrap() as f64;
    let at = |r: &Row| (num(r, "write_ns").unwrap() as f64 - t0) / 1e9;
    let paced: Vec<f64> = rows
        .iter()
        .filter(|r| r["invite_reason"] == "paced-start")
        .map(at)
        .collect();
    let rtt_s = s["min_rtt_us"].as_f64().unwrap() / 1e6;
    // 6 s at one write per smoothed RTT (≥ the 172 ms minimum, a little more with queueing).
    assert!(
        (20..=36).contains(&paced.len()),
        "{} paced writes in 6 s (RTT {rtt_s} s)",
        paced.len()
    );
    let min_gap = paced
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(f64::MAX, f64::min);
    assert!(
        min_gap >= 0.9 * rtt_s,
        "paced writes {min_gap:.3} s apart, under one RTT ({rtt_s} s)"
    );
    let last_paced = paced.last().copied().unwrap();
    assert!(last_paced < 6.1, "a paced write at {last_paced:.2} s");
    // Before the phase ends no write comes from the rule; after it, every one does.
    let first_rule = rows
        .iter()
        .find(|r| r["invite_reason"] != "paced-start")
        .map(at)
        .unwrap();
    assert!(
        first_rule >= 5.9,
        "the rule invited at {first_rule:.2} s, inside the paced phase"
    );
    let share = share_of_bottleneck(&s, 2e6);
    assert!(
        share >= 0.85,
        "with the clause on the flow left the paced state: {share:.3} of the bottleneck"
    );
}

/// The report's 2 Mb/s REPLENISH_TIME cell, short: emulated 15 ms keeps the sojourn near
/// the 64 KiB write's own drain time at full rate, woken through NOTSENT_LOWAT.
#[test]
fn emulated_replenish_time_holds_the_source_queue_at_2mbit() {
    let _g = serial();
    let bed = Bed::up("j", &["--rate", "2mbit"]);
    let (s, out) = bed.transfer_to(&[
        "-t",
        "20s",
        "--warmup",
        "8s",
        "--cc",
        "cubic",
        "--replenish-time",
        "15ms",
    ]);
    assert_eq!(s["policy"]["implementation"], "emulated");
    let median_ms = s["sojourn"]["p50_us"].as_f64().unwrap() / 1e3;
    assert!(
        median_ms <= 350.0,
        "median sojourn {median_ms} ms (report 280 ms)"
    );
    let share = share_of_bottleneck(&s, 2e6);
    assert!(share >= 0.90, "{share:.3} of the bottleneck");
    let lowats: Vec<u64> = read_csv(&out.join("intervals.csv"))
        .iter()
        .filter_map(|r| num(r, "lowat_bytes"))
        .collect();
    assert!(
        lowats.iter().any(|&l| l > 0),
        "the emulation waits through NOTSENT_LOWAT: {lowats:?}"
    );
}

/// Trip times on the 172 ms path: the sink's read times sit between the sender's SCHED
/// and ACK times, one-way delay apart, as physics says they must.
#[test]
fn trip_times_agree_with_the_paths_one_way_delay() {
    let _g = serial();
    let bed = Bed::up("k", &["--rate", "2mbit"]);
    let (s, out) = bed.transfer_to(&[
        "-t",
        "25s",
        "--warmup",
        "5s",
        "--cc",
        "cubic",
        "--notsent-lowat",
        "16KB",
        "--trip-times",
        "--drain-timeout",
        "30s",
        // Short writes under lowat gating share skbs; MSG_EOR gives every message's last
        // write its own report, so that every message has exact times.
        "--eor",
    ]);
    assert_eq!(s["receiver"]["clocks_shared"], true);
    let rows = read_csv(&out.join("messages.csv"));
    let exact: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            r["exact"] == "true" && !r["sink_read_ns"].is_empty() && !r["ack_ns"].is_empty()
        })
        .collect();
    assert!(exact.len() > 40, "{} exact messages", exact.len());
    let one_way = 86_000_000u64;
    let ok = exact
        .iter()
        .filter(|r| {
            let (sched, read, ack) = (
                num(r, "sched_ns").unwrap(),
                num(r, "sink_read_ns").unwrap(),
                num(r, "ack_ns").unwrap(),
            );
            sched + one_way <= read && read <= ack - one_way + 45_000_000
        })
        .count();
    assert!(
        ok as f64 >= 0.95 * exact.len() as f64,
        "{ok} of {} within bounds",
        exact.len()
    );
    let mut ack_minus_read: Vec<i64> = exact
        .iter()
        .map(|r| num(r, "ack_ns").unwrap() as i64 - num(r, "sink_read_ns").unwrap() as i64)
        .collect();
    ack_minus_read.sort();
    let median = ack_minus_read[ack_minus_read.len() / 2] as f64 / 1e6;
    assert!(
        (median - 86.0).abs() <= 10.0,
        "median ack − read {median} ms"
    );
    assert_eq!(s["trip_estimators"].as_array().unwrap().len(), 5);
}

/// The snd_nxt sampler on the 172 ms path at 2 Mb/s: where a write has its own TX_SCHED
/// report, the report is never before the sampler's bracket and lies in it for ≥ 95 % of the
/// writes (64 KiB and 4 KiB writes, Nagle and NODELAY; a few per cent of segments reach the
/// qdisc after TCP counted them sent: `exact_reports_inside_bracket`); and at 86 Mb/s the
/// sampling timer costs no goodput (on against off).
#[test]
fn sampler_agrees_with_exact_reports_and_costs_no_goodput() {
    let _g = serial();
    let bed = Bed::up("m", &["--rate", "2mbit"]);
    for (size, nodelay) in [
        ("64KiB", false),
        ("64KiB", true),
        ("4KiB", false),
        ("4KiB", true),
    ] {
        let mut args = vec![
            "-t",
            "12s",
            "--warmup",
            "2s",
            "--cc",
            "cubic",
            "-l",
            size,
            "--replenish-time",
            "15ms",
        ];
        if nodelay {
            args.push("--nodelay");
        }
        let (_, out) = bed.transfer_to(&args);
        let rows = read_csv(&out.join("writes.csv"));
        let (inside, exact, before) = exact_reports_inside_bracket(&rows);
        assert!(exact >= 20, "{size} nodelay={nodelay}: {exact} exact");
        assert_eq!(
            before, 0,
            "{size} nodelay={nodelay}: reports before the sampler's bracket"
        );
        assert!(
            inside as f64 >= 0.95 * exact as f64,
            "{size} nodelay={nodelay}: {inside} of {exact} inside"
        );
    }
    bed.set(&["--rate", "86mbit"]);
    // A CUBIC flow on a 172 ms path keeps the mark of whether its slow start overshot the
    // bottleneck queue for many seconds, so one pair of runs can differ by a few per cent
    // for reasons that have nothing to do with sampling. Runs alternate off/on; a second
    // pair is run only when the first misses, and the best of each setting is compared.
    let mut best_off = 0.0f64;
    let mut best_on = 0.0f64;
    let mut seen = Vec::new();
    for _pair in 0..2 {
        let off = bed.transfer(&[
            "-t",
            "15s",
            "--warmup",
            "5s",
            "--cc",
            "cubic",
            "--sample-interval",
            "0s",
        ]);
        let on = bed.transfer(&["-t", "15s", "--warmup", "5s", "--cc", "cubic"]);
        assert_eq!(off["sampling"]["interval_us"], 0);
        assert_eq!(on["sampling"]["interval_us"], 1000);
        let (g_off, g_on) = (
            off["totals"]["goodput_bps"].as_f64().unwrap(),
            on["totals"]["goodput_bps"].as_f64().unwrap(),
        );
        seen.push(format!(
            "off {g_off:.0} b/s ({} retransmits), on {g_on:.0} b/s ({} retransmits)",
            off["totals"]["retransmits"], on["totals"]["retransmits"]
        ));
        best_off = best_off.max(g_off);
        best_on = best_on.max(g_on);
        // The bottleneck caps both runs; a window that catches the end of a queue drain
        // can put one a little above its payload rate, so compare with the lower of the two.
        let cap = payload_rate(&off, 86e6);
        if best_on >= 0.98 * best_off.min(cap) {
            return;
        }
    }
    panic!("sampling costs goodput at 86 Mb/s: {}", seen.join("; "));
}

/// Whether this kernel can run netem (tried in a namespace of our own, then removed).
fn kernel_has_netem() -> bool {
    let ns = format!("t{}probe", std::process::id() % 100_000);
    run_program("ip", &["netns", "add", &ns], Duration::from_secs(30));
    let ok = run_program(
        "ip",
        &[
            "netns", "exec", &ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
            "1ms",
        ],
        Duration::from_secs(30),
    )
    .status
    .success();
    run_program("ip", &["netns", "del", &ns], Duration::from_secs(30));
    ok
}

/// What a user gets by default (`--delay-impl auto`): netem on a kernel that has it, the
/// delay line on one that has not — and either way a path with the requested RTT. This
/// test runs the default path on whichever kind of kernel it finds; tests/uml.rs runs the
/// netem path inside a guest kernel that has sch_netem, so both are covered here too.
#[test]
fn the_default_delay_implementation_fits_the_kernel_and_keeps_the_rtt() {
    let _g = serial();
    let netem = kernel_has_netem();
    let bed = Bed::up(
        "g",
        &["--rtt", "100ms", "--rate", "off", "--delay-impl", "auto"],
    );
    let st = bed.status();
    let want = if netem { "netem" } else { "nfqueue" };
    assert_eq!(st["delay_impl"], want, "{st}");
    let qdiscs = bed.tc("wan", &["qdisc", "show"]);
    assert_eq!(qdiscs.contains("netem"), netem, "{qdiscs}");
    let got = path_floor_ms(&bed, 100.0);
    assert!(
        (got - 100.0).abs() <= 2.0,
        "min_rtt {got} ms for --rtt 100ms with {want}"
    );
}

/// Over a backlog each write takes the previous write's TX timestamp request over (the kernel
/// keeps one per skb): sbm-send says so in summary.json and its summary, naming the estimator
/// per-write delay then rests on; with --eor every 4 KiB write (none short) keeps its own
/// report and there is nothing to say.
#[test]
fn most_writes_without_their_own_tx_report_are_explained_and_eor_keeps_them() {
    let _g = serial();
    let bed = Bed::up("own", &["--rate", "2mbit"]);
    let common = [
        "-t",
        "6s",
        "--warmup",
        "2s",
        "-l",
        "4KiB",
        "--notsent-lowat",
        "16KB",
    ];
    let s = bed.transfer(&common);
    let a = &s["attribution"];
    let n = |k: &str| a[k].as_u64().unwrap();
    // Without their own report, writes are coalesced (a later write's time bounds them) or
    // missing (that time came too late after the byte's departure to be a bound).
    assert!(n("coalesced") + n("missing") > n("exact"), "{a}");
    let warnings = s["warnings"].to_string();
    assert!(
        warnings.contains("have a TX report of their own")
            && warnings.contains("rests on the snd_nxt sampler"),
        "{warnings}"
    );
    let mut eor = common.to_vec();
    eor.push("--eor");
    let s = bed.transfer(&eor);
    let a = &s["attribution"];
    assert_eq!(a["coalesced"].as_u64(), Some(0), "{a}");
    assert_eq!(s["totals"]["short_writes"].as_u64(), Some(0));
    assert!(
        !s["warnings"].to_string().contains("TX report of their own"),
        "{}",
        s["warnings"]
    );
}
