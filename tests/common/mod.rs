//! Test harness: spawns the real binaries, waits on their output with timeouts (never
//! fixed sleeps), and reads their CSV/JSON outputs.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Tests in one binary run one at a time: they measure timing on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn bin(name: &str) -> PathBuf {
    match name {
        "sbm-send" => PathBuf::from(env!("CARGO_BIN_EXE_sbm-send")),
        "sbm-sink" => PathBuf::from(env!("CARGO_BIN_EXE_sbm-sink")),
        #[cfg(feature = "bpf")]
        "sbm-trace" => PathBuf::from(env!("CARGO_BIN_EXE_sbm-trace")),
        "sbm-matrix" => PathBuf::from(env!("CARGO_BIN_EXE_sbm-matrix")),
        "sbm-rpm" => PathBuf::from(env!("CARGO_BIN_EXE_sbm-rpm")),
        "sbm-rpm-server" => PathBuf::from(env!("CARGO_BIN_EXE_sbm-rpm-server")),
        other => panic!("unknown binary {other}"),
    }
}

/// A test's scratch directory under the system's temporary directory, removed when the test
/// ends (passing or failing). `SBM_KEEP_TEST_DIRS=1` keeps it, to read a failure's outputs.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TempDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("SBM_KEEP_TEST_DIRS").is_some() {
            eprintln!("kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn tempdir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!(
        "sbm-test-{tag}-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        % 1_000_000_007
}

/// A running process whose stdout lines arrive on a channel. Killed on drop.
pub struct Running {
    pub child: Option<Child>,
    pub lines: Receiver<String>,
    pub seen: Vec<String>,
}

impl Running {
    pub fn spawn(name: &str, args: &[&str]) -> Running {
        Running::spawn_program(&bin(name).to_string_lossy(), args)
    }

    /// Any program (e.g. `ip netns exec NS sbm-send …`).
    pub fn spawn_program(program: &str, args: &[&str]) -> Running {
        let mut cmd = Command::new(program);
        cmd.args(args);
        Running::spawn_command(cmd)
    }

