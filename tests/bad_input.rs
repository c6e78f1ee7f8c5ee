//! Bad input, flag by flag, for every binary and script: exactly one line on stderr, exit
//! status 2 for a usage error and 1 for an environment error, never a panic. The table is
//! checked for coverage against the parsers themselves, so a new flag without a row fails.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::CommandFactory;
use common::{serial, Running};

const LIMIT: Duration = Duration::from_secs(30);

fn bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sbm-send"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn program(name: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    match name {
        "scripts/matrix"
        | "scripts/bench"
        | "scripts/setup"
        | "scripts/instrument-cost"
        | "scripts/soak"
        | "scripts/uml-alarm-trace"
        | "scripts/bbr-mechanism"
        | "scripts/displaced-stamps"
        | "scripts/timestamp-sources"
        | "scripts/small-write-segments"
        | "scripts/tx-report-trace"
        | "scripts/analysis/invitation-backlog.py"
        | "testbed/wan"
        | "testbed/shape"
        | "testbed/uml"
        | "kernel/mutate" => {
            format!("{root}/{name}")
        }
        bin => bin_dir().join(bin).to_string_lossy().into_owned(),
    }
}

/// Runs `prog args` and checks the one-line rule: Ok(stderr), or what is wrong.
fn try_check(prog: &str, args: &[&str], code: i32, needle: &str) -> Result<String, String> {
    let res = Running::spawn_program(&program(prog), args).wait(LIMIT);
    let stderr = res.stderr.trim().to_string();
    let what = format!("{prog} {args:?}");
    if stderr.contains("panicked") {
        return Err(format!("{what} panicked: {stderr}"));
    }
    if res.code() != Some(code) {
        return Err(format!(
            "{what}: exit status {:?}, not {code} (stderr: {stderr})",
            res.code()
        ));
    }
    if stderr.lines().count() != 1 {
        return Err(format!("{what}: stderr must be one line, was:\n{stderr}"));
    }
    if !stderr.contains(needle) {
        return Err(format!("{what}: stderr lacks {needle:?}: {stderr}"));
    }
    Ok(stderr)
}

fn check(prog: &str, args: &[&str], code: i32, needle: &str) -> String {
    try_check(prog, args, code, needle).unwrap_or_else(|e| panic!("{e}"))
}

