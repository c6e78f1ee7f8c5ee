//! A guest whose clock stopped, found within seconds and examined before it is ended.
//!
//! In the BBR-in-VMs campaigns about 1.5 % of guest cells hung: the guest kernel spun in its
//! idle loop with its host timer unarmed, so nothing that waits for time ran again (results/
//! README.md, "A hung guest, profiled"). The guest's init writes a counter to a file on every
//! turn of its 0.5 s loop ([`guest::HEARTBEAT_FILE`]); [`Heartbeat`] notices when it stops
//! changing, long before the cell's time limit. [`record_state`] then reads, from outside,
//! what the guest kernel believed about its timer (gdb on the UML kernel's host process:
//! its signal bookkeeping, the clock event device, the last jiffies update, and the host
//! timer itself through timer_gettime) and the host's view of the process's signals and
//! POSIX timers, so that each hang leaves the evidence for its cause.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::guest;

/// The file the evidence goes to, in the run's output directory.
pub const STATE_FILE: &str = "guest-hang.txt";

/// How long the init loop may go without a turn before the guest counts as hung, at a
/// whole CPU. The loop sleeps 0.5 s and forks one `sleep`; a guest busy at line rate turned
/// it in under 1 s in every cell seen. With a CPU share below 1 the limit grows as 1/share
/// (a guest given 35 % gets 14 s), up to [`MAX_STALL`].
pub const STALL_AT_FULL_CPU: Duration = Duration::from_secs(5);
const MAX_STALL: Duration = Duration::from_secs(60);
/// gdb's time to attach, read and detach.
const GDB_LIMIT_S: u32 = 20;

/// The stall limit for a guest given `share` (0..=1) of a CPU.
pub fn stall_limit(share: f64) -> Duration {
    let share = share.clamp(0.01, 1.0);
    STALL_AT_FULL_CPU.div_f64(share).min(MAX_STALL)
}

/// Watches the init loop's counter file. Armed by its first turn (the guest has booted and
/// started its command); a counter that then stays the same for `limit` is a stall.
pub struct Heartbeat {
    path: PathBuf,
    limit: Duration,
    last: Option<(String, Instant)>,
}

