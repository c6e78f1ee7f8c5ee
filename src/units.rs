//! Parsing and printing of the quantities sbm takes on its command line and prints:
//! byte sizes (`64KiB`, `165KB`, iperf's `128K`), durations (`15ms`, `40s`, iperf's bare
//! `3` for seconds) and bit rates (`2Mbit`, iperf's `10M`, the `Mb/s` sbm prints).
//!
//! The rules, the same for every flag and matrix file (README "Units"):
//! - sizes: a bare number is bytes; `K`/`M`/`G` in either case, as iperf, and `KiB`/`MiB`/
//!   `GiB` in any case are powers of 2; `KB`/`MB`/`GB` (and `kB`) powers of 10, as SI.
//!   `kb`, `mb`, `gb` are refused: bits or bytes cannot be told apart there.
//! - durations: `ns`, `us`/`µs`, `ms`, `s`, `m`/`min`, `h`; where iperf takes seconds
//!   (`-t`, `-i`, the warm-up, the time-outs: [`parse_seconds`]) a bare number is seconds.
//!   Elsewhere a unit is required: a bare `15` for a replenish time could mean 15 s, 15 ms
//!   or the draft's 15 µs.
//! - rates: bits per second, powers of 10 as tc and iperf: a bare number, or `k`/`M`/`G` in
//!   either case, optionally followed by `bit`, `bps`, `b/s` or `bit/s`. An upper-case `B`
//!   (bytes) is refused rather than read as bits.
//!
//! Values are exact (decimal arithmetic, no float rounding); zero where it means nothing,
//! negative, overflowing and unknown-unit values are errors with one line of text.

use std::fmt;
use std::time::Duration;

/// The units table the programs' `--help` ends with (README "Units" says the same), as a
/// literal so that `concat!` can put it into clap's `after_help`.
#[macro_export]
macro_rules! units_help {
    () => {
        "Units (iperf's where iperf has them):
  sizes      bytes; K, M, G (either case) and KiB, MiB, GiB are powers of 2 (128K = 131072),
             KB, MB, GB powers of 10 (165KB = 165000)
  rates      bits/s, powers of 10: 10M, 10m, 10Mbit, 10Mb/s, 500k, 1.5G (bytes, 10MB/s, refused)
  durations  15ms, 40s, 2min; -t, -i, --warmup and the time-outs also take bare seconds (3, 0.5);
             elsewhere a unit is needed (a bare 15 could be seconds, ms or the draft's µs)"
    };
}

/// Why a quantity did not parse. The message is a single line suitable for a CLI error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} '{input}': {why}")]
pub struct ParseError {
    what: &'static str,
    input: String,
    why: String,
}

impl ParseError {
    fn new(what: &'static str, input: &str, why: impl Into<String>) -> Self {
        Self {
            what,
            input: input.to_string(),
            why: why.into(),
        }
    }
}

/// Splits `"64KiB"` into `("64", "KiB")`. A leading sign stays in the number so that
/// negative values are reported as negative rather than as an unknown unit.
fn split_number_unit(s: &str) -> (&str, &str) {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || ((c == '-' || c == '+') && i == 0)))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    (&s[..end], s[end..].trim())
}

/// Parses a non-negative decimal number given as text into an exact rational
/// `mantissa / 10^scale`, so that `1.5MB` is exactly 1_500_000 without float rounding.
fn parse_decimal(what: &'static str, input: &str, num: &str) -> Result<(u128, u32), ParseError> {
    if num.is_empty() {
        return Err(ParseError::new(what, input, "no number"));
    }
    if num.starts_with('-') {
        return Err(ParseError::new(what, input, "must not be negative"));
    }
    let num = num.trim_start_matches('+');
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty())
        || !int_part.chars().all(|c| c.is_ascii_digit())
        || !frac_part.chars().all(|c| c.is_ascii_digit())
    {
        return Err(ParseError::new(what, input, "not a number"));
    }
    let digits = format!("{int_part}{frac_part}");
    let mantissa: u128 = digits
        .parse()
        .map_err(|_| ParseError::new(what, input, "too large"))?;
    let scale =
        u32::try_from(frac_part.len()).map_err(|_| ParseError::new(what, input, "too long"))?;
    if scale > 18 {
        return Err(ParseError::new(what, input, "too many decimals"));
    }
    Ok((mantissa, scale))
}