    /// A prepared command (environment, directory); stdin is closed.
    pub fn spawn_command(mut cmd: Command) -> Running {
        let name = format!("{:?}", cmd.get_program());
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child: Some(child),
            lines: rx,
            seen: vec![],
        }
    }

    /// Waits for a stdout line containing `needle`; returns it.
    pub fn wait_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "no line with {needle:?} within {timeout:?}; saw {:#?}",
                    self.seen
                ),
            }
        }
    }

    /// A program in a process group of its own, as a shell starts a foreground job: Ctrl-C
    /// is then [`Running::interrupt_group`], reaching the program and every child in it.
    pub fn spawn_group(program: &str, args: &[&str]) -> Running {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(program);
        cmd.args(args).process_group(0);
        Running::spawn_command(cmd)
    }

    /// What a terminal does on Ctrl-C: SIGINT to the whole foreground process group.
    pub fn interrupt_group(&self) {
        nix::sys::signal::killpg(self.pid(), Signal::SIGINT).unwrap();
    }

    /// Whether it is still running (it may be waited for afterwards).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.as_ref().unwrap().id() as i32)
    }

    pub fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).unwrap();
    }

    /// Waits for exit; collects the remaining stdout and the stderr.
    pub fn wait(mut self, timeout: Duration) -> Finished {
        let mut child = self.child.take().unwrap();
        let pid = Pid::from_raw(child.id() as i32);
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take();
        std::thread::spawn(move || {
            let status = child.wait();
            let mut err = String::new();
            if let Some(mut s) = stderr {
                use std::io::Read;
                let _ = s.read_to_string(&mut err);
            }
            let _ = tx.send((status, err));
        });
        let (status, stderr) = match rx.recv_timeout(timeout) {
            Ok((s, e)) => (s.unwrap(), e),
            Err(_) => {
                let _ = kill(pid, Signal::SIGKILL);
                panic!(
                    "process did not exit within {timeout:?}; stdout so far {:#?}",
                    self.seen
                );
            }
        };
        // The reader thread ends at EOF once the process is gone.
        let mut stdout = std::mem::take(&mut self.seen);
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            stdout.push(l);
        }
        Finished {
            status,
            stdout: stdout.join("\n"),
            stderr,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

/// `Command::output` with a limit: a command that hangs is killed and the test fails
/// saying so, instead of stalling the whole run.
pub fn output_within(cmd: Command, timeout: Duration) -> Finished {
    Running::spawn_command(cmd).wait(timeout)
}

/// Runs a program with arguments to completion within `timeout`.
pub fn run_program(program: &str, args: &[&str], timeout: Duration) -> Finished {
    Running::spawn_program(program, args).wait(timeout)
}

/// Runs a binary to completion with a timeout.
pub fn run(name: &str, args: &[&str], timeout: Duration) -> Finished {
    Running::spawn(name, args).wait(timeout)
}

/// A sink on an ephemeral port; its address is known once it printed it.
pub struct Sink {
    pub proc: Running,
    pub addr: String,
}

impl Sink {
    pub fn start(listen: &str, extra: &[&str]) -> Sink {
        let mut args = vec!["--listen", listen];
        args.extend_from_slice(extra);
        Sink::from_running(Running::spawn("sbm-sink", &args))
    }

    /// A sink inside a network namespace.
    pub fn start_in(netns: &str, listen: &str, extra: &[&str]) -> Sink {
        let bin = bin("sbm-sink");
        let mut args = vec![
            "netns",
            "exec",
            netns,
            bin.to_str().unwrap(),
            "--listen",
            listen,
        ];
        args.extend_from_slice(extra);
        Sink::from_running(Running::spawn_program("ip", &args))
    }

    pub fn from_running(mut proc: Running) -> Sink {
        let line = proc.wait_line("listening on", Duration::from_secs(10));
        let addr = line
            .rsplit("listening on ")
            .next()
            .unwrap()
            .trim()
            .to_string();
        Sink { proc, addr }
    }

    /// Stops the sink with SIGTERM and returns its output.
    pub fn stop(self) -> Finished {
        self.proc.signal(Signal::SIGTERM);
        self.proc.wait(Duration::from_secs(10))
    }
}

/// Processes whose command line mentions `needle` (e.g. a run's unique output directory).
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{pid}: {cmd}"));
            }
        }
    }
    found
}

