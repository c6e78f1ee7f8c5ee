//! Who decides when sbm-send writes: the kernel's EPOLLOUT (the default, TCP_NOTSENT_LOWAT,
//! and the in-kernel TCP_REPLENISH_TIME of a patched kernel), or the userspace emulation of
//! TCP_REPLENISH_TIME ([`super::rule`]) woken by NOTSENT_LOWAT or by a timer — chosen once
//! per run by [`setup`], and for the emulation a small state machine ([`EmulatedGate`]) that
//! the send loop feeds with observations and whose actions it carries out.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::kernel::{
    detect_optname, kernel_sub_mss_clause, set_kernel_option, HIGHEST_MAINLINE_TCP_OPTION,
    OPTNAME_SYSCTL,
};
use super::program::SocketRule;
use super::rule::{Decision, Observation, RateEstimator, Replenish, ThresholdTest};
use crate::sockopt::OptionReport;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ReplenishImpl {
    /// The kernel when it is known to implement the option, else emulated.
    Auto,
    /// setsockopt(IPPROTO_TCP, N, µs) on a patched kernel.
    Kernel,
    /// The rule in userspace, woken through NOTSENT_LOWAT.
    Emulated,
    /// The rule in userspace, woken by a timer at the predicted drain time (no lowat).
    EmulatedTimer,
    /// A sock_ops BPF program keeps TCP_NOTSENT_LOWAT at drain rate × T (stock kernel,
    /// root): the kernel's EPOLLOUT invites, as it would for any program.
    Bpf,
}

impl ReplenishImpl {
    /// The name used on the command line and in summary.json.
    pub fn name(self) -> &'static str {
        match self {
            ReplenishImpl::Auto => "auto",
            ReplenishImpl::Kernel => "kernel",
            ReplenishImpl::Emulated => "emulated",
            ReplenishImpl::EmulatedTimer => "emulated-timer",
            ReplenishImpl::Bpf => "bpf",
        }
    }
}

/// `--replenish-time` and its companions; a run without the rule has none (a time of zero
/// on the command line means that too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplenishConfig {
    pub time: Duration,
    pub implementation: ReplenishImpl,
    /// From `--replenish-optname` or SBM_REPLENISH_OPTNAME.
    pub optname: Option<u32>,
    pub sub_mss_clause: bool,
    /// `--sub-mss-clause always`: the clause under TCP_NODELAY too (an experiment).
    pub clause_under_nodelay: bool,
    pub estimator: RateEstimator,
    /// The emulation's threshold test.
    pub test: ThresholdTest,
}

/// What decided readiness in this run (summary.json `policy`).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct PolicyReport {
    /// default | notsent-lowat | replenish
    pub kind: std::borrow::Cow<'static, str>,
    /// kernel | emulated | emulated-timer (replenish only).
    pub implementation: Option<ReplenishImpl>,
    pub replenish_time_us: Option<u64>,
    pub optname: Option<u32>,
    pub sub_mss_clause: Option<bool>,
    pub rate_estimator: Option<RateEstimator>,
    /// The emulation's threshold test (emulated only).
    pub threshold_test: Option<ThresholdTest>,
    /// The patched kernel's net.ipv4.tcp_replenish_estimator (kernel only; kernel/patches/0003).
    pub kernel_estimator: Option<u64>,
    /// Why `auto` chose what it chose.
    pub note: Option<String>,
}

impl PolicyReport {
    /// The kernel decides: the emulation's settings do not apply, the kernel's estimator
    /// switch (when this kernel has one) does.
    fn kernel_view(&mut self) {
        self.rate_estimator = None;
        self.threshold_test = None;
        self.kernel_estimator = crate::sysinfo::sysctl_u64(super::kernel::ESTIMATOR_SYSCTL);
    }
}

pub enum Gate {
    /// Every EPOLLOUT is an invitation. With the kernel's TCP_REPLENISH_TIME, each
    /// invitation also records the kernel's own view of the rule, read through
    /// TCP_REPLENISH_INFO (its option number here).
    Kernel { info_optname: Option<u32> },
    /// The userspace emulation decides; EPOLLOUT only wakes it.
    Emulated(EmulatedGate),
    /// The BPF program sets NOTSENT_LOWAT and every EPOLLOUT is an invitation; its view of
    /// the rule is read back per invitation through its handle.
    Bpf(Arc<dyn SocketRule>),
}

