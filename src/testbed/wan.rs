//! The emulated WAN path: namespaces snd — wan — rcv on one machine, a delay in wan
//! (netem where the kernel has it, else sbm-delay on NFQUEUE) and an HTB bottleneck on
//! wan's egress toward rcv, or on rcv's ingress via IFB as the report did.
//!
//! A bed records its owner (a PID) and what it made in a state file, so that `down` can
//! always remove everything and `up` can reclaim a bed whose owner died.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::cmd::{Cmd, CmdError};
use super::plan::{self, Bottleneck};

pub const SND_ADDR: &str = "198.18.1.1";
pub const WAN_SND_ADDR: &str = "198.18.1.254";
pub const RCV_ADDR: &str = "198.18.2.1";
pub const WAN_RCV_ADDR: &str = "198.18.2.254";
/// Interfaces: snd's veth, wan's veth toward snd, wan's veth toward rcv, rcv's veth, IFB.
pub const SND_IF: &str = "s0";
pub const WAN_SND_IF: &str = "ws";
pub const WAN_RCV_IF: &str = "wr";
pub const RCV_IF: &str = "r0";
pub const IFB_IF: &str = "ifb0";
/// NFQUEUE numbers of the two directions.
const QUEUE_FWD: u16 = 0;
const QUEUE_REV: u16 = 1;
/// TCP buffer maxima in snd and rcv: large enough for 86 Mb/s × 172 ms plus seconds of
/// source queue (the report's default run parks 8 MB).
const TCP_MEM: &str = "4096 131072 67108864";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ShapeAt {
    /// HTB on wan's egress toward rcv.
    Wan,
    /// HTB on an IFB device fed by rcv's ingress (the report's receiver-side shaping).
    Ingress,
}

/// What limits the rate: a shaper (HTB and a FIFO: excess waits) or a policer (excess is
/// dropped as it arrives, nothing waits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum BottleneckKind {
    #[default]
    Shaper,
    /// On what wan receives from snd: tc's police action, or where the kernel lacks it a
    /// token bucket with a one-packet queue (plan::police_by_tbf).
    Policer,
}

/// How a policer was installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicerImpl {
    /// act_police.
    Police,
    /// TBF with a one-packet queue on an IFB (this kernel has no act_police).
    Tbf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DelayImpl {
    /// netem when the kernel has it, else nfqueue.
    Auto,
    Netem,
    Nfqueue,
}

#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    #[error("the test bed needs root (network namespaces, tc, iptables); run it with sudo")]
    NotRoot,
    #[error("invalid prefix '{0}': use 1-12 characters from a-z, 0-9 and '-'")]
    BadPrefix(String),
    #[error("test bed '{prefix}' is in use by live process {owner} ({comm}); use another --prefix or run `testbed/wan down --prefix {prefix}`")]
    InUse {
        prefix: String,
        owner: u32,
        comm: String,
    },
    #[error("no test bed '{0}' is up (testbed/wan up --prefix {0})")]
    NotUp(String),
    #[error("this kernel has no netem (sch_netem); use --delay-impl nfqueue or auto")]
    NoNetem,
    #[error("sbm-delay not found at {0}: build it with `cargo build --release`")]
    NoDelayBinary(PathBuf),
    #[error("the delay line did not start: {0}")]
    DelayLine(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Cmd(#[from] CmdError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TestbedError + '_ {
    move |source| TestbedError::Io {
        path: path.into(),
        source,
    }
}

/// What `up` is asked for.
#[derive(Debug, Clone)]
pub struct WanSpec {
    pub prefix: String,
    pub rtt: Duration,
    pub rate_bps: Option<u64>,
    pub queue: Duration,
    pub shape_at: ShapeAt,
    pub delay_impl: DelayImpl,
    pub bottleneck: BottleneckKind,
    pub owner: u32,
}

/// What a bed is, as recorded in its state file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct State {
    pub prefix: String,
    pub owner_pid: u32,
    pub rtt_us: u64,
    pub rate_bps: Option<u64>,
    pub queue_us: u64,
    pub shape_at: ShapeAt,
    /// Resolved: netem or nfqueue (auto before resolution).
    pub delay_impl: DelayImpl,
    pub delay_pid: Option<u32>,
    pub created_unix_s: u64,
    /// Shaper or policer (beds from before policers: shaper).
    #[serde(default)]
    pub bottleneck: BottleneckKind,
    /// How the policer is made, while there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policer_impl: Option<PolicerImpl>,
}

