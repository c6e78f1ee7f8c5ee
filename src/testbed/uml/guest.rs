//! What the guest is told: the kernel command line and the init script that sets up its
//! network, runs the command (sbm-send, from the host's file system) and powers off.
//! Pure functions of a [`GuestSpec`], so they are tested without booting anything.

use std::path::{Path, PathBuf};

/// The guest's side of the tap link; the host side is [`HOST_ADDR`] in the snd namespace.
pub const GUEST_ADDR: &str = "198.18.3.2";
pub const HOST_ADDR: &str = "198.18.3.1";
pub const GUEST_NET: &str = "198.18.3.0/24";
/// The guest's interface (the vector driver's first device).
pub const GUEST_IF: &str = "vec0";

/// Files the init script leaves in the output directory.
pub const EXIT_FILE: &str = "guest-exit";
/// Created by the host to ask the guest's command to stop (SIGINT) early.
pub const STOP_FILE: &str = ".guest-stop";
/// What the stop file holds when the command ran past its time (not when interrupted).
pub const STOP_TIMEOUT: &str = "timeout";
/// Where the guest records its command's threads when the command ran past its time.
pub const TASK_DUMP_FILE: &str = "guest-tasks.txt";
/// A counter the init loop rewrites on every turn (shell builtins only: no process per
/// turn beyond the loop's own `sleep`). The host watches it (hang.rs): a guest whose clock
/// stopped never wakes from that `sleep`, and the counter stands still.
pub const HEARTBEAT_FILE: &str = "guest-heartbeat";
/// The guest's trace (tracefs's `trace`, text) when it was asked to record tracepoints, and
/// its ring's counters (per_cpu/cpu0/stats: how many events it kept, lost or overwrote).
pub const TRACE_FILE: &str = "guest-trace.txt";
pub const TRACE_STATS_FILE: &str = "guest-trace-stats.txt";
/// Where the guest mounts tracefs.
const TRACEFS: &str = "/sys/kernel/tracing";

/// Tracepoints the guest records while its command runs, written to [`TRACE_FILE`] after it
/// ends. Stamped with the `tai` trace clock: the guest's realtime clock (its TAI offset is
/// never set), which UML reads from the host's at boot and advances with the host's
/// monotonic clock, so the stamps line up with the host's CLOCK_REALTIME (the slicer's).
/// UML's own `local` clock counts jiffies (HZ=100), too coarse for per-ACK events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestTrace {
    /// `system:event`, as tracefs's set_event takes them (tcp:tcp_probe, tcp_bbr:bbr_ack).
    pub events: Vec<String>,
    /// The ring's size (buffer_size_kb; the guest has one CPU). When it fills, later events
    /// are dropped, not earlier ones overwritten, and the stats file counts them.
    pub buffer_kb: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestSpec {
    pub kernel: PathBuf,
    pub mem_mb: u32,
    pub tap: String,
    pub mtu: u32,
    /// sysctls set in the guest before the command (name with dots, value).
    pub sysctls: Vec<(String, String)>,
    /// Tracepoints to record while the command runs, if any.
    pub trace: Option<GuestTrace>,
    /// Host directory mounted read-write at the same path inside the guest.
    pub out_dir: PathBuf,
    /// The command and its arguments, host paths.
    pub command: Vec<String>,
    /// The directory the command starts in (the host caller's), so relative paths resolve
    /// as they would on the host.
    pub cwd: PathBuf,
    /// Where the init script is written (host path, visible in the guest).
    pub init_path: PathBuf,
    /// UML's own runtime directory (pid file, mconsole socket).
    pub uml_dir: PathBuf,
    pub umid: String,
}

/// Paths reach the guest through the kernel command line and hostfs mount options,
/// which split on spaces and commas.
pub fn check_path(p: &Path) -> Result<(), String> {
    let s = p.to_string_lossy();
    if !p.is_absolute() || s.contains([' ', ',', '\'', '\n', '"']) {
        return Err(format!(
            "{s}: the guest needs an absolute path without spaces, commas or quotes"
        ));
    }
    Ok(())
}

