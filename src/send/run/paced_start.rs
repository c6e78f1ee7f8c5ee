//! `--paced-start DUR`: an experiment-only opening phase of one write per smoothed RTT,
//! whatever the readiness rule says. It puts the flow in the application-limited state the
//! report's §6 trap starts from (one write per RTT, delivery-rate samples at that pace); when
//! the phase ends the configured rule takes over, and the run shows whether it stays there.

use super::*;

/// The phase's clock: when it ends, and when its next write is due.
#[derive(Debug, Clone, Copy)]
pub(super) struct PacedStart {
    until: Duration,
    next_write: Duration,
}

impl PacedStart {
    pub(super) fn new(until: Duration) -> PacedStart {
        PacedStart {
            until,
            next_write: Duration::ZERO,
        }
    }
}

/// Before the first RTT sample (none after the handshake is unusual): the report's path.
const RTT_UNKNOWN: Duration = Duration::from_millis(172);

impl Sender<'_> {
    /// Whether the paced opening phase is on: while it is, the rule does not invite.
    pub(super) fn paced_start_active(&self) -> bool {
        self.paced.is_some()
    }

    /// While the phase lasts: one write when it is due, the next one a smoothed RTT later.
    /// When it ends, the readiness rule takes over (a kernel rule gets EPOLLOUT back; the
    /// emulation decides on its next turn).
    pub(super) fn paced_start_step(&mut self) -> Result<(), EndReason> {
        let Some(p) = self.paced else {
            return Ok(());
        };
        let now = self.elapsed();
        if now >= p.until {
            self.paced = None;
            crate::say!(
                "{}paced start: ended at {:.2} s; the readiness rule takes over",
                self.cfg.line_tag(),
                now.as_secs_f64()
            );
            if self.gate.kernel_invites() {
                self.set_out_interest(true)?;
            }
            return Ok(());
        }
        if now < p.next_write {
            return Ok(());
        }
        self.write_once(None, "paced-start")?;
        let info = self.tcp_info().map_err(EndReason::local)?;
        let srtt = if info.rtt_us > 0 {
            Duration::from_micros(u64::from(info.rtt_us))
        } else {
            RTT_UNKNOWN
        };
        if let Some(p) = &mut self.paced {
            p.next_write = now + srtt;
        }
        Ok(())
    }

    /// When the loop must wake for the phase (its next write or its end).
    pub(super) fn paced_start_wake(&self) -> Option<Duration> {
        self.paced.map(|p| p.next_write.min(p.until))
    }
}
