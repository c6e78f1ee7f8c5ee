//! `-P N`: N connections from one sbm-send, as iperf's `-P`. Each flow is a whole run — its
//! own socket, event loop, files (`DIR/flow-K/`) and summary — on its own thread. The owner
//! (this module) holds the process's SIGINT/SIGTERM and relays them to every flow, prints
//! each interval's per-flow lines and a SUM line, and adds up the totals (flows.json).

use std::collections::BTreeMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::config::{IntervalTap, SendConfig};
use super::run::{run_with_stop, Attached, SendOutcome, SetupError};
use crate::replenish::SocketRule;
use crate::report::human;
use crate::report::schema::{FlowsSum, FlowsSummary, IntervalRow, SUMMARY_SCHEMA_VERSION};
use crate::signals::{StopBroadcast, StopSignals};

/// How the flows ended: flows.json's content and the exit status (the worst flow's; 1 if
/// a flow could not start).
pub struct FlowsOutcome {
    pub summary: FlowsSummary,
    pub exit_code: i32,
}

type Flow = JoinHandle<Result<SendOutcome, SetupError>>;

/// Interval rows by interval number, each with a slot per flow.
struct Lines {
    flows: usize,
    interval_s: f64,
    rows: BTreeMap<u64, Vec<Option<IntervalRow>>>,
    quiet: bool,
    /// `--json-stream`: each flow's row as an event line too.
    json_stream: bool,
    /// The column header is printed once, above the first interval's lines (after the
    /// flows' banners, as iperf does).
    header_printed: bool,
}

impl Lines {
    fn add(&mut self, flow: usize, row: IntervalRow) {
        let k = (row.start_s / self.interval_s).round() as u64;
        let slots = self.rows.entry(k).or_insert_with(|| vec![None; self.flows]);
        slots[flow - 1] = Some(row);
    }

    /// Prints, in order, every interval that no running flow can still add to: each
    /// flow's line, then SUM. `ended[i]`: flow i+1 has ended and all its rows are in.
    fn print_ready(&mut self, ended: &[bool]) {
        while let Some((&k, slots)) = self.rows.iter().next() {
            let ready = slots.iter().zip(ended).all(|(s, &e)| s.is_some() || e);
            if !ready {
                return;
            }
            let slots = self.rows.remove(&k).expect("just seen");
            self.print(&slots);
        }
    }

    fn print(&mut self, slots: &[Option<IntervalRow>]) {
        if self.json_stream {
            for (i, row) in slots.iter().enumerate() {
                if let Some(r) = row {
                    crate::cli::print_json_event("interval", Some(i + 1), r);
                }
            }
        }
        if self.quiet {
            return;
        }
        if !self.header_printed {
            crate::say!("[ ID] {}", human::send_interval_header());
            self.header_printed = true;
        }
        let present: Vec<&IntervalRow> = slots.iter().flatten().collect();
        for (i, row) in slots.iter().enumerate() {
            if let Some(r) = row {
                crate::say!(
                    "{} {}",
                    human::flow_tag(Some(i + 1)),
                    human::send_interval_line(r)
                );
            }
        }
        if present.len() > 1 {
            crate::say!(
                "{} {}",
                human::flow_tag(None),
                human::sum_interval_line(&present)
            );
        }
    }
}

