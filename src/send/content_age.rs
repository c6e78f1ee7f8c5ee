//! Content age: each frame of an application-limited source followed from its generation
//! through its writes and its last byte's departure to the sink's read, and the ages
//! summarised per interval and for the run. Pure: the write path reports what happened.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use super::source::Frame;
use crate::report::schema::{ContentAgeRow, ContentAgeSummary, FrameRow};
use crate::stats::LatencyHist;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Its writing started (finished, unless the run ended inside it).
    Written,
    Dropped,
}

#[derive(Debug, Clone)]
struct Record {
    number: u64,
    bytes: u32,
    content_ns: u64,
    fate: Fate,
    message: Option<u64>,
    writes: u32,
    write_start_ns: Option<u64>,
    write_end_ns: Option<u64>,
    depart: Option<(u64, &'static str)>,
}

/// Where the frames of a run are, from their generation to the sink.
#[derive(Debug)]
pub struct FrameLog {
    t0_ns: u64,
    warmup_end_ns: u64,
    records: Vec<Record>,
    /// Frame number → index in `records`.
    index: HashMap<u64, usize>,
    /// Finished frames waiting for the departure of their last byte: (stream end offset,
    /// frame number), in stream order.
    ends: VecDeque<(u64, u64)>,
}

impl FrameLog {
    /// `t0_ns`: the realtime clock at the source's start (frame content times count from
    /// it).
    pub fn new(t0_ns: u64, warmup: Duration) -> FrameLog {
        FrameLog {
            t0_ns,
            warmup_end_ns: t0_ns + warmup.as_nanos() as u64,
            records: vec![],
            index: HashMap::new(),
            ends: VecDeque::new(),
        }
    }

    pub fn content_ns(&self, f: &Frame) -> u64 {
        self.t0_ns + f.content_at.as_nanos() as u64
    }

    fn record(&mut self, f: &Frame, fate: Fate) -> &mut Record {
        let content_ns = self.content_ns(f);
        let i = *self.index.entry(f.number).or_insert_with(|| {
            self.records.push(Record {
                number: f.number,
                bytes: f.size,
                content_ns,
                fate,
                message: None,
                writes: 0,
                write_start_ns: None,
                write_end_ns: None,
                depart: None,
            });
            self.records.len() - 1
        });
        &mut self.records[i]
    }

    /// Frames the source dropped as stale.
    pub fn dropped(&mut self, frames: &[Frame]) {
        for f in frames {
            self.record(f, Fate::Dropped);
        }
    }

    /// A write of `f` was accepted (in part) at `write_ns`, returning at `end_ns`;
    /// `message` is its trip-times message. `finished_at`: the stream offset its last byte
    /// ends at, when this write finished it.
    pub fn wrote(
        &mut self,
        f: &Frame,
        message: Option<u64>,
        write_ns: u64,
        end_ns: u64,
        finished_at: Option<u64>,
    ) {
        let r = self.record(f, Fate::Written);
        r.writes += 1;
        r.message = r.message.or(message);
        r.write_start_ns.get_or_insert(write_ns);
        if let Some(end) = finished_at {
            r.write_end_ns = Some(end_ns);
            self.ends.push_back((end, f.number));
        }
    }

