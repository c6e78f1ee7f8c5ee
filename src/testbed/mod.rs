//! sbm-testbed: the emulated WAN path (`wan`) and shaping for real hosts (`shape`).
//! `testbed/wan` and `testbed/shape` are thin wrappers around it.

pub mod cmd;
pub mod hold;
pub mod hostinfo;
pub mod plan;
pub mod queue_trace;
pub mod shape;
pub mod status;
pub mod uml;
pub mod wan;

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::units;
use wan::{BottleneckKind, DelayImpl, ShapeAt, WanSpec};

#[derive(Debug, Parser)]
#[command(
    name = "sbm-testbed",
    version,
    about = "The report's WAN path on one machine, and shaping for real hosts"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Top,
}

#[derive(Debug, Subcommand)]
pub enum Top {
    /// The emulated path: namespaces snd — wan — rcv with delay and bottleneck.
    #[command(subcommand)]
    Wan(WanCmd),
    /// Shape one interface of a real host.
    #[command(subcommand)]
    Shape(ShapeCmd),
    /// The sender as a User-Mode Linux guest with the patched kernel (TCP_REPLENISH_TIME).
    #[command(subcommand)]
    Uml(UmlCmd),
    /// Describe this host for a matrix run on real hosts (run over ssh by sbm-matrix).
    #[command(subcommand)]
    Host(HostCmd),
}

#[derive(Debug, Subcommand)]
pub enum HostCmd {
    /// Kernel, sysctls, clock synchronisation and each DEV's MTU, offloads and qdiscs, as JSON.
    Info {
        /// Interfaces to describe.
        #[arg(long = "dev", value_name = "DEV")]
        devs: Vec<String>,
    },
    /// This host's wall clock (CLOCK_REALTIME) in nanoseconds, for an offset measurement.
    Clock,
    /// Round trips to ADDR:PORT from TCP handshakes (a closed port answers with a reset),
    /// as JSON.
    #[command(after_help = "Example:\n  sbm-testbed host probe-rtt 198.18.2.1:5301 --count 5")]
    ProbeRtt {
        #[arg(value_name = "ADDR:PORT")]
        addr: std::net::SocketAddr,
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
        count: u32,
        /// How long one probe waits for an answer.
        #[arg(long, default_value = "2s", value_parser = units::parse_duration)]
        timeout: Duration,
    },
}

#[derive(Debug, Args)]
pub struct KernelSource {
    /// The directory with patches/ and uml.config.
    #[arg(long, default_value_os_t = uml::build::default_kernel_dir())]
    pub kernel_dir: std::path::PathBuf,
    /// Where built kernels are cached ($SBM_UML_CACHE, else $XDG_CACHE_HOME/sbm/uml or
    /// ~/.cache/sbm/uml).
    #[arg(long, default_value_os_t = uml::build::default_cache_root())]
    pub cache: std::path::PathBuf,
}