/// Namespace names of a bed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub snd: String,
    pub wan: String,
    pub rcv: String,
}

impl Names {
    pub fn new(prefix: &str) -> Names {
        Names {
            snd: format!("{prefix}-snd"),
            wan: format!("{prefix}-wan"),
            rcv: format!("{prefix}-rcv"),
        }
    }

    pub fn all(&self) -> [&str; 3] {
        [&self.snd, &self.wan, &self.rcv]
    }
}

/// Why a thread could not enter a network namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("{}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("setns(CLONE_NEWNET) failed: {0}")]
    Setns(nix::errno::Errno),
}

/// Moves the calling thread into network namespace `ns` (ip-netns's /run/netns/NS) for the
/// rest of its life: the sockets it opens afterwards live there.
pub fn enter_netns(ns: &str) -> Result<(), NetnsError> {
    let path = Path::new("/run/netns").join(ns);
    let file = std::fs::File::open(&path).map_err(|source| NetnsError::Open {
        path: path.clone(),
        source,
    })?;
    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(NetnsError::Setns)
}

pub fn validate_prefix(p: &str) -> Result<(), TestbedError> {
    let ok = !p.is_empty()
        && p.len() <= 12
        && p.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(TestbedError::BadPrefix(p.into()))
    }
}

/// Where beds keep their state: $SBM_TESTBED_RUN_DIR or /run/sbm-testbed.
pub fn run_dir() -> PathBuf {
    std::env::var_os("SBM_TESTBED_RUN_DIR")
        .map_or_else(|| PathBuf::from("/run/sbm-testbed"), PathBuf::from)
}

fn state_dir(prefix: &str) -> PathBuf {
    run_dir().join(prefix)
}

pub fn delay_stats_path(prefix: &str) -> PathBuf {
    state_dir(prefix).join("delay-stats.json")
}

fn state_path(prefix: &str) -> PathBuf {
    state_dir(prefix).join("state.json")
}

pub fn load_state(prefix: &str) -> Option<State> {
    let text = std::fs::read_to_string(state_path(prefix)).ok()?;
    serde_json::from_str(&text).ok()
}

fn save_state(s: &State) -> Result<(), TestbedError> {
    let path = state_path(&s.prefix);
    let json = serde_json::to_string_pretty(s).expect("state serializes");
    std::fs::write(&path, json + "\n").map_err(io_err(&path))
}

pub fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// The command name of a live process, None if there is no such process.
pub fn process_comm(pid: u32) -> Option<String> {
    if pid == 0 || kill(Pid::from_raw(pid as i32), None).is_err() {
        return None;
    }
    Some(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into()),
    )
}

fn now_unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether a bed's namespaces and delay line are all there.
pub fn healthy(state: &State) -> bool {
    let names = Names::new(&state.prefix);
    names.all().iter().all(|n| netns_exists(n))
        && match state.delay_impl {
            DelayImpl::Nfqueue => state
                .delay_pid
                .and_then(process_comm)
                .is_some_and(|c| c == "sbm-delay"),
            _ => true,
        }
}

fn sysctl(ns: &str, key_path: &str, value: &str) -> Cmd {
    Cmd::new(
        "sh",
        &["-c", &format!("echo '{value}' > /proc/sys/{key_path}")],
    )
    .in_ns(ns)
}

/// Sets the sysctl `name` (dotted, `net.ipv4.tcp_notsent_lowat`) inside namespace `ns` and
/// returns the value it had, so that the caller can put it back.
pub fn set_ns_sysctl(ns: &str, name: &str, value: &str) -> Result<String, TestbedError> {
    // A dotted name only: no path of its own, no empty part, nothing that leaves /proc/sys,
    // and a value that cannot end the shell's quoted string.
    let well_formed = name.split('.').all(|part| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    });
    let path = name.replace('.', "/");
    if !well_formed || value.contains('\'') {
        return Err(TestbedError::Invalid(format!(
            "sysctl '{name}={value}': not a sysctl setting"
        )));
    }
    let previous = Cmd::new("cat", &[&format!("/proc/sys/{path}")])
        .in_ns(ns)
        .run()?;
    sysctl(ns, &path, value).run()?;
    Ok(previous.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn run_all(cmds: &[Cmd]) -> Result<(), TestbedError> {
    for c in cmds {
        c.run()?;
    }
    Ok(())
}

/// Checks that must pass before anything is made.
fn preflight(delay_impl: DelayImpl) -> Result<(), TestbedError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(TestbedError::NotRoot);
    }
    let mut tools = vec![("ip", "-V"), ("tc", "-V"), ("ethtool", "--version")];
    if delay_impl != DelayImpl::Netem {
        tools.push(("iptables", "--version"));
    }
    for (tool, arg) in tools {
        let found = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(CmdError::Missing {
                program: tool,
                package: super::cmd::package_of(tool),
            }
            .into());
        }
    }
    Ok(())
}