    /// A write row became final: the write ending at `end_offset` left the socket at
    /// `depart` (ns, and which estimator said so). If it carried a frame's last byte,
    /// that is the frame's departure.
    pub fn departed(&mut self, end_offset: u64, depart: Option<(u64, &'static str)>) {
        while let Some(&(end, number)) = self.ends.front() {
            if end > end_offset {
                return;
            }
            self.ends.pop_front();
            if end == end_offset {
                if let Some(&i) = self.index.get(&number) {
                    self.records[i].depart = depart;
                }
                return;
            }
        }
    }

    /// The rows, per-interval statistics and summary, with the sink's read times by
    /// message (empty without trip times) and the frames still unwritten at the end.
    pub fn finish(
        mut self,
        read_times: &HashMap<u64, u64>,
        unwritten: &[Frame],
        interval: Duration,
    ) -> (Vec<FrameRow>, Vec<ContentAgeRow>, ContentAgeSummary) {
        let mut rows: Vec<FrameRow> = self
            .records
            .iter()
            .map(|r| {
                let sink = r.message.and_then(|m| read_times.get(&m).copied());
                let age = |t: Option<u64>| t.map(|t| t.saturating_sub(r.content_ns) / 1_000);
                FrameRow {
                    frame: r.number,
                    bytes: r.bytes,
                    content_ns: r.content_ns,
                    warmup: r.content_ns < self.warmup_end_ns,
                    fate: Cow::Borrowed(match r.fate {
                        Fate::Written => "written",
                        Fate::Dropped => "dropped",
                    }),
                    message: r.message,
                    writes: r.writes,
                    write_start_ns: r.write_start_ns,
                    write_end_ns: r.write_end_ns,
                    depart_ns: r.depart.map(|d| d.0),
                    depart_source: Cow::Borrowed(r.depart.map_or("", |d| d.1)),
                    sink_read_ns: sink,
                    age_write_start_us: age(r.write_start_ns),
                    age_write_end_us: age(r.write_end_ns),
                    age_depart_us: age(r.depart.map(|d| d.0)),
                    age_sink_us: age(sink),
                }
            })
            .collect();
        for f in unwritten {
            if self.index.contains_key(&f.number) {
                continue; // begun: a written frame the run ended inside
            }
            let content_ns = self.content_ns(f);
            rows.push(FrameRow::generated(
                f.number,
                f.size,
                content_ns,
                content_ns < self.warmup_end_ns,
                "unwritten",
            ));
        }
        rows.sort_by_key(|r| r.frame);
        self.records.clear();
        let intervals = per_interval(&rows, self.t0_ns, self.warmup_end_ns, interval);
        let summary = summarize(&rows);
        (rows, intervals, summary)
    }
}

#[derive(Default)]
struct Ages {
    generated: u64,
    written: u64,
    dropped: u64,
    unwritten: u64,
    received: u64,
    bytes: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    start: LatencyHist,
    depart: LatencyHist,
    sink: LatencyHist,
}

impl Ages {
    fn add(&mut self, r: &FrameRow) {
        self.generated += 1;
        self.bytes += u64::from(r.bytes);
        self.first_ns.get_or_insert(r.content_ns);
        self.last_ns = r.content_ns;
        match r.fate.as_ref() {
            "written" => self.written += 1,
            "dropped" => self.dropped += 1,
            _ => self.unwritten += 1,
        }
        if let Some(a) = r.age_write_start_us {
            self.start.record(a);
        }
        if let Some(a) = r.age_depart_us {
            self.depart.record(a);
        }
        if let Some(a) = r.age_sink_us {
            self.received += 1;
            self.sink.record(a);
        }
    }
}

fn per_interval(
    rows: &[FrameRow],
    t0_ns: u64,
    warmup_end_ns: u64,
    interval: Duration,
) -> Vec<ContentAgeRow> {
    let step = interval.as_nanos().max(1) as u64;
    let mut bins: Vec<Ages> = vec![];
    for r in rows {
        let i = (r.content_ns.saturating_sub(t0_ns) / step) as usize;
        if bins.len() <= i {
            bins.resize_with(i + 1, Ages::default);
        }
        bins[i].add(r);
    }
    bins.iter()
        .enumerate()
        .map(|(i, a)| {
            let start_ns = i as u64 * step;
            let (d, s) = (a.depart.percentiles(), a.sink.percentiles());
            ContentAgeRow {
                start_s: start_ns as f64 / 1e9,
                end_s: (start_ns + step) as f64 / 1e9,
                warmup: t0_ns + start_ns < warmup_end_ns,
                generated: a.generated,
                written: a.written,
                dropped: a.dropped,
                received: a.received,
                depart_p50_us: d.p50_us,
                depart_p95_us: d.p95_us,
                depart_max_us: d.max_us,
                sink_p50_us: s.p50_us,
                sink_p95_us: s.p95_us,
                sink_max_us: s.max_us,
            }
        })
        .collect()
}

/// The frames generated after the warm-up.
fn summarize(rows: &[FrameRow]) -> ContentAgeSummary {
    let mut a = Ages::default();
    for r in rows.iter().filter(|r| !r.warmup) {
        a.add(r);
    }
    // The generated rate over the span the frames cover, one frame period counted per
    // frame: (n frames over n − 1 gaps) × n / (n − 1).
    let span_ns = a.first_ns.map_or(0, |f| a.last_ns - f);
    let generated_bps = if a.generated > 1 && span_ns > 0 {
        a.bytes as f64 * 8.0 / (span_ns as f64 / 1e9) * (a.generated - 1) as f64
            / a.generated as f64
    } else {
        0.0
    };
    ContentAgeSummary {
        source: String::new(),
        description: String::new(),
        generated: a.generated,
        written: a.written,
        dropped: a.dropped,
        unwritten: a.unwritten,
        received: a.received,
        at_write_start: a.start.percentiles(),
        at_depart: a.depart.percentiles(),
        at_sink: a.sink.percentiles(),
        generated_bps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn frame(number: u64, at_ms: u64, size: u32) -> Frame {
        Frame {
            number,
            size,
            content_at: Duration::from_millis(at_ms),
            written: 0,
        }
    }

    #[test]
    fn a_frame_is_followed_from_generation_to_the_sink() {
        let t0 = 1_000 * MS;
        let mut log = FrameLog::new(t0, Duration::from_millis(100));
        // Frame 1 (warm-up) generated at 0, written in two writes; frame 2 dropped;
        // frame 3 at 200 ms written at once; frame 4 never written.
        let f1 = frame(1, 0, 1000);
        log.wrote(&f1, Some(1), t0 + 10 * MS, t0 + 11 * MS, None);
        log.wrote(&f1, Some(1), t0 + 30 * MS, t0 + 31 * MS, Some(1000));
        log.dropped(&[frame(2, 100, 1000)]);
        let f3 = frame(3, 200, 500);
        log.wrote(&f3, Some(2), t0 + 205 * MS, t0 + 206 * MS, Some(1500));
        // A row ending inside frame 1 departs nothing; 1000 and 1500 do.
        log.departed(600, Some((t0 + 20 * MS, "sampler")));
        log.departed(1000, Some((t0 + 50 * MS, "sampler")));
        log.departed(1500, Some((t0 + 240 * MS, "sched")));
        let reads: HashMap<u64, u64> = [(1, t0 + 140 * MS), (2, t0 + 330 * MS)].into();
        let (rows, intervals, summary) =
            log.finish(&reads, &[frame(4, 300, 700)], Duration::from_millis(100));
        let fates: Vec<&str> = rows.iter().map(|r| r.fate.as_ref()).collect();
        assert_eq!(fates, ["written", "dropped", "written", "unwritten"]);
        let r1 = &rows[0];
        assert_eq!(
            (
                r1.writes,
                r1.age_write_start_us,
                r1.age_write_end_us,
                r1.age_depart_us,
                r1.age_sink_us
            ),
            (2, Some(10_000), Some(31_000), Some(50_000), Some(140_000))
        );
        assert!(r1.warmup && !rows[1].warmup);
        assert_eq!(rows[2].age_depart_us, Some(40_000));
        assert_eq!(rows[2].depart_source, "sched");
        assert_eq!(rows[2].age_sink_us, Some(130_000));
        // After the warm-up: frames 2, 3 and 4.
        assert_eq!(
            (
                summary.generated,
                summary.written,
                summary.dropped,
                summary.unwritten,
                summary.received
            ),
            (3, 1, 1, 1, 1)
        );
        // Histograms keep three significant digits.
        let near = |v: Option<u64>, want: u64| v.is_some_and(|v| v.abs_diff(want) * 1000 <= want);
        assert!(
            near(summary.at_sink.p50_us, 130_000),
            "{:?}",
            summary.at_sink
        );
        // Bins of 100 ms by content time: one frame each.
        assert_eq!(intervals.len(), 4);
        assert!(intervals[0].warmup && !intervals[1].warmup);
        assert_eq!(
            intervals.iter().map(|i| i.dropped).collect::<Vec<_>>(),
            [0, 1, 0, 0]
        );
        assert!(near(intervals[2].sink_p50_us, 130_000));
        // 2200 B over 200 ms of content, three frames: 2200 × 8 / 0.2 × 2/3.
        assert!((summary.generated_bps - 58_666.7).abs() < 1.0);
    }
}
