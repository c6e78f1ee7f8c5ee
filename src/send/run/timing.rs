//! The timing side: TX reports drained from the error queue, the snd_nxt sampler, and each
//! write's final row (sojourn, attribution, advance notice) into the run's statistics.

use super::*;

impl Sender<'_> {
    pub(super) fn sampling(&self) -> bool {
        self.cfg.timestamps.is_some() && !self.cfg.sample_interval.is_zero()
    }

    /// Reads notsent between two clock readings; with sampling on it is a sample of
    /// snd_nxt for the departure estimator. `written` is the byte count it refers to.
    pub(super) fn sample_now(&mut self, written: u64) -> Result<u32, EndReason> {
        let before_ns = realtime_ns();
        let notsent = sys::outq_notsent(self.sock.as_fd()).map_err(EndReason::local)?;
        if self.sampling() {
            let after_ns = realtime_ns();
            self.sampler.sample(Sample {
                before_ns,
                after_ns,
                sent: written.saturating_sub(u64::from(notsent)),
            });
            self.next_sample = Some(Instant::now() + self.cfg.sample_interval);
        }
        Ok(notsent)
    }

    /// A sample when writes wait for their departure and the timer says so.
    pub(super) fn sample_if_due(&mut self) -> Result<(), EndReason> {
        if self.sampling()
            && self.sampler.pending() > 0
            && self.next_sample.is_none_or(|t| Instant::now() >= t)
        {
            self.sample_now(self.run.tally.bytes_written)?;
        }
        Ok(())
    }

    /// A write whose attribution is final: to writes.csv and the run statistics.
    pub(super) fn finish_row(&mut self, w: &TimedWrite) -> Result<(), EndReason> {
        let mut w = *w;
        let displaced = self
            .program_tap
            .as_mut()
            .is_some_and(|d| d.take_displaced(w.write.end_offset));
        let exact_departure = self.program_tap.as_mut().and_then(|d| d.take(w.write.seq));
        w.settle_with_departure(displaced, exact_departure);
        let w = &w;
        let warmup = w.write.write_ns < self.warmup_end_ns;
        // Advance notice: how long before the previous write's last byte left the socket
        // this write was invited (negative: the backlog had already run dry).
        let advance_us = self
            .prev_sched_ns
            .map(|prev| (prev as i64 - w.write.write_ns as i64) / 1_000);
        self.prev_sched_ns = w.sched.time_ns;
        let departure = self.sampler.take(w.write.seq);
        if let Some(t) = exact_departure.filter(|_| !warmup) {
            self.run
                .depart
                .record(t.saturating_sub(w.write.write_ns) / 1_000);
        }
        if let Some((seq, write_ns)) = self
            .framer
            .as_mut()
            .and_then(|f| f.on_row(w.write.end_offset))
        {
            self.messages.push(MessageRecord {
                seq,
                write_ns,
                sched_ns: w.sched.time_ns,
                ack_ns: w.ack.time_ns,
                exact: w.sched.state == StampState::Exact,
                srtt_us: self.prev_info.rtt_us,
            });
        }
        if let Some(log) = &mut self.frame_log {
            // A frame's last byte left with this write's: the sampler's estimate, else the
            // write's own TX_SCHED time.
            let depart = departure
                .map(|d| (d.estimate_ns(), "sampler"))
                .or(w.sched.time_ns.map(|t| (t, "sched")));
            log.departed(w.write.end_offset, depart);
        }
        if let Some(d) = departure {
            let us = d.estimate_ns().saturating_sub(w.write.write_ns) / 1_000;
            self.interval.sampled.record(us);
            if !warmup {
                self.run.sampled.record(us);
                self.run.sampled_error.record(d.error_ns() / 1_000);
            }
        }
        if !warmup {
            match advance_us {
                Some(a) if a >= 0 => self.run.advance.record(a as u64),
                Some(_) => self.run.invited_after_dry += 1,
                None => {}
            }
        }
        let state = w.sched.state.name();
        self.run.attribution.add(state);
        if !warmup {
            self.run.attribution_after_warmup.add(state);
            if let Some(us) = w.sojourn_us() {
                self.run.sojourn.record(us);
                if w.sched.state == StampState::Exact {
                    self.run.sojourn_exact.record(us);
                }
            }
        }
        self.out
            .write_row(&WriteRow::new(
                w,
                warmup,
                advance_us,
                departure,
                exact_departure,
            ))
            .map_err(EndReason::local)
    }

    /// Takes what the BPF program queued so far (`--exact-departures`, `--timestamps bpf`):
    /// before rows become final, never on a wakeup of its own.
    pub(super) fn collect_from_program(&mut self) -> Result<(), EndReason> {
        match &mut self.program_tap {
            Some(d) => d.collect().map_err(EndReason::local),
            None => Ok(()),
        }
    }

    /// Reads the error queue until it is empty (`--timestamps socket`). Returns how many
    /// messages it read.
    pub(super) fn drain_errqueue(&mut self) -> Result<usize, EndReason> {
        let mut n = 0;
        loop {
            match sys::recv_errqueue(self.sock.as_fd(), &mut self.control) {
                Ok(ErrqueueRecv::Empty) => break,
                Ok(ErrqueueRecv::Message { len, truncated }) => {
                    n += 1;
                    if truncated {
                        self.run.reports.truncated += 1;
                    }
                    match parse_errqueue_control(&self.control[..len]) {
                        ErrqueueMessage::Report(r) => {
                            self.ledger.on_report(r, &mut self.sojourns, &mut self.done);
                        }
                        ErrqueueMessage::UnknownKind(_) | ErrqueueMessage::Other(_) => {
                            self.run.reports.other += 1;
                        }
                    }
                }
                Err(e) => return Err(EndReason::local(e)),
            }
        }
        self.settle_reports(n)?;
        Ok(n)
    }

    /// Takes the TX reports the BPF program has queued (`--timestamps bpf`): called on
    /// every turn of the loop, which wakes for its own reasons (the program never wakes
    /// it). Returns how many it took.
    pub(super) fn take_program_reports(&mut self) -> Result<usize, EndReason> {
        let Some(tap) = &mut self.program_tap else {
            return Ok(0);
        };
        tap.collect().map_err(EndReason::local)?;
        if let Some(err) = tap.timestamping_error() {
            return Err(EndReason::LocalError(LocalFailure::BpfTimestamping(
                nix::errno::Errno::from_raw(-err),
            )));
        }
        let mut reports = std::mem::take(&mut self.program_reports);
        tap.take_reports(&mut reports);
        let n = reports.len();
        for r in reports.drain(..) {
            self.ledger.on_report(r, &mut self.sojourns, &mut self.done);
        }
        self.program_reports = reports;
        self.settle_reports(n)?;
        Ok(n)
    }

    /// After `n` reports: the interval's provisional sojourns, and the rows that became
    /// final.
    fn settle_reports(&mut self, n: usize) -> Result<(), EndReason> {
        // A sample after reading the reports and before finishing rows: every byte an ACK
        // report covers had left before the report was read, so the sample sees it gone.
        if n > 0 && self.sampling() && self.sampler.pending() > 0 {
            self.sample_now(self.run.tally.bytes_written)?;
        }
        for s in self.sojourns.drain(..) {
            self.interval.sojourn.record(s.sojourn_us);
            self.interval.exact_reports += u64::from(s.exact);
        }
        if !self.done.is_empty() {
            self.collect_from_program()?;
        }
        let done = std::mem::take(&mut self.done);
        for w in &done {
            self.finish_row(w)?;
        }
        self.done = done;
        self.done.clear();
        Ok(())
    }
}