/// Runs a two-cell matrix (cells `2mbit-a`, `2mbit-b`) as a terminal's foreground job and
/// presses Ctrl-C once cell b's sender has written its first interval; checks what must
/// hold after it: status 130, cell a ok, cell b interrupted with its files flushed (a
/// summary marked incomplete, a row per write), no namespace and no process left.
pub fn ctrl_c_mid_second_cell(matrix: &Path, out: &Path, prefix: &str, patience: Duration) {
    let mut runner = Running::spawn_group(
        env!("CARGO_BIN_EXE_sbm-matrix"),
        &[
            "run",
            matrix.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--prefix",
            prefix,
        ],
    );
    runner.wait_line("[2/2]", patience);
    let csv = out.join("2mbit-b/intervals.csv");
    let deadline = Instant::now() + patience;
    while std::fs::read_to_string(&csv).map_or(0, |t| t.lines().count()) < 2 {
        assert!(Instant::now() < deadline, "cell b never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    runner.interrupt_group();
    let res = runner.wait(Duration::from_secs(120));
    assert_eq!(res.code(), Some(130), "{}\n{}", res.stdout, res.stderr);
    assert!(res.stdout.contains("--resume"), "{}", res.stdout);
    assert_eq!(read_json(&out.join("2mbit-a/cell.json"))["status"], "ok");
    assert_eq!(
        read_json(&out.join("2mbit-b/cell.json"))["status"],
        "interrupted"
    );
    // sbm-send got the SIGINT too (or was stopped by the matrix): complete rows, and a
    // summary that says the run was cut short.
    let summary = read_json(&out.join("2mbit-b/summary.json"));
    assert_eq!(summary["complete"], false, "{summary}");
    let writes = read_csv(&out.join("2mbit-b/writes.csv"));
    assert!(!writes.is_empty());
    assert_eq!(
        writes.len() as u64,
        summary["totals"]["writes"].as_u64().unwrap(),
        "every write has its row"
    );
    let left = namespaces_of(prefix);
    assert!(left.is_empty(), "namespaces left: {left:?}");
    // A guest's command line names the bed's run directory (its init script), the delay
    // line its statistics file there; sbm-send and sbm-sink name the output directory.
    let mut left = processes_mentioning(out.to_str().unwrap());
    left.extend(processes_mentioning(&format!("/sbm-testbed/{prefix}/")));
    assert!(left.is_empty(), "processes left: {left:?}");
}

pub type Row = HashMap<String, String>;

/// Rows of a CSV by its plain name, stored plain or xz-compressed (matrix cells).
pub fn read_csv(path: &Path) -> Vec<Row> {
    let file =
        sbm::report::compressed::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = csv::Reader::from_reader(file);
    let headers = r.headers().unwrap().clone();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

pub fn csv_headers(path: &Path) -> Vec<String> {
    let mut r = csv::Reader::from_reader(sbm::report::compressed::open(path).unwrap());
    r.headers().unwrap().iter().map(str::to_string).collect()
}

pub fn read_json(path: &Path) -> serde_json::Value {
    // A cell's file may be in its archive (a packed run).
    let text = sbm::report::compressed::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A CSV field that must be a number.
pub fn f(row: &Row, key: &str) -> f64 {
    row[key]
        .parse()
        .unwrap_or_else(|_| panic!("{key} in {row:?}"))
}

pub fn num(row: &Row, key: &str) -> Option<u64> {
    row.get(key)
        .filter(|v| !v.is_empty())
        .map(|v| v.parse().unwrap())
}

/// Total bytes the sink received on its connections (the `total` rows).
pub fn sink_total_bytes(dir: &Path) -> u64 {
    read_csv(&dir.join("sink-intervals.csv"))
        .iter()
        .filter(|r| r["kind"] == "total")
        .map(|r| num(r, "bytes").unwrap())
        .sum()
}

/// Of the writes with their own TX_SCHED report and a sampled departure, how many have the
/// report inside the sampler's bracket, and how many have it before the bracket opened:
/// (inside, exact, before). snd_nxt advances just after the skb entered the qdisc and
/// SIOCOUTQNSD reads it without the socket lock, so the bracket may open up to a few µs after
/// the report (50 µs allowed). A report before that would contradict the sampler; one after
/// the bracket closed means the segment reached the qdisc after TCP had counted it sent
/// (measured on the emulated path for a few per cent of 64 KiB writes, 10–12 ms late).
pub fn exact_reports_inside_bracket(rows: &[Row]) -> (usize, usize, usize) {
    let exact: Vec<(u64, u64, u64)> = rows
        .iter()
        .filter(|r| r["attribution"] == "exact" && !r["depart_hi_ns"].is_empty())
        .map(|r| {
            (
                num(r, "depart_lo_ns").unwrap(),
                num(r, "depart_hi_ns").unwrap(),
                num(r, "sched_ns").unwrap(),
            )
        })
        .collect();
    let inside = exact
        .iter()
        .filter(|&&(lo, hi, sched)| lo <= sched + 50_000 && sched <= hi)
        .count();
    let before = exact
        .iter()
        .filter(|&&(lo, _, sched)| sched + 50_000 < lo)
        .count();
    (inside, exact.len(), before)
}

// ---- The emulated path (root): a bed per test, removed on drop. ----

pub fn testbed_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sbm-testbed"))
}

pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the test-bed tests need root (network namespaces, tc, iptables): run `sudo cargo test --release`"
    );
}

/// A unique prefix per bed: t<pid><tag>, at most 12 characters.
pub fn prefix(tag: &str) -> String {
    format!("t{}{tag}", std::process::id() % 100_000)
}

/// sbm-testbed with a limit (building a bed takes seconds; two minutes means a hang).
pub fn testbed(args: &[&str]) -> Finished {
    run_program(
        &testbed_bin().to_string_lossy(),
        args,
        Duration::from_secs(120),
    )
}

/// An emulated path, removed on drop.
pub struct Bed {
    pub prefix: String,
}

impl Bed {
    pub fn up(tag: &str, args: &[&str]) -> Bed {
        require_root();
        let prefix = prefix(tag);
        let pid = std::process::id().to_string();
        let mut all = vec!["wan", "up", "--prefix", &prefix, "--owner", &pid];
        // The delay implementation is pinned: `auto` would test netem on a kernel that has
        // it and the delay line on one that has not. Tests that mean netem say so.
        if !args.contains(&"--delay-impl") {
            all.extend(["--delay-impl", "nfqueue"]);
        }
        all.extend_from_slice(args);
        let bed = Bed {
            prefix: prefix.clone(),
        };
        let res = testbed(&all);
        assert_eq!(
            res.code(),
            Some(0),
            "up failed: {}{}",
            res.stdout,
            res.stderr
        );
        bed
    }

    pub fn ns(&self, which: &str) -> String {
        format!("{}-{which}", self.prefix)
    }

    pub fn set(&self, args: &[&str]) {
        let mut all = vec!["wan", "set", "--prefix", &self.prefix];
        all.extend_from_slice(args);
        let res = testbed(&all);
        assert_eq!(res.code(), Some(0), "set failed: {}", res.stderr);
    }

    pub fn status(&self) -> serde_json::Value {
        let res = testbed(&["wan", "status", "--json", "--prefix", &self.prefix]);
        assert_eq!(res.code(), Some(0), "{}", res.stderr);
        serde_json::from_str(&res.stdout).unwrap()
    }
}

impl Bed {
    /// `tc ARGS` in one of the bed's namespaces; its stdout.
    pub fn tc(&self, which: &str, args: &[&str]) -> String {
        let ns = self.ns(which);
        let mut all = vec!["netns", "exec", &ns, "tc"];
        all.extend_from_slice(args);
        let out = run_program("ip", &all, Duration::from_secs(30));
        assert!(out.status.success(), "tc {args:?}: {}", out.stderr);
        out.stdout
    }

    /// The bottleneck as the kernel has it: (HTB class rate in bit/s, the class's leaf
    /// qdisc, its limit — bytes for bfifo, packets for netem, which is the leaf on a netem
    /// path), read from tc on `dev` in namespace `which` — not from the bed's state file.
    pub fn installed_bottleneck(&self, which: &str, dev: &str) -> (u64, String, u64) {
        let class = self.tc(which, &["class", "show", "dev", dev]);
        let rate = class
            .split_whitespace()
            .skip_while(|w| *w != "rate")
            .nth(1)
            .and_then(parse_tc_rate)
            .unwrap_or_else(|| panic!("no HTB rate in tc's class list: {class}"));
        let qdisc: serde_json::Value =
            serde_json::from_str(&self.tc(which, &["-j", "qdisc", "show", "dev", dev])).unwrap();
        let leaf = qdisc
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["parent"] == "1:1")
            .unwrap_or_else(|| panic!("no leaf under the HTB class: {qdisc}"));
        let limit = leaf["options"]["limit"]
            .as_u64()
            .unwrap_or_else(|| panic!("no limit on the leaf: {leaf}"));
        (rate, leaf["kind"].as_str().unwrap().to_string(), limit)
    }
}

