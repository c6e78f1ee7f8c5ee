//! A matrix file (TOML, no code) and its expansion into cells. Every key has a default;
//! scripts/matrices/example.toml documents each of them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::units;

/// The emulated path shared by every cell.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PathSpec {
    pub rtt: String,
    pub queue: String,
    /// wan | ingress
    pub shape_at: String,
    /// auto | netem | nfqueue
    pub delay_impl: String,
}

impl Default for PathSpec {
    fn default() -> Self {
        PathSpec {
            rtt: "172ms".into(),
            queue: "200ms".into(),
            shape_at: "wan".into(),
            delay_impl: "auto".into(),
        }
    }
}

/// A sender configuration: a row of the report's table.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ConfigSpec {
    /// The row's name in table.md (default: the config's key).
    pub label: Option<String>,
    /// sbm-send arguments for every rate.
    pub args: Vec<String>,
    /// Arguments that depend on the rate (added after `args`), keyed like `axes.rate`.
    pub by_rate: BTreeMap<String, Vec<String>>,
}

/// Settings that may differ per rate (the report used 512 B writes at 100 kb/s).
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RateOverride {
    pub write_size: Option<String>,
    pub duration: Option<String>,
    pub warmup: Option<String>,
    pub drain_timeout: Option<String>,
    /// A note printed under the table for this rate's column.
    pub note: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Axes {
    pub rate: Vec<String>,
    pub config: Vec<String>,
    pub write_size: Vec<String>,
    pub nodelay: Vec<bool>,
    pub cc: Vec<String>,
}

impl Default for Axes {
    fn default() -> Self {
        Axes {
            rate: vec!["2mbit".into()],
            config: vec!["default".into()],
            write_size: vec!["64KiB".into()],
            nodelay: vec![false],
            cc: vec!["cubic".into()],
        }
    }
}

/// A cell left out: every key given must match.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Exclude {
    pub rate: Option<String>,
    pub config: Option<String>,
    pub write_size: Option<String>,
    pub nodelay: Option<bool>,
    pub cc: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MatrixSpec {
    /// Names the run directory (default: the file's stem).
    pub name: Option<String>,
    pub description: String,
    pub duration: String,
    pub warmup: String,
    pub interval: String,
    /// sbm-send's --drain-timeout (empty: its default).
    pub drain_timeout: Option<String>,
    pub repetitions: u32,
    /// Idle time between cells, so queues empty.
    pub pause: String,
    pub path: PathSpec,
    pub axes: Axes,
    pub configs: BTreeMap<String, ConfigSpec>,
    pub rates: BTreeMap<String, RateOverride>,
    pub exclude: Vec<Exclude>,
}

impl Default for MatrixSpec {
    fn default() -> Self {
        MatrixSpec {
            name: None,
            description: String::new(),
            duration: "40s".into(),
            warmup: "10s".into(),
            interval: "1s".into(),
            drain_timeout: None,
            repetitions: 1,
            pause: "2s".into(),
            path: PathSpec::default(),
            axes: Axes::default(),
            configs: BTreeMap::new(),
            rates: BTreeMap::new(),
            exclude: vec![],
        }
    }
}

/// One run of sbm-send: everything needed to run it and to place it in the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Directory name, unique in the run.
    pub name: String,
    pub rate: String,
    pub rate_bps: Option<u64>,
    pub config: String,
    pub label: String,
    pub write_size: String,
    pub nodelay: bool,
    pub cc: String,
    pub repetition: u32,
    pub duration: Duration,
    pub warmup: Duration,
    pub drain_timeout: Option<Duration>,
    /// sbm-send arguments beyond connection and output.
    pub args: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("matrix file: {0}")]
    Toml(String),
    #[error("matrix: {0}")]
    Invalid(String),
}

fn dur(what: &str, s: &str) -> Result<Duration, SpecError> {
    units::parse_duration_or_zero(s).map_err(|e| SpecError::Invalid(format!("{what}: {e}")))
}

/// `off` or a bit rate.
pub fn parse_rate(s: &str) -> Result<Option<u64>, SpecError> {
    if s == "off" {
        return Ok(None);
    }
    units::parse_rate_bps(s)
        .map(Some)
        .map_err(|e| SpecError::Invalid(format!("axes.rate: {e}")))
}

/// A file-name-safe token: `64KiB` → `64kib`, `NOTSENT 165KB` → `notsent-165kb`.
fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

impl MatrixSpec {
    pub fn parse(text: &str) -> Result<MatrixSpec, SpecError> {
        toml::from_str(text).map_err(|e| SpecError::Toml(e.to_string().trim().replace('\n', " ")))
    }

