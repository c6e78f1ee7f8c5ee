//! sbm-rpm and sbm-rpm-server end to end: the server answers curl (HTTP/2 with prior
//! knowledge, HTTP/1.1, TLS with ALPN); on an idle emulated path RPM is 60 000 / RTT within
//! 5 % (cleartext and TLS); a loaded run gives both directions, every probe row and the
//! server's per-write rule at work; Debian's nginx serves the test (HTTP/2 and HTTP/1.1); a
//! server that dies or never answers ends the test with the reason, never a hang; a self
//! probe's round trip splits into the GET's way, the server's wait (its ledger) and the
//! bottleneck queue (sampled by `testbed/wan queue-trace`), which never exceed it.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{bin, f, num, read_csv, read_json, run_program, serial, tempdir, Bed, Row, Running};

/// sbm-rpm-server started (in a namespace, or on loopback), and the address it printed.
fn start_server(ns: Option<&str>, args: &[&str]) -> (Running, String) {
    let server = bin("sbm-rpm-server");
    let server = server.to_str().unwrap();
    let mut all: Vec<&str> = match ns {
        Some(ns) => vec!["netns", "exec", ns, server],
        None => vec![],
    };
    all.extend_from_slice(args);
    let mut running = match ns {
        Some(_) => Running::spawn_program("ip", &all),
        None => Running::spawn_program(server, &all),
    };
    let line = running.wait_line("listening on", Duration::from_secs(10));
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (running, addr)
}

/// sbm-rpm in `ns` (or on loopback) to completion.
fn rpm(ns: Option<&str>, args: &[&str], limit: Duration) -> common::Finished {
    let client = bin("sbm-rpm");
    let client = client.to_str().unwrap();
    match ns {
        Some(ns) => {
            let mut all = vec!["netns", "exec", ns, client];
            all.extend_from_slice(args);
            run_program("ip", &all, limit)
        }
        None => run_program(client, args, limit),
    }
}

fn curl(args: &[&str]) -> String {
    let out = run_program("curl", args, Duration::from_secs(20));
    assert!(out.status.success(), "curl {args:?}: {}", out.stderr);
    out.stdout
}

fn stop(server: Running) -> common::Finished {
    server.signal(nix::sys::signal::Signal::SIGINT);
    let done = server.wait(Duration::from_secs(10));
    assert_eq!(done.code(), Some(0), "the server's exit: {}", done.stderr);
    done
}

#[test]
fn the_server_answers_curl_over_h2c_http11_and_tls() {
    let _g = serial();
    let dir = tempdir("rpm-curl");
    let out = dir.path().join("plain");
    let out_arg = out.to_str().unwrap();
    let (server, addr) = start_server(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--large-size",
            "1M",
            "--out",
            out_arg,
        ],
    );
    // The configuration object names the server's own URLs.
    let nq = curl(&[
        "-s",
        "--http2-prior-knowledge",
        &format!("http://{addr}/.well-known/nq"),
    ]);
    let nq: serde_json::Value = serde_json::from_str(&nq).unwrap();
    assert_eq!(nq["version"], 1);
    assert_eq!(
        nq["urls"]["small_download_url"],
        format!("http://{addr}/small")
    );
    let h2 = curl(&[
        "-s",
        "--http2-prior-knowledge",
        "-w",
        " %{http_version}",
        &format!("http://{addr}/small"),
    ]);
    assert_eq!(h2, "x 2");
    let h1 = curl(&[
        "-s",
        "--http1.1",
        "-w",
        " %{http_version}",
        &format!("http://{addr}/small"),
    ]);
    assert_eq!(h1, "x 1.1");
    let large = curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
        &format!("http://{addr}/large"),
    ]);
    assert_eq!(large, "1048576");
    let body = dir.path().join("body");
    std::fs::write(&body, vec![7u8; 300_000]).unwrap();
    let up = curl(&[
        "-s",
        "--http2-prior-knowledge",
        "--data-binary",
        &format!("@{}", body.display()),
        &format!("http://{addr}/upload"),
    ]);
    assert_eq!(up.trim(), "300000");
    stop(server);
    let rows = read_csv(&out.join("connections.csv"));
    assert_eq!(rows.len(), 5, "one row per curl connection: {rows:?}");
    let http: Vec<&str> = rows.iter().map(|r| r["http"].as_str()).collect();
    assert_eq!(
        http.iter().filter(|h| **h == "HTTP/2").count(),
        3,
        "{http:?}"
    );
    assert!(rows.iter().any(|r| r["upload_bytes"] == "300000"));
    assert!(rows
        .iter()
        .any(|r| r["bytes_written"].parse::<u64>().unwrap() > 1_048_576));

    // TLS: HTTP/2 by ALPN, with the self-signed certificate the server wrote.
    let tls_out = dir.path().join("tls");
    let (server, addr) = start_server(
        None,
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls",
            "--out",
            tls_out.to_str().unwrap(),
        ],
    );
    let cert = tls_out.join("server-cert.pem");
    let tls = curl(&[
        "-s",
        "--http2",
        "--cacert",
        cert.to_str().unwrap(),
        "-w",
        " %{http_version}",
        &format!("https://{addr}/small"),
    ]);
    assert_eq!(tls, "x 2");
    stop(server);
}