/// Single-quoted for sh, whatever it contains.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The kernel command line (arguments to the UML binary).
pub fn kernel_args(g: &GuestSpec) -> Vec<String> {
    vec![
        format!("mem={}M", g.mem_mb),
        "root=/dev/root".into(),
        "rootfstype=hostfs".into(),
        "rootflags=/".into(),
        "ro".into(),
        format!("init={}", g.init_path.display()),
        "con=null".into(),
        "con0=null,fd:1".into(),
        format!("uml_dir={}", g.uml_dir.display()),
        format!("umid={}", g.umid),
        // tap transport: the legacy eth0=tuntap passes ping but not TCP (FACTS.md).
        format!("vec0:transport=tap,ifname={},gro=1", g.tap),
    ]
}

/// The guest's init (PID 1): every failure ends in `guest-exit` holding a code and the
/// console holding why, then power-off, so the host never waits for a hung guest.
pub fn init_script(g: &GuestSpec) -> String {
    let out = g.out_dir.display().to_string();
    let exit_file = format!("{out}/{EXIT_FILE}");
    let stop_file = format!("{out}/{STOP_FILE}");
    let mut s = String::new();
    s.push_str("#!/bin/sh\n# sbm UML guest init, generated by sbm-testbed uml run.\n");
    s.push_str("export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n");
    s.push_str(
        "poweroff() { sync; exec python3 -c 'import ctypes; ctypes.CDLL(None).reboot(0x4321fedc)'; }\n",
    );
    s.push_str(&format!(
        "fail() {{ echo \"sbm-guest: $*\"; echo 125 > {} 2>/dev/null; poweroff; }}\n",
        quote(&exit_file)
    ));
    s.push_str("mount -t proc proc /proc || fail 'cannot mount /proc'\n");
    s.push_str("mount -t sysfs sysfs /sys || fail 'cannot mount /sys'\n");
    s.push_str(&format!(
        "mount -t hostfs -o {o} none {o} || fail 'cannot mount the output directory'\n",
        o = quote(&out)
    ));
    s.push_str("ip link set lo up || fail 'no loopback'\n");
    s.push_str(&format!(
        "ip link set {GUEST_IF} mtu {} up || fail 'no {GUEST_IF}: is the tap there?'\n",
        g.mtu
    ));
    s.push_str(&format!(
        "ip addr add {GUEST_ADDR}/24 dev {GUEST_IF} || fail 'cannot address {GUEST_IF}'\n"
    ));
    s.push_str(&format!(
        "ip route add default via {HOST_ADDR} || fail 'cannot route'\n"
    ));
    for (k, v) in &g.sysctls {
        s.push_str(&format!(
            "sysctl -q -w {kv} || fail {msg}\n",
            kv = quote(&format!("{k}={v}")),
            msg = quote(&format!("cannot set {k}"))
        ));
    }
    if let Some(tr) = &g.trace {
        s.push_str(&trace_start(tr));
    }
    s.push_str(&format!(
        "cd {c} || fail {m}\n",
        c = quote(&g.cwd.display().to_string()),
        m = quote(&format!("cannot enter {}", g.cwd.display()))
    ));
    s.push_str("echo \"sbm-guest: up, kernel $(uname -r)\"\n");
    let cmd: Vec<String> = g.command.iter().map(|a| quote(a)).collect();
    s.push_str(&format!("{} &\npid=$!\n", cmd.join(" ")));
    // The host asks for an early stop through a file: the guest has no host signals. SIGINT
    // first (sbm's programs stop on it and keep what they measured); a command started in
    // the background of a script ignores SIGINT unless it asks for it, so TERM follows after
    // 10 s and KILL after 15 s, well inside the host's grace period. Past its time, the
    // command's threads (state, wait channel, kernel stack) and where the CPU went over one
    // second are recorded first, so that a hang says where it was. (SysRq t through the
    // mconsole would show every task, but this kernel panicked reading a never-run
    // kworker's stack.)
    s.push_str(
        "dump_tasks() {\n  for t in /proc/$pid/task/*; do\n    echo \"-- thread ${t##*/} $(cat $t/comm) $(grep State: $t/status) wchan $(cat $t/wchan)\"\n    cat $t/stack\n  done\n  echo '-- /proc/stat and /proc/softirqs, then again 1 s later'\n  cat /proc/stat /proc/softirqs; sleep 1; cat /proc/stat /proc/softirqs\n}\n",
    );
    s.push_str(&format!(
        "beat=0\nwhile kill -0 $pid 2>/dev/null; do\n  beat=$((beat + 1)); echo $beat > {hb}\n  if [ -e {sf} ]; then\n    if grep -q {STOP_TIMEOUT} {sf}; then dump_tasks > {td} 2>&1; fi\n    kill -INT $pid\n    ( sleep 10; kill -TERM $pid 2>/dev/null; sleep 5; kill -KILL $pid 2>/dev/null ) &\n    break\n  fi\n  sleep 0.5\ndone\n",
        sf = quote(&stop_file),
        hb = quote(&format!("{out}/{HEARTBEAT_FILE}")),
        td = quote(&format!("{out}/{TASK_DUMP_FILE}")),
    ));
    s.push_str("wait $pid\nrc=$?\n");
    s.push_str(&format!("echo $rc > {}\n", quote(&exit_file)));
    // The trace is written after the exit is reported: the init loop's heartbeat has
    // stopped by then, and the host's hang watch stands down once the exit file is there.
    if g.trace.is_some() {
        s.push_str(&trace_stop(&out));
    }
    s.push_str("echo \"sbm-guest: command exited $rc\"\npoweroff\n");
    s
}