/// `mantissa / 10^scale * multiplier`, which must be a whole number that fits in u64.
fn scale_exact(
    what: &'static str,
    input: &str,
    (mantissa, scale): (u128, u32),
    multiplier: u128,
) -> Result<u64, ParseError> {
    let product = mantissa
        .checked_mul(multiplier)
        .ok_or_else(|| ParseError::new(what, input, "too large"))?;
    let divisor = 10u128.pow(scale);
    if product % divisor != 0 {
        return Err(ParseError::new(
            what,
            input,
            "is not a whole number of the base unit",
        ));
    }
    u64::try_from(product / divisor).map_err(|_| ParseError::new(what, input, "too large"))
}

/// Parses a byte count (the module's rules: a bare number is bytes, `K`/`M`/`G` and
/// `KiB`/`MiB`/`GiB` powers of 2, `KB`/`MB`/`GB` powers of 10). Zero is allowed only when
/// `allow_zero`.
pub fn parse_bytes_with(input: &str, allow_zero: bool) -> Result<u64, ParseError> {
    const WHAT: &str = "byte size";
    let (num, unit) = split_number_unit(input);
    let multiplier: u128 = match unit {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "kb" | "mb" | "gb" | "Kb" | "Mb" | "Gb" => {
            return Err(ParseError::new(
                WHAT,
                input,
                format!(
                    "'{unit}' could be bits or bytes: a size is bytes, KB (1000) or K/KiB (1024)"
                ),
            ))
        }
        other => match other.to_ascii_lowercase().as_str() {
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            _ => {
                return Err(ParseError::new(
                    WHAT,
                    input,
                    format!("unknown unit '{other}' (use B, K, M, G, KiB, MiB, GiB, KB, MB or GB)"),
                ))
            }
        },
    };
    let value = scale_exact(WHAT, input, parse_decimal(WHAT, input, num)?, multiplier)?;
    if value == 0 && !allow_zero {
        return Err(ParseError::new(WHAT, input, "must be greater than zero"));
    }
    Ok(value)
}

/// A byte count that must be greater than zero.
pub fn parse_bytes(input: &str) -> Result<u64, ParseError> {
    parse_bytes_with(input, false)
}

/// What a duration without a unit means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bare {
    /// It needs a unit.
    Refused,
    /// Seconds, as iperf's `-t 3` and `-i 0.5`.
    Seconds,
}

/// Parses a duration with a unit: `ns`, `us`/`µs`, `ms`, `s`, `m`/`min`, `h`. Zero is
/// allowed only when `allow_zero`.
pub fn parse_duration_with(input: &str, allow_zero: bool) -> Result<Duration, ParseError> {
    duration(input, allow_zero, Bare::Refused)
}

/// A duration where iperf takes seconds (`-t`, `-i`, time-outs): a bare number is seconds.
pub fn parse_seconds(input: &str) -> Result<Duration, ParseError> {
    duration(input, false, Bare::Seconds)
}

/// [`parse_seconds`] where zero means "off".
pub fn parse_seconds_or_zero(input: &str) -> Result<Duration, ParseError> {
    duration(input, true, Bare::Seconds)
}

fn duration(input: &str, allow_zero: bool, bare: Bare) -> Result<Duration, ParseError> {
    const WHAT: &str = "duration";
    let (num, unit) = split_number_unit(input);
    let ns_per_unit: u128 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "" if bare == Bare::Seconds => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "" => {
            return Err(ParseError::new(
                WHAT,
                input,
                "needs a unit (ns, us, ms, s, min or h), e.g. 15ms or 40s",
            ))
        }
        other => {
            return Err(ParseError::new(
                WHAT,
                input,
                format!("unknown unit '{other}' (use ns, us, ms, s, min or h)"),
            ))
        }
    };
    let ns = scale_exact(WHAT, input, parse_decimal(WHAT, input, num)?, ns_per_unit)?;
    if ns == 0 && !allow_zero {
        return Err(ParseError::new(WHAT, input, "must be greater than zero"));
    }
    Ok(Duration::from_nanos(ns))
}