    /// Checks every value before anything runs.
    pub fn validate(&self) -> Result<(), SpecError> {
        for (what, v) in [
            ("duration", &self.duration),
            ("warmup", &self.warmup),
            ("pause", &self.pause),
        ] {
            dur(what, v)?;
        }
        if dur("interval", &self.interval)?.is_zero() {
            return Err(SpecError::Invalid(
                "interval must be greater than zero".into(),
            ));
        }
        dur("path.rtt", &self.path.rtt)?;
        dur("path.queue", &self.path.queue)?;
        if !["wan", "ingress"].contains(&self.path.shape_at.as_str()) {
            return Err(SpecError::Invalid(format!(
                "path.shape_at '{}': wan or ingress",
                self.path.shape_at
            )));
        }
        if !["auto", "netem", "nfqueue"].contains(&self.path.delay_impl.as_str()) {
            return Err(SpecError::Invalid(format!(
                "path.delay_impl '{}': auto, netem or nfqueue",
                self.path.delay_impl
            )));
        }
        if self.repetitions == 0 {
            return Err(SpecError::Invalid("repetitions must be at least 1".into()));
        }
        let a = &self.axes;
        if a.rate.is_empty()
            || a.config.is_empty()
            || a.write_size.is_empty()
            || a.nodelay.is_empty()
            || a.cc.is_empty()
        {
            return Err(SpecError::Invalid(
                "every axis needs at least one value".into(),
            ));
        }
        for r in &a.rate {
            parse_rate(r)?;
        }
        for w in &a.write_size {
            units::parse_bytes(w)
                .map_err(|e| SpecError::Invalid(format!("axes.write_size: {e}")))?;
        }
        for c in &a.config {
            if c != "default" && !self.configs.contains_key(c) {
                return Err(SpecError::Invalid(format!(
                    "axes.config names '{c}', which has no [configs.{c}]"
                )));
            }
        }
        for (name, c) in &self.configs {
            for r in c.by_rate.keys() {
                if !a.rate.contains(r) {
                    return Err(SpecError::Invalid(format!(
                        "configs.{name}.by_rate names rate '{r}', which is not in axes.rate"
                    )));
                }
            }
        }
        for (r, o) in &self.rates {
            if !a.rate.contains(r) {
                return Err(SpecError::Invalid(format!(
                    "[rates.\"{r}\"] names a rate not in axes.rate"
                )));
            }
            if let Some(w) = &o.write_size {
                units::parse_bytes(w)
                    .map_err(|e| SpecError::Invalid(format!("rates.{r}.write_size: {e}")))?;
            }
            for (what, v) in [
                ("duration", &o.duration),
                ("warmup", &o.warmup),
                ("drain_timeout", &o.drain_timeout),
            ] {
                if let Some(v) = v {
                    dur(what, v)?;
                }
            }
        }
        if let Some(d) = &self.drain_timeout {
            dur("drain_timeout", d)?;
        }
        Ok(())
    }

    fn excluded(&self, rate: &str, config: &str, write: &str, nodelay: bool, cc: &str) -> bool {
        self.exclude.iter().any(|e| {
            e.rate.as_deref().is_none_or(|x| x == rate)
                && e.config.as_deref().is_none_or(|x| x == config)
                && e.write_size.as_deref().is_none_or(|x| x == write)
                && e.nodelay.is_none_or(|x| x == nodelay)
                && e.cc.as_deref().is_none_or(|x| x == cc)
        })
    }

    /// The cross product of the axes, less exclusions, in table order (rate, then config).
    pub fn cells(&self) -> Result<Vec<Cell>, SpecError> {
        self.validate()?;
        let a = &self.axes;
        let mut cells = vec![];
        for rate in &a.rate {
            let over = self.rates.get(rate).cloned().unwrap_or_default();
            for config in &a.config {
                for ws in &a.write_size {
                    for &nodelay in &a.nodelay {
                        for cc in &a.cc {
                            if self.excluded(rate, config, ws, nodelay, cc) {
                                continue;
                            }
                            for rep in 1..=self.repetitions {
                                cells.push(self.cell(rate, &over, config, ws, nodelay, cc, rep)?);
                            }
                        }
                    }
                }
            }
        }
        if cells.is_empty() {
            return Err(SpecError::Invalid("every cell is excluded".into()));
        }
        Ok(cells)
    }