/// The emulated rule's live state between decisions: what it last set NOTSENT_LOWAT to,
/// whether it waits for the kernel (EPOLLOUT) or for its own timer.
#[derive(Debug, Clone)]
pub struct EmulatedGate {
    rule: Replenish,
    /// Woken by a timer at the predicted drain time instead of through NOTSENT_LOWAT.
    timer: bool,
    /// TCP_NOTSENT_LOWAT as the gate last asked for it (None: not yet).
    lowat: Option<u32>,
    /// Waiting for EPOLLOUT: a NOTSENT_LOWAT wakeup, or room in a full send buffer.
    awaiting_kernel: bool,
    /// Timer mode: when to decide again.
    next_check: Option<Instant>,
}

/// What the send loop does after one decision of the emulated rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// Write once. `set_lowat`: NOTSENT_LOWAT to set first (0 = off, so that a lowat never
    /// shortens a write the rule invited: notification only); None: unchanged.
    Write {
        decision: Decision,
        set_lowat: Option<u32>,
    },
    /// Not writable yet: set NOTSENT_LOWAT (when Some) so that Linux, which wakes at
    /// lowat/2, brings the next invitation, and wait for EPOLLOUT.
    AwaitKernel {
        decision: Decision,
        set_lowat: Option<u32>,
    },
    /// Not writable yet (timer mode): decide again at this instant.
    CheckAt { decision: Decision, at: Instant },
}

impl Action {
    pub fn decision(&self) -> Decision {
        match *self {
            Action::Write { decision, .. }
            | Action::AwaitKernel { decision, .. }
            | Action::CheckAt { decision, .. } => decision,
        }
    }
}

impl EmulatedGate {
    pub fn new(rule: Replenish, timer: bool) -> EmulatedGate {
        EmulatedGate {
            rule,
            timer,
            lowat: None,
            awaiting_kernel: false,
            next_check: None,
        }
    }

    /// Whether the rule should decide now: not waiting for the kernel or for its timer.
    pub fn due(&self, now: Instant) -> bool {
        !self.awaiting_kernel && self.next_check.is_none_or(|t| now >= t)
    }

    /// Timer mode: the instant of the next decision.
    pub fn next_check(&self) -> Option<Instant> {
        self.next_check
    }

    /// One decision over what tcp_info says, and what to do about it.
    pub fn step(&mut self, obs: &Observation, now: Instant) -> Action {
        let decision = self.rule.decide(obs);
        let wake_lowat = self.rule.wake_lowat(&decision, obs.mss);
        self.next_check = None;
        if decision.writable {
            let set_lowat = if self.timer {
                None
            } else {
                self.lowat_change(0)
            };
            Action::Write {
                decision,
                set_lowat,
            }
        } else if self.timer {
            // Re-check when the backlog is predicted to reach half the threshold.
            let (t, rate) = (
                decision.threshold.unwrap_or(0),
                decision.rate.unwrap_or(0.0),
            );
            let excess = f64::from(obs.notsent) - (t / 2) as f64;
            let wait = if rate > 0.0 {
                excess.max(0.0) / rate
            } else {
                0.001
            };
            let at = now + Duration::from_secs_f64(wait.clamp(1e-4, 1.0));
            self.next_check = Some(at);
            Action::CheckAt { decision, at }
        } else {
            self.awaiting_kernel = true;
            Action::AwaitKernel {
                decision,
                set_lowat: self.lowat_change(wake_lowat),
            }
        }
    }

    /// The invited write found the send buffer full: the kernel says when there is room.
    pub fn send_buffer_full(&mut self) {
        self.awaiting_kernel = true;
    }

    /// EPOLLOUT came: the rule decides on its next step.
    pub fn kernel_woke(&mut self) {
        self.awaiting_kernel = false;
    }

    fn lowat_change(&mut self, want: u32) -> Option<u32> {
        (self.lowat != Some(want)).then(|| {
            self.lowat = Some(want);
            want
        })
    }
}

impl Gate {
    /// Every EPOLLOUT is an invitation (the kernel decides, with or without a program
    /// setting its lowat); false when the emulation decides.
    pub fn kernel_invites(&self) -> bool {
        !matches!(self, Gate::Emulated(_))
    }

    /// The program's view of the socket (`--replenish-impl bpf` only; None otherwise, or
    /// while it holds nothing for the socket).
    pub fn program_state(&self, fd: BorrowedFd<'_>) -> Option<super::BpfSocketState> {
        match self {
            Gate::Bpf(program) => program.state(fd),
            Gate::Kernel { .. } | Gate::Emulated(_) => None,
        }
    }