/// The checks every finished run's summary.json passes; returns its first stage.
fn finished_stage(dir: &Path) -> serde_json::Value {
    let s = read_json(&dir.join("summary.json"));
    assert_eq!(s["complete"], true, "{s:#}");
    assert_eq!(s["schema_version"], 1);
    s["stages"][0].clone()
}

fn within(got: f64, want: f64, share: f64) -> bool {
    (got - want).abs() <= want * share
}

#[test]
fn idle_rpm_is_sixty_thousand_over_the_path_rtt_in_cleartext_and_tls() {
    let _g = serial();
    let bed = Bed::up("rpmi", &["--rate", "100mbit", "--rtt", "40ms"]);
    let dir = tempdir("rpm-idle");
    let tls_out = dir.path().join("server-tls");
    let (plain, _) = start_server(Some(&bed.ns("snd")), &["--listen", "198.18.1.1:8080"]);
    let (tls, _) = start_server(
        Some(&bed.ns("snd")),
        &[
            "--listen",
            "198.18.1.1:8443",
            "--tls",
            "--out",
            tls_out.to_str().unwrap(),
        ],
    );
    let cert = tls_out.join("server-cert.pem");
    for (url, extra, tls_used) in [
        ("http://198.18.1.1:8080", vec![], false),
        (
            "https://198.18.1.1:8443",
            vec!["--cacert", cert.to_str().unwrap()],
            true,
        ),
    ] {
        let out = dir.path().join(if tls_used { "tls" } else { "plain" });
        let mut args = vec![
            "--idle",
            "--interval",
            "1s",
            "-q",
            "--out",
            out.to_str().unwrap(),
            url,
        ];
        args.extend(extra.iter().copied());
        let res = rpm(Some(&bed.ns("rcv")), &args, Duration::from_secs(60));
        assert_eq!(res.code(), Some(0), "{}{}", res.stdout, res.stderr);
        let st = finished_stage(&out);
        let r = &st["responsiveness"];
        // One round trip each: the TCP handshake, the TLS 1.3 handshake (normalised to its
        // one round trip), a GET on a new connection, a GET on a live one.
        let rpm = r["rpm"].as_f64().unwrap();
        assert!(
            within(rpm, 60_000.0 / 40.0, 0.05),
            "{url}: RPM {rpm}: {r:#}"
        );
        for key in ["tm_tcp_f_ms", "tm_http_f_ms", "tm_http_l_ms"] {
            let ms = r[key].as_f64().unwrap();
            assert!(within(ms, 40.0, 0.05), "{url}: {key} {ms}");
        }
        match tls_used {
            true => {
                // The handshake's one round trip plus both ends' key exchange and signature,
                // which take CPU time the bare round trips do not: no faster than the path,
                // and within 10 ms of it (CI's two busy cores once took 44.2 ms, 4.2 over).
                let ms = r["tm_tls_f_ms"].as_f64().unwrap();
                assert!(
                    (40.0 * 0.95..=40.0 + 10.0).contains(&ms),
                    "TLS per round trip {ms}"
                );
            }
            false => assert!(r["tm_tls_f_ms"].is_null()),
        }
        assert!(r["foreign_probes"].as_u64().unwrap() >= 20, "{r:#}");
        let rows = read_csv(&out.join("probes.csv"));
        assert!(rows.iter().all(|p| p["error"].is_empty()), "{rows:?}");
    }
    stop(plain);
    stop(tls);
}