/// tc's rate notation: 100Kbit, 2Mbit, 86Mbit, 1Gbit, 800bit.
pub fn parse_tc_rate(s: &str) -> Option<u64> {
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(digits);
    let n: u64 = n.parse().ok()?;
    let mult = match unit {
        "bit" => 1,
        "Kbit" => 1_000,
        "Mbit" => 1_000_000,
        "Gbit" => 1_000_000_000,
        _ => return None,
    };
    Some(n * mult)
}

/// The network namespaces whose names start with `prefix-` (a bed's), from `ip netns list`.
pub fn namespaces_of(prefix: &str) -> Vec<String> {
    let listed = run_program("ip", &["netns", "list"], Duration::from_secs(30)).stdout;
    let mine = format!("{prefix}-");
    listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&mine))
        .map(str::to_string)
        .collect()
}

impl Drop for Bed {
    fn drop(&mut self) {
        // A bed was once found still up after its test passed (session 10); what `down`
        // reports is kept in the test's output, and a second try is made, so that the next
        // occurrence says why instead of leaving namespaces behind silently.
        for attempt in 1..=2 {
            let res = testbed(&["wan", "down", "--prefix", &self.prefix]);
            let left = namespaces_of(&self.prefix);
            if res.code() == Some(0) && left.is_empty() {
                return;
            }
            eprintln!(
                "test bed {}: `wan down` attempt {attempt} exited {:?} ({} {}); namespaces left: {left:?}",
                self.prefix,
                res.code(),
                res.stdout.trim(),
                res.stderr.trim(),
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

impl Bed {
    /// Runs sbm-send in snd against a sink in rcv; returns the summary.
    pub fn transfer(&self, args: &[&str]) -> serde_json::Value {
        self.transfer_to(args).0
    }

    /// The same, with the output directory.
    pub fn transfer_to(&self, args: &[&str]) -> (serde_json::Value, TempDir) {
        let sink = Sink::start_in(&self.ns("rcv"), "198.18.2.1:5301", &["-q"]);
        let out = tempdir(&format!("{}-send", self.prefix));
        let send = bin("sbm-send");
        let snd = self.ns("snd");
        let mut all = vec![
            "netns",
            "exec",
            &snd,
            send.to_str().unwrap(),
            "--connect",
            &sink.addr,
            "--out",
            out.to_str().unwrap(),
            "-q",
        ];
        // No wait for outstanding reports unless the test asks for one.
        if !args.contains(&"--drain-timeout") {
            all.extend(["--drain-timeout", "0s"]);
        }
        all.extend_from_slice(args);
        let res = Running::spawn_program("ip", &all).wait(Duration::from_secs(120));
        assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
        sink.stop();
        (read_json(&out.join("summary.json")), out)
    }
}

/// The goodput a bottleneck of `rate_bps` allows at the run's MSS (66 bytes of headers on
/// the wire per segment).
pub fn payload_rate(summary: &serde_json::Value, rate_bps: f64) -> f64 {
    let mss = summary["mss"].as_f64().unwrap();
    rate_bps * mss / (mss + 66.0)
}

/// The output reference: every file, column and key sbm writes (docs/output.md).
pub fn output_reference() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/output.md")).unwrap()
}

/// What the machine did to timing while a test measured: a control thread of the test's
/// own process waking every millisecond (how late it woke), and the CPU time the
/// hypervisor took (/proc/stat steal). Timing tests judge their figures against this, so
/// that a busy host is said to be one instead of failing a test on noise.
pub struct MachineProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    control: std::thread::JoinHandle<Vec<u64>>,
    ticks: (u64, u64),
}

/// What a [`MachineProbe`] saw.
#[derive(Debug, Clone, Copy)]
pub struct MachineReport {
    /// The control thread's wake-up lateness, p99 and worst, µs.
    pub control_p99_us: u64,
    pub control_max_us: u64,
    /// Stolen CPU time as a share of all CPUs' time.
    pub steal_share: f64,
}

impl std::fmt::Display for MachineReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a 1 ms timer thread beside it woke up to {} us late (p99 {} us); {:.2} % of CPU time stolen",
            self.control_max_us,
            self.control_p99_us,
            self.steal_share * 100.0
        )
    }
}