/// (program, args, expected status, a word the message must contain)
type Case = (&'static str, &'static [&'static str], i32, &'static str);

const C: &str = "127.0.0.1:9";

#[rustfmt::skip]
const CASES: &[Case] = &[
    // sbm-send: usage errors, one or more per flag.
    ("sbm-send", &[], 2, "--connect"),
    ("sbm-send", &["--connect"], 2, "--connect"),
    ("sbm-send", &["--connect", "127.0.0.1:99999"], 2, "port"),
    ("sbm-send", &["-c", C, "--time", "10x"], 2, "unit"),
    ("sbm-send", &["-c", C, "-P", "2", "--cc", "bbr,cubic,reno"], 2, "multiple of the names"),
    ("sbm-send", &["-c", C, "-l", "64kb"], 2, "bits or bytes"),
    ("sbm-send", &["-c", C, "-b", "10MB/s"], 2, "bytes"),
    ("sbm-send", &["-c", C, "-t=-1s"], 2, "--time"),
    ("sbm-send", &["-c", C, "--bytes", "0"], 2, "--bytes"),
    ("sbm-send", &["-c", C, "--bytes", "5XB"], 2, "--bytes"),
    ("sbm-send", &["-c", C, "--writes", "0"], 2, "--writes"),
    ("sbm-send", &["-c", C, "--writes", "99999999999999999999999"], 2, "--writes"),
    ("sbm-send", &["-c", C, "--write-size", "0"], 2, "--write-size"),
    ("sbm-send", &["-c", C, "-l", "2GiB"], 2, "--write-size"),
    ("sbm-send", &["-c", C, "--interval", "0s"], 2, "--interval"),
    ("sbm-send", &["-c", C, "-i", "often"], 2, "--interval"),
    ("sbm-send", &["-c", C, "--warmup", "x"], 2, "--warmup"),
    ("sbm-send", &["-c", C, "-t", "2s", "--warmup", "3s"], 2, "--warmup"),
    ("sbm-send", &["-c", C, "--out"], 2, "--out"),
    ("sbm-send", &["-c", C, "--label"], 2, "--label"),
    ("sbm-send", &["-c", C, "--epoll", "sideways"], 2, "--epoll"),
    ("sbm-send", &["-c", C, "--nodelay=yes"], 2, "--nodelay"),
    ("sbm-send", &["-c", C, "--notsent-lowat", "5GiB"], 2, "--notsent-lowat"),
    ("sbm-send", &["-c", C, "--sndbuf", "0"], 2, "--sndbuf"),
    ("sbm-send", &["-c", C, "--replenish-time", "15"], 2, "--replenish-time"),
    ("sbm-send", &["-c", C, "--replenish-time", "1500ns"], 2, "microsecond"),
    ("sbm-send", &["-c", C, "--replenish-time", "15ms", "--replenish-impl", "magic"], 2, "--replenish-impl"),
    ("sbm-send", &["-c", C, "--replenish-impl", "kernel"], 2, "--replenish-time"),
    ("sbm-send", &["-c", C, "--replenish-time", "15ms", "--replenish-optname", "x"], 2, "--replenish-optname"),
    ("sbm-send", &["-c", C, "--replenish-optname", "47"], 2, "--replenish-time"),
    ("sbm-send", &["-c", C, "--replenish-time", "15ms", "--sub-mss-clause", "maybe"], 2, "--sub-mss-clause"),
    ("sbm-send", &["-c", C, "--sub-mss-clause", "off"], 2, "--replenish-time"),
    ("sbm-send", &["-c", C, "--threshold-test", "half"], 2, "--replenish-time"),
    ("sbm-send", &["-c", C, "--replenish-time", "15ms", "--threshold-test", "quarter"], 2, "--threshold-test"),
    ("sbm-send", &["-c", C, "--replenish-time", "15ms", "--rate-estimator", "median"], 2, "--rate-estimator"),
    ("sbm-send", &["-c", C, "--rule-trace", "1ms"], 2, "--out"),
    ("sbm-send", &["-c", C, "--rule-trace", "soon", "--out", "/tmp"], 2, "--rule-trace"),
    ("sbm-sink", &["--ack", "never"], 2, "--ack"),
    ("sbm-sink", &["-l", "0"], 2, "--len"),
    ("sbm-sink", &["--len", "65MiB"], 2, "--len"),
    ("sbm-sink", &["--format", "kbit"], 2, "report format"),
    ("sbm-send", &["-c", C, "--replenish-time", "15ms", "--rate-estimator", "guess"], 2, "--rate-estimator"),
    ("sbm-send", &["-c", C, "--rate-estimator", "latest"], 2, "--replenish-time"),
    ("sbm-send", &["-c", C, "--replenish-time", "15ms", "--replenish-impl", "emulated", "--notsent-lowat", "1000"], 2, "NOTSENT_LOWAT"),
    ("sbm-send", &["-c", C, "--cc"], 2, "--cc"),
    ("sbm-send", &["-c", C, "--cc", "bbr,cubic"], 2, "one"),
    ("sbm-send", &["-c", C, "-P", "2", "--cc", "bbr,,cubic"], 2, "empty"),
    ("sbm-send", &["-c", C, "--errqueue-rcvbuf", "5GiB"], 2, "--errqueue-rcvbuf"),
    ("sbm-send", &["-c", C, "--no-timestamps", "--errqueue-rcvbuf", "1MiB"], 2, "--no-timestamps"),
    ("sbm-send", &["-c", C, "--no-timestamps=1"], 2, "--no-timestamps"),
    ("sbm-send", &["-c", C, "--drain-timeout", "5 s s"], 2, "--drain-timeout"),
    ("sbm-send", &["-c", C, "--sample-interval", "5"], 2, "--sample-interval"),
    ("sbm-send", &["-c", C, "--no-timestamps", "--sample-interval", "2ms"], 2, "--no-timestamps"),
    ("sbm-send", &["-c", C, "--no-timestamps", "--eor"], 2, "--eor"),
    ("sbm-send", &["-c", C, "--burst", "0"], 2, "--burst"),
    ("sbm-send", &["-c", C, "--paced-start", "soon"], 2, "--paced-start"),
    ("sbm-send", &["-c", C, "--paced-start", "5s", "--burst", "4"], 2, "--paced-start"),
    ("sbm-send", &["-c", C, "--burst", "10", "--replenish-time", "15ms"], 2, "--burst"),
    ("sbm-send", &["-c", C, "--trip-times", "-l", "8"], 2, "--trip-times"),
    ("sbm-send", &["-c", C, "--reply-timeout", "0s"], 2, "--reply-timeout"),
    ("sbm-send", &["-c", C, "--connect-timeout", "soon"], 2, "--connect-timeout"),
    ("sbm-send", &["-c", C, "--quiet=no"], 2, "--quiet"),
    ("sbm-send", &["-c", C, "-b", "0"], 2, "--bitrate"),
    ("sbm-send", &["-c", C, "--bitrate", "fast"], 2, "--bitrate"),
    ("sbm-send", &["-c", C, "--fps", "30", "--frame-size", "1KB", "--seed", "x"], 2, "--seed"),
    ("sbm-send", &["-c", C, "--seed", "7"], 2, "--frame-size"),
    ("sbm-send", &["-c", C, "-b", "1mbit", "--fps", "30"], 2, "--fps"),
    ("sbm-send", &["-c", C, "-b", "1mbit", "--paced-start", "5s"], 2, "--paced-start"),
    ("sbm-send", &["-c", C, "--fps", "0", "--frame-size", "1KB"], 2, "frame rate"),
    ("sbm-send", &["-c", C, "--fps", "30"], 2, "--frame-size"),
    ("sbm-send", &["-c", C, "--frame-size", "1KB"], 2, "--fps"),
    ("sbm-send", &["-c", C, "--fps", "30", "--frame-size", "10"], 2, "frame size"),
    ("sbm-send", &["-c", C, "--fps", "30", "--frame-size", "1KB", "--frame-dist", "normal"], 2, "distribution"),
    ("sbm-send", &["-c", C, "--fps", "30", "--frame-size", "1KB", "--frame-dist", "uniform:150%"], 2, "spread"),
    ("sbm-send", &["-c", C, "--fps", "30", "--frame-sizes", "/nonexistent/sizes"], 2, "--frame-sizes"),
    ("sbm-send", &["-c", C, "--fps", "30", "--frame-size", "1KB", "--stale", "oldest"], 2, "--stale"),
    ("sbm-send", &["-c", C, "--stale", "latest"], 2, "--fps"),
    ("sbm-send", &["-c", C, "--fps", "30", "--render", "fast"], 2, "--render"),
    ("sbm-send", &["-c", C, "--render", "delivery"], 2, "--fps"),
    ("sbm-send", &["-c", C, "--fps", "30", "--render", "delivery", "--stale", "latest"], 2, "--stale"),
    ("sbm-send", &["-c", C, "--fps", "30", "--render", "delivery", "--frame-cap", "8"], 2, "frame size"),
    ("sbm-send", &["-c", C, "--bogus"], 2, "--bogus"),
    ("sbm-send", &["-c", C, "--port", "99999"], 2, "--port"),
    ("sbm-send", &["-c", "127.0.0.1:5301", "--port", "5400"], 2, "contradicts"),
    ("sbm-send", &["-c", C, "--bind"], 2, "--bind"),
    ("sbm-send", &["-c", C, "--bind", "127.0.0.1:99999"], 2, "--bind"),
    ("sbm-send", &["-c", "127.0.0.1", "--bind", "::1"], 2, "address families"),
    ("sbm-send", &["-c", "127.0.0.1", "-p", "1", "--bind", "198.18.255.254", "-t", "1s"], 1, "no interface of this host has that address"),
    ("sbm-send", &["-c", C, "--json=yes"], 2, "--json"),
    ("sbm-send", &["-c", C, "--json-stream", "-J"], 2, "--json"),
    ("sbm-send", &["-c", C, "--logfile"], 2, "--logfile"),
    ("sbm-send", &["-c", C, "--logfile", "/nonexistent-dir/x.log"], 1, "--logfile"),
    ("sbm-send", &["-c", C, "--forceflush=1"], 2, "--forceflush"),
    ("sbm-send", &["-c", C, "-4", "-6"], 2, "--version"),
    ("sbm-send", &["-c", "[::1]:9", "--version4"], 2, "IPv4 (-4)"),
    ("sbm-send", &["-c", C, "--version6"], 2, "IPv6 (-6)"),
    ("sbm-send", &["-c", C, "--reverse", "-P", "2"], 2, "-P is not available with it"),
    ("sbm-send", &["-c", C, "-R", "--trip-times"], 2, "--trip-times"),
    ("sbm-send", &["-c", C, "-R", "--exact-departures"], 2, "a reverse run's socket"),
    ("sbm-send", &["-c", C, "--bidir", "--reverse"], 2, "--reverse"),
    ("sbm-send", &["-c", C, "--bidir", "--json-stream"], 2, "--json-stream"),
    ("sbm-send", &["-c", C, "--format", "x"], 2, "report format"),
    ("sbm-send", &["-c", C, "-f", "Mbit"], 2, "report format"),
    ("sbm-send", &["-c", C, "--light", "--eor"], 2, "--light"),
    ("sbm-send", &["-c", C, "--light", "--sample-interval", "2ms"], 2, "--light"),
    ("sbm-send", &["-c", C, "--parallel", "0"], 2, "--parallel"),
    ("sbm-send", &["-c", C, "--parallel", "300"], 2, "--parallel"),
    ("sbm-send", &["-c", C, "--parallel", "2", "--bind", "127.0.0.1:5000"], 2, "names a port"),
    // sbm-send: environment errors.
    ("sbm-send", &["-c", "no-such-host.invalid:5301"], 1, "cannot resolve"),
    ("sbm-send", &["-c", C, "-t", "1s", "--out", "/proc/sbm-none/x"], 1, "output directory"),
    // sbm-sink
    ("sbm-sink", &["--listen", "127.0.0.1:99999"], 2, "port"),
    ("sbm-sink", &["--listen", "no-such-host.invalid:5301"], 1, "cannot resolve"),
    ("sbm-sink", &["--listen", "198.18.255.254:5301"], 1, "no interface has that address"),
    ("sbm-sink", &["--interval", "0s"], 2, "--interval"),
    ("sbm-sink", &["--once=1"], 2, "--once"),
    ("sbm-sink", &["--conns", "0"], 2, "--conns"),
    ("sbm-sink", &["--conns", "2", "--once"], 2, "--once"),
    ("sbm-sink", &["--out"], 2, "--out"),
    ("sbm-sink", &["--listen", "127.0.0.1:0", "--out", "/proc/sbm-none/x"], 1, "output directory"),
    ("sbm-sink", &["--rcvbuf", "lots"], 2, "--rcvbuf"),
    ("sbm-sink", &["--expect-trip-times=yes"], 2, "--expect-trip-times"),
    ("sbm-sink", &["--copy-reads=yes"], 2, "--copy-reads"),
    ("sbm-sink", &["--quiet=yes"], 2, "--quiet"),
    ("sbm-sink", &["--max-conns", "0"], 2, "--max-conns"),
    ("sbm-sink", &["--idle-timeout", "5 minutes"], 2, "--idle-timeout"),
    ("sbm-sink", &["extra"], 2, "extra"),
    ("sbm-sink", &["--port", "99999"], 2, "--port"),
    ("sbm-sink", &["--json=yes"], 2, "--json"),
    ("sbm-sink", &["--listen", "127.0.0.1:0", "--port", "5400"], 2, "--port"),
    ("sbm-sink", &["--bind", "127.0.0.1:5301", "--port", "5400"], 2, "contradicts"),
    ("sbm-sink", &["--bind", "198.18.255.254", "--port", "5400"], 1, "no interface has that address"),
    // sbm-rpm
    ("sbm-rpm", &[], 2, "<URL>"),
    ("sbm-rpm", &["ftp://198.18.0.2/"], 2, "not an http"),
    ("sbm-rpm", &["http://198.18.0.2:0/"], 2, "not a port"),
    ("sbm-rpm", &["https://198.18.0.2/"], 2, "--cacert"),
    ("sbm-rpm", &["http://x/", "--direction", "sideways"], 2, "--direction"),
    ("sbm-rpm", &["http://x/", "--sequential", "--idle"], 2, "--idle"),
    ("sbm-rpm", &["http://x/", "--idle-probe-rate", "0", "--idle"], 2, "--idle-probe-rate"),
    ("sbm-rpm", &["http://x/", "--idle-probe-rate", "5"], 2, "--idle"),
    ("sbm-rpm", &["http://x/", "--http", "3"], 2, "--http"),
    ("sbm-rpm", &["http://x/", "--insecure=yes"], 2, "--insecure"),
    ("sbm-rpm", &["http://x/", "--insecure", "--cacert", "/nonexistent"], 2, "--cacert"),
    ("sbm-rpm", &["http://x/", "--interval", "10ms"], 2, "--interval"),
    ("sbm-rpm", &["http://x/", "--mad", "0"], 2, "--mad"),
    ("sbm-rpm", &["http://x/", "--sdt", "2"], 2, "--sdt"),
    ("sbm-rpm", &["http://x/", "--max-connections", "0"], 2, "--max-connections"),
    ("sbm-rpm", &["http://x/", "--max-probe-rate", "0"], 2, "--max-probe-rate"),
    ("sbm-rpm", &["http://x/", "--probe-share", "0"], 2, "--probe-share"),
    ("sbm-rpm", &["http://x/", "--stage-limit", "forever"], 2, "--stage-limit"),
    ("sbm-rpm", &["http://x/", "--probe-timeout", "x"], 2, "--probe-timeout"),
    ("sbm-rpm", &["http://x/", "--nagle=yes"], 2, "--nagle"),
    ("sbm-rpm", &["http://x/", "--h2-send-buffer", "0"], 2, "--h2-send-buffer"),
    ("sbm-rpm", &["http://x/", "--notsent-lowat", "lots"], 2, "--notsent-lowat"),
    ("sbm-rpm", &["http://x/", "--replenish-time", "1ns"], 2, "--replenish-time"),
    ("sbm-rpm", &["http://x/", "--replenish-impl", "bpf", "--replenish-time", "5ms"], 2, "--replenish-impl"),
    ("sbm-rpm", &["http://x/", "--replenish-optname", "x", "--replenish-time", "5ms"], 2, "--replenish-optname"),
    ("sbm-rpm", &["http://x/", "--lowat-per-write", "5ms", "--notsent-lowat", "16K"], 2, "--notsent-lowat"),
    ("sbm-rpm", &["http://x/", "--compact", "--json"], 2, "--json"),
    ("sbm-rpm", &["http://x/", "--out"], 2, "--out"),
    ("sbm-rpm", &["http://x/", "--quiet=yes"], 2, "--quiet"),
    ("sbm-rpm", &["http://127.0.0.1:9/", "--probe-timeout", "1s"], 1, "connect to 127.0.0.1:9"),
    // sbm-rpm-server
    ("sbm-rpm-server", &["--listen", "nowhere"], 2, "--listen"),
    ("sbm-rpm-server", &["--tls=yes"], 2, "--tls"),
    ("sbm-rpm-server", &["--cert", "/nonexistent"], 2, "--key <FILE>"),
    ("sbm-rpm-server", &["--tls", "--cert", "/nonexistent", "--key", "/nonexistent"], 2, "--cert /nonexistent"),
    ("sbm-rpm-server", &["--key", "/nonexistent", "--tls"], 2, "--cert <FILE>"),
    ("sbm-rpm-server", &["--public-base", "gopher://x"], 2, "--public-base"),
    ("sbm-rpm-server", &["--test-endpoint"], 2, "--test-endpoint"),
    ("sbm-rpm-server", &["--large-size", "0"], 2, "--large-size"),
    ("sbm-rpm-server", &["--nagle=yes"], 2, "--nagle"),
    ("sbm-rpm-server", &["--h2-send-buffer", "5G"], 2, "--h2-send-buffer"),
    ("sbm-rpm-server", &["--notsent-lowat", "lots"], 2, "--notsent-lowat"),
    ("sbm-rpm-server", &["--replenish-time", "soon"], 2, "--replenish-time"),
    ("sbm-rpm-server", &["--replenish-impl", "emulated"], 2, "--replenish-time"),
    ("sbm-rpm-server", &["--replenish-time", "5ms", "--replenish-optname", "13"], 2, "mainline"),
    ("sbm-rpm-server", &["--lowat-per-write", "x"], 2, "--lowat-per-write"),
    ("sbm-rpm-server", &["--out"], 2, "--out"),
    ("sbm-rpm-server", &["--listen", "198.18.255.254:9"], 1, "bind 198.18.255.254:9"),
    // sbm-delay
    ("sbm-delay", &[], 2, "--queue"),
    ("sbm-delay", &["--queue", "bad"], 2, "--queue"),
    ("sbm-delay", &["--queue", "0:86ms", "--stats"], 2, "--stats"),
    ("sbm-delay", &["--queue", "0:86ms", "--max-len", "x"], 2, "--max-len"),
    ("sbm-delay", &["--queue", "0:86ms", "--rcvbuf", "x"], 2, "--rcvbuf"),
    // sbm-testbed
    ("sbm-testbed", &[], 2, "wan, shape, uml"),
    ("sbm-testbed", &["wan"], 2, "up, set, down, queue-trace, status"),
    ("sbm-testbed", &["wan", "up", "--rtt", "x"], 2, "--rtt"),
    ("sbm-testbed", &["wan", "up", "--rate", "fast"], 2, "--rate"),
    ("sbm-testbed", &["wan", "up", "--queue", "deep"], 2, "--queue"),
    ("sbm-testbed", &["wan", "up", "--shape-at", "moon"], 2, "--shape-at"),
    ("sbm-testbed", &["wan", "up", "--delay-impl", "pigeon"], 2, "--delay-impl"),
    ("sbm-testbed", &["wan", "up", "--prefix", "Bad!"], 2, "--prefix"),
    ("sbm-testbed", &["wan", "up", "--owner", "me"], 2, "--owner"),
    ("sbm-testbed", &["wan", "up", "--bottleneck", "wall"], 2, "--bottleneck"),
    ("sbm-testbed", &["wan", "set", "--rate", "1mbit", "--bottleneck", "wall"], 2, "--bottleneck"),
    ("sbm-testbed", &["wan", "set"], 2, "--rate"),
    ("sbm-testbed", &["wan", "set", "--rate", "x"], 2, "--rate"),
    ("sbm-testbed", &["wan", "set", "--rate", "1mbit", "--queue", "x"], 2, "--queue"),
    ("sbm-testbed", &["wan", "down", "--prefix", "much-too-long-prefix"], 2, "--prefix"),
    ("sbm-testbed", &["wan", "status", "--json=1"], 2, "--json"),
    ("sbm-testbed", &["wan", "set", "--rate", "1mbit", "--prefix", "zznone"], 1, "no test bed 'zznone'"),
    ("sbm-testbed", &["wan", "status", "--prefix", "zznone"], 1, "no test bed 'zznone'"),
    ("sbm-testbed", &["wan", "queue-trace"], 2, "--out"),
    ("sbm-testbed", &["wan", "queue-trace", "--out", "q.csv", "--interval", "x"], 2, "--interval"),
    ("sbm-testbed", &["wan", "queue-trace", "--out", "q.csv", "--duration", "x"], 2, "--duration"),
    ("sbm-testbed", &["wan", "queue-trace", "--out", "/proc/sbm-none/q.csv", "--prefix", "zznone"], 1, "no test bed 'zznone'"),
    ("sbm-testbed", &["shape"], 2, "apply, clear, show"),
    ("sbm-testbed", &["shape", "apply", "--rate", "1mbit"], 2, "<DEV>"),
    ("sbm-testbed", &["shape", "apply", "lo", "--rate", "x"], 2, "--rate"),
    ("sbm-testbed", &["shape", "apply", "lo", "--rate", "1mbit", "--queue", "x"], 2, "--queue"),
    ("sbm-testbed", &["shape", "apply", "lo", "--rate", "1mbit", "--delay", "x"], 2, "--delay"),
    ("sbm-testbed", &["shape", "apply", "lo", "--rate", "1mbit", "--ingress=1"], 2, "--ingress"),
    ("sbm-testbed", &["shape", "apply", "lo", "--rate", "1mbit", "--dry-run=1"], 2, "--dry-run"),
    ("sbm-testbed", &["shape", "clear", "lo", "--dry-run=1"], 2, "--dry-run"),
    ("sbm-testbed", &["shape", "clear", "lo", "--ingress=1"], 2, "--ingress"),
    ("sbm-testbed", &["shape", "show"], 2, "<DEV>"),
    ("sbm-testbed", &["shape", "hold", "--rate", "1mbit"], 2, "<DEV>"),
    ("sbm-testbed", &["shape", "hold", "lo", "--rate", "x"], 2, "--rate"),
    ("sbm-testbed", &["shape", "hold", "lo", "--rate", "1mbit", "--queue", "x"], 2, "--queue"),
    ("sbm-testbed", &["shape", "hold", "lo", "--rate", "1mbit", "--ingress=1"], 2, "--ingress"),
    ("sbm-testbed", &["shape", "hold", "nosuchdev0", "--rate", "1mbit"], 1, "nosuchdev0"),
    ("sbm-testbed", &["host"], 2, "info, clock, probe-rtt"),
    ("sbm-testbed", &["host", "info", "--dev"], 2, "--dev"),
    ("sbm-testbed", &["host", "probe-rtt", "nowhere"], 2, "<ADDR:PORT>"),
    ("sbm-testbed", &["host", "probe-rtt", "127.0.0.1:9", "--count", "0"], 2, "--count"),
    ("sbm-testbed", &["host", "probe-rtt", "127.0.0.1:9", "--timeout", "x"], 2, "--timeout"),
    ("sbm-testbed", &["uml"], 2, "build, path, checkpatch, run"),
    ("sbm-testbed", &["uml", "build", "--jobs", "0"], 2, "--jobs"),
    ("sbm-testbed", &["uml", "build", "--force=1"], 2, "--force"),
    ("sbm-testbed", &["uml", "build", "--kernel-dir", "/nonexistent"], 1, "/nonexistent/patches"),
    ("sbm-testbed", &["uml", "build", "--cache"], 2, "--cache"),
    ("sbm-testbed", &["uml", "path", "--cache"], 2, "--cache"),
    ("sbm-testbed", &["uml", "checkpatch", "--kernel-dir", "/nonexistent"], 1, "/nonexistent/patches"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--cache", "--", "true"], 2, "--cache"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--kernel-dir", "--", "true"], 2, "--kernel-dir"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--prefix", "Bad!", "--", "true"], 2, "--prefix"),
    ("sbm-testbed", &["uml", "path", "--kernel-dir"], 2, "--kernel-dir"),
    ("sbm-testbed", &["uml", "checkpatch", "--cache"], 2, "--cache"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x"], 2, "<COMMAND>"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--kernel", "--", "true"], 2, "--kernel"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--cpu-quota", "0", "--", "true"], 2, "--cpu-quota"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--cpu-period", "x", "--", "true"], 2, "--cpu-period"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--cpu-slices", "3", "--", "true"], 2, "--cpu-slices"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--cpu-slices", "35", "--cpu-quota", "35", "--", "true"], 2, "--cpu-quota"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--slice-cpu", "1", "--", "true"], 2, "--cpu-slices"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--cpu-slices", "35", "--slice-cpu", "x", "--", "true"], 2, "--slice-cpu"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--mem", "x", "--", "true"], 2, "--mem"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--mtu", "100", "--", "true"], 2, "--mtu"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--sysctl", "noeq", "--", "true"], 2, "--sysctl"),
    ("sbm-testbed", &["uml", "run", "--out", "/tmp/x", "--timeout", "x", "--", "true"], 2, "--timeout"),
    // sbm-matrix (scripts/matrix runs it)
    ("sbm-matrix", &[], 2, "run, report, compare, pack, unpack, list"),
    ("sbm-matrix", &["compare", "results/paper"], 2, "<RUNS>"),
    ("sbm-matrix", &["compare", "results/paper", "results/nagle-trap", "--out"], 2, "--out"),
    ("sbm-matrix", &["compare", "results/paper", "results/nagle-trap", "--html"], 2, "--html"),
    ("sbm-matrix", &["compare", "/nonexistent-a", "/nonexistent-b"], 1, "not a run directory"),
    ("sbm-matrix", &["run"], 2, "<MATRIX>"),
    ("sbm-matrix", &["run", "quick", "--resume"], 2, "--out"),
    ("sbm-matrix", &["run", "quick", "--out"], 2, "--out"),
    ("sbm-matrix", &["run", "quick", "--only"], 2, "--only"),
    ("sbm-matrix", &["run", "quick", "--dry-run=1"], 2, "--dry-run"),
    ("sbm-matrix", &["run", "quick", "--prefix", "Bad!"], 2, "--prefix"),
    ("sbm-matrix", &["run", "quick", "--only", "nothing-matches", "--dry-run"], 1, "matches no cell"),
    ("sbm-matrix", &["run", "no-such-preset", "--dry-run"], 1, "no-such-preset"),
    ("sbm-matrix", &["report"], 2, "<DIR>"),
    ("sbm-matrix", &["report", "/nonexistent-sbm-run"], 1, "/nonexistent-sbm-run"),
    ("sbm-matrix", &["report", "--every-plot=yes", "/nonexistent-sbm-run"], 2, "--every-plot"),
    ("sbm-matrix", &["list", "extra"], 2, "extra"),
    ("sbm-matrix", &["pack"], 2, "<DIRS>"),
    ("sbm-matrix", &["pack", "/nonexistent-sbm-run"], 1, "not a run directory"),
    ("sbm-matrix", &["unpack"], 2, "<DIR>"),
    ("sbm-matrix", &["unpack", "/nonexistent-sbm-run"], 1, "not a run directory"),
    ("sbm-matrix", &["unpack", "results/uml-trap-mss1448", "no-such-cell"], 1, "no such cell"),
    // The scripts: their own argument handling, or the binary they run.
    ("scripts/matrix", &["run", "--bogus"], 2, "--bogus"),
    ("scripts/bench", &["--bogus"], 2, "--bogus"),
    ("scripts/bench", &["--reps", "0"], 2, "--reps"),
    ("scripts/bench", &["--duration", "x"], 2, "--duration"),
    ("scripts/bench", &["--placement", "moon"], 2, "--placement"),
    ("scripts/bench", &["--rss-minutes", "-1"], 2, "--rss-minutes"),
    ("scripts/bench", &["--out"], 2, "--out"),
    ("scripts/bench", &["--smoke=1"], 2, "--smoke"),
    ("scripts/bench", &["--no-path=1"], 2, "--no-path"),
    ("scripts/setup", &["--bogus"], 2, "--bogus"),
    ("scripts/instrument-cost", &["--bogus"], 2, "--bogus"),
    ("scripts/instrument-cost", &["--reps", "0"], 2, "--reps"),
    ("scripts/instrument-cost", &["--duration", "x"], 2, "--duration"),
    ("scripts/instrument-cost", &["--out"], 2, "--out"),
    ("scripts/soak", &["--bogus"], 2, "--bogus"),
    ("scripts/soak", &["--runs", "0"], 2, "--runs"),
    ("scripts/soak", &["--stress-minutes", "x"], 2, "--stress-minutes"),
    ("scripts/soak", &["--at-most", "0"], 2, "--at-most"),
    ("scripts/uml-alarm-trace", &[], 2, "cmd"),
    ("scripts/uml-alarm-trace", &["analyze", "x", "--bogus"], 2, "--bogus"),
    ("scripts/uml-alarm-trace", &["analyze", "/nonexistent"], 2, "no trace at"),
    ("scripts/uml-alarm-trace", &["record", "x", "--minutes", "-1"], 2, "--minutes"),
    ("scripts/uml-alarm-trace", &["ring", "/nonexistent"], 2, "no console at"),
    ("scripts/bbr-mechanism", &[], 2, "cmd"),
    ("scripts/bbr-mechanism", &["acks", "/nonexistent"], 2, "not a directory"),
    ("scripts/bbr-mechanism", &["seconds", "/"], 2, "no trace"),
    ("scripts/bbr-mechanism", &["acks", "/", "--bogus"], 2, "--bogus"),
    ("testbed/uml", &["run", "--out", "/tmp/x", "--trace-event", "bbr", "--", "true"], 2, "SYSTEM:EVENT"),
    ("testbed/uml", &["run", "--out", "/tmp/x", "--trace-event", "tcp_bbr:bbr_ack", "--trace-buffer-kb", "8", "--", "true"], 2, "--trace-buffer-kb"),
    ("testbed/uml", &["run", "--out", "/tmp/x", "--trace-buffer-kb", "1024", "--", "true"], 2, "--trace-event"),
    ("testbed/uml", &["run", "--out", "/tmp/x", "--cpu-slices", "25", "--cpu-slices-for", "x", "--", "true"], 2, "--cpu-slices-for"),
    ("testbed/uml", &["run", "--out", "/tmp/x", "--cpu-slices-for", "5s", "--", "true"], 2, "--cpu-slices"),
    ("scripts/displaced-stamps", &["--bogus"], 2, "--bogus"),
    ("scripts/displaced-stamps", &["--reps", "0"], 2, "--reps"),
    ("scripts/displaced-stamps", &["--sizes", ","], 2, "--sizes"),
    ("scripts/displaced-stamps", &["--duration", "4"], 2, "--duration"),
    ("scripts/displaced-stamps", &["--out"], 2, "--out"),
    ("scripts/timestamp-sources", &["--bogus"], 2, "--bogus"),
    ("scripts/small-write-segments", &["--bogus"], 2, "--bogus"),
    ("scripts/small-write-segments", &["--reps", "0"], 2, "--reps"),
    ("scripts/small-write-segments", &["--duration", "1"], 2, "--duration"),
    ("scripts/timestamp-sources", &["--reps", "0"], 2, "--reps"),
    ("scripts/timestamp-sources", &["--rates", ","], 2, "--rates"),
    ("scripts/timestamp-sources", &["--duration", "10", "--warmup", "10"], 2, "--warmup"),
    ("scripts/timestamp-sources", &["--check", "--out", "/nonexistent/ts"], 1, "/nonexistent/ts"),
    ("scripts/tx-report-trace", &["--bogus"], 2, "--bogus"),
    ("scripts/tx-report-trace", &["--reps", "-1"], 2, "--reps"),
    ("scripts/tx-report-trace", &["--guest-reps", "x"], 2, "--guest-reps"),
    ("scripts/tx-report-trace", &["--build"], 2, "--build"),
    ("scripts/analysis/invitation-backlog.py", &[], 2, "a run directory"),
    ("scripts/analysis/invitation-backlog.py", &["--bogus"], 2, "a run directory"),
    ("scripts/analysis/invitation-backlog.py", &["/nonexistent"], 1, "no summary.csv"),
    ("kernel/mutate", &["--bogus"], 2, "--bogus"),
    ("kernel/mutate", &["--work"], 2, "--work"),
    ("testbed/wan", &["up", "--rate", "fast"], 2, "--rate"),
    ("testbed/shape", &["apply"], 2, "<DEV>"),
    ("testbed/uml", &["run", "--mem", "x"], 2, "--mem"),
    ("sbm-send", &["-c", C, "--replenish-time", "15ms", "--replenish-impl", "bpf", "--rate-estimator", "cwnd"], 2, "delivery estimator only"),
    ("sbm-send", &["-c", C, "--exact-departures", "-P", "2"], 2, "one connection"),
    ("sbm-send", &["-c", C, "--exact-departures", "--no-timestamps"], 2, "--no-timestamps"),
    ("sbm-send", &["-c", C, "--timestamps", "kernel"], 2, "--timestamps"),
    ("sbm-send", &["-c", C, "--timestamps", "bpf", "-P", "2"], 2, "one connection"),
    ("sbm-send", &["-c", C, "--timestamps", "bpf", "--no-timestamps"], 2, "--no-timestamps"),
    ("sbm-send", &["-c", C, "--timestamps", "bpf", "--light"], 2, "--light"),
    ("sbm-send", &["-c", C, "--timestamps", "bpf", "--errqueue-rcvbuf", "1M"], 2, "does not use it"),
    ("sbm-send", &["-c", C, "--timestamps", "off", "--eor"], 2, "needs timed writes"),
    ("sbm-send", &["-c", C, "-R", "--timestamps", "bpf"], 2, "a reverse run's socket"),
    ("sbm-trace", &[], 2, "COMMAND"),
    ("sbm-trace", &["--cgroup", "/nonexistent/cg", "--", "true"], 2, "--cgroup"),
    ("sbm-trace", &["--cgroup", "/nonexistent/cg"], 1, "/nonexistent/cg"),
    ("sbm-trace", &["--time", "soon", "--", "true"], 2, "--time"),
    ("sbm-trace", &["--cc", "nosuch", "--", "true"], 2, "--cc"),
    ("sbm-trace", &["--port", "70000", "--", "true"], 2, "--port"),
    ("sbm-trace", &["--out", "/proc/no/such/dir", "--cgroup", "/nonexistent/cg"], 1, "/nonexistent/cg"),
    ("sbm-trace", &["--interval", "0s", "--", "true"], 2, "--interval"),
    ("sbm-trace", &["--warmup", "x", "--", "true"], 2, "--warmup"),
    ("sbm-trace", &["--no-timestamps=1", "--", "true"], 2, "--no-timestamps"),
    ("sbm-trace", &["--no-departures", "--no-timestamps", "--", "true"], 2, "--no-departures"),
    ("sbm-trace", &["--replenish-time", "fast", "--", "true"], 2, "--replenish-time"),
    ("sbm-trace", &["--threshold-test", "half", "--", "true"], 2, "--replenish-time"),
    ("sbm-trace", &["--quiet=1", "--", "true"], 2, "--quiet"),
    ("sbm-trace", &["--json=1", "--", "true"], 2, "--json"),
];

