//! The write path: one write per invitation (or the kernel's burst), the readiness gate's
//! actions carried out (NOTSENT_LOWAT, EPOLLOUT interest), and each write handed to the
//! timing side.

use super::*;

impl Sender<'_> {
    /// One write invitation: exactly one write of write-size bytes (less if a byte limit
    /// leaves less to write).
    pub(super) fn write_once(
        &mut self,
        threshold: Option<u64>,
        reason: &'static str,
    ) -> Result<WriteOutcome, EndReason> {
        // An idle application is not invited (the loop keeps it so; this is the guard).
        if !self.source_ready() {
            return Ok(WriteOutcome::Idle);
        }
        self.count(|t| t.invitations += 1);
        self.write(threshold, reason)
    }

    /// One kernel-readiness invitation (EPOLLOUT under the default rule or NOTSENT_LOWAT):
    /// its write, then with `--burst N` up to N − 1 more while each is taken whole and no
    /// limit is reached, as iperf3 writes up to ten times per select(). The extra writes are
    /// not invitations and are labelled "burst" in writes.csv.
    pub(super) fn kernel_invited_writes(
        &mut self,
        threshold: Option<u64>,
        reason: &'static str,
    ) -> Result<(), EndReason> {
        let mut outcome = self.write_once(threshold, reason)?;
        for _ in 1..self.cfg.burst {
            if outcome != WriteOutcome::Whole
                || self.writing_limit_reached(self.elapsed()).is_some()
            {
                break;
            }
            outcome = self.write(threshold, "burst")?;
        }
        Ok(())
    }

    /// One write of write-size bytes (less if a byte limit leaves less to write), or with
    /// an application-limited source the rest of its current frame.
    pub(super) fn write(
        &mut self,
        threshold: Option<u64>,
        reason: &'static str,
    ) -> Result<WriteOutcome, EndReason> {
        let frame = self.source_frame()?;
        if self.source.is_some() && frame.is_none() {
            return Ok(WriteOutcome::Idle);
        }
        let mut range = 0..self.cfg.write_size as usize;
        if let Some(limit) = self
            .cfg
            .limits
            .bytes
            .filter(|_| self.framer.is_none() && frame.is_none())
        {
            range.end = range
                .end
                .min((limit - self.run.tally.bytes_written) as usize);
        }
        if let Some(f) = frame {
            range = f.written as usize..f.size as usize;
        }
        let fd = self.sock.as_fd();
        // The backlog before the write is a writes.csv column only: not read without one.
        let notsent_before = if self.cfg.write_log {
            sys::outq_notsent(fd).map_err(EndReason::local)?
        } else {
            0
        };
        let write_ns = if self.keeps_write_times() {
            realtime_ns()
        } else {
            self.t0_ns + self.turn.as_nanos() as u64
        };
        let content_ns = frame.map(|f| {
            self.frame_log
                .as_ref()
                .map_or(write_ns, |l| l.content_ns(&f))
        });
        if let Some(fr) = &mut self.framer {
            range = match (frame, content_ns) {
                (Some(f), Some(c)) => fr.next_message(&mut self.buf, write_ns, f.size, c),
                _ => fr.next(&mut self.buf, write_ns),
            };
        }
        let message = self.framer.as_ref().and_then(|fr| fr.current_seq());
        let size = range.len();
        let mut flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
        if self.cfg.eor {
            flags |= libc::MSG_EOR;
        }
        match self.sock.send_with_flags(&self.buf[range], flags) {
            Ok(0) => Ok(WriteOutcome::WouldBlock),
            Ok(n) => {
                let written_after = self.run.tally.bytes_written + n as u64;
                if let Some(f) = &mut self.framer {
                    f.accepted(n as u32, written_after);
                }
                if let Some(f) = frame {
                    let finished = self
                        .source
                        .as_mut()
                        .and_then(|s| s.accepted(n as u32))
                        .map(|_| written_after);
                    if let Some(log) = &mut self.frame_log {
                        log.wrote(&f, message, write_ns, realtime_ns(), finished);
                    }
                }
                if self.sampling() {
                    self.sampler
                        .on_write(self.run.tally.writes + 1, written_after, write_ns);
                }
                // The backlog after the write (and, with sampling, a snd_nxt sample); not
                // read in the lean --no-timestamps mode, which exists to be compared with
                // iperf.
                let notsent_after = if self.cfg.timestamps.is_some() {
                    Some(self.sample_now(written_after)?)
                } else {
                    None
                };
                if self.first_write.is_none() {
                    self.first_write = Some(self.elapsed());
                }
                let short = n < size;
                self.count(|t| t.wrote(n as u64, short));
                let issued = IssuedWrite {
                    seq: self.run.tally.writes,
                    write_ns,
                    asked: size as u32,
                    accepted: n as u32,
                    notsent_before,
                    notsent_after,
                    threshold,
                    reason,
                };
                self.record(issued)?;
                Ok(if short {
                    WriteOutcome::Short
                } else {
                    WriteOutcome::Whole
                })
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.count(|t| t.would_block += 1);
                Ok(WriteOutcome::WouldBlock)
            }
            Err(e) => Err(EndReason::PeerFailed(format!("write failed: {e}"))),
        }
    }

    /// Whether anything keeps a write's own time (a writes.csv row, TX reports, the
    /// sampler, exact departures, message framing, an application-limited source's log);
    /// if nothing does, writes are timed by the loop's turn (see [`Sender::turn`]).
    fn keeps_write_times(&self) -> bool {
        self.cfg.write_log
            || self.cfg.timestamps.is_some()
            || self.program_tap.is_some()
            || self.framer.is_some()
            || self.frame_log.is_some()
    }

    pub(super) fn record(&mut self, issued: IssuedWrite) -> Result<(), EndReason> {
        if self.cfg.timestamps.is_some() {
            let w = self.ledger.record_write(issued);
            if let Some(d) = &mut self.program_tap {
                d.on_write(w.seq, w.end_offset, w.write_ns);
            }
            Ok(())
        } else {
            let w = WriteRecord::place(issued, self.run.tally.bytes_written);
            self.finish_row(&TimedWrite::untimed(w))
        }
    }

    /// Counts in the interval's tally and the run's alike.
    pub(super) fn count(&mut self, f: impl Fn(&mut Tally)) {
        f(&mut self.interval.tally);
        f(&mut self.run.tally);
    }

    /// Sets TCP_NOTSENT_LOWAT for the emulation (0 = off: sendmsg is never gated).
    pub(super) fn set_lowat(&mut self, lowat: u32) -> Result<(), EndReason> {
        sys::set_int(
            self.sock.as_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            lowat.min(i32::MAX as u32) as i32,
        )
        .map_err(EndReason::local)
    }

    pub(super) fn set_out_interest(&mut self, want: bool) -> Result<(), EndReason> {
        if self.out_interest != want {
            let mut flags = if want {
                EpollFlags::EPOLLOUT
            } else {
                EpollFlags::empty()
            };
            if want && self.cfg.epoll == EpollMode::Edge {
                flags |= EpollFlags::EPOLLET;
            }
            let mut ev = EpollEvent::new(flags, SOCK_TOKEN);
            self.epoll
                .modify(self.sock.as_fd(), &mut ev)
                .map_err(|source| {
                    EndReason::LocalError(LocalFailure::Poll {
                        what: "epoll_ctl(MOD)",
                        source,
                    })
                })?;
            self.out_interest = want;
        }
        Ok(())
    }

    /// Whether the emulation should decide now (not waiting for the kernel or a timer, and
    /// the source has something to write).
    pub(super) fn emulation_due(&self) -> bool {
        self.phase == Phase::Writing
            && !self.paced_start_active()
            && self.source_ready()
            && matches!(&self.gate, Gate::Emulated(g) if g.due(Instant::now()))
    }

    /// One decision of the emulated TCP_REPLENISH_TIME: write once if writable, else arrange
    /// to be woken when it may be. Returns true when it wrote (decide again soon).
    pub(super) fn emulation_step(&mut self) -> Result<bool, EndReason> {
        let info = self.tcp_info().map_err(EndReason::local)?;
        let obs = Observation::from_tcp_info(&info, Instant::now());
        let Gate::Emulated(gate) = &mut self.gate else {
            return Ok(false);
        };
        let action = gate.step(&obs, Instant::now());
        self.last_decision = Some(action.decision());
        match action {
            Action::Write {
                decision,
                set_lowat,
            } => {
                if let Some(lowat) = set_lowat {
                    self.set_lowat(lowat)?;
                }
                match self.write_once(decision.threshold, decision.reason.name())? {
                    WriteOutcome::Whole | WriteOutcome::Short => {
                        self.set_out_interest(false)?;
                        Ok(true)
                    }
                    // The source had nothing: the loop waits for its next frame.
                    WriteOutcome::Idle => {
                        self.set_out_interest(false)?;
                        Ok(false)
                    }
                    WriteOutcome::WouldBlock => {
                        // The send buffer is full: the kernel says when there is room.
                        self.set_out_interest(true)?;
                        if let Gate::Emulated(gate) = &mut self.gate {
                            gate.send_buffer_full();
                        }
                        Ok(false)
                    }
                }
            }
            Action::CheckAt { .. } => {
                self.set_out_interest(false)?;
                Ok(false)
            }
            Action::AwaitKernel { set_lowat, .. } => {
                if let Some(lowat) = set_lowat {
                    self.set_lowat(lowat)?;
                }
                self.set_out_interest(true)?;
                Ok(false)
            }
        }
    }
}