/// Steal and total CPU ticks of all CPUs so far (/proc/stat's `cpu` line).
pub fn cpu_steal_and_total_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|t| t.parse().unwrap())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    (ticks[7], ticks[..8].iter().sum())
}

impl MachineProbe {
    pub fn start() -> MachineProbe {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let control = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut late = vec![];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let due = Instant::now() + Duration::from_millis(1);
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    late.push(Instant::now().saturating_duration_since(due).as_micros() as u64);
                }
                late
            })
        };
        MachineProbe {
            stop,
            control,
            ticks: cpu_steal_and_total_ticks(),
        }
    }

    pub fn finish(self) -> MachineReport {
        let (steal1, total1) = cpu_steal_and_total_ticks();
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut late = self.control.join().unwrap();
        late.sort_unstable();
        MachineReport {
            control_p99_us: late.get(late.len() * 99 / 100).copied().unwrap_or(0),
            control_max_us: late.last().copied().unwrap_or(0),
            steal_share: (steal1 - self.ticks.0) as f64 / (total1 - self.ticks.1).max(1) as f64,
        }
    }
}

/// Says that a timing test is measuring again because the machine, not the code, spoiled
/// its try — on stderr, and as a line (test name, `retry`, why; tab-separated) appended to
/// the file `SBM_TEST_RETRY_LOG` names, so that scripts/soak counts every retry a test
/// needed instead of a retry passing silently.
pub fn say_retry(why: &str) {
    say_for_soak("retry", why);
}