/// Bytes written by the server's connections that carried the large object, and how many
/// times each had its lowat set by the rule.
fn large_connections(dir: &Path) -> Vec<(u64, u64)> {
    read_csv(&dir.join("connections.csv"))
        .iter()
        .map(|r| {
            (
                r["bytes_written"].parse::<u64>().unwrap(),
                r["lowat_sets"].parse::<u64>().unwrap(),
            )
        })
        .filter(|(b, _)| *b > 1_000_000)
        .collect()
}

/// A stage's download rate from its first interval's start to its last's end, from
/// intervals.csv (each row's rate is its bytes over its own end − start).
fn cumulative_bps(intervals: &[Row], stage: &str) -> f64 {
    let rows: Vec<&Row> = intervals.iter().filter(|r| r["stage"] == stage).collect();
    assert!(!rows.is_empty(), "no {stage} intervals");
    let bits: f64 = rows
        .iter()
        .map(|r| f(r, "dl_bps") * (f(r, "end_s") - f(r, "start_s")))
        .sum();
    let span = f(rows[rows.len() - 1], "end_s") - f(rows[0], "start_s");
    bits / span
}

#[test]
fn a_sequential_loaded_run_measures_both_directions_and_the_servers_rule_acts_per_write() {
    let _g = serial();
    let bed = Bed::up("rpml", &["--rate", "20mbit", "--rtt", "20ms"]);
    let dir = tempdir("rpm-load");
    for (rule, per_write) in [(vec![], false), (vec!["--lowat-per-write", "5ms"], true)] {
        let tag = if per_write { "lowat" } else { "default" };
        let server_out = dir.path().join(format!("server-{tag}"));
        let server = start_ledger_server(&bed, &server_out, &rule);
        let out = dir.path().join(format!("client-{tag}"));
        let res = rpm(
            Some(&bed.ns("rcv")),
            &[
                "-s",
                "--interval",
                "0.5s",
                "--mad",
                "2",
                "--stage-limit",
                "15s",
                "--max-connections",
                "4",
                "--notsent-lowat",
                "16K",
                "-q",
                "--out",
                out.to_str().unwrap(),
                "http://198.18.1.1:8080",
            ],
            Duration::from_secs(90),
        );
        assert_eq!(res.code(), Some(0), "{}{}", res.stdout, res.stderr);
        stop(server);
        let s = read_json(&out.join("summary.json"));
        assert_eq!(s["complete"], true, "{s:#}");
        assert_eq!(s["upload_rule"], "notsent-lowat 16384 B");
        let stages = s["stages"].as_array().unwrap();
        assert_eq!(stages.len(), 2);
        assert_eq!(stages[0]["stage"], "down");
        assert_eq!(stages[1]["stage"], "up");
        // The bottleneck shapes the download's direction; the upload's is unshaped.
        // The stage's figure is the draft's: the last MAD (2) intervals' average, what its
        // interval rows say. Over two half-second intervals it is noisy — it has read over
        // 20 Mb/s here (why is not known, docs/rpm.md) and, once in CI, 9.7 — so the rate's
        // bounds are checked on the whole stage, where they must hold: every byte counted
        // crossed the bottleneck after the stage began.
        let dl = stages[0]["dl_throughput_bps"].as_f64().unwrap();
        let intervals = read_csv(&out.join("intervals.csv"));
        let downs: Vec<f64> = intervals
            .iter()
            .filter(|r| r["stage"] == "down")
            .map(|r| f(r, "dl_bps"))
            .collect();
        assert!(downs.len() >= 2, "{} down intervals", downs.len());
        let last_mad = (downs[downs.len() - 1] + downs[downs.len() - 2]) / 2.0;
        assert!(
            dl > 0.0 && (dl - last_mad).abs() <= 0.01 * last_mad,
            "download {dl} b/s, its last two interval rows {last_mad} b/s"
        );
        let cumulative = cumulative_bps(&intervals, "down");
        eprintln!("{tag}: download {dl:.0} b/s (last MAD intervals), {cumulative:.0} b/s (stage)");
        assert!(
            cumulative > 10e6 && cumulative < 20.2e6,
            "download {cumulative} b/s over the whole stage through a 20 Mb/s bottleneck"
        );
        assert!(stages[0]["ul_throughput_bps"].is_null());
        assert!(stages[1]["ul_throughput_bps"].as_f64().unwrap() > 10e6);
        for st in stages {
            assert!(!st["responsiveness"].is_null(), "{st:#}");
        }
        assert!(stages[0]["self_on_down"]["count"].as_u64().unwrap() > 0);
        assert!(stages[1]["self_on_up"]["count"].as_u64().unwrap() > 0);
        let probes = read_csv(&out.join("probes.csv"));
        for (stage, on) in [("down", "down"), ("up", "up")] {
            assert!(probes
                .iter()
                .any(|p| p["stage"] == stage && p["kind"] == "self" && p["on"] == on));
            assert!(probes
                .iter()
                .any(|p| p["stage"] == stage && p["kind"] == "foreign"));
        }
        let intervals = read_csv(&out.join("intervals.csv"));
        assert!(intervals.len() >= 4, "{intervals:?}");
        // The server's per-write rule set a lowat on every download connection; without
        // it, none did.
        let large = large_connections(&server_out);
        assert!(
            !large.is_empty(),
            "no download connection in the server's rows"
        );
        for (bytes, sets) in large {
            assert_eq!(
                sets > 0,
                per_write,
                "{tag}: {bytes} B written, lowat set {sets} times"
            );
        }
    }
}

