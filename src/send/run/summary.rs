//! The end of a run: the last drain, every pending write attributed, the exchange with the
//! sink, summary.json and the printed summary; and the banner that opens a run.

use std::collections::HashMap;

use super::*;
use crate::report::schema::EstimatorError;

/// What the summary says about the run's set-up.
pub(super) struct RunAbout {
    pub(super) local: String,
    pub(super) options: Vec<OptionReport>,
    pub(super) timestamping: Option<TimestampingMode>,
    pub(super) mss: u32,
    pub(super) policy: PolicyReport,
}

impl Sender<'_> {
    /// Final drain, attribution of everything pending, summary and exit status.
    pub(super) fn finish(mut self, mut drain: DrainReport, about: RunAbout) -> SendOutcome {
        let last = match self.cfg.timestamps {
            Some(TimestampSource::Socket) => self.drain_errqueue().err(),
            Some(TimestampSource::Bpf) => self.take_program_reports().err(),
            None => None,
        };
        if let Some(e) = last {
            self.warnings
                .push(format!("final read of the TX reports failed: {e:?}"));
        }
        if let Some(mut trace) = self.rule_trace.take() {
            match trace.finish() {
                Ok(rows) => crate::say!(
                    "{}rule trace: {rows} rows in rule-trace.csv",
                    self.cfg.line_tag()
                ),
                Err(e) => self.warnings.push(format!("rule trace ended early: {e}")),
            }
        }
        let written = self.run.tally.bytes_written;
        let notsent = self.sample_now(written).unwrap_or(0);
        let info = self.tcp_info().ok();
        drain.notsent_at_end = notsent;
        drain.pending_writes = self.ledger.pending_len() as u64;
        if self.cfg.timestamps.is_some() {
            let written = self.ledger.written();
            let acked = info.as_ref().map_or(0, |i| self.data_acked(i));
            let end = RunEnd {
                sent_offset: written.saturating_sub(u64::from(notsent)),
                acked_offset: acked,
            };
            if let Err(e) = self.collect_from_program() {
                self.warnings.push(format!("{e:?}"));
            }
            let mut done = std::mem::take(&mut self.done);
            self.ledger.finish(end, &mut done);
            for w in &done {
                if let Err(e) = self.finish_row(w) {
                    self.warnings.push(format!("{e:?}"));
                    break;
                }
            }
        }
        let (receiver, trip_estimators, read_times) = if notsent > 0 {
            // Bytes still in the socket would keep flowing after sbm-send exits and load the
            // path (the next run's, in a matrix): reset instead of a graceful close, and
            // skip the exchange, which could only start after they drained.
            let _ = self.sock.set_linger(Some(Duration::ZERO));
            let note = format!(
                "{} still unsent at the end: connection reset, no exchange with the sink",
                units::Bytes(u64::from(notsent))
            );
            self.warnings.push(note.clone());
            (
                ReceiverView {
                    error: Some(note),
                    ..Default::default()
                },
                vec![],
                HashMap::new(),
            )
        } else {
            self.exchange_with_sink()
        };
        let content_age = self.finish_frames(&read_times);
        let bpf = self.gate.program_state(self.sock.as_fd());
        let counters = self.ledger.counters();
        self.run.reports.sched = counters.accepted[0];
        self.run.reports.snd = counters.accepted[1];
        self.run.reports.ack = counters.accepted[2];
        self.run.reports.repeated = counters.repeated.iter().sum();
        self.run.reports.stale = counters.stale;

        let end = self
            .end
            .take()
            .unwrap_or(EndReason::LocalError(LocalFailure::NoReason));
        let (complete, end_reason, error, exit_code) = match &end {
            EndReason::Limit(why) => (true, why.to_string(), None, 0),
            EndReason::Signal(sig) => (
                false,
                format!("interrupted by {sig}"),
                None,
                exit_status_for(*sig),
            ),
            EndReason::PeerFailed(e) => (false, "peer failed".to_string(), Some(e.clone()), 1),
            EndReason::LocalError(e) => (false, "local error".to_string(), Some(e.to_string()), 1),
        };
        let (end_at, end_info) = self
            .write_end
            .clone()
            .unwrap_or_else(|| (self.elapsed(), info.clone().unwrap_or_default()));
        let start_at = self.first_write.unwrap_or(Duration::ZERO);
        let (goodput_from, sent_before) = self.warmup_mark.unwrap_or((Duration::ZERO, 0));
        let acked_end = self.data_acked(&end_info);
        let goodput_bytes = acked_end.saturating_sub(sent_before);
        let goodput_window = end_at.saturating_sub(goodput_from);
        let totals = Totals {
            duration_s: end_at.saturating_sub(start_at).as_secs_f64(),
            bytes_written: self.run.tally.bytes_written,
            bytes_acked: info.as_ref().map_or(acked_end, |i| self.data_acked(i)),
            writes: self.run.tally.writes,
            short_writes: self.run.tally.short_writes,
            would_block: self.run.tally.would_block,
            invitations: self.run.tally.invitations,
            retransmits: info.as_ref().map_or(0, |i| i.total_retrans),
            goodput_bps: units::bits_per_second(goodput_bytes, goodput_window),
            goodput_bytes,
            goodput_window_s: goodput_window.as_secs_f64(),
        };
        let cfg = self.cfg;
        let mut summary = SendSummary {
            schema_version: crate::report::schema::SUMMARY_SCHEMA_VERSION,
            sbm_version: env!("CARGO_PKG_VERSION").into(),
            label: cfg.label.clone(),
            complete,
            end_reason,
            error,
            local: about.local,
            peer: cfg.peer.to_string(),
            started_unix_ns: self.t0_ns,
            kernel_release: sysinfo::kernel_release(),
            sysctls: sysinfo::relevant_sysctls(),
            config: RunConfig {
                write_size: cfg.write_size,
                time_limit_s: cfg.limits.time.map(|d| d.as_secs_f64()),
                bytes_limit: cfg.limits.bytes,
                writes_limit: cfg.limits.writes,
                interval_s: cfg.interval.as_secs_f64(),
                warmup_s: cfg.warmup.as_secs_f64(),
                epoll: cfg.epoll.name().into(),
                burst: cfg.burst,
                paced_start_s: cfg.paced_start.map(|d| d.as_secs_f64()),
                timestamps: cfg.timestamps.is_some(),
                timestamp_source: cfg.timestamps.map(|t| t.name().into()),
                timestamp_note: cfg.timestamp_note(),
                drain_timeout_s: cfg.drain_timeout.map(|d| d.as_secs_f64()),
            },
            options: about.options,
            warnings: self.warnings.clone(),
            timestamping: about.timestamping,
            policy: about.policy,
            mss: about.mss,
            min_rtt_us: info.as_ref().and_then(|i| i.min_rtt_us),
            totals,
            sojourn: self.run.sojourn.percentiles(),
            sojourn_exact: self.run.sojourn_exact.percentiles(),
            sojourn_sampled: self.run.sampled.percentiles(),
            sampled_error: self.run.sampled_error.percentiles(),
            sojourn_depart: self.run.depart.percentiles(),
            exact_departures: self
                .program_tap
                .as_ref()
                .filter(|_| cfg.exact_departures)
                .map(|d| d.report()),
            bpf_timestamps: self
                .program_tap
                .as_ref()
                .filter(|_| cfg.timestamps == Some(TimestampSource::Bpf))
                .map(|d| d.timestamps_report()),
            sampling: SamplingReport {
                interval_us: if self.sampling() {
                    cfg.sample_interval.as_micros() as u64
                } else {
                    0
                },
                samples: self.sampler.samples(),
                eor: cfg.eor,
            },
            attribution: self.run.attribution.clone(),
            attribution_after_warmup: self.run.attribution_after_warmup.clone(),
            reports: self.run.reports.clone(),
            advance_notice: self.run.advance.percentiles(),
            invited_after_dry: self.run.invited_after_dry,
            receiver,
            trip_estimators,
            content_age,
            bpf,
            resources: crate::report::schema::Resources::of_self(),
            drain,
        };
        // Why most writes lack a TX report of their own, if they do (summary.json and banner).
        summary
            .warnings
            .extend(crate::report::own_reports::note(&summary));
        let mut outcome = SendOutcome {
            summary,
            exit_code,
            intervals: std::mem::take(&mut self.intervals),
        };
        if let Err(e) = self.out.finish(&outcome.summary, &self.cfg.line_tag()) {
            eprintln!("sbm-send: {e}");
            outcome.exit_code = outcome.exit_code.max(1);
        }
        outcome
    }

    /// The control exchange: half-close, read the sink's reply (its view of the run), and
    /// with --trip-times compare the sender's latency estimates with the sink's truth.
    /// Also returns the sink's read time of each message (empty without trip times).
    fn exchange_with_sink(&mut self) -> (ReceiverView, Vec<EstimatorError>, HashMap<u64, u64>) {
        let mut view = ReceiverView::default();
        if !matches!(
            self.end,
            Some(EndReason::Limit(_)) | Some(EndReason::Signal(_))
        ) {
            view.error = Some("no exchange: the run failed".into());
            return (view, vec![], HashMap::new());
        }
        let mut reply = match trip::read_reply(&self.sock, self.cfg.reply_timeout) {
            Ok(r) => r,
            Err(e) => {
                self.warnings.push(format!("sink reply: {e}"));
                view.error = Some(e);
                return (view, vec![], HashMap::new());
            }
        };
        view.replied = true;
        view.bytes = Some(reply.bytes);
        view.goodput_bps = Some(reply.goodput_bps);
        view.clocks_shared = reply.clocks_shared;
        view.messages = Some(reply.messages);
        view.latency_p50_us = reply.latency.p50_us;
        view.latency_p95_us = reply.latency.p95_us;
        view.latency_max_us = reply.latency.max_us;
        let mut estimators = vec![];
        // The per-message read times go to messages.csv; the stored summary keeps the rest.
        let read_times: HashMap<u64, u64> =
            std::mem::take(&mut reply.read_times).into_iter().collect();
        if self.framer.is_some() {
            let (rows, stats) = trip::compare(&self.messages, &read_times);
            if let Err(e) = self.out.write_messages(&rows) {
                self.warnings.push(e.to_string());
            }
            estimators = stats;
        }
        if let Err(e) = self.out.write_json("sink-summary.json", &reply) {
            self.warnings.push(e.to_string());
        }
        (view, estimators, read_times)
    }
}