// Parsed once per process: the Run variant's size costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum UmlCmd {
    /// Build the patched UML kernel (cached: a second build with the same inputs is instant).
    #[command(
        after_help = "Example:\n  testbed/uml build            # ~4 minutes the first time on 2 cores"
    )]
    Build {
        #[command(flatten)]
        source: KernelSource,
        /// Parallel compile jobs (default: the number of CPUs).
        #[arg(long, value_parser = parse_jobs)]
        jobs: Option<usize>,
        /// Rebuild even if the cache has this kernel.
        #[arg(long)]
        force: bool,
    },
    /// Print the cached kernel's path (building it first if needed).
    Path {
        #[command(flatten)]
        source: KernelSource,
    },
    /// Check kernel/patches with the source's scripts/checkpatch.pl --strict.
    Checkpatch {
        #[command(flatten)]
        source: KernelSource,
    },
    /// Boot a sender guest on a bed's snd namespace and run a command in it.
    #[command(
        after_help = "The command runs inside the guest from the host's file system, in the caller's directory;\nthe file system is read-only there except OUT (mounted read-write at the same path).\n\nExamples:\n  testbed/wan up --rate 2mbit --prefix sbm\n  ip netns exec sbm-rcv target/release/sbm-sink --listen 198.18.2.1:5301 &\n  testbed/uml run --out /var/tmp/r1 -- target/release/sbm-send --connect 198.18.2.1 \\\n      -t 40s --replenish-time 15ms --replenish-impl kernel --out /var/tmp/r1\n  testbed/uml run --cpu-quota 35 --cpu-period 10ms --out /var/tmp/r2 -- ...\n  testbed/uml run --cpu-slices 35 --out /var/tmp/r3 -- ...   # 3.5 ms of every 10 ms, fixed phase\n  testbed/uml run --cpu-slices 25 --trace-event tcp_bbr:bbr_ack --sysctl net.ipv4.tcp_congestion_control=bbr \\\n      --out /var/tmp/r4 -- ...   # BBR's model after each ACK, beside the off-slices"
    )]
    Run {
        #[command(flatten)]
        prefix: PrefixArg,
        #[command(flatten)]
        source: KernelSource,
        /// A kernel to boot instead of the cached build.
        #[arg(long)]
        kernel: Option<std::path::PathBuf>,
        /// Output directory (created; mounted read-write in the guest).
        #[arg(long)]
        out: std::path::PathBuf,
        /// Limit the whole guest to PCT percent of one CPU (cgroup CFS quota: it runs until
        /// its budget is spent, then waits for the next period).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100), conflicts_with = "cpu_slices")]
        cpu_quota: Option<u32>,
        /// Deal the whole guest PCT percent of every period in one piece at a fixed phase, as
        /// a hypervisor does a vCPU: the guest pinned to one CPU, where a real-time thread
        /// of ours takes the rest (5 to 100).
        #[arg(long, value_parser = clap::value_parser!(u32).range(5..=100))]
        cpu_slices: Option<u32>,
        /// The CPU a sliced guest is pinned to (default: the last one).
        #[arg(long, requires = "cpu_slices")]
        slice_cpu: Option<usize>,
        /// Deal the slices for this long from the guest's start only, then leave the guest its
        /// CPU whole (to watch it recover).
        #[arg(long, requires = "cpu_slices", value_parser = units::parse_duration)]
        cpu_slices_for: Option<Duration>,
        /// The quota's or the slices' period.
        #[arg(long, default_value = "10ms", value_parser = units::parse_duration)]
        cpu_period: Duration,
        /// Guest memory in MiB.
        #[arg(long, default_value_t = 512)]
        mem: u32,
        /// MTU of the guest's interface (1280 gives the report's MSS of 1228).
        #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u32).range(576..=65535))]
        mtu: u32,
        /// A sysctl to set in the guest first, NAME=VALUE (repeatable).
        #[arg(long = "sysctl", value_parser = crate::sysinfo::parse_sysctl)]
        sysctls: Vec<(String, String)>,
        /// Record a tracepoint in the guest while the command runs, SYSTEM:EVENT (repeatable):
        /// e.g. tcp_bbr:bbr_ack (BBR's model after each ACK, kernel/patches/0011) or
        /// tcp:tcp_probe. Written to OUT/guest-trace.txt.xz, stamped in CLOCK_REALTIME; with
        /// --cpu-slices, the off-slices go to OUT/guest-slices.csv.
        #[arg(long = "trace-event", value_parser = parse_trace_event)]
        trace_events: Vec<String>,
        /// The guest's trace ring in KiB; when it fills, later events are dropped (counted
        /// in uml.json's trace.stats).
        #[arg(long, default_value_t = 65536, requires = "trace_events", value_parser = clap::value_parser!(u32).range(64..=1048576))]
        trace_buffer_kb: u32,
        /// Stop the guest's command after this long (then end the guest).
        #[arg(long, default_value = "10min", value_parser = units::parse_duration)]
        timeout: Duration,
        /// The command to run in the guest.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// A tracepoint as tracefs names it, `system:event` (letters, digits, underscores).
pub fn parse_trace_event(s: &str) -> Result<String, String> {
    let word = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    match s.split_once(':') {
        Some((sys, ev)) if word(sys) && word(ev) => Ok(s.to_string()),
        _ => Err(format!(
            "'{s}' is not SYSTEM:EVENT (e.g. tcp_bbr:bbr_ack, tcp:tcp_probe)"
        )),
    }
}

/// A bottleneck rate in bit/s; None = no bottleneck (`off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateArg(pub Option<u64>);

/// A bottleneck rate: `2mbit`, `100kbit`, `86mbit` or `off`.
fn parse_rate(s: &str) -> Result<RateArg, String> {
    if s == "off" {
        Ok(RateArg(None))
    } else {
        units::parse_rate_bps(s)
            .map(|r| RateArg(Some(r)))
            .map_err(|e| e.to_string())
    }
}

fn parse_jobs(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ 1..=1024) => Ok(n),
        _ => Err(format!("'{s}': a whole number from 1 to 1024")),
    }
}

