//! Figures as the report prints them: delays, rates and rate columns' headers.

/// `8.6 ms`, `280 ms`, `22.0 s`.
pub fn fmt_delay(us: u64) -> String {
    let ms = us as f64 / 1e3;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 100_000.0 {
        format!("{:.2} s", ms / 1e3)
    } else {
        format!("{:.0} s", ms / 1e3)
    }
}

/// `1.88 Mb/s`, `84 kb/s` (the report's units).
pub fn fmt_rate(bps: f64) -> String {
    if bps >= 1e6 {
        format!("{:.2} Mb/s", bps / 1e6)
    } else {
        format!("{:.1} kb/s", bps / 1e3)
    }
}

/// A rate column's header: the rate as the report writes it, `unshaped`, or the column's
/// own name (a column named in `[rates]`, e.g. one with a schedule).
pub fn rate_header(rate: &str) -> String {
    match super::spec::parse_rate(rate) {
        Ok(Some(bps)) => fmt_rate(bps as f64)
            .replace(".00 Mb/s", " Mb/s")
            .replace(".0 kb/s", " kb/s"),
        Ok(None) => "unshaped".into(),
        Err(_) => rate.into(),
    }
}