    #[allow(clippy::too_many_arguments)]
    fn cell(
        &self,
        rate: &str,
        over: &RateOverride,
        config: &str,
        ws: &str,
        nodelay: bool,
        cc: &str,
        rep: u32,
    ) -> Result<Cell, SpecError> {
        let a = &self.axes;
        let write_size = over.write_size.clone().unwrap_or_else(|| ws.to_string());
        let duration = dur(
            "duration",
            over.duration.as_deref().unwrap_or(&self.duration),
        )?;
        let warmup = dur("warmup", over.warmup.as_deref().unwrap_or(&self.warmup))?;
        let drain_timeout = over
            .drain_timeout
            .as_deref()
            .or(self.drain_timeout.as_deref())
            .map(|d| dur("drain_timeout", d))
            .transpose()?;
        let spec = self.configs.get(config).cloned().unwrap_or_default();
        let mut args = spec.args.clone();
        args.extend(spec.by_rate.get(rate).cloned().unwrap_or_default());
        let mut name = format!("{}-{}", slug(rate), slug(config));
        if a.write_size.len() > 1 || over.write_size.is_some() {
            name.push_str(&format!("-{}", slug(&write_size)));
        }
        if a.nodelay.len() > 1 && nodelay {
            name.push_str("-nodelay");
        }
        if a.cc.len() > 1 {
            name.push_str(&format!("-{}", slug(cc)));
        }
        if self.repetitions > 1 {
            name.push_str(&format!("-r{rep}"));
        }
        Ok(Cell {
            name,
            rate: rate.to_string(),
            rate_bps: parse_rate(rate)?,
            config: config.to_string(),
            label: spec.label.unwrap_or_else(|| config.to_string()),
            write_size,
            nodelay,
            cc: cc.to_string(),
            repetition: rep,
            duration,
            warmup,
            drain_timeout,
            args,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAPERISH: &str = r#"
        duration = "40s"
        [axes]
        rate = ["100kbit", "2mbit", "86mbit"]
        config = ["default", "tuned"]
        [configs.default]
        label = "Default"
        args = ["--sndbuf", "4MiB"]
        [configs.tuned]
        label = "NOTSENT_LOWAT tuned to the rate"
        by_rate = { "100kbit" = ["--notsent-lowat", "187"], "2mbit" = ["--notsent-lowat", "15KB"], "86mbit" = ["--notsent-lowat", "165KB"] }
        [rates."100kbit"]
        write_size = "512B"
        duration = "90s"
        [[exclude]]
        rate = "86mbit"
        config = "default"
    "#;

    #[test]
    fn expands_axes_with_rate_dependent_parameters_and_exclusions() {
        let m = MatrixSpec::parse(PAPERISH).unwrap();
        let cells = m.cells().unwrap();
        let names: Vec<&str> = cells.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "100kbit-default-512b",
                "100kbit-tuned-512b",
                "2mbit-default",
                "2mbit-tuned",
                "86mbit-tuned"
            ]
        );
        let slow = &cells[1];
        assert_eq!(slow.write_size, "512B");
        assert_eq!(slow.duration, Duration::from_secs(90));
        assert_eq!(slow.args, ["--notsent-lowat", "187"]);
        assert_eq!(slow.label, "NOTSENT_LOWAT tuned to the rate");
        assert_eq!(cells[3].args, ["--notsent-lowat", "15KB"]);
        assert_eq!(cells[3].duration, Duration::from_secs(40));
        assert_eq!(cells[2].args, ["--sndbuf", "4MiB"]);
        assert_eq!(cells[2].rate_bps, Some(2_000_000));
    }

    #[test]
    fn every_key_has_a_default() {
        let m = MatrixSpec::parse("").unwrap();
        let cells = m.cells().unwrap();
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].name, "2mbit-default");
        assert_eq!(cells[0].cc, "cubic");
        assert_eq!(cells[0].warmup, Duration::from_secs(10));
    }

    #[test]
    fn repetitions_and_extra_axes_name_cells_uniquely() {
        let m = MatrixSpec::parse(
            "repetitions = 2\n[axes]\nnodelay = [false, true]\ncc = [\"cubic\", \"bbr\"]\n",
        )
        .unwrap();
        let cells = m.cells().unwrap();
        assert_eq!(cells.len(), 8);
        let mut names: Vec<&str> = cells.iter().map(|c| c.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 8);
        assert!(names.contains(&"2mbit-default-nodelay-bbr-r2"));
    }

    #[test]
    fn mistakes_are_reported() {
        for (text, want) in [
            ("[axes]\nrate = [\"2mbyte\"]", "axes.rate"),
            ("[axes]\nconfig = [\"nope\"]", "no [configs.nope]"),
            ("duration = \"40\"", "duration"),
            ("bogus = 1", "unknown field"),
            ("[path]\nshape_at = \"sender\"", "shape_at"),
            ("repetitions = 0", "repetitions"),
            ("[[exclude]]\nrate = \"2mbit\"", "every cell is excluded"),
            ("[rates.\"5mbit\"]\nduration = \"1s\"", "not in axes.rate"),
        ] {
            let err = MatrixSpec::parse(text)
                .and_then(|m| m.cells())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