#[test]
fn debians_nginx_serves_the_test_over_http2_and_http11() {
    let _g = serial();
    let bed = Bed::up("rpmn", &["--rate", "20mbit", "--rtt", "20ms"]);
    let dir = tempdir("rpm-nginx");
    let script = format!("{}/scripts/unmodified/nginx-nq", env!("CARGO_MANIFEST_DIR"));
    for (port, http) in [("8081", "h2"), ("8082", "http1.1")] {
        let ngx_dir = dir.path().join(http);
        let ns = bed.ns("snd");
        let nginx = Running::spawn_program(
            "ip",
            &[
                "netns",
                "exec",
                &ns,
                &script,
                "198.18.1.1",
                port,
                ngx_dir.to_str().unwrap(),
                http,
            ],
        );
        // nginx listens before it logs nothing more: wait for the port instead.
        let deadline = Instant::now() + Duration::from_secs(10);
        let url = format!("http://198.18.1.1:{port}");
        loop {
            let probe = run_program(
                "ip",
                &[
                    "netns",
                    "exec",
                    &bed.ns("rcv"),
                    "curl",
                    "-s",
                    "-o",
                    "/dev/null",
                    if http == "h2" {
                        "--http2-prior-knowledge"
                    } else {
                        "--http1.1"
                    },
                    &format!("{url}/small"),
                ],
                Duration::from_secs(5),
            );
            if probe.status.success() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not come up: {}",
                probe.stderr
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let out = dir.path().join(format!("client-{http}"));
        let res = rpm(
            Some(&bed.ns("rcv")),
            &[
                "-d",
                "down",
                "--interval",
                "0.5s",
                "--mad",
                "2",
                "--stage-limit",
                "10s",
                "--max-connections",
                "4",
                "-q",
                "--out",
                out.to_str().unwrap(),
                &url,
            ],
            Duration::from_secs(60),
        );
        drop(nginx);
        assert_eq!(res.code(), Some(0), "{http}: {}{}", res.stdout, res.stderr);
        let s = read_json(&out.join("summary.json"));
        let want = if http == "h2" { "HTTP/2" } else { "HTTP/1.1" };
        assert_eq!(s["http"], want, "{s:#}");
        let st = &s["stages"][0];
        assert!(st["dl_throughput_bps"].as_f64().unwrap() > 10e6, "{st:#}");
        assert!(!st["responsiveness"].is_null(), "{st:#}");
        // Over HTTP/1.1 a self probe cannot share the transfer's connection: the draft's
        // substitute, tcp_info's sRTT, and the summary says so.
        let subs = st["self_on_down"]["srtt_substitutes"].as_u64().unwrap();
        let count = st["self_on_down"]["count"].as_u64().unwrap();
        match http {
            "h2" => assert_eq!(subs, 0),
            _ => assert!(count > 0 && subs == count, "{st:#}"),
        }
    }
}

#[test]
fn a_server_that_dies_or_never_answers_ends_the_test_with_the_reason() {
    let _g = serial();
    let dir = tempdir("rpm-dies");
    let (server, addr) = start_server(None, &["--listen", "127.0.0.1:0"]);
    let out = dir.path().join("client");
    let client_bin = bin("sbm-rpm");
    let mut client = Running::spawn_program(
        client_bin.to_str().unwrap(),
        &[
            "-d",
            "down",
            "--interval",
            "0.5s",
            "--stage-limit",
            "60s",
            "--probe-timeout",
            "2s",
            "--out",
            out.to_str().unwrap(),
            &format!("http://{addr}"),
        ],
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        client.is_running(),
        "the client ended before the server died"
    );
    server.signal(nix::sys::signal::Signal::SIGKILL);
    drop(server);
    let started = Instant::now();
    let res = client.wait(Duration::from_secs(30));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(res.code(), Some(1), "{}{}", res.stdout, res.stderr);
    assert!(res.stdout.contains("INCOMPLETE"), "{}", res.stdout);
    let s = read_json(&out.join("summary.json"));
    assert_eq!(s["complete"], false);
    let reason = s["incomplete_reason"].as_str().unwrap();
    assert!(reason.contains("load-generating connection"), "{reason}");
    // What was measured before is kept.
    assert!(s["stages"][0]["intervals"].as_u64().unwrap() >= 2, "{s:#}");

    // A server that accepts and never answers: the configuration fetch times out, one line.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let holder = std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in silent.incoming().take(2) {
            held.push(c);
        }
        std::thread::sleep(Duration::from_secs(5));
    });
    let res = rpm(
        None,
        &["--probe-timeout", "1s", &format!("http://{silent_addr}")],
        Duration::from_secs(20),
    );
    assert_eq!(res.code(), Some(1), "{}", res.stderr);
    assert_eq!(res.stderr.trim().lines().count(), 1, "{}", res.stderr);
    assert!(res.stderr.contains("no answer within 1s"), "{}", res.stderr);
    holder.join().unwrap();
}