/// Mounts tracefs, sets the clock, the ring and the events, and starts recording: any of
/// them refused ends the guest with the reason (a kernel without tracing, an event this
/// kernel does not have).
fn trace_start(tr: &GuestTrace) -> String {
    let mut s = format!(
        "mount -t tracefs nodev {TRACEFS} || fail 'cannot mount tracefs (a kernel without CONFIG_FTRACE?)'\n\
         echo 0 > {TRACEFS}/tracing_on\n\
         echo tai > {TRACEFS}/trace_clock || fail 'no tai trace clock in this kernel'\n\
         echo 0 > {TRACEFS}/options/overwrite || fail 'cannot keep the ring from overwriting'\n\
         echo {kb} > {TRACEFS}/buffer_size_kb || fail 'cannot size the trace ring to {kb} KB'\n",
        kb = tr.buffer_kb
    );
    for e in &tr.events {
        s.push_str(&format!(
            "echo {q} >> {TRACEFS}/set_event || fail {m}\n",
            q = quote(e),
            m = quote(&format!("no trace event {e} in this kernel"))
        ));
    }
    s.push_str(&format!("echo 1 > {TRACEFS}/tracing_on\n"));
    // The stamps' clock against the host's (clock_probe.rs); a guest that cannot send them
    // still runs, and the host records that no probe came.
    s.push_str(&format!(
        "python3 -c {} || echo 'sbm-guest: clock probes not sent'\n",
        quote(&super::clock_probe::guest_command(HOST_ADDR))
    ));
    s
}