/// Creates the three namespaces and their links, addresses, routes and sysctls.
fn build_topology(n: &Names) -> Result<(), TestbedError> {
    for ns in n.all() {
        Cmd::new("ip", &["netns", "add", ns]).run()?;
        Cmd::new("ip", &["-n", ns, "link", "set", "lo", "up"]).run()?;
    }
    Cmd::new(
        "ip",
        &[
            "link", "add", SND_IF, "netns", &n.snd, "type", "veth", "peer", "name", WAN_SND_IF,
            "netns", &n.wan,
        ],
    )
    .run()?;
    Cmd::new(
        "ip",
        &[
            "link", "add", RCV_IF, "netns", &n.rcv, "type", "veth", "peer", "name", WAN_RCV_IF,
            "netns", &n.wan,
        ],
    )
    .run()?;
    let links = [
        (&n.snd, SND_IF, SND_ADDR, WAN_SND_ADDR),
        (&n.wan, WAN_SND_IF, WAN_SND_ADDR, ""),
        (&n.wan, WAN_RCV_IF, WAN_RCV_ADDR, ""),
        (&n.rcv, RCV_IF, RCV_ADDR, WAN_RCV_ADDR),
    ];
    for (ns, dev, addr, gw) in links {
        Cmd::new(
            "ip",
            &["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev],
        )
        .run()?;
        // Packet-level fidelity at low rates: no TSO/GSO/GRO trains on the path (FACTS.md).
        Cmd::new(
            "ethtool",
            &["-K", dev, "tso", "off", "gso", "off", "gro", "off"],
        )
        .in_ns(ns)
        .run()?;
        Cmd::new("ip", &["-n", ns, "link", "set", dev, "up"]).run()?;
        if !gw.is_empty() {
            Cmd::new("ip", &["-n", ns, "route", "add", "default", "via", gw]).run()?;
        }
    }
    sysctl(&n.wan, "net/ipv4/ip_forward", "1").run()?;
    for ns in [&n.snd, &n.rcv] {
        sysctl(ns, "net/ipv4/tcp_wmem", TCP_MEM).run()?;
        sysctl(ns, "net/ipv4/tcp_rmem", TCP_MEM).run()?;
    }
    Ok(())
}

/// Whether the kernel can create a netem qdisc (tried on wan's loopback).
fn netem_available(wan: &str) -> bool {
    let ok = Cmd::new(
        "tc",
        &["qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
    )
    .in_ns(wan)
    .run()
    .is_ok();
    if ok {
        let _ = Cmd::new("tc", &["qdisc", "del", "dev", "lo", "root"])
            .in_ns(wan)
            .run();
    }
    ok
}

fn delay_binary() -> Result<PathBuf, TestbedError> {
    let path = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("sbm-delay")))
        .unwrap_or_else(|| PathBuf::from("sbm-delay"));
    if path.exists() {
        Ok(path)
    } else {
        Err(TestbedError::NoDelayBinary(path))
    }
}