pub(super) fn print_banner(
    cfg: &SendConfig,
    local: &str,
    options: &[OptionReport],
    ts: Option<TimestampingMode>,
    mss: u32,
) {
    let tag = cfg.line_tag();
    crate::say!(
        "{tag}sbm-send {}: {} -> {}, kernel {}, mss {}, write {} per invitation, epoll {}",
        env!("CARGO_PKG_VERSION"),
        local,
        cfg.peer,
        sysinfo::kernel_release(),
        mss,
        units::Bytes(u64::from(cfg.write_size)),
        cfg.epoll.name(),
    );
    let opts: Vec<String> = options
        .iter()
        .map(|o| {
            if o.requested.starts_with("default") || o.requested == "false" {
                format!("{} {}", o.name, o.effective)
            } else {
                format!("{} {} (asked {})", o.name, o.effective, o.requested)
            }
        })
        .collect();
    crate::say!("{tag}options: {}", opts.join(", "));
    if let Some(note) = cfg.timestamp_note() {
        crate::say!("{tag}timestamp source: {note}");
    }
    match (cfg.timestamps, ts) {
        (Some(TimestampSource::Socket), Some(t)) => crate::say!(
            "{tag}timestamps: SCHED+SND+ACK per write from the error queue, keyed by byte offset ({})",
            if t.opt_id_tcp { "OPT_ID_TCP" } else { "OPT_ID" }
        ),
        (Some(TimestampSource::Bpf), _) => crate::say!(
            "{tag}timestamps: SCHED+SND+ACK per write from a BPF program (BPF TX timestamping), keyed by byte offset, read when the loop wakes anyway"
        ),
        _ => crate::say!("{tag}timestamps: off (--timestamps off, --no-timestamps or --light): sojourn is not measured"),
    }
}