/// A test-bed prefix, checked where it is parsed (a bad one is a usage error).
pub fn parse_prefix(s: &str) -> Result<String, String> {
    wan::validate_prefix(s).map_err(|e| e.to_string())?;
    Ok(s.to_string())
}

#[derive(Debug, Args)]
pub struct PrefixArg {
    /// Names the bed: namespaces PREFIX-snd, PREFIX-wan, PREFIX-rcv.
    #[arg(long, default_value = "sbm", value_parser = parse_prefix)]
    pub prefix: String,
}

#[derive(Debug, Subcommand)]
pub enum WanCmd {
    /// Build the path (reclaims a bed whose owner is gone).
    #[command(
        after_help = "Examples:\n  testbed/wan up --rtt 172ms --rate 2mbit --queue 200ms\n  testbed/wan up --rate 100kbit --shape-at ingress --prefix slow\n  ip netns exec sbm-rcv target/release/sbm-sink --listen 198.18.2.1:5301 &\n  ip netns exec sbm-snd target/release/sbm-send --connect 198.18.2.1 -t 40s"
    )]
    Up {
        /// Round-trip time, split evenly between the directions.
        #[arg(long, default_value = "172ms", value_parser = units::parse_duration_or_zero)]
        rtt: Duration,
        /// Bottleneck rate toward rcv, or off.
        #[arg(long, default_value = "2mbit", value_parser = parse_rate)]
        rate: RateArg,
        /// Bottleneck queue in time (bfifo of rate × queue bytes, at least 4 packets).
        #[arg(long, default_value = "200ms", value_parser = units::parse_duration)]
        queue: Duration,
        #[arg(long, value_enum, default_value_t = ShapeAt::Wan)]
        shape_at: ShapeAt,
        #[arg(long, value_enum, default_value_t = DelayImpl::Auto)]
        delay_impl: DelayImpl,
        #[command(flatten)]
        prefix: PrefixArg,
        /// The process that owns the bed (default: the caller); a bed whose owner is gone
        /// is reclaimed by the next `up`.
        #[arg(long)]
        owner: Option<u32>,
        /// shaper: HTB with a FIFO of --queue (excess waits); policer: excess dropped as it
        /// arrives from snd, with a bucket of --queue at the rate (tc police, or where the
        /// kernel lacks act_police a token bucket with a one-packet queue).
        #[arg(long, value_enum, default_value_t = BottleneckKind::Shaper)]
        bottleneck: BottleneckKind,
    },
    /// Change the bottleneck in place.
    Set {
        /// New rate, or off.
        #[arg(long, value_parser = parse_rate)]
        rate: RateArg,
        #[arg(long, value_parser = units::parse_duration)]
        queue: Option<Duration>,
        /// shaper or policer (default: as it is).
        #[arg(long, value_enum)]
        bottleneck: Option<BottleneckKind>,
        #[command(flatten)]
        prefix: PrefixArg,
    },
    /// Remove everything under the prefix (always succeeds).
    Down {
        #[command(flatten)]
        prefix: PrefixArg,
    },
    /// Sample the bottleneck queue (the kernel's backlog, packets, drops, bytes sent) every
    /// --interval into a CSV, with CLOCK_REALTIME on each row, until SIGINT/SIGTERM or
    /// --duration.
    #[command(
        after_help = "Examples:\n  testbed/wan queue-trace --out queue.csv &          # until SIGINT or SIGTERM\n  testbed/wan queue-trace --prefix slow --interval 5ms --duration 60s --out q.csv\n\nColumns: realtime_ns, backlog_bytes, qlen, drops, sent_bytes, sent_packets (the kernel's\ncounters of the queue under HTB's class, `tc -s qdisc`'s figures), backlog_over_rate_ms\n(the backlog's time to drain at the bed's rate, computed by sbm)."
    )]
    QueueTrace {
        /// Time between samples.
        #[arg(long, default_value = "10ms", value_parser = units::parse_duration)]
        interval: Duration,
        /// Stop after this long (default: at SIGINT or SIGTERM).
        #[arg(long, value_parser = units::parse_duration)]
        duration: Option<Duration>,
        /// The CSV to write.
        #[arg(long)]
        out: std::path::PathBuf,
        #[command(flatten)]
        prefix: PrefixArg,
    },
    /// Topology, addresses, qdisc counters, delay-line statistics.
    Status {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        prefix: PrefixArg,
    },
}

