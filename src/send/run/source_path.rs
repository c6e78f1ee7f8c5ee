//! The send loop's side of an application-limited source: frames generated on their clock
//! (stale ones dropped and logged), write interest only while there is content to write,
//! the loop woken for the next frame, and the frames' ages written out at the end.

use std::collections::HashMap;

use super::*;
use crate::report::schema::ContentAgeSummary;
use crate::send::source::{Frame, RenderRate, SourceSpec};

impl Sender<'_> {
    /// Generates what the source's clock has due, and asks for write invitations only while
    /// there is something to write: an idle application must not be woken by a writable
    /// socket (level-triggered EPOLLOUT would spin).
    pub(super) fn source_step(&mut self) -> Result<(), EndReason> {
        let Some(src) = &mut self.source else {
            return Ok(());
        };
        let now = self.t0.elapsed();
        let dropped = src.generate(now);
        let ready = src.ready(now);
        if let Some(log) = &mut self.frame_log {
            log.dropped(&dropped);
        }
        if !ready {
            self.source_was_ready = false;
            return self.set_out_interest(false);
        }
        match &mut self.gate {
            Gate::Kernel { .. } | Gate::Bpf(_) => self.set_out_interest(true)?,
            // Content has appeared: whatever the emulation waited for while the application
            // was idle, it decides afresh.
            Gate::Emulated(g) if !self.source_was_ready => g.kernel_woke(),
            Gate::Emulated(_) => {}
        }
        self.source_was_ready = true;
        Ok(())
    }

    /// Whether the source has something to write now (bulk: always).
    pub(super) fn source_ready(&self) -> bool {
        self.source.as_ref().is_none_or(|s| s.ready(self.elapsed()))
    }

    /// When the loop must wake for the source (its next frame), if that is still ahead.
    pub(super) fn source_wake(&self) -> Option<Duration> {
        self.source
            .as_ref()
            .and_then(|s| s.next_wake())
            .filter(|&t| t > self.elapsed())
    }

    /// The frame to write on this invitation (None: bulk, or nothing to write — see
    /// [`Sender::source_ready`]). Render sizes by the kernel's delivery-rate estimate.
    pub(super) fn source_frame(&mut self) -> Result<Option<Frame>, EndReason> {
        let wants_rate = matches!(
            self.source.as_ref().map(|s| s.spec()),
            Some(SourceSpec::Render {
                rate: RenderRate::DeliveryRate,
                ..
            })
        );
        let rate_bps = if wants_rate {
            let info = self.tcp_info().map_err(EndReason::local)?;
            info.delivery_rate.unwrap_or(0).saturating_mul(8)
        } else {
            0
        };
        let Some(src) = self.source.as_mut() else {
            return Ok(None);
        };
        Ok(src.current(self.t0.elapsed(), rate_bps))
    }

    /// frames.csv and content-age.csv, and the summary's content age (None: bulk).
    pub(super) fn finish_frames(
        &mut self,
        read_times: &HashMap<u64, u64>,
    ) -> Option<ContentAgeSummary> {
        let src = self.source.take()?;
        let log = self.frame_log.take()?;
        let unwritten: Vec<Frame> = src.unwritten().copied().collect();
        let (rows, intervals, mut summary) = log.finish(read_times, &unwritten, self.cfg.interval);
        summary.source = src.spec().kind().into();
        summary.description = src.spec().describe();
        if let Err(e) = self.out.write_frames(&rows, &intervals) {
            self.warnings.push(e.to_string());
        }
        Some(summary)
    }
}