/// Median of a non-empty list.
fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A self probe joined with the server's ledger of it.
struct JoinedProbe {
    /// The probe's round trip at the client, ms.
    rtt_ms: f64,
    /// Its response's wait in the server's socket, and that wait's bound, ms.
    wait_ms: f64,
    bound_ms: f64,
    /// When the response was ready at the server (CLOCK_REALTIME, ns).
    ready_unix_ns: u64,
    /// The wait of the response's own bytes, its bound, and the bytes written between
    /// ready and the flush that put the response in the socket.
    own_ms: Option<f64>,
    own_bound_ms: Option<f64>,
    written_after_ready: Option<u64>,
    /// When the client sent the GET (CLOCK_REALTIME, ns).
    sent_unix_ns: Option<u64>,
}

/// Each answered self probe joined with the server's ledger.
fn joined_self_probes(client: &Path, server: &Path) -> Vec<JoinedProbe> {
    let waits: std::collections::HashMap<String, Row> = read_csv(&server.join("probes.csv"))
        .into_iter()
        .map(|r| (r["probe_id"].clone(), r))
        .collect();
    let answered: Vec<_> = read_csv(&client.join("probes.csv"))
        .into_iter()
        .filter(|r| r["kind"] == "self" && !r["http_ms"].is_empty())
        .collect();
    let joined: Vec<JoinedProbe> = answered
        .iter()
        .filter_map(|r| {
            let w = waits.get(&r["probe_id"])?;
            Some(JoinedProbe {
                rtt_ms: r["http_ms"].parse().unwrap(),
                wait_ms: w["socket_wait_ms"].parse().unwrap(),
                bound_ms: w["bound_ms"].parse().unwrap(),
                ready_unix_ns: w["ready_unix_ns"].parse().unwrap(),
                own_ms: w["response_wait_ms"].parse().ok(),
                own_bound_ms: w["response_bound_ms"].parse().ok(),
                written_after_ready: num(w, "written_after_ready"),
                sent_unix_ns: num(r, "sent_unix_ns"),
            })
        })
        .collect();
    assert!(
        joined.len() * 10 >= answered.len() * 9 && !joined.is_empty(),
        "only {} of {} answered self probes are in the server's ledger",
        joined.len(),
        answered.len()
    );
    joined
}