/// A duration that must be greater than zero.
pub fn parse_duration(input: &str) -> Result<Duration, ParseError> {
    parse_duration_with(input, false)
}

/// A duration that may be zero (meaning "off" for the option that takes it).
pub fn parse_duration_or_zero(input: &str) -> Result<Duration, ParseError> {
    parse_duration_with(input, true)
}

/// Parses a bit rate in bits per second (the module's rules: powers of 10, `k`/`M`/`G` in
/// either case with or without `bit`, `bps`, `b/s`, `bit/s`; bytes refused).
pub fn parse_rate_bps(input: &str) -> Result<u64, ParseError> {
    const WHAT: &str = "bit rate";
    let (num, unit) = split_number_unit(input);
    let (multiplier, per_second): (u128, &str) = match unit.chars().next() {
        Some('k' | 'K') => (1_000, &unit[1..]),
        Some('m' | 'M') => (1_000_000, &unit[1..]),
        Some('g' | 'G') => (1_000_000_000, &unit[1..]),
        _ => (1, unit),
    };
    let prefix = &unit[..unit.len() - per_second.len()];
    if per_second.contains('B') {
        return Err(ParseError::new(
            WHAT,
            input,
            format!(
                "'{unit}' is bytes: give bits per second (e.g. {num}{prefix}bit, 8× the bytes)"
            ),
        ));
    }
    if !matches!(
        per_second.to_ascii_lowercase().as_str(),
        "" | "bit" | "bps" | "b/s" | "bit/s"
    ) {
        return Err(ParseError::new(
            WHAT,
            input,
            format!("unknown unit '{unit}' (use bit, kbit, Mbit or Gbit per second, or iperf's k, M, G)"),
        ));
    }
    let value = scale_exact(WHAT, input, parse_decimal(WHAT, input, num)?, multiplier)?;
    if value == 0 {
        return Err(ParseError::new(WHAT, input, "must be greater than zero"));
    }
    Ok(value)
}

/// A byte count printed with the IEC unit that keeps it short: `64.0 KiB`.
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        if self.0 < 1 << 10 {
            write!(f, "{} B", self.0)
        } else if self.0 < 1 << 20 {
            write!(f, "{:.1} KiB", b / 1024.0)
        } else if self.0 < 1 << 30 {
            write!(f, "{:.2} MiB", b / (1024.0 * 1024.0))
        } else {
            write!(f, "{:.2} GiB", b / (1024.0 * 1024.0 * 1024.0))
        }
    }
}

/// How the human text prints rates (iperf's `-f`): the unit that keeps each rate short
/// (the default), or one unit for every rate, in bits or bytes per second. Files and JSON
/// always hold bit/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateFormat {
    Adaptive,
    /// Decimal bits per second: 10^3, 10^6, 10^9 or 10^12 (iperf's k, m, g, t).
    Bits(u32),
    /// Binary bytes per second: 2^10, 2^20, 2^30 or 2^40 (iperf's K, M, G, T).
    Bytes(u32),
}

impl RateFormat {
    /// iperf's letters: `k m g t` (bits, powers of 10) and `K M G T` (bytes, powers of 2).
    pub fn parse(input: &str) -> Result<RateFormat, ParseError> {
        let mut chars = input.chars();
        let (Some(c), None) = (chars.next(), chars.next()) else {
            return Err(Self::bad(input));
        };
        if let Some(i) = "kmgt".find(c) {
            Ok(RateFormat::Bits(i as u32 + 1))
        } else if let Some(i) = "KMGT".find(c) {
            Ok(RateFormat::Bytes(i as u32 + 1))
        } else {
            Err(Self::bad(input))
        }
    }

    fn bad(input: &str) -> ParseError {
        ParseError::new(
            "report format",
            input,
            "one of k m g t (kbit/s … Tbit/s) or K M G T (KiB/s … TiB/s), as iperf's -f",
        )
    }
}

