//! What a run's share of writes with a TX report of their own says.
//!
//! The kernel keeps one timestamp request per skb, and a write extends the write queue's
//! tail skb when it has room: over a backlog (TCP_NOTSENT_LOWAT, REPLENISH_TIME, any
//! window- or queue-limited flow) each write takes the previous write's request over, so
//! most writes' TX times are a later write's (upper bounds). MSG_EOR (`--eor`) ends each
//! write's skb and keeps every request — except, on kernels without "tcp: keep MSG_EOR's
//! boundary when sendmsg() returns short" (kernel/patches/0007), a short write's.
//! docs/tx-timestamps.md has the rule and the measurements.

use super::schema::SendSummary;

/// A note when the run's writes got fewer TX reports of their own than their pattern
/// should give — with `--eor` every write should have one, without it a minority is below
/// what an idle socket gives — saying why and which estimator per-write delay rests on.
/// None when timestamps were off, no write was timed, or nothing is amiss.
pub fn note(s: &SendSummary) -> Option<String> {
    if !s.config.timestamps {
        return None;
    }
    let a = &s.attribution;
    let timed = a.exact + a.coalesced + a.missing + a.displaced;
    if timed == 0 {
        return None;
    }
    let without = timed - a.exact;
    let rests_on = rests_on(s);
    if s.sampling.eor {
        if without == 0 {
            return None;
        }
        return Some(format!(
            "{without} of {timed} writes sent with MSG_EOR have no TX report of their own \
             ({} writes returned short; a kernel without \"tcp: keep MSG_EOR's boundary when \
             sendmsg() returns short\" lets the next write take a short write's request \
             over); per-write delay rests on {rests_on}",
            s.totals.short_writes
        ));
    }
    if without <= a.exact {
        return None;
    }
    Some(format!(
        "only {} of {timed} writes ({:.0} %) have a TX report of their own: each write \
         extended the skb that carried the previous write's request, and the kernel keeps one \
         per skb, so the others' TX times are a later write's (upper bounds); per-write delay \
         rests on {rests_on}; --eor gives every write its own skb and report",
        a.exact,
        100.0 * a.exact as f64 / timed as f64
    ))
}

/// The estimator that times every write when TX reports do not.
fn rests_on(s: &SendSummary) -> &'static str {
    if s.exact_departures.is_some() {
        "the exact departures (--exact-departures)"
    } else if s.sampling.interval_us > 0 {
        "the snd_nxt sampler (bracketed times)"
    } else {
        "TX reports alone (no sampler ran): those writes have upper bounds only"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::schema::AttributionCounts;

    fn summary(exact: u64, coalesced: u64, eor: bool, sampler_us: u64) -> SendSummary {
        let mut s = SendSummary::default();
        s.config.timestamps = true;
        s.sampling.eor = eor;
        s.sampling.interval_us = sampler_us;
        s.totals.short_writes = 7;
        s.attribution = AttributionCounts {
            exact,
            coalesced,
            ..Default::default()
        };
        s
    }

    #[test]
    fn most_writes_without_their_own_report_get_a_note_naming_the_estimator() {
        let n = note(&summary(1, 878, false, 1000)).unwrap();
        assert!(n.starts_with("only 1 of 879 writes (0 %)"), "{n}");
        assert!(n.contains("the snd_nxt sampler"), "{n}");
        let n = note(&summary(1, 878, false, 0)).unwrap();
        assert!(n.contains("no sampler ran"), "{n}");
    }

    #[test]
    fn a_majority_with_their_own_report_needs_no_note() {
        assert_eq!(note(&summary(500, 500, false, 1000)), None);
        assert_eq!(note(&summary(0, 0, false, 1000)), None);
    }

    #[test]
    fn with_eor_every_write_must_have_its_own_report() {
        assert_eq!(note(&summary(30, 0, true, 1000)), None);
        let n = note(&summary(29, 1, true, 1000)).unwrap();
        assert!(n.starts_with("1 of 30 writes sent with MSG_EOR"), "{n}");
        assert!(n.contains("7 writes returned short"), "{n}");
    }

    #[test]
    fn untimed_runs_get_no_note() {
        let mut s = summary(1, 878, false, 1000);
        s.config.timestamps = false;
        assert_eq!(note(&s), None);
    }
}