/// Runs `n` flows of `cfg` at once and waits for all of them; `rule`: the BPF replenish
/// program the process started, read by every flow's gate.
pub fn run_flows(
    cfg: &SendConfig,
    n: usize,
    rule: Option<Arc<dyn SocketRule>>,
) -> Result<FlowsOutcome, SetupError> {
    // Blocked here, SIGINT and SIGTERM stay blocked in every flow's thread too (threads
    // inherit the mask): only this signalfd sees them, and the broadcast passes them on.
    let signals = StopSignals::install().map_err(|e| SetupError::Os {
        what: "signalfd",
        source: e.into(),
    })?;
    let mut broadcast = StopBroadcast::default();
    let (tx, rx) = mpsc::channel();
    let mut flows: Vec<Flow> = Vec::with_capacity(n);
    // `--cc bbr,cubic`: the flows take the names in turn.
    let ccs: Option<Vec<String>> = cfg
        .options
        .congestion
        .as_ref()
        .map(|list| list.split(',').map(|n| n.trim().to_string()).collect());
    for flow in 1..=n {
        let mut c = cfg.clone();
        c.options.congestion = ccs.as_ref().map(|v| v[(flow - 1) % v.len()].clone());
        c.out_dir = cfg.out_dir.as_ref().map(|d| d.join(format!("flow-{flow}")));
        let cc_note = match (&ccs, &c.options.congestion) {
            (Some(v), Some(cc)) if v.len() > 1 => format!(" ({cc})"),
            _ => String::new(),
        };
        c.label = Some(match &cfg.label {
            Some(l) => format!("{l} flow {flow}{cc_note}"),
            None => format!("flow {flow}{cc_note}"),
        });
        c.interval_tap = Some(IntervalTap {
            flow,
            rows: tx.clone(),
        });
        let spawned = broadcast
            .relay()
            .map_err(|e| SetupError::Os {
                what: "eventfd",
                source: e.into(),
            })
            .and_then(|stop| {
                let rule = rule.clone();
                std::thread::Builder::new()
                    .name(format!("flow-{flow}"))
                    .spawn(move || {
                        let attached = Attached {
                            rule,
                            ..Attached::default()
                        };
                        run_with_stop(&c, stop, attached)
                    })
                    .map_err(|source| SetupError::Os {
                        what: "starting a flow's thread",
                        source,
                    })
            });
        match spawned {
            Ok(h) => flows.push(h),
            Err(e) => {
                // Stop the flows already running; their files are still written.
                broadcast.send(nix::sys::signal::Signal::SIGTERM);
                for h in flows {
                    let _ = h.join();
                }
                return Err(e);
            }
        }
    }
    drop(tx);
    let mut lines = Lines {
        flows: n,
        interval_s: cfg.interval.as_secs_f64(),
        rows: BTreeMap::new(),
        quiet: cfg.quiet,
        json_stream: cfg.json_stream,
        header_printed: false,
    };
    loop {
        if let Some(sig) = signals.take() {
            broadcast.send(sig);
        }
        // Which flows have ended, looked at before the channel is drained: every row they
        // sent is then in hand.
        let ended: Vec<bool> = flows.iter().map(JoinHandle::is_finished).collect();
        let closed = match rx.recv_timeout(Duration::from_millis(50)) {
            Ok((flow, row)) => {
                lines.add(flow, row);
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        while let Ok((flow, row)) = rx.try_recv() {
            lines.add(flow, row);
        }
        if closed {
            lines.print_ready(&vec![true; n]);
            break;
        }
        lines.print_ready(&ended);
    }
    let mut summaries = vec![];
    let mut failed = vec![];
    let mut exit_code = 0;
    for (i, h) in flows.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(outcome)) => {
                exit_code = exit_code.max(outcome.exit_code);
                summaries.push(outcome.summary);
            }
            Ok(Err(e)) => {
                eprintln!("sbm-send: flow {}: {e}", i + 1);
                failed.push((i + 1, e.to_string()));
                exit_code = exit_code.max(1);
            }
            Err(_) => {
                eprintln!("sbm-send: flow {}: its thread panicked", i + 1);
                failed.push((i + 1, "its thread panicked".into()));
                exit_code = exit_code.max(1);
            }
        }
    }
    let summary = FlowsSummary {
        schema_version: SUMMARY_SCHEMA_VERSION,
        sum: FlowsSum::of(&summaries),
        flows: summaries,
        failed,
    };
    Ok(FlowsOutcome { summary, exit_code })
}

/// The totals as iperf ends a `-P` run: a line per flow, then SUM.
pub fn totals_text(s: &FlowsSummary) -> String {
    let mut out = String::from("--- sbm-send flows ---\n");
    for (i, f) in s.flows.iter().enumerate() {
        out.push_str(&format!(
            "{} {}\n",
            human::flow_tag(Some(i + 1)),
            human::flow_total_line(f)
        ));
    }
    let t = &s.sum;
    out.push_str(&format!(
        "{} {:.2} s  acked {}  goodput {}  {} writes  {} retransmits  ({} flows{})\n",
        human::flow_tag(None),
        t.duration_s,
        crate::units::Bytes(t.bytes_acked),
        crate::units::BitRate(t.goodput_bps),
        t.writes,
        t.retransmits,
        t.flows,
        if s.failed.is_empty() {
            String::new()
        } else {
            format!("; {} failed to start", s.failed.len())
        }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(start: f64, acked: u64) -> IntervalRow {
        IntervalRow {
            start_s: start,
            end_s: start + 1.0,
            bytes_acked: acked,
            ..Default::default()
        }
    }

    #[test]
    fn an_interval_waits_for_every_running_flow() {
        let mut l = Lines {
            flows: 2,
            interval_s: 1.0,
            rows: BTreeMap::new(),
            quiet: true,
            json_stream: false,
            header_printed: false,
        };
        l.add(1, row(0.0, 10));
        l.add(1, row(1.0, 10));
        l.print_ready(&[false, false]);
        assert_eq!(l.rows.len(), 2, "flow 2 has not reported interval 0");
        l.add(2, row(0.001, 20));
        l.print_ready(&[false, false]);
        assert_eq!(l.rows.keys().copied().collect::<Vec<_>>(), [1]);
        // Flow 2 ended without an interval 1: it is printed with flow 1's row alone.
        l.print_ready(&[false, true]);
        assert!(l.rows.is_empty());
    }
}
