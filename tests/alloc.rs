//! The hot path does not allocate per write: sbm-send runs in this process under a
//! counting allocator against an in-process discard sink, and the allocations of a long
//! run, less those of a short one (set-up, intervals, summary), are divided by the extra
//! writes.

use clap::Parser;
use sbm::sys::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// sbm-sink in its own process (its allocations must not count); returns its address.
fn sink() -> (std::process::Child, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sbm-sink"))
        .args(["--listen", "127.0.0.1:0", "-q"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    // The first line, read on a thread so that a sink that never prints fails the test
    // after 10 s instead of blocking it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut out, &mut line);
        let _ = tx.send((line, out));
    });
    let Ok((line, mut out)) = rx.recv_timeout(std::time::Duration::from_secs(10)) else {
        let _ = child.kill();
        panic!("sbm-sink printed no address within 10 s");
    };
    let addr = line
        .trim()
        .rsplit("listening on ")
        .next()
        .unwrap()
        .to_string();
    // Keep reading its stdout so that it never writes into a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, addr)
}

fn allocations_for(addr: &str, writes: u64, out: &std::path::Path) -> u64 {
    let n = writes.to_string();
    let args = sbm::send::cli::SendArgs::try_parse_from([
        "sbm-send",
        "--connect",
        addr,
        "--writes",
        &n,
        "-l",
        "4KiB",
        "-q",
        "--reply-timeout",
        "100ms",
        "--out",
        out.to_str().unwrap(),
    ])
    .unwrap();
    let cfg = args.into_config().unwrap();
    let before = ALLOC.count();
    let outcome = sbm::send::run(&cfg).unwrap();
    let after = ALLOC.count();
    assert_eq!(outcome.summary.totals.writes, writes);
    after - before
}

#[test]
fn no_allocation_per_write() {
    let (mut child, addr) = sink();
    let dir = std::env::temp_dir().join(format!("sbm-alloc-{}", std::process::id()));
    let short = allocations_for(&addr, 2_000, &dir.join("short"));
    let long = allocations_for(&addr, 40_000, &dir.join("long"));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = child.kill();
    let _ = child.wait();
    let per_write = long.saturating_sub(short) as f64 / 38_000.0;
    assert!(
        per_write < 0.05,
        "{per_write:.3} allocations per write ({short} for 2000 writes, {long} for 40000)"
    );
}