/// `-f`: set once by `main` before anything prints (None: adaptive).
static RATE_FORMAT: std::sync::OnceLock<RateFormat> = std::sync::OnceLock::new();

/// Prints every [`BitRate`] from now on in `format` (the first call wins).
pub fn set_rate_format(format: RateFormat) {
    let _ = RATE_FORMAT.set(format);
}

/// A bit rate printed in SI units: `1.92 Mbit/s` (or as `-f` asked: [`set_rate_format`]).
pub struct BitRate(pub f64);

impl BitRate {
    /// The rate in `format`, whatever `-f` set.
    pub fn in_format(&self, format: RateFormat) -> String {
        let r = self.0;
        match format {
            RateFormat::Adaptive => self.adaptive(),
            RateFormat::Bits(p) => {
                let unit = ["kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"][p as usize - 1];
                format!("{:.2} {unit}", r / 1e3f64.powi(p as i32))
            }
            RateFormat::Bytes(p) => {
                let unit = ["KiB/s", "MiB/s", "GiB/s", "TiB/s"][p as usize - 1];
                format!("{:.2} {unit}", r / 8.0 / 1024f64.powi(p as i32))
            }
        }
    }

    fn adaptive(&self) -> String {
        let r = self.0;
        if r < 1e3 {
            format!("{r:.0} bit/s")
        } else if r < 1e6 {
            format!("{:.1} kbit/s", r / 1e3)
        } else if r < 1e9 {
            format!("{:.2} Mbit/s", r / 1e6)
        } else {
            format!("{:.2} Gbit/s", r / 1e9)
        }
    }
}

impl fmt::Display for BitRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let format = RATE_FORMAT.get().copied().unwrap_or(RateFormat::Adaptive);
        f.write_str(&self.in_format(format))
    }
}

/// A duration in microseconds printed with the unit that keeps it readable: `8.6 ms`.
pub struct Micros(pub u64);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0 as f64;
        if self.0 < 1_000 {
            write!(f, "{} us", self.0)
        } else if self.0 < 1_000_000 {
            write!(f, "{:.1} ms", us / 1e3)
        } else {
            write!(f, "{:.2} s", us / 1e6)
        }
    }
}

