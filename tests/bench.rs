//! `scripts/bench --smoke`: sbm beside iperf3 and iperf 2, report loss, and the validity
//! control, end to end (root; needs Debian's iperf3 and iperf, which .ci/run installs).
//! Checks that every measurement is made and reported, not the performance goals: those
//! are ratios for results/bench, not assertions about a noisy machine.

mod common;

use std::process::Command;

use common::*;

#[test]
fn bench_smoke_measures_and_reports_every_part() {
    let _g = serial();
    let out = tempdir("bench");
    let mut cmd = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench"));
    cmd.args(["--smoke", "--out", out.to_str().unwrap()]).env(
        "SBM_BIN",
        std::path::Path::new(env!("CARGO_BIN_EXE_sbm-send"))
            .parent()
            .unwrap(),
    );
    // The smoke run takes about a minute; ten mean it hangs.
    let res = common::output_within(cmd, std::time::Duration::from_secs(600));
    assert!(res.status.success(), "{}\n{}", res.stdout, res.stderr);
    let json = read_json(&out.join("bench.json"));
    // The run names its machine: ratios to iperf3 differ between machines.
    let machine = &json["machine"];
    assert!(
        machine["cpus"].as_u64().unwrap_or(0) >= 1
            && !machine["cpu_model"].as_str().unwrap_or("").is_empty()
            && machine["kernel"].as_str() == Some(sbm::sysinfo::kernel_release().as_str()),
        "{machine}"
    );
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        readme.contains(&format!(
            "CPUs ({})",
            machine["cpu_model"].as_str().unwrap()
        )),
        "README names the CPU: {readme}"
    );
    for tool in [
        "sbm (timestamps, CSV)",
        "sbm --no-timestamps",
        "sbm --no-timestamps --burst 10",
        "iperf3",
        "iperf 2",
    ] {
        let runs = json["loopback"][tool]
            .as_array()
            .unwrap_or_else(|| panic!("no {tool} runs"));
        assert!(!runs.is_empty());
        for r in runs {
            assert!(r["goodput_bps"].as_f64().unwrap() > 1e8, "{tool}: {r}");
            assert!(r["tx_cpu_s"].as_f64().unwrap() > 0.0, "{tool}: {r}");
        }
    }
    // Small NODELAY writes as fast as loopback takes them: every TX report arrives, from the
    // error queue and (as root, --timestamps bpf) from the BPF program.
    let root = nix::unistd::geteuid().is_root();
    let stressed: &[&str] = if root {
        &["512B", "4KiB", "512B bpf", "4KiB bpf"]
    } else {
        &["512B", "4KiB"]
    };
    for size in stressed {
        let s = &json["stress"][size];
        assert!(s["writes"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(
            s["missing"].as_u64(),
            Some(0),
            "reports lost at {size}: {s}"
        );
    }
    if root {
        // The same writes timed by BPF (--timestamps bpf), and iperf3 under sbm-trace, with
        // and without per-packet departures.
        for tool in [
            "sbm --timestamps bpf (CSV)",
            "iperf3 under sbm-trace",
            "iperf3 under sbm-trace --no-departures",
        ] {
            let runs = json["loopback"][tool]
                .as_array()
                .unwrap_or_else(|| panic!("no {tool} runs"));
            assert!(runs
                .iter()
                .all(|r| r["goodput_bps"].as_f64().unwrap() > 1e8));
            // README.md's ratio to iperf3, as a number.
            let ratio = &json["ratios"]["loopback"][tool]["goodput"]["median"];
            assert!(ratio.as_f64().is_some_and(|x| x > 0.0), "{tool}: {ratio}");
        }
        for rate in ["2mbit", "86mbit"] {
            let v = &json["validity"][rate];
            // on, off, on, and bpf (--timestamps bpf).
            assert_eq!(v["runs"].as_array().unwrap().len(), 4, "{v}");
            assert!(v["goodput_on_bpf"].as_f64().is_some(), "{v}");
            assert!(v["cadence_on_on"].as_f64().is_some(), "{v}");
            // The instrument must not change what it measures: goodput with timestamps on
            // and off agree within a bound wide enough for a short run's noise (the
            // committed 30 s runs agree within 0.4 %).
            let bound = if rate == "2mbit" { 0.05 } else { 0.15 };
            let on_off = v["goodput_on_off"].as_f64().expect("goodput_on_off");
            assert!(
                on_off <= bound,
                "{rate}: timestamps on/off differ by {:.1} % (bound {:.0} %): {v}",
                on_off * 100.0,
                bound * 100.0
            );
        }
        let small = &json["validity"]["86mbit"]["small_writes"];
        assert_eq!(small["missing"].as_u64(), Some(0), "{small}");
    }
    // 512 B NODELAY writes against iperf3's, every sbm write timed and reported.
    let small = &json["small_writes"];
    for (tool, runs) in small.as_object().expect("small_writes").iter() {
        for r in runs.as_array().unwrap() {
            assert!(r["writes_per_s"].as_f64().unwrap() > 1000.0, "{tool}: {r}");
            if tool != "iperf3" {
                assert_eq!(r["missing"].as_u64(), Some(0), "{tool}: {r}");
            }
        }
    }
    assert!(small["iperf3"].is_array() && small["sbm --timestamps socket"].is_array());
    assert_eq!(json["loopback_placement"], "pinned", "--smoke runs pinned");
    // The exact commands, with the run's ports and scratch directories as placeholders.
    let commands: Vec<&str> = json["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for expected in [
        "taskset -c 0 sbm-send -c 127.0.0.1:PORT -t 3s -l 64KiB --cc cubic -q --no-timestamps --burst 10 --out OUT",
        "taskset -c 0 iperf3 -c 127.0.0.1 -p PORT -t 3 -l 64K -C cubic -J",
        "taskset -c 1 sbm-sink --listen 127.0.0.1:0 -q",
    ] {
        assert!(commands.contains(&expected), "{expected} not in {commands:#?}");
    }
    assert!(
        commands
            .iter()
            .all(|c| !c.contains("/tmp/") && !c.contains("sbm-bench-")),
        "{commands:#?}"
    );
    let md = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        md.contains("| iperf3 |")
            && md.contains("× iperf3")
            && md.contains("Measurement validity")
            && md.contains("## Commands"),
        "{md}"
    );
}