/// sbm-rpm-server in the bed's sender with `--out` and a rule.
fn start_ledger_server(bed: &Bed, out: &Path, rule: &[&str]) -> Running {
    let mut args = vec![
        "--listen",
        "198.18.1.1:8080",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(rule);
    start_server(Some(&bed.ns("snd")), &args).0
}

/// A download-only run from the bed's receiver with four flows, at most 15 s, into `out`.
fn loaded_download(bed: &Bed, out: &Path) {
    let res = rpm(
        Some(&bed.ns("rcv")),
        &[
            "-d",
            "down",
            "--interval",
            "1s",
            "--mad",
            "2",
            "--stage-limit",
            "15s",
            "--max-connections",
            "4",
            "-q",
            "--out",
            out.to_str().unwrap(),
            "http://198.18.1.1:8080",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(res.code(), Some(0), "{}{}", res.stdout, res.stderr);
}

#[test]
fn the_servers_ledger_times_each_self_probes_wait_in_its_socket() {
    let _g = serial();
    let bed = Bed::up("rpmw", &["--rate", "10mbit", "--rtt", "40ms"]);
    let dir = tempdir("rpm-ledger");
    let mut medians = Vec::new();
    for (tag, rule) in [
        ("default", vec![]),
        ("lowat", vec!["--notsent-lowat", "16K"]),
    ] {
        let server_out = dir.path().join(format!("server-{tag}"));
        let server = start_ledger_server(&bed, &server_out, &rule);
        let out = dir.path().join(format!("client-{tag}"));
        loaded_download(&bed, &out);
        stop(server);
        let joined = joined_self_probes(&out, &server_out);
        // The wait in the server's socket is part of the probe's round trip.
        for j in &joined {
            assert!(
                j.wait_ms - j.bound_ms <= j.rtt_ms,
                "{tag}: wait {} ± {} ms in an RTT of {} ms",
                j.wait_ms,
                j.bound_ms,
                j.rtt_ms
            );
        }
        medians.push(median(joined.iter().map(|j| j.wait_ms).collect()));
    }
    // The default parks seconds of data in the socket; a 16 KB lowat a fraction of that.
    assert!(
        medians[0] > 3.0 * medians[1],
        "median socket wait: default {} ms, NOTSENT_LOWAT 16K {} ms",
        medians[0],
        medians[1]
    );
}

/// The bottleneck queue as `testbed/wan queue-trace` sampled it: (CLOCK_REALTIME ns, the
/// backlog's time to drain at the rate in ms), in time order.
fn queue_samples(path: &Path) -> Vec<(u64, f64)> {
    read_csv(path)
        .iter()
        .map(|r| (num(r, "realtime_ns").unwrap(), f(r, "backlog_over_rate_ms")))
        .collect()
}

/// Packets the bottleneck dropped while the trace ran.
fn queue_drops(path: &Path) -> u64 {
    let rows = read_csv(path);
    let drops = |r: Option<&Row>| r.and_then(|r| num(r, "drops")).unwrap_or(0);
    drops(rows.last()) - drops(rows.first())
}

/// The queue's delay at `t_ns`: the last sample at or before it, if that is at most 50 ms
/// old (the trace samples every 5 ms).
fn queue_delay_at(samples: &[(u64, f64)], t_ns: u64) -> Option<f64> {
    let i = samples.partition_point(|s| s.0 <= t_ns).checked_sub(1)?;
    (t_ns - samples[i].0 <= 50_000_000).then_some(samples[i].1)
}

#[test]
fn a_self_probes_round_trip_splits_into_the_gets_way_the_servers_wait_and_the_bottleneck_queue() {
    let _g = serial();
    let bed = Bed::up("rpmq", &["--rate", "10mbit", "--rtt", "40ms"]);
    // The client's receive buffers capped at 64 KB, so that four flows fit in the path and
    // its queue and nothing is dropped: time a retransmission costs a probe is in neither
    // part.
    let cap = run_program(
        "ip",
        &[
            "netns",
            "exec",
            &bed.ns("rcv"),
            "sysctl",
            "-qw",
            "net.ipv4.tcp_rmem=4096 65536 65536",
        ],
        Duration::from_secs(5),
    );
    assert!(cap.status.success(), "{}", cap.stderr);
    let dir = tempdir("rpm-agree");
    let mut report = String::new();
    for (tag, rule) in [
        ("default", vec![]),
        ("lowat", vec!["--notsent-lowat", "16K"]),
    ] {
        let server_out = dir.path().join(format!("server-{tag}"));
        let server = start_ledger_server(&bed, &server_out, &rule);
        let queue_csv = dir.path().join(format!("queue-{tag}.csv"));
        let mut trace = Running::spawn_program(
            &common::testbed_bin().to_string_lossy(),
            &[
                "wan",
                "queue-trace",
                "--prefix",
                &bed.prefix,
                "--interval",
                "5ms",
                "--out",
                queue_csv.to_str().unwrap(),
            ],
        );
        trace.wait_line("sampling the bottleneck queue", Duration::from_secs(10));
        let out = dir.path().join(format!("client-{tag}"));
        loaded_download(&bed, &out);
        trace.signal(nix::sys::signal::Signal::SIGTERM);
        let traced = trace.wait(Duration::from_secs(10));
        assert_eq!(traced.code(), Some(0), "queue-trace: {}", traced.stderr);
        stop(server);
        let samples = queue_samples(&queue_csv);
        let joined = joined_self_probes(&out, &server_out);
        // A response leaves the server's socket after its wait, crosses the one-way delay
        // (20 ms, in wan before the bottleneck) and then waits behind the queue's backlog.
        // The round trip, leg by leg, on one clock: the GET's way to the server (sent →
        // ready), the response's wait in the server (ready → its own bytes left the
        // socket: HTTP/2's buffer and the socket), the one-way delay (20 ms, in wan before
        // the bottleneck), the bottleneck queue it met, and the rest (to the client's read).
        let mut legs = Vec::new();
        for j in &joined {
            let (Some(sent), Some(own)) = (j.sent_unix_ns, j.own_ms) else {
                continue;
            };
            let at_queue = j.ready_unix_ns + (own * 1e6) as u64 + 20_000_000;
            let Some(q) = queue_delay_at(&samples, at_queue) else {
                continue;
            };
            let up = (j.ready_unix_ns as f64 - sent as f64) / 1e6;
            let rest = j.rtt_ms - up - own - 20.0 - q;
            report += &format!(
                "{tag}: RTT {:.1} ms = up {up:.1} + server {own:.1} (bytes ahead {:.1} ± {:.1}; {} B written after ready) + 20 + queue {q:.1} + rest {rest:.1}\n",
                j.rtt_ms,
                j.wait_ms,
                j.bound_ms,
                j.written_after_ready.unwrap_or(0)
            );
            // The response's own bytes leave no earlier than the bytes ahead of it.
            assert!(
                own + j.own_bound_ms.unwrap_or(0.0) >= j.wait_ms - j.bound_ms,
                "{tag}: own {own} ms before the bytes ahead ({} ms)\n{report}",
                j.wait_ms
            );
            // The parts never exceed the whole (to the waits' bounds and the queue
            // sample's spacing, 5 ms).
            assert!(
                rest >= -(j.own_bound_ms.unwrap_or(0.0) + 5.0),
                "{tag}: the legs exceed the probe's round trip\n{report}"
            );
            legs.push((j.rtt_ms, up, own, q, rest));
        }
        assert!(
            legs.len() * 10 >= joined.len() * 9,
            "{tag}: only {} of {} probes have every leg",
            legs.len(),
            joined.len()
        );
        let mean = |k: fn(&(f64, f64, f64, f64, f64)) -> f64| {
            legs.iter().map(k).sum::<f64>() / legs.len() as f64
        };
        let (rtt, up, own, queue, rest) = (
            mean(|l| l.0),
            mean(|l| l.1),
            mean(|l| l.2),
            mean(|l| l.3),
            mean(|l| l.4),
        );
        let drops = queue_drops(&queue_csv);
        report += &format!(
            "{tag}: mean over {} self probes: RTT {rtt:.1} ms = up {up:.1} + server {own:.1} + 20 + queue {queue:.1} + rest {rest:.1}; the bottleneck dropped {drops} packets\n",
            legs.len()
        );
        assert_eq!(
            drops, 0,
            "{tag}: the capped flows overflowed the queue\n{report}"
        );
        // The GET's way is the path's one-way delay (the upload is not shaped): the two
        // programs' clocks agree.
        let ups: Vec<f64> = legs.iter().map(|l| l.1).collect();
        let up_median = median(ups);
        assert!(
            (19.0..=25.0).contains(&up_median),
            "{tag}: the GET took {up_median:.1} ms to the server\n{report}"
        );
        // Each part is there: the bottleneck held a queue and, under the default, the
        // server held the response longer than the queue did. The rest is not accounted
        // for yet.
        assert!(queue > 20.0, "{tag}: queue {queue:.1} ms\n{report}");
        if tag == "default" {
            assert!(own > 2.0 * queue, "{report}");
        }
    }
    eprint!("{report}");
}