/// The interface and bottleneck of `shape apply` and `shape hold`.
#[derive(Debug, Args)]
pub struct ShapeArgs {
    pub dev: String,
    #[arg(long, value_parser = units::parse_rate_bps)]
    pub rate: u64,
    #[arg(long, default_value = "200ms", value_parser = units::parse_duration)]
    pub queue: Duration,
    #[arg(long)]
    pub ingress: bool,
}

impl ShapeArgs {
    fn bottleneck(&self) -> plan::Bottleneck {
        plan::Bottleneck {
            rate_bps: self.rate,
            queue: self.queue,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum ShapeCmd {
    /// Install HTB (egress, or ingress through an IFB) on DEV.
    #[command(
        after_help = "Example (receiver of the report's experiment):\n  testbed/shape apply eth0 --rate 2mbit --queue 200ms --ingress --dry-run"
    )]
    Apply {
        #[command(flatten)]
        shape: ShapeArgs,
        /// Add a netem delay as the HTB leaf (kernels with sch_netem).
        #[arg(long, value_parser = units::parse_duration)]
        delay: Option<Duration>,
        /// Print the commands instead of running them.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove what apply installed.
    Clear {
        dev: String,
        #[arg(long)]
        ingress: bool,
        #[arg(long)]
        dry_run: bool,
    },
    /// Show qdiscs and classes with counters.
    Show { dev: String },
    /// Install as apply does, print `shaped`, and remove it again when stdin closes or on
    /// SIGINT/SIGTERM/SIGHUP (prints `cleared`): shaping tied to the life of an ssh session.
    #[command(
        after_help = "Example (what sbm-matrix runs on a remote receiver):\n  ssh root@receiver sbm-testbed shape hold eth0 --rate 2mbit --queue 200ms --ingress"
    )]
    Hold {
        #[command(flatten)]
        shape: ShapeArgs,
    },
}