/// Bits per second from a byte count over a duration; 0 for an empty duration.
pub fn bits_per_second(bytes: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_si_and_iec() {
        assert_eq!(parse_bytes("64KiB").unwrap(), 65_536);
        assert_eq!(parse_bytes("165KB").unwrap(), 165_000);
        assert_eq!(parse_bytes("1.5MB").unwrap(), 1_500_000);
        assert_eq!(parse_bytes("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_bytes("187").unwrap(), 187);
        assert_eq!(parse_bytes("512B").unwrap(), 512);
        assert_eq!(parse_bytes(" 2 GiB ").unwrap(), 2 << 30);
        // iperf's habits: K/M/G in either case are powers of 2, IEC units in any case.
        assert_eq!(parse_bytes("128K").unwrap(), 131_072);
        assert_eq!(parse_bytes("64k").unwrap(), 65_536);
        assert_eq!(parse_bytes("64kib").unwrap(), 65_536);
        assert_eq!(parse_bytes("1M").unwrap(), 1 << 20);
        assert_eq!(parse_bytes("1g").unwrap(), 1 << 30);
        // What sbm prints reads back.
        assert_eq!(parse_bytes(&Bytes(65_536).to_string()).unwrap(), 65_536);
    }

    #[test]
    fn bytes_rejects_bad_input() {
        for bad in [
            "0", "0KiB", "-5", "-5KB", "12XB", "K", "", "1.5", "1.0001KB", "abc", "1e3", "64kb",
            "1Mb",
        ] {
            assert!(parse_bytes(bad).is_err(), "{bad} should be rejected");
        }
        assert!(parse_bytes("99999999999999999999999").is_err());
        assert!(parse_bytes("20000000000GiB").is_err());
        assert_eq!(parse_bytes_with("0", true).unwrap(), 0);
    }

    #[test]
    fn error_message_is_one_line_and_names_the_input() {
        let e = parse_bytes("12XB").unwrap_err().to_string();
        assert!(
            e.contains("12XB") && e.contains("unknown unit") && !e.contains('\n'),
            "{e}"
        );
        let e = parse_duration("-3s").unwrap_err().to_string();
        assert!(e.contains("negative"), "{e}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15ms").unwrap(), Duration::from_millis(15));
        assert_eq!(parse_duration("40s").unwrap(), Duration::from_secs(40));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("2min").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration_or_zero("0ms").unwrap(), Duration::ZERO);
        // iperf's habit where it takes seconds: a bare number is seconds.
        assert_eq!(parse_seconds("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_seconds("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_seconds("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_seconds_or_zero("0").unwrap(), Duration::ZERO);
        for bad in ["0", "0.0000000001", "-1", "3x"] {
            assert!(parse_seconds(bad).is_err(), "{bad} should be rejected");
        }
        for bad in [
            "0s",
            "15",
            "-1s",
            "3 fortnights",
            "1.5ns",
            "ms",
            "99999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate_bps("2Mbit").unwrap(), 2_000_000);
        assert_eq!(parse_rate_bps("100kbit").unwrap(), 100_000);
        assert_eq!(parse_rate_bps("86mbit").unwrap(), 86_000_000);
        assert_eq!(parse_rate_bps("1.5Gbps").unwrap(), 1_500_000_000);
        // iperf's habits and the forms sbm prints.
        for (text, bps) in [
            ("10M", 10_000_000),
            ("10m", 10_000_000),
            ("500k", 500_000),
            ("500K", 500_000),
            ("1G", 1_000_000_000),
            ("10Mb/s", 10_000_000),
            ("1.92 Mbit/s", 1_920_000),
            ("100 kb/s", 100_000),
            ("9600", 9_600),
            ("9600b/s", 9_600),
        ] {
            assert_eq!(parse_rate_bps(text).unwrap(), bps, "{text}");
        }
        assert_eq!(
            parse_rate_bps(&BitRate(1_920_000.0).to_string()).unwrap(),
            1_920_000
        );
        for bad in [
            "0mbit",
            "-2Mbit",
            "2Mbyte",
            "fast",
            "10MB/s",
            "10MBps",
            "10MB",
            "10x",
            "10Mx",
            "1.0000001k",
        ] {
            assert!(parse_rate_bps(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn printing() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(65_536).to_string(), "64.0 KiB");
        assert_eq!(BitRate(1_920_000.0).to_string(), "1.92 Mbit/s");
    }

    #[test]
    fn report_formats_are_iperfs_letters_and_print_one_unit() {
        assert_eq!(RateFormat::parse("k"), Ok(RateFormat::Bits(1)));
        assert_eq!(RateFormat::parse("t"), Ok(RateFormat::Bits(4)));
        assert_eq!(RateFormat::parse("M"), Ok(RateFormat::Bytes(2)));
        for bad in ["", "x", "mm", "Mbit", "a", "1"] {
            assert!(RateFormat::parse(bad).is_err(), "{bad}");
        }
        let r = BitRate(1_920_000.0);
        assert_eq!(r.in_format(RateFormat::Bits(1)), "1920.00 kbit/s");
        assert_eq!(r.in_format(RateFormat::Bits(3)), "0.00 Gbit/s");
        // 1 920 000 bit/s = 240 000 B/s = 234.375 KiB/s.
        assert_eq!(r.in_format(RateFormat::Bytes(1)), "234.38 KiB/s");
        assert_eq!(r.in_format(RateFormat::Adaptive), "1.92 Mbit/s");
        // What -f k prints is read back as the rate it is.
        assert_eq!(
            parse_rate_bps(&r.in_format(RateFormat::Bits(1))).unwrap(),
            1_920_000
        );
        assert_eq!(Micros(8_600).to_string(), "8.6 ms");
        assert_eq!(Micros(22_000_000).to_string(), "22.00 s");
        assert_eq!(
            bits_per_second(250_000, Duration::from_secs(1)),
            2_000_000.0
        );
    }
}
