//! A cell's time series as its plots show them, read from its stored files: per write
//! (writes.csv: both sojourn estimators, the invitations by reason) and per interval
//! (intervals.csv columns). Display only — the CSVs keep every row; [`thin`] reduces a
//! series of a million writes to what a plot can show without hiding its extremes.

use std::collections::BTreeMap;
use std::path::Path;

use crate::report::compressed;

/// writes.csv over time: seconds since the first write.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct WriteSeries {
    /// The snd_nxt sampler's sojourn per write (ms).
    pub sampled: Vec<(f64, f64)>,
    /// TX_SCHED's sojourn per write (ms) from the write's own report (`exact`).
    pub sched: Vec<(f64, f64)>,
    /// TX_SCHED's sojourn per write (ms) from a later write's report (`coalesced`,
    /// `displaced`): upper bounds, not measurements.
    pub sched_bound: Vec<(f64, f64)>,
    /// Writes per second by `invite_reason` (second k covers [k, k+1)).
    pub invitations: BTreeMap<String, Vec<(f64, f64)>>,
    /// When the warm-up ended: the first write after it.
    pub warmup_end_s: Option<f64>,
}

impl WriteSeries {
    /// Reads `dir`/writes.csv (or .csv.xz); an absent or unreadable file is empty series.
    pub fn read(dir: &Path) -> WriteSeries {
        let Ok(file) = compressed::open(&dir.join("writes.csv")) else {
            return WriteSeries::default();
        };
        let mut r = csv::Reader::from_reader(file);
        let headers = r.headers().cloned().unwrap_or_default();
        let idx = |name: &str| headers.iter().position(|h| h == name);
        let Some(iw) = idx("write_ns") else {
            return WriteSeries::default();
        };
        let (isamp, isched, ireason, iwarm, iattr) = (
            idx("sampled_sojourn_us"),
            idx("sojourn_us"),
            idx("invite_reason"),
            idx("warmup"),
            idx("attribution"),
        );
        let mut out = WriteSeries::default();
        let mut per_second: BTreeMap<String, BTreeMap<u64, u64>> = BTreeMap::new();
        let mut t0 = None;
        let num = |rec: &csv::StringRecord, i: Option<usize>| -> Option<f64> {
            rec.get(i?)?.parse::<f64>().ok()
        };
        for rec in r.records().map_while(Result::ok) {
            let Some(w) = num(&rec, Some(iw)) else {
                continue;
            };
            let t = (w - *t0.get_or_insert(w)) / 1e9;
            if let Some(s) = num(&rec, isamp) {
                out.sampled.push((t, s / 1e3));
            }
            if let Some(s) = num(&rec, isched) {
                // Files without the column (sbm-trace's departures) are their own reports.
                match iattr.and_then(|i| rec.get(i)) {
                    Some("coalesced" | "displaced") => out.sched_bound.push((t, s / 1e3)),
                    _ => out.sched.push((t, s / 1e3)),
                }
            }
            if let Some(reason) = ireason.and_then(|i| rec.get(i)).filter(|r| !r.is_empty()) {
                *per_second
                    .entry(reason.to_string())
                    .or_default()
                    .entry(t as u64)
                    .or_default() += 1;
            }
            if out.warmup_end_s.is_none() && iwarm.and_then(|i| rec.get(i)) == Some("false") {
                out.warmup_end_s = Some(t);
            }
        }
        // Seconds without a write of a reason are zeros, so the lines drop to the axis.
        let last = per_second
            .values()
            .filter_map(|m| m.keys().next_back())
            .max()
            .copied()
            .unwrap_or(0);
        for (reason, counts) in per_second {
            let series = (0..=last)
                .map(|s| (s as f64, counts.get(&s).copied().unwrap_or(0) as f64))
                .collect();
            out.invitations.insert(reason, series);
        }
        out
    }
}

/// One intervals.csv column over time (end of each interval, seconds since connect),
/// scaled; empty where the run has no such column or no values in it.
pub fn interval_series(dir: &Path, column: &str, scale: f64) -> Vec<(f64, f64)> {
    let Ok(mut r) = compressed::open(&dir.join("intervals.csv")).map(csv::Reader::from_reader)
    else {
        return vec![];
    };
    let headers = r.headers().cloned().unwrap_or_default();
    let (Some(ie), Some(ic)) = (
        headers.iter().position(|h| h == "end_s"),
        headers.iter().position(|h| h == column),
    ) else {
        return vec![];
    };
    r.records()
        .map_while(Result::ok)
        .filter_map(|rec| {
            Some((
                rec.get(ie)?.parse().ok()?,
                rec.get(ic)?.parse::<f64>().ok()? * scale,
            ))
        })
        .collect()
}

/// At most about `max_points` of `points` (in x order) for display: the points split into
/// equal runs, each shown by its lowest and its highest point, so a spike or a dip of a
/// single write stays visible however many writes share its pixels.
pub fn thin(points: Vec<(f64, f64)>, max_points: usize) -> Vec<(f64, f64)> {
    let buckets = (max_points / 2).max(1);
    if points.len() <= max_points.max(2) {
        return points;
    }
    let size = points.len().div_ceil(buckets);
    let mut out = Vec::with_capacity(2 * buckets);
    for chunk in points.chunks(size) {
        let lo = chunk
            .iter()
            .copied()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("chunks are not empty");
        let hi = chunk
            .iter()
            .copied()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("chunks are not empty");
        if lo.0 <= hi.0 {
            out.push(lo);
            if hi != lo {
                out.push(hi);
            }
        } else {
            out.push(hi);
            out.push(lo);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_the_extremes_and_the_order() {
        let mut pts: Vec<(f64, f64)> = (0..1_000_000).map(|i| (i as f64, 1.0)).collect();
        pts[123_457].1 = 900.0;
        pts[765_431].1 = -5.0;
        let t = thin(pts, 2000);
        assert!(t.len() <= 2000, "{}", t.len());
        assert!(t.contains(&(123_457.0, 900.0)));
        assert!(t.contains(&(765_431.0, -5.0)));
        assert!(t.windows(2).all(|w| w[0].0 <= w[1].0), "x order kept");
        let few = vec![(0.0, 1.0), (1.0, 2.0)];
        assert_eq!(thin(few.clone(), 2000), few);
    }

    #[test]
    fn writes_csv_becomes_both_estimators_and_invitations_per_second() {
        let dir = std::env::temp_dir().join(format!("sbm-cell-series-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("writes.csv"),
            "write_ns,sojourn_us,sampled_sojourn_us,invite_reason,warmup\n\
             1000000000,5000,4000,epollout,true\n\
             1500000000,,6000,sub-mss,false\n\
             3200000000,7000,,epollout,false\n",
        )
        .unwrap();
        let s = WriteSeries::read(&dir);
        assert_eq!(s.sampled, [(0.0, 4.0), (0.5, 6.0)]);
        assert_eq!(s.sched, [(0.0, 5.0), (2.2, 7.0)]);
        assert_eq!(s.warmup_end_s, Some(0.5));
        assert_eq!(
            s.invitations["epollout"],
            [(0.0, 1.0), (1.0, 0.0), (2.0, 1.0)]
        );
        assert_eq!(
            s.invitations["sub-mss"],
            [(0.0, 1.0), (1.0, 0.0), (2.0, 0.0)]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