fn run_or_print(cmds: &[cmd::Cmd], dry_run: bool, keep_going: bool) -> Result<(), String> {
    for c in cmds {
        if dry_run {
            crate::say!("{c}");
            continue;
        }
        match c.run() {
            Ok(out) => crate::say_partial!("{out}"),
            Err(e) if keep_going => eprintln!("sbm-testbed: {e}"),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

fn build_kernel(
    source: &KernelSource,
    jobs: Option<usize>,
    force: bool,
) -> Result<uml::build::Built, String> {
    uml::build::build_from(
        &source.kernel_dir,
        source.cache.clone(),
        jobs,
        force,
        &mut |line| eprintln!("sbm-testbed uml build: {line}"),
    )
    .map_err(|e| e.to_string())
}

/// Exit status of `uml run`: the guest command's, or 1 when it never reported one.
fn run_uml(spec: &uml::RunSpec) -> Result<i32, String> {
    let signals = crate::signals::StopSignals::install().map_err(|e| format!("signalfd: {e}"))?;
    let record = uml::run(spec, &mut || signals.take().is_some()).map_err(|e| e.to_string())?;
    if let Some(why) = &record.stopped {
        eprintln!("sbm-testbed: guest stopped: {why}");
    }
    if let Some(dump) = &record.task_dump {
        eprintln!("sbm-testbed: the guest's tasks when it ran past its time: {dump}");
    }
    if let Some(profile) = &record.host_profile {
        eprintln!("sbm-testbed: the host's profile of the guest past its time: {profile}");
    }
    if let Some(q) = &record.cpu_quota {
        eprintln!(
            "sbm-testbed: cpu quota {}% of {} us: throttled in {} of {} periods ({} ms in all)",
            q.pct,
            q.period_us,
            q.stat.nr_throttled,
            q.stat.nr_periods,
            q.stat.throttled_us / 1000
        );
    }
    if let Some(s) = &record.cpu_slices {
        eprintln!(
            "sbm-testbed: cpu slices {}% of {} us on CPU {}: {} periods ({} late); the guest received {}",
            s.slicer.share_pct,
            s.slicer.period_us,
            s.slicer.cpu,
            s.slicer.periods,
            s.slicer.late_periods,
            s.received_share
                .map_or("an unmeasured share".into(), |r| format!("{:.1} % of a CPU", r * 100.0))
        );
    }
    match record.guest_exit {
        Some(code) => Ok(code),
        None => Err(format!(
            "the guest reported no exit status; see {}",
            spec.out_dir.join("guest-console.log").display()
        )),
    }
}

fn run(cli: Cli) -> Result<i32, String> {
    match cli.cmd {
        Top::Uml(UmlCmd::Build {
            source,
            jobs,
            force,
        }) => {
            let built = build_kernel(&source, jobs, force)?;
            crate::say!(
                "{} ({}; key {}{})",
                built.kernel.display(),
                built.record.source_version,
                built.record.key,
                if built.fresh {
                    format!(", built in {:.0} s", built.record.build_seconds)
                } else {
                    ", cached".to_string()
                }
            );
            Ok(0)
        }
        Top::Uml(UmlCmd::Path { source }) => {
            let built = build_kernel(&source, None, false)?;
            crate::say!("{}", built.kernel.display());
            Ok(0)
        }
        Top::Uml(UmlCmd::Checkpatch { source }) => {
            let inputs = uml::build::BuildInputs::discover(&source.kernel_dir, source.cache)
                .map_err(|e| e.to_string())?;
            let report = uml::build::checkpatch(&inputs).map_err(|e| e.to_string())?;
            crate::say_partial!("{report}");
            Ok(0)
        }
        Top::Uml(UmlCmd::Run {
            prefix,
            source,
            kernel,
            out,
            cpu_quota,
            cpu_slices,
            slice_cpu,
            cpu_slices_for,
            cpu_period,
            mem,
            mtu,
            sysctls,
            trace_events,
            trace_buffer_kb,
            timeout,
            command,
        }) => {
            let kernel = match kernel {
                Some(k) => k,
                None => build_kernel(&source, None, false)?.kernel,
            };
            let quota = cpu_quota
                .map(|pct| uml::cgroup::Quota::new(pct, cpu_period))
                .transpose()
                .map_err(|e| e.to_string())?;
            let last_cpu = std::thread::available_parallelism().map_or(1, usize::from) - 1;
            let slices = cpu_slices
                .map(|pct| {
                    uml::slices::Slices::new(pct, cpu_period, slice_cpu.unwrap_or(last_cpu)).map(
                        |s| match cpu_slices_for {
                            Some(d) => s.lasting(d),
                            None => s,
                        },
                    )
                })
                .transpose()
                .map_err(|e| e.to_string())?;
            run_uml(&uml::RunSpec {
                prefix: prefix.prefix,
                kernel,
                out_dir: out,
                quota,
                slices,
                mem_mb: mem,
                mtu,
                sysctls,
                trace: (!trace_events.is_empty()).then_some(uml::guest::GuestTrace {
                    events: trace_events,
                    buffer_kb: trace_buffer_kb,
                }),
                timeout,
                command,
            })
        }
        Top::Wan(WanCmd::Up {
            rtt,
            rate,
            queue,
            shape_at,
            delay_impl,
            prefix,
            owner,
            bottleneck,
        }) => {
            let spec = WanSpec {
                prefix: prefix.prefix,
                rtt,
                rate_bps: rate.0,
                queue,
                shape_at,
                delay_impl,
                bottleneck,
                owner: owner.unwrap_or_else(|| nix::unistd::getppid().as_raw() as u32),
            };
            let state = wan::up(&spec).map_err(|e| e.to_string())?;
            crate::say!("{}", status::human(&status::collect(&state)));
            Ok(0)
        }
        Top::Wan(WanCmd::Set {
            rate,
            queue,
            bottleneck,
            prefix,
        }) => {
            let state =
                wan::set(&prefix.prefix, rate.0, queue, bottleneck).map_err(|e| e.to_string())?;
            crate::say!("{}", status::human(&status::collect(&state)));
            Ok(0)
        }
        Top::Wan(WanCmd::Down { prefix }) => {
            wan::validate_prefix(&prefix.prefix).map_err(|e| e.to_string())?;
            for p in wan::down(&prefix.prefix) {
                eprintln!("sbm-testbed: {p}");
            }
            Ok(0)
        }
        Top::Wan(WanCmd::QueueTrace {
            interval,
            duration,
            out,
            prefix,
        }) => {
            let signals =
                crate::signals::StopSignals::install().map_err(|e| format!("signalfd: {e}"))?;
            let spec = queue_trace::TraceSpec {
                prefix: prefix.prefix,
                interval,
                duration,
                out,
            };
            // The first line on stdout, as sbm-rpm-server's "listening": scripts wait for it.
            let s = queue_trace::trace(&spec, &mut || signals.take().is_some(), &mut |line| {
                crate::say!("sbm-testbed wan queue-trace: {line}")
            })
            .map_err(|e| e.to_string())?;
            eprintln!(
                "sbm-testbed wan queue-trace: {} samples; peak backlog {} B ({:.1} ms at the rate); {} drops since the queue was made{}",
                s.samples,
                s.peak_backlog_bytes,
                s.peak_over_rate_ms,
                s.drops,
                if s.missing > 0 {
                    format!("; {} dumps found no queue (being replaced)", s.missing)
                } else {
                    String::new()
                }
            );
            Ok(0)
        }
        Top::Wan(WanCmd::Status { json, prefix }) => {
            wan::validate_prefix(&prefix.prefix).map_err(|e| e.to_string())?;
            let state = wan::load_state(&prefix.prefix)
                .ok_or_else(|| wan::TestbedError::NotUp(prefix.prefix.clone()).to_string())?;
            let s = status::collect(&state);
            if json {
                crate::say!(
                    "{}",
                    serde_json::to_string_pretty(&s).expect("status serializes")
                );
            } else {
                crate::say!("{}", status::human(&s));
            }
            Ok(0)
        }
        Top::Shape(ShapeCmd::Apply {
            shape,
            delay,
            dry_run,
        }) => run_or_print(
            &shape::apply_commands(&shape.dev, &shape.bottleneck(), shape.ingress, delay),
            dry_run,
            false,
        )
        .map(|()| 0),
        Top::Shape(ShapeCmd::Clear {
            dev,
            ingress,
            dry_run,
        }) => run_or_print(&shape::clear_commands(&dev, ingress), dry_run, true).map(|()| 0),
        Top::Shape(ShapeCmd::Show { dev }) => {
            run_or_print(&shape::show_commands(&dev), false, false).map(|()| 0)
        }
        Top::Shape(ShapeCmd::Hold { shape }) => {
            hold::hold(&shape.dev, &shape.bottleneck(), shape.ingress)
        }
        Top::Host(HostCmd::Info { devs }) => {
            crate::say!(
                "{}",
                serde_json::to_string(&hostinfo::collect(&devs)).expect("host info serializes")
            );
            Ok(0)
        }
        Top::Host(HostCmd::Clock) => {
            crate::say!("{}", crate::clock::realtime_ns());
            Ok(0)
        }
        Top::Host(HostCmd::ProbeRtt {
            addr,
            count,
            timeout,
        }) => {
            let p = hostinfo::probe_rtt(addr, count, timeout);
            crate::say!("{}", serde_json::to_string(&p).expect("probe serializes"));
            Ok(if p.min_us.is_some() { 0 } else { 1 })
        }
    }
}

/// The whole of `main` for bin/sbm-testbed.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    crate::cli::main_with(args, |cli: Cli| run(cli).map_err(crate::cli::Failure::env))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_lines_are_consistent() {
        Cli::command().debug_assert();
        crate::send::cli::SendArgs::command().debug_assert();
        crate::sink::cli::SinkArgs::command().debug_assert();
        crate::delay::DelayArgs::command().debug_assert();
    }

    #[test]
    fn rates_and_off() {
        let c = Cli::try_parse_from(["t", "wan", "set", "--rate", "off"]).unwrap();
        assert!(matches!(
            c.cmd,
            Top::Wan(WanCmd::Set {
                rate: RateArg(None),
                ..
            })
        ));
        let c = Cli::try_parse_from(["t", "wan", "up", "--rate", "100kbit"]).unwrap();
        assert!(matches!(
            c.cmd,
            Top::Wan(WanCmd::Up {
                rate: RateArg(Some(100_000)),
                ..
            })
        ));
        assert!(Cli::try_parse_from(["t", "wan", "up", "--rate", "fast"]).is_err());
        assert!(Cli::try_parse_from(["t", "wan", "set"]).is_err());
    }
}