/// Stops recording and writes the ring's counters, then the trace, to the output directory.
fn trace_stop(out: &str) -> String {
    format!(
        "echo 0 > {TRACEFS}/tracing_on\n\
         cat {TRACEFS}/per_cpu/cpu0/stats > {st}\n\
         cat {TRACEFS}/trace > {tf}\n",
        st = quote(&format!("{out}/{TRACE_STATS_FILE}")),
        tf = quote(&format!("{out}/{TRACE_FILE}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> GuestSpec {
        GuestSpec {
            kernel: "/c/linux".into(),
            mem_mb: 512,
            tap: "sbmu0".into(),
            mtu: 1280,
            sysctls: vec![("net.ipv4.tcp_replenish_submss".into(), "0".into())],
            trace: None,
            out_dir: "/r/out".into(),
            command: vec!["/b/sbm-send".into(), "--label".into(), "it's".into()],
            cwd: "/work/sbm".into(),
            init_path: "/r/init".into(),
            uml_dir: "/r/uml".into(),
            umid: "g1".into(),
        }
    }

    #[test]
    fn command_line_boots_hostfs_with_the_tap() {
        let a = kernel_args(&spec());
        assert!(a.contains(&"init=/r/init".to_string()));
        assert!(a.contains(&"vec0:transport=tap,ifname=sbmu0,gro=1".to_string()));
        assert!(a.contains(&"mem=512M".to_string()));
    }

    #[test]
    fn init_sets_up_runs_and_records_the_exit() {
        let s = init_script(&spec());
        assert!(s.contains("ip link set vec0 mtu 1280 up"));
        assert!(s.contains("sysctl -q -w 'net.ipv4.tcp_replenish_submss=0'"));
        assert!(s.contains("mount -t hostfs -o '/r/out' none '/r/out'"));
        assert!(s.contains("cd '/work/sbm' || fail"));
        assert!(s.contains("'/b/sbm-send' '--label' 'it'\\''s' &"));
        assert!(s.contains("echo $rc > '/r/out/guest-exit'"));
        assert!(s.contains(
            "if grep -q timeout '/r/out/.guest-stop'; then dump_tasks > '/r/out/guest-tasks.txt'"
        ));
        assert!(s.ends_with("poweroff\n"));
    }

    #[test]
    fn a_traced_guest_records_its_events_around_the_command_only() {
        let plain = init_script(&spec());
        assert!(!plain.contains("tracefs"), "no trace asked, none set up");
        let mut g = spec();
        g.trace = Some(GuestTrace {
            events: vec!["tcp_bbr:bbr_ack".into(), "tcp:tcp_probe".into()],
            buffer_kb: 65536,
        });
        let s = init_script(&g);
        let at = |needle: &str| {
            s.find(needle)
                .unwrap_or_else(|| panic!("{needle:?} not in\n{s}"))
        };
        assert!(at("echo tai > /sys/kernel/tracing/trace_clock || fail") > at("mount -t tracefs"));
        at("echo 0 > /sys/kernel/tracing/options/overwrite || fail");
        at("echo 65536 > /sys/kernel/tracing/buffer_size_kb || fail");
        let bbr = at("echo 'tcp_bbr:bbr_ack' >> /sys/kernel/tracing/set_event || fail 'no trace event tcp_bbr:bbr_ack in this kernel'");
        at("echo 'tcp:tcp_probe' >> /sys/kernel/tracing/set_event || fail");
        let on = at("echo 1 > /sys/kernel/tracing/tracing_on");
        let probes = at("python3 -c 'import socket, time");
        assert!(on < probes && probes < at("'/b/sbm-send' '--label'"));
        let command = at("'/b/sbm-send' '--label'");
        let off = s.rfind("echo 0 > /sys/kernel/tracing/tracing_on").unwrap();
        let written = at("cat /sys/kernel/tracing/trace > '/r/out/guest-trace.txt'");
        assert!(bbr < on && on < command && command < at("wait $pid"));
        assert!(at("wait $pid") < off && off < written);
        assert!(
            at("cat /sys/kernel/tracing/per_cpu/cpu0/stats > '/r/out/guest-trace-stats.txt'")
                < written
        );
        assert!(at("echo $rc > '/r/out/guest-exit'") < written);
    }

    #[test]
    fn paths_the_command_line_would_split_are_refused() {
        assert!(check_path(Path::new("/a/b")).is_ok());
        assert!(check_path(Path::new("/a b")).is_err());
        assert!(check_path(Path::new("/a,b")).is_err());
        assert!(check_path(Path::new("rel")).is_err());
    }
}