/// Says that a timing test left its figure unjudged because the machine never gave it the
/// conditions it needs (logged as [`say_retry`] does, kind `unjudged`).
pub fn say_unjudged(why: &str) {
    say_for_soak("unjudged", why);
}

fn say_for_soak(kind: &str, why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_string();
    eprintln!("sbm-test-{kind}: {test}: {why}");
    if let Some(path) = std::env::var_os("SBM_TEST_RETRY_LOG") {
        use std::io::Write;
        let line = format!("{test}\t{kind}\t{}\n", why.replace(['\t', '\n'], " "));
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// A loopback port nothing listens on now (bound, read, released), for a program the test
/// starts there.
pub fn free_loopback_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
        .to_string()
}

/// `127.0.0.1:PORT` with nothing listening: a connection there is refused.
pub fn closed_loopback_addr() -> String {
    format!("127.0.0.1:{}", free_loopback_port())
}

/// The fenced code blocks of a markdown text, each with the line before its opening fence
/// (the "<!-- … -->" marker or the sentence that introduces it).
pub fn code_blocks(md: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks = vec![];
    let mut current: Option<(String, Vec<String>)> = None;
    let mut previous = String::new();
    for line in md.lines() {
        if line.starts_with("```") {
            match current.take() {
                Some(b) => blocks.push(b),
                None => current = Some((previous.clone(), vec![])),
            }
        } else if let Some((_, body)) = current.as_mut() {
            body.push(line.to_string());
        }
        if !line.trim().is_empty() {
            previous = line.to_string();
        }
    }
    blocks
}

fn digits_as_nines(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_digits = false;
    for ch in s.chars() {
        if ch.is_ascii_digit() {
            if !in_digits {
                out.push('9');
            }
            in_digits = true;
        } else {
            out.push(ch);
            in_digits = false;
        }
    }
    out
}

/// What a line of sbm's human output is, without its values: the label before a colon near
/// its start (`options`, `rows`, `sojourn (exact only)`; its digits as 9s), or the words
/// before its first digit; interval lines (they start with their time) are one kind. Two
/// outputs of one command compare line for line in shape (tests/docs.rs, tests/matrix.rs).
pub fn shape(line: &str) -> String {
    let line = line.trim();
    if line.starts_with(|c: char| c.is_ascii_digit()) {
        return "<interval>".into();
    }
    let label = match line.find(':') {
        // A label: the same digits in another run (a version, a count, an ETA) make one
        // kind of line.
        Some(i) if i <= 40 => digits_as_nines(&line[..i]),
        _ => line[..line
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(line.len())]
            .to_string(),
    };
    label.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The line kinds in order, runs of interval lines as one.
pub fn shapes(text: &str) -> Vec<String> {
    let mut v: Vec<String> = vec![];
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let s = shape(l);
        if v.last() != Some(&s) || s != "<interval>" {
            v.push(s);
        }
    }
    v
}