impl Heartbeat {
    pub fn new(out_dir: &Path, limit: Duration) -> Heartbeat {
        Heartbeat {
            path: out_dir.join(guest::HEARTBEAT_FILE),
            limit,
            last: None,
        }
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// How long the counter has stood still, once that is past the limit.
    pub fn stalled(&mut self, now: Instant) -> Option<Duration> {
        let Ok(text) = fs::read_to_string(&self.path) else {
            return None;
        };
        let text = text.trim().to_string();
        // A write caught half-way reads empty: not a turn, not a stall.
        if text.is_empty() {
            return None;
        }
        match &self.last {
            Some((seen, at)) if *seen == text => {
                let age = now.saturating_duration_since(*at);
                (age >= self.limit).then_some(age)
            }
            _ => {
                self.last = Some((text, now));
                None
            }
        }
    }
}

/// The commands gdb runs on the stopped UML kernel. No debug information is needed: the
/// variables are read by symbol, and the clock event device's fields by their offsets in
/// 6.12's struct clock_event_device (next_event at 24, max_delta_ns 32, min_delta_ns 40,
/// mult 48, state 56), checked in the output against the device's known constants
/// (max_delta_ns 0xffffffff, min_delta_ns 500, mult 1 for UML's "posix-timer").
/// timer_gettime's result goes to a scratch area 4 KiB below the stack pointer, far below
/// the frames of the call itself.
const GDB_SCRIPT: &str = r#"set pagination off
set confirm off
printf "signals_enabled %d\n", *(int *)&signals_enabled
printf "signals_pending 0x%x (bit 0 SIGIO, bit 1 SIGALRM)\n", *(unsigned int *)&signals_pending
printf "signals_active 0x%x (bit 1: inside the timer handler)\n", *(unsigned int *)&signals_active
printf "jiffies_64 %lu\n", *(unsigned long *)&jiffies_64
printf "last_jiffies_update_ns %ld\n", *(long *)&last_jiffies_update
printf "tick_next_period_ns %ld\n", *(long *)&tick_next_period
set $dev = *(char **)&tick_cpu_device
printf "tick device is timer_clockevent: %d\n", $dev == (char *)&timer_clockevent
printf "clockevent next_event_ns %ld\n", *(long *)($dev + 24)
printf "clockevent max_delta_ns 0x%lx min_delta_ns %lu mult %u (expect 0xffffffff 500 1)\n", *(unsigned long *)($dev + 32), *(unsigned long *)($dev + 40), *(unsigned int *)($dev + 48)
printf "clockevent state %d (0 detached, 1 shutdown, 2 periodic, 3 oneshot, 4 oneshot-stopped)\n", *(int *)($dev + 56)
set $its = (long *)($sp - 4096)
set $its[0] = -1
set $its[1] = -1
set $its[2] = -1
set $its[3] = -1
set $rc = (int) timer_gettime(*(void **)&event_high_res_timer, $its)
printf "host timer_gettime rc %d: interval %ld s %ld ns, remaining %ld s %ld ns (0 0: not armed)\n", $rc, $its[0], $its[1], $its[2], $its[3]
printf "host CLOCK_MONOTONIC now (the guest's clocksource) %ld ns\n", (long) os_nsecs()
printf "stack pointer %p: on the IRQ stack %d (cpu0_irqstack %p..+16K), on init_stack %d\n", $sp, $sp >= (char *)&cpu0_irqstack && $sp < (char *)&cpu0_irqstack + 16384, &cpu0_irqstack, $sp >= (char *)&init_stack && $sp < (char *)&__end_init_stack
bt 40
detach
quit
"#;

/// Records what the hung guest's kernel and the host knew about its timer, in
/// [`STATE_FILE`]. Returns the file's name, or why there is none.
/// gdb's commands are written to a file in `work`.
pub fn record_state(
    pid: u32,
    out_dir: &Path,
    work: &Path,
    stalled_for: Duration,
) -> Result<String, String> {
    let mut text = format!(
        "# The UML kernel's host process (PID {pid}) after its init loop stood still for \
         {:.1} s.\n",
        stalled_for.as_secs_f64()
    );
    text.push_str(
        "## /proc/PID/status, signal lines (hex masks; SIGALRM is bit 13, SIGIO bit 28)\n",
    );
    match fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(s) => {
            for line in s.lines().filter(|l| {
                [
                    "State", "SigQ", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt",
                ]
                .iter()
                .any(|k| l.starts_with(&format!("{k}:")))
            }) {
                text.push_str(line);
                text.push('\n');
            }
        }
        Err(e) => text.push_str(&format!("unreadable: {e}\n")),
    }
    text.push_str("## /proc/PID/timers (the host's POSIX timers of the process)\n");
    text.push_str(
        &fs::read_to_string(format!("/proc/{pid}/timers"))
            .unwrap_or_else(|e| format!("unreadable: {e}\n")),
    );
    text.push_str("## gdb, attached to the UML kernel's process for a moment\n");
    let script = work.join("guest-hang.gdb");
    // gdb stops the kernel while it reads; `timeout` ends gdb (and with it the stop) should
    // it ever wait on something in the hung process.
    let gdb = fs::write(&script, GDB_SCRIPT).and_then(|()| {
        Command::new("timeout")
            .arg(GDB_LIMIT_S.to_string())
            .args(["gdb", "-nx", "-batch", "-p", &pid.to_string(), "-x"])
            .arg(&script)
            .stdin(Stdio::null())
            .output()
    });
    match gdb {
        Ok(out) if out.status.code() == Some(127) => {
            text.push_str("none: gdb is not installed (Debian: gdb)\n")
        }
        Ok(out) => {
            text.push_str(&String::from_utf8_lossy(&out.stdout));
            if out.status.code() == Some(124) {
                text.push_str(&format!(
                    "gdb did not finish in {GDB_LIMIT_S} s and was ended\n"
                ));
            }
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.trim().is_empty() {
                text.push_str("## gdb's messages\n");
                text.push_str(&err);
            }
        }
        Err(e) => text.push_str(&format!("none: gdb could not start: {e}\n")),
    }
    let path = out_dir.join(STATE_FILE);
    fs::write(&path, text).map_err(|e| format!("none: {}: {e}", path.display()))?;
    Ok(STATE_FILE.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stall_limit_grows_with_a_smaller_share_and_is_capped() {
        assert_eq!(stall_limit(1.0), STALL_AT_FULL_CPU);
        assert_eq!(stall_limit(0.5), Duration::from_secs(10));
        assert_eq!(stall_limit(0.01), MAX_STALL);
        assert_eq!(stall_limit(2.0), STALL_AT_FULL_CPU);
    }

    #[test]
    fn a_counter_that_stands_still_past_the_limit_is_a_stall_and_a_turn_rearms_it() {
        let dir = std::env::temp_dir().join(format!("sbm-hb-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join(guest::HEARTBEAT_FILE);
        let mut hb = Heartbeat::new(&dir, Duration::from_secs(5));
        let t0 = Instant::now();
        // Not armed before the first turn.
        assert_eq!(hb.stalled(t0 + Duration::from_secs(100)), None);
        fs::write(&file, "1\n").unwrap();
        assert_eq!(hb.stalled(t0), None);
        assert_eq!(hb.stalled(t0 + Duration::from_secs(4)), None);
        assert_eq!(
            hb.stalled(t0 + Duration::from_secs(6)),
            Some(Duration::from_secs(6))
        );
        fs::write(&file, "2\n").unwrap();
        assert_eq!(hb.stalled(t0 + Duration::from_secs(7)), None);
        assert_eq!(hb.stalled(t0 + Duration::from_secs(11)), None);
        assert!(hb.stalled(t0 + Duration::from_secs(12)).is_some());
        // A half-written file is neither.
        fs::write(&file, "").unwrap();
        assert_eq!(hb.stalled(t0 + Duration::from_secs(30)), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