/// NFQUEUE rules in wan's FORWARD chain and sbm-delay serving them; returns its PID.
fn start_delay_line(prefix: &str, n: &Names, one_way: Duration) -> Result<u32, TestbedError> {
    let bin = delay_binary()?;
    for (dev, q) in [(WAN_SND_IF, QUEUE_FWD), (WAN_RCV_IF, QUEUE_REV)] {
        Cmd::new(
            "iptables",
            &[
                "-A",
                "FORWARD",
                "-i",
                dev,
                "-j",
                "NFQUEUE",
                "--queue-num",
                &q.to_string(),
            ],
        )
        .in_ns(&n.wan)
        .run()?;
    }
    let stats = delay_stats_path(prefix);
    let log_path = state_dir(prefix).join("delay.log");
    let log = std::fs::File::create(&log_path).map_err(io_err(&log_path))?;
    let us = one_way.as_micros();
    let mut child = Command::new("ip")
        .args(["netns", "exec", &n.wan])
        .arg(&bin)
        .args(["--queue", &format!("{QUEUE_FWD}:{us}us:snd-to-rcv")])
        .args(["--queue", &format!("{QUEUE_REV}:{us}us:rcv-to-snd")])
        .arg("--stats")
        .arg(&stats)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io_err(&log_path))?)
        .stderr(log)
        // Its own process group: a Ctrl-C aimed at the caller does not stop the path.
        .process_group(0)
        .spawn()
        .map_err(|e| TestbedError::DelayLine(format!("cannot start {}: {e}", bin.display())))?;
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(TestbedError::DelayLine(format!(
                "sbm-delay exited ({status}): {}",
                log.trim().lines().last().unwrap_or("no output")
            )));
        }
        if std::fs::read_to_string(&stats).is_ok_and(|s| s.contains("\"running\"")) {
            return Ok(pid);
        }
        if Instant::now() >= deadline {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            return Err(TestbedError::DelayLine(
                "sbm-delay did not report ready within 5 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The device the bottleneck sits on, and its namespace.
pub fn shape_device(prefix: &str, shape_at: ShapeAt) -> (String, &'static str) {
    let n = Names::new(prefix);
    match shape_at {
        ShapeAt::Wan => (n.wan, WAN_RCV_IF),
        ShapeAt::Ingress => (n.rcv, IFB_IF),
    }
}

/// Whether a link exists in a namespace.
fn link_exists(ns: &str, dev: &str) -> bool {
    Cmd::new("ip", &["-n", ns, "link", "show", dev])
        .run()
        .is_ok()
}

/// Installs, changes or removes the bottleneck in place (`None`: no bottleneck) and records
/// it in `state` (not saved).
fn apply_bottleneck(
    state: &mut State,
    rate_bps: Option<u64>,
    queue: Duration,
    kind: BottleneckKind,
) -> Result<(), TestbedError> {
    let n = Names::new(&state.prefix);
    let shaping = state.rate_bps.is_some() && state.bottleneck == BottleneckKind::Shaper;
    let policing = state.rate_bps.is_some() && state.bottleneck == BottleneckKind::Policer;
    let shaper = rate_bps.filter(|_| kind == BottleneckKind::Shaper);
    let policer = rate_bps.filter(|_| kind == BottleneckKind::Policer);
    if policing && policer.is_none() {
        for c in plan::unpolice(WAN_SND_IF) {
            let _ = c.in_ns(&n.wan).run();
        }
        state.policer_impl = None;
    }
    if shaping || shaper.is_some() {
        apply_shaper(state, shaper, queue, shaping)?;
    }
    if let Some(rate) = policer {
        let b = Bottleneck {
            rate_bps: rate,
            queue,
        };
        state.policer_impl = Some(match (policing, state.policer_impl) {
            (true, Some(PolicerImpl::Police)) => {
                plan::police(WAN_SND_IF, &b)[1]
                    .clone()
                    .in_ns(&n.wan)
                    .run()?;
                PolicerImpl::Police
            }
            (true, _) => {
                plan::tbf_policer(&b).in_ns(&n.wan).run()?;
                PolicerImpl::Tbf
            }
            // tc's police action where the kernel has it, else the token bucket.
            (false, _) => {
                let police: Vec<Cmd> = plan::police(WAN_SND_IF, &b)
                    .into_iter()
                    .map(|c| c.in_ns(&n.wan))
                    .collect();
                if run_all(&police).is_ok() {
                    PolicerImpl::Police
                } else {
                    for c in plan::unpolice(WAN_SND_IF) {
                        let _ = c.in_ns(&n.wan).run();
                    }
                    let tbf: Vec<Cmd> = plan::police_by_tbf(WAN_SND_IF, &b)
                        .into_iter()
                        .map(|c| c.in_ns(&n.wan))
                        .collect();
                    run_all(&tbf)?;
                    PolicerImpl::Tbf
                }
            }
        });
    }
    state.rate_bps = rate_bps;
    state.queue_us = queue.as_micros() as u64;
    state.bottleneck = kind;
    Ok(())
}

/// The shaper part of [`apply_bottleneck`]: HTB and bfifo installed or changed (`shaping`:
/// one is there now), or removed.
fn apply_shaper(
    state: &State,
    rate_bps: Option<u64>,
    queue: Duration,
    shaping: bool,
) -> Result<(), TestbedError> {
    let n = Names::new(&state.prefix);
    let (ns, dev) = shape_device(&state.prefix, state.shape_at);
    let one_way = Duration::from_micros(state.rtt_us / 2);
    let netem_on_wr = state.delay_impl == DelayImpl::Netem && state.shape_at == ShapeAt::Wan;
    if state.shape_at == ShapeAt::Ingress && rate_bps.is_some() && !link_exists(&n.rcv, IFB_IF) {
        for c in plan::ingress_redirect(RCV_IF, IFB_IF) {
            c.in_ns(&n.rcv).run()?;
        }
    }
    match rate_bps {
        Some(rate) => {
            let b = Bottleneck {
                rate_bps: rate,
                queue,
            };
            let mut cmds: Vec<Cmd> = plan::htb(dev, &b)
                .into_iter()
                .map(|c| c.in_ns(&ns))
                .collect();
            // HTB cannot change its root in place: with one there, change class and leaf only.
            let skip_root = usize::from(shaping);
            if netem_on_wr {
                // One root per device: netem becomes the class's leaf, its limit the queue.
                let pkts = (b.limit_bytes() / plan::FULL_PACKET).max(4).to_string();
                let d = format!("{}us", one_way.as_micros());
                cmds[2] = Cmd::new(
                    "tc",
                    &[
                        "qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "10:", "netem",
                        "delay", &d, "limit", &pkts,
                    ],
                )
                .in_ns(&ns);
            }
            run_all(&cmds[skip_root..])
        }
        None => {
            let _ = Cmd::new("tc", &["qdisc", "del", "dev", dev, "root"])
                .in_ns(&ns)
                .run();
            if netem_on_wr {
                plan::netem_delay(WAN_RCV_IF, one_way).in_ns(&n.wan).run()?;
            }
            Ok(())
        }
    }
}

/// Brings a bed up. A half-built bed is torn down before the error is returned.
pub fn up(spec: &WanSpec) -> Result<State, TestbedError> {
    validate_prefix(&spec.prefix)?;
    preflight(spec.delay_impl)?;
    let names = Names::new(&spec.prefix);
    if let Some(old) = load_state(&spec.prefix) {
        if let Some(comm) = process_comm(old.owner_pid).filter(|_| healthy(&old)) {
            return Err(TestbedError::InUse {
                prefix: spec.prefix.clone(),
                owner: old.owner_pid,
                comm,
            });
        }
        eprintln!(
            "sbm-testbed: reclaiming bed '{}' left by process {} (gone or bed broken)",
            spec.prefix, old.owner_pid
        );
        down(&spec.prefix);
    } else if names.all().iter().any(|n| netns_exists(n)) {
        eprintln!(
            "sbm-testbed: removing leftover namespaces of '{}' (no state file)",
            spec.prefix
        );
        down(&spec.prefix);
    }
    let dir = state_dir(&spec.prefix);
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let mut state = State {
        prefix: spec.prefix.clone(),
        owner_pid: spec.owner,
        rtt_us: spec.rtt.as_micros() as u64,
        rate_bps: None,
        queue_us: spec.queue.as_micros() as u64,
        shape_at: spec.shape_at,
        delay_impl: spec.delay_impl,
        delay_pid: None,
        created_unix_s: now_unix_s(),
        bottleneck: BottleneckKind::Shaper,
        policer_impl: None,
    };
    // Recorded before anything is made, so a crash half-way is reclaimable.
    save_state(&state)?;
    let result = (|| {
        build_topology(&names)?;
        let one_way = spec.rtt / 2;
        state.delay_impl = match spec.delay_impl {
            DelayImpl::Auto if netem_available(&names.wan) => DelayImpl::Netem,
            DelayImpl::Auto => DelayImpl::Nfqueue,
            DelayImpl::Netem if !netem_available(&names.wan) => return Err(TestbedError::NoNetem),
            other => other,
        };
        save_state(&state)?;
        match state.delay_impl {
            DelayImpl::Netem => {
                plan::netem_delay(WAN_SND_IF, one_way)
                    .in_ns(&names.wan)
                    .run()?;
                // wr's root is the HTB when it shapes there (netem becomes its leaf).
                let htb_on_wr = spec.shape_at == ShapeAt::Wan
                    && spec.rate_bps.is_some()
                    && spec.bottleneck == BottleneckKind::Shaper;
                if !htb_on_wr {
                    plan::netem_delay(WAN_RCV_IF, one_way)
                        .in_ns(&names.wan)
                        .run()?;
                }
            }
            _ => {
                state.delay_pid = Some(start_delay_line(&spec.prefix, &names, one_way)?);
                save_state(&state)?;
            }
        }
        apply_bottleneck(&mut state, spec.rate_bps, spec.queue, spec.bottleneck)?;
        save_state(&state)?;
        Ok(())
    })();
    match result {
        Ok(()) => Ok(state),
        Err(e) => {
            down(&spec.prefix);
            Err(e)
        }
    }
}

/// Changes the bottleneck of a running bed in place (`queue`, `kind`: None keeps them).
pub fn set(
    prefix: &str,
    rate_bps: Option<u64>,
    queue: Option<Duration>,
    kind: Option<BottleneckKind>,
) -> Result<State, TestbedError> {
    validate_prefix(prefix)?;
    if !nix::unistd::geteuid().is_root() {
        return Err(TestbedError::NotRoot);
    }
    let mut state = load_state(prefix)
        .filter(healthy)
        .ok_or_else(|| TestbedError::NotUp(prefix.into()))?;
    let queue = queue.unwrap_or(Duration::from_micros(state.queue_us));
    let kind = kind.unwrap_or(state.bottleneck);
    apply_bottleneck(&mut state, rate_bps, queue, kind)?;
    save_state(&state)?;
    Ok(state)
}

/// Stops sbm-delay with SIGTERM (it accepts what it holds), SIGKILL after 3 s.
fn stop_delay(pid: u32) {
    if process_comm(pid).as_deref() != Some("sbm-delay") {
        return;
    }
    let p = Pid::from_raw(pid as i32);
    let _ = kill(p, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(3);
    while process_comm(pid).is_some() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if process_comm(pid).is_some() {
        let _ = kill(p, Signal::SIGKILL);
    }
}

/// Removes everything under the prefix; never fails (what it could not remove, it says).
pub fn down(prefix: &str) -> Vec<String> {
    let mut problems = vec![];
    let names = Names::new(prefix);
    if let Some(state) = load_state(prefix) {
        if let Some(pid) = state.delay_pid {
            stop_delay(pid);
        }
    }
    // Any other delay line left in wan (a state file lost in a crash).
    if netns_exists(&names.wan) {
        if let Ok(pids) = Cmd::new("ip", &["netns", "pids", &names.wan]).run() {
            for pid in pids
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
            {
                stop_delay(pid);
            }
        }
    }
    for ns in names.all() {
        if netns_exists(ns) {
            if let Err(e) = Cmd::new("ip", &["netns", "del", ns]).run() {
                problems.push(e.to_string());
            }
        }
    }
    let dir = state_dir(prefix);
    if dir.exists() {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            problems.push(format!("{}: {e}", dir.display()));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_sysctl_must_be_a_dotted_name() {
        // Refused before any command runs (the namespace does not exist).
        for (name, value) in [
            ("net/../../etc/x", "1"),
            ("net..ipv4", "1"),
            ("", "1"),
            ("net.ipv4.tcp_notsent_lowat", "1' >x"),
        ] {
            assert!(
                matches!(
                    set_ns_sysctl("sbm-no-such-ns", name, value),
                    Err(TestbedError::Invalid(_))
                ),
                "{name}={value}"
            );
        }
    }

    #[test]
    fn prefixes() {
        for ok in ["sbm", "t-1234", "abcdefghijkl"] {
            assert!(validate_prefix(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Sbm", "a b", "abcdefghijklm", "x/y", "../x"] {
            assert!(validate_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_and_shape_devices() {
        let n = Names::new("t1");
        assert_eq!(n.all(), ["t1-snd", "t1-wan", "t1-rcv"]);
        assert_eq!(
            shape_device("t1", ShapeAt::Wan),
            ("t1-wan".to_string(), "wr")
        );
        assert_eq!(
            shape_device("t1", ShapeAt::Ingress),
            ("t1-rcv".to_string(), "ifb0")
        );
    }

    #[test]
    fn state_round_trips_through_json() {
        let s = State {
            prefix: "t1".into(),
            owner_pid: 42,
            rtt_us: 172_000,
            rate_bps: Some(2_000_000),
            queue_us: 200_000,
            shape_at: ShapeAt::Ingress,
            delay_impl: DelayImpl::Nfqueue,
            delay_pid: Some(7),
            created_unix_s: 1,
            bottleneck: BottleneckKind::Policer,
            policer_impl: Some(PolicerImpl::Tbf),
        };
        let back: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