    /// The emulation's timer, if it runs one.
    pub fn next_check(&self) -> Option<Instant> {
        match self {
            Gate::Emulated(g) => g.next_check(),
            Gate::Kernel { .. } | Gate::Bpf(_) => None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GateError {
    #[error("TCP_REPLENISH_TIME needs an option number: give --replenish-optname N (or SBM_REPLENISH_OPTNAME), run a patched kernel that sets {sysctl}, or use --replenish-impl emulated", sysctl = OPTNAME_SYSCTL.replace('/', "."))]
    NoOptname,
    #[error("--replenish-optname {0} is a mainline TCP option number (≤ {HIGHEST_MAINLINE_TCP_OPTION}); a patched kernel's TCP_REPLENISH_TIME has a higher one")]
    MainlineOptname(u32),
    #[error("this kernel does not implement TCP_REPLENISH_TIME as option {optname} ({errno}); use a patched kernel with its number, or --replenish-impl emulated")]
    Unsupported { optname: u32, errno: String },
    #[error(
        "TCP_REPLENISH_TIME option {optname} did not read back: set {asked} us, kernel has {got}"
    )]
    NoReadback { optname: u32, asked: u64, got: i64 },
    #[error("--notsent-lowat cannot be combined with an emulated --replenish-time: the emulation drives TCP_NOTSENT_LOWAT itself (the kernel impl enforces both)")]
    LowatWithEmulation,
    #[error("--notsent-lowat cannot be combined with --replenish-impl bpf: the BPF program sets TCP_NOTSENT_LOWAT itself")]
    LowatWithBpf,
    #[error("--replenish-impl bpf: the BPF program is not running in this process (sbm-send starts it before connecting)")]
    BpfNotRunning,
    #[error("{0}")]
    Sys(String),
}

fn kernel_gate(optname: u32) -> Gate {
    Gate::Kernel {
        info_optname: Some(super::kernel::info_optname(optname)),
    }
}

/// The emulation drives TCP_NOTSENT_LOWAT itself, so a user's lowat cannot stand beside it
/// (the kernel implementation enforces both). Checked on the command line for an explicit
/// emulation and here again when `auto` falls back to one.
pub fn check_lowat_combination(
    implementation: ReplenishImpl,
    notsent_lowat: Option<u32>,
) -> Result<(), GateError> {
    let emulated = matches!(
        implementation,
        ReplenishImpl::Emulated | ReplenishImpl::EmulatedTimer
    );
    if emulated && notsent_lowat.is_some() {
        return Err(GateError::LowatWithEmulation);
    }
    if implementation == ReplenishImpl::Bpf && notsent_lowat.is_some() {
        return Err(GateError::LowatWithBpf);
    }
    Ok(())
}

/// Sets the run's readiness rule up on a connected socket. `program`: the BPF program that
/// `--replenish-impl bpf` needs, started by the caller before the socket existed.
pub fn setup(
    fd: BorrowedFd<'_>,
    replenish: Option<&ReplenishConfig>,
    nodelay: bool,
    notsent_lowat: Option<u32>,
    program: Option<Arc<dyn SocketRule>>,
) -> Result<(Gate, PolicyReport, Option<OptionReport>), GateError> {
    let Some(r) = replenish else {
        let kind = if notsent_lowat.is_some() {
            "notsent-lowat"
        } else {
            "default"
        };
        let report = PolicyReport {
            kind: kind.into(),
            implementation: None,
            replenish_time_us: None,
            optname: None,
            sub_mss_clause: None,
            rate_estimator: None,
            threshold_test: None,
            kernel_estimator: None,
            note: None,
        };
        return Ok((Gate::Kernel { info_optname: None }, report, None));
    };
    let time_us = r.time.as_micros() as u64;
    let mut report = PolicyReport {
        kind: "replenish".into(),
        implementation: None,
        replenish_time_us: Some(time_us),
        optname: None,
        sub_mss_clause: Some(r.sub_mss_clause && (!nodelay || r.clause_under_nodelay)),
        rate_estimator: Some(r.estimator),
        threshold_test: Some(r.test),
        kernel_estimator: None,
        note: None,
    };
    let optname = r.optname.or_else(detect_optname);
    let chosen = match r.implementation {
        ReplenishImpl::Kernel => {
            let n = optname.ok_or(GateError::NoOptname)?;
            let opt = set_kernel_option(fd, n, time_us)?;
            report.optname = Some(n);
            report.implementation = Some(ReplenishImpl::Kernel);
            report.sub_mss_clause = kernel_sub_mss_clause(nodelay);
            report.kernel_view();
            return Ok((kernel_gate(n), report, Some(opt)));
        }
        ReplenishImpl::Bpf => {
            check_lowat_combination(ReplenishImpl::Bpf, notsent_lowat)?;
            let program = program.ok_or(GateError::BpfNotRunning)?;
            report.implementation = Some(ReplenishImpl::Bpf);
            report.rate_estimator = Some(RateEstimator::Delivery);
            report.note = Some(format!(
                "bpf: TCP_NOTSENT_LOWAT = {} × drain rate × T, set per RTT by a sock_ops program; it also gates sendmsg",
                match r.test {
                    ThresholdTest::Hysteresis => 2,
                    ThresholdTest::Half => 1,
                }
            ));
            return Ok((Gate::Bpf(program), report, None));
        }
        ReplenishImpl::Auto => match optname {
            Some(n) => match set_kernel_option(fd, n, time_us) {
                Ok(opt) => {
                    report.optname = Some(n);
                    report.implementation = Some(ReplenishImpl::Kernel);
                    report.sub_mss_clause = kernel_sub_mss_clause(nodelay);
                    report.kernel_view();
                    report.note = Some(format!(
                        "auto: the kernel implements TCP_REPLENISH_TIME as option {n}"
                    ));
                    return Ok((kernel_gate(n), report, Some(opt)));
                }
                Err(e) => {
                    report.note = Some(format!(
                        "auto: {e}; falling back to the userspace emulation"
                    ));
                    ReplenishImpl::Emulated
                }
            },
            None => {
                report.note = Some(
                    "auto: this kernel does not announce TCP_REPLENISH_TIME; using the userspace emulation".into(),
                );
                ReplenishImpl::Emulated
            }
        },
        other => other,
    };
    check_lowat_combination(chosen, notsent_lowat)?;
    report.implementation = Some(chosen);
    let rule = Replenish::new(time_us, r.sub_mss_clause, nodelay, r.estimator)
        .with_test(r.test)
        .with_clause_under_nodelay(r.clause_under_nodelay);
    Ok((
        Gate::Emulated(EmulatedGate::new(
            rule,
            chosen == ReplenishImpl::EmulatedTimer,
        )),
        report,
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(notsent: u32, rate: u64) -> Observation {
        Observation {
            notsent,
            mss: 1448,
            delivery_rate: Some(rate),
            app_limited: false,
            cwnd: 10,
            srtt_us: 172_000,
            snd_wnd: None,
            ..Observation::default()
        }
    }

    fn gate(timer: bool) -> EmulatedGate {
        EmulatedGate::new(
            Replenish::new(15_000, true, false, RateEstimator::Delivery),
            timer,
        )
    }

    #[test]
    fn lowat_wakeups_set_the_option_only_when_it_changes() {
        let now = Instant::now();
        let mut g = gate(false);
        // 250 kB/s × 15 ms = 3 750 B threshold; 2 000 B unsent: write, lowat off first.
        let a = g.step(&obs(2_000, 250_000), now);
        assert!(
            matches!(
                a,
                Action::Write {
                    set_lowat: Some(0),
                    ..
                }
            ),
            "{a:?}"
        );
        // Again writable: lowat is already off.
        let a = g.step(&obs(2_000, 250_000), now);
        assert!(
            matches!(
                a,
                Action::Write {
                    set_lowat: None,
                    ..
                }
            ),
            "{a:?}"
        );
        // Above: wait for the kernel with lowat = the threshold; Linux wakes at lowat/2,
        // the rule's half-threshold hysteresis.
        let a = g.step(&obs(70_000, 250_000), now);
        assert!(
            matches!(
                a,
                Action::AwaitKernel {
                    set_lowat: Some(3_750),
                    ..
                }
            ),
            "{a:?}"
        );
        assert!(!g.due(now), "waits for EPOLLOUT");
        g.kernel_woke();
        assert!(g.due(now));
    }

    #[test]
    fn the_timer_mode_waits_for_the_predicted_half_threshold() {
        let now = Instant::now();
        let mut g = gate(true);
        // 3 750 B threshold, 10 000 B unsent: (10 000 − 1 875) / 250 000 s = 32.5 ms.
        match g.step(&obs(10_000, 250_000), now) {
            Action::CheckAt { at, .. } => {
                let wait = at.duration_since(now).as_secs_f64();
                assert!((wait - 0.0325).abs() < 1e-6, "{wait}");
                assert!(!g.due(now));
                assert!(g.due(at));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            g.step(&obs(1_000, 250_000), now),
            Action::Write {
                set_lowat: None,
                ..
            }
        ));
    }

    #[test]
    fn a_user_lowat_cannot_stand_beside_the_emulation() {
        for i in [ReplenishImpl::Emulated, ReplenishImpl::EmulatedTimer] {
            assert_eq!(
                check_lowat_combination(i, Some(1000)),
                Err(GateError::LowatWithEmulation)
            );
        }
        assert_eq!(
            check_lowat_combination(ReplenishImpl::Kernel, Some(1000)),
            Ok(())
        );
        assert_eq!(
            check_lowat_combination(ReplenishImpl::Emulated, None),
            Ok(())
        );
    }
}