#[test]
fn every_bad_argument_is_one_line_and_the_right_status() {
    let _g = serial();
    // The wrappers must run the binaries under test, not build their own.
    std::env::set_var("SBM_BIN", bin_dir());
    std::env::set_var(
        "SBM_MATRICES",
        concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/matrices"),
    );
    let failures: Vec<String> = CASES
        .iter()
        // sbm-trace is BPF: a build without the feature has no such binary.
        .filter(|(prog, ..)| cfg!(feature = "bpf") || *prog != "sbm-trace")
        .filter_map(|(prog, args, code, needle)| try_check(prog, args, *code, needle).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every long flag of every parser has a row above (booleans as `--flag=value`).
#[test]
fn the_table_covers_every_flag() {
    fn flags(cmd: &clap::Command, out: &mut BTreeSet<String>, path: &str) {
        for a in cmd.get_arguments() {
            if let Some(l) = a.get_long() {
                if l != "help" && l != "version" {
                    out.insert(format!("{path} --{l}"));
                }
            }
        }
        for s in cmd.get_subcommands() {
            flags(s, out, &format!("{path} {}", s.get_name()));
        }
    }
    let mut wanted = BTreeSet::new();
    flags(
        &sbm::send::cli::SendArgs::command(),
        &mut wanted,
        "sbm-send",
    );
    flags(
        &sbm::sink::cli::SinkArgs::command(),
        &mut wanted,
        "sbm-sink",
    );
    flags(&sbm::delay::DelayArgs::command(), &mut wanted, "sbm-delay");
    flags(
        &sbm::rpm::client::ClientArgs::command(),
        &mut wanted,
        "sbm-rpm",
    );
    flags(
        &sbm::rpm::server::ServerArgs::command(),
        &mut wanted,
        "sbm-rpm-server",
    );
    flags(&sbm::testbed::Cli::command(), &mut wanted, "sbm-testbed");
    flags(&sbm::matrix::Cli::command(), &mut wanted, "sbm-matrix");
    #[cfg(feature = "bpf")]
    flags(
        &sbm::trace::cli::TraceArgs::command(),
        &mut wanted,
        "sbm-trace",
    );
    let mut covered = BTreeSet::new();
    for (prog, args, _, _) in CASES {
        let prog = match *prog {
            "testbed/wan" => "sbm-testbed wan".to_string(),
            "testbed/shape" => "sbm-testbed shape".to_string(),
            "testbed/uml" => "sbm-testbed uml".to_string(),
            "scripts/matrix" => "sbm-matrix".to_string(),
            p => p.to_string(),
        };
        let mut path = prog;
        for a in args.iter() {
            if let Some(flag) = a.strip_prefix("--") {
                let flag = flag.split('=').next().unwrap();
                covered.insert(format!("{path} --{flag}"));
            } else if !a.starts_with('-')
                && wanted
                    .iter()
                    .any(|w| w.starts_with(&format!("{path} {a} ")))
            {
                path = format!("{path} {a}");
            }
        }
    }
    // Short forms (-c, -t, -l, -i) stand for their long flags in the table.
    for alias in [
        "--connect",
        "--time",
        "--write-size",
        "--interval",
        "--quiet",
    ] {
        covered.insert(format!("sbm-send {alias}"));
    }
    let missing: Vec<&String> = wanted.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "flags without a bad-input row: {missing:?}"
    );
}

/// A port already taken, and a peer that never answers the SYN: environment errors, one
/// line each, status 1, within the connect timeout.
#[test]
fn a_taken_port_and_a_black_holed_peer_are_one_line_and_status_1() {
    let _g = serial();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    check(
        "sbm-sink",
        &["--listen", &addr],
        1,
        "another program is listening there",
    );

    // A listener whose accept queue is full: Linux drops further SYNs, so a connect
    // neither succeeds nor is refused (a black hole on loopback).
    let hole = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    hole.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    hole.listen(0).unwrap();
    let hole_addr = hole.local_addr().unwrap().as_socket().unwrap();
    let fillers: Vec<std::net::TcpStream> = (0..2)
        .filter_map(|_| {
            std::net::TcpStream::connect_timeout(&hole_addr, Duration::from_secs(1)).ok()
        })
        .collect();
    assert!(!fillers.is_empty(), "could not fill the accept queue");
    let started = std::time::Instant::now();
    let msg = check(
        "sbm-send",
        &[
            "-c",
            &hole_addr.to_string(),
            "--connect-timeout",
            "1s",
            "-t",
            "1s",
        ],
        1,
        "no answer within 1s",
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "connect timeout 1s took {took:?}: {msg}"
    );
}

/// A soak run in which no test ran (here: cargo asked for a test target that does not exist;
/// on a machine without scripts/setup's packages, the build failing) says so in one line,
/// exits 1 and records no run: it says nothing about the suite's reliability.
#[test]
fn a_soak_run_that_ran_no_test_is_not_recorded() {
    common::require_root();
    let _serial = serial();
    let out = common::tempdir("soak-not-run");
    let out_arg = out.path().to_string_lossy().into_owned();
    let res = Running::spawn_program(
        &program("scripts/soak"),
        &[
            "--runs",
            "1",
            "--out",
            &out_arg,
            "--cargo-args",
            "--test no-such-test-target",
        ],
    )
    .wait(Duration::from_secs(120));
    let stderr = res.stderr.trim();
    assert_eq!(res.code(), Some(1), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line, was: {stderr}");
    assert!(stderr.contains("ran no test"), "{stderr}");
    assert!(
        !out.join("runs.csv").exists(),
        "a run that ran nothing was recorded"
    );
    assert!(!out.join("logs").exists());
    let kept = std::fs::read_to_string(out.join("not-run.txt")).unwrap();
    assert!(kept.contains("no-such-test-target"), "{kept}");
}
