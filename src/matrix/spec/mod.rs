//! A matrix file (TOML, no code) and its expansion into cells. Every key has a default;
//! scripts/matrices/example.toml documents each of them.

pub mod pair;
pub mod rates;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::sysinfo::parse_sysctl;
use crate::testbed::wan;
use crate::units;

/// The sink's port on the emulated path (and real hosts' default).
pub const SINK_PORT: u16 = 5301;

/// The path shared by every cell: emulated on this machine, or real hosts.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PathSpec {
    /// emulated (the test bed's namespaces) | hosts (real machines over ssh, `hosts`)
    pub kind: PathKind,
    /// The emulated path's round trip (a real path's is measured before each cell).
    pub rtt: String,
    pub queue: String,
    /// Emulated: wan (default) | ingress. Hosts: receiver-ingress (default) | sender-egress.
    pub shape_at: Option<ShapeAtSpec>,
    /// auto | netem | nfqueue (emulated only)
    pub delay_impl: wan::DelayImpl,
    /// kind = "hosts": the sender/receiver pairs; cells are spread over them.
    pub hosts: Vec<pair::HostPairSpec>,
}

/// `path.kind`: where the cells run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    /// The test bed's namespaces on this machine.
    Emulated,
    /// Real machines over ssh (`path.hosts`).
    Hosts,
}

/// `path.shape_at`: where the bottleneck goes — on the emulated path `wan` or `ingress`,
/// on real hosts `receiver-ingress` or `sender-egress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShapeAtSpec {
    Wan,
    Ingress,
    ReceiverIngress,
    SenderEgress,
}

/// `axes.sender_kernel`: where sbm-send runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SenderKernel {
    /// The bed's snd namespace on this machine's kernel.
    Host,
    /// A UML guest running the patched kernel (testbed/uml), attached to snd by a tap.
    Uml,
}

impl SenderKernel {
    /// As the matrix file, cell names and summary.csv write it.
    pub fn name(self) -> &'static str {
        match self {
            SenderKernel::Host => "host",
            SenderKernel::Uml => "uml",
        }
    }
}

impl std::fmt::Display for SenderKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `configs.NAME.workload`: what a row's cells run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// sbm-send against sbm-sink (the default).
    Send,
    /// An unmodified client/server pair, the server under sbm-trace.
    Command,
}

impl Default for PathSpec {
    fn default() -> Self {
        PathSpec {
            kind: PathKind::Emulated,
            rtt: "172ms".into(),
            queue: "200ms".into(),
            shape_at: None,
            delay_impl: wan::DelayImpl::Auto,
            hosts: vec![],
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
    /// sysctls set inside a UML sender guest, `NAME=VALUE` (sender_kernel = "uml" only),
    /// e.g. `net.ipv4.tcp_replenish_submss=0`.
    pub guest_sysctls: Vec<String>,
    /// Tracepoints a UML sender guest records, `SYSTEM:EVENT` (sender_kernel = "uml" only),
    /// e.g. `tcp_bbr:bbr_ack`: each cell's guest-trace.txt.xz (testbed/uml run --trace-event).
    pub guest_trace_events: Vec<String>,
    /// sbm-sink arguments for this row's cells, e.g. `["--ack", "delayed"]`.
    pub sink_args: Vec<String>,
    /// sysctls set in the emulated path's sender namespace for this row's cells and put
    /// back after each, `NAME=VALUE` (host sender kernel only), e.g.
    /// `net.ipv4.tcp_notsent_lowat=131072`.
    pub sysctls: Vec<String>,
    /// `send` (sbm-send against sbm-sink, the default) or `command`: an unmodified
    /// client/server pair across the path, the server run under sbm-trace (which then
    /// takes `args`) in the sender's namespace, the client in the receiver's.
    pub workload: Option<WorkloadKind>,
    /// workload = "command": the server's command line and the client's. Placeholders:
    /// {addr} and {port} (where the server listens), {dir} (the cell's directory),
    /// {tmp} (a scratch directory removed after the cell), {seconds} (the cell's duration,
    /// whole seconds) and {bytes} (twice what the bottleneck carries in that time).
    /// Relative program paths are taken from where sbm-matrix runs (scripts/matrix: the
    /// repository's root).
    pub server: Vec<String>,
    pub client: Vec<String>,
    /// The implementation report's figures for this row, keyed like `axes.rate`: table.md
    /// says whether each lies inside the spread of this run's repetitions.
    pub report: BTreeMap<String, ReportFigure>,
}

impl ConfigSpec {
    /// The row's workload, checked.
    pub fn workload(&self) -> Result<Workload, String> {
        match self.workload {
            None | Some(WorkloadKind::Send) => {
                if !self.server.is_empty() || !self.client.is_empty() {
                    return Err("server and client need workload = \"command\"".into());
                }
                Ok(Workload::Send)
            }
            Some(WorkloadKind::Command) => {
                if self.server.is_empty() || self.client.is_empty() {
                    return Err(
                        "workload = \"command\" needs a server and a client command line".into(),
                    );
                }
                if !self.sink_args.is_empty() {
                    return Err("sink_args are sbm-sink's: a command cell runs no sink".into());
                }
                Ok(Workload::Command {
                    server: self.server.clone(),
                    client: self.client.clone(),
                })
            }
        }
    }
}

/// A figure from the implementation report for one cell (each part optional).
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ReportFigure {
    /// Median source queueing delay, a duration (`"0.28s"`).
    pub p50: Option<String>,
    /// 95th percentile, a duration.
    pub p95: Option<String>,
    /// Goodput, a rate (`"1.88mbit"`).
    pub goodput: Option<String>,
    /// What the report says in words, shown beside the figures.
    pub text: Option<String>,
}

/// A ReportFigure with its units parsed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReportValues {
    pub p50_us: Option<u64>,
    pub p95_us: Option<u64>,
    pub goodput_bps: Option<u64>,
}

impl ReportFigure {
    pub fn values(&self) -> Result<ReportValues, SpecError> {
        let us = |what: &str, v: &Option<String>| -> Result<Option<u64>, SpecError> {
            v.as_deref()
                .map(|d| dur(what, d).map(|d| d.as_micros() as u64))
                .transpose()
        };
        let goodput = self
            .goodput
            .as_deref()
            .map(|r| {
                units::parse_rate_bps(r)
                    .map_err(|e| SpecError::Invalid(format!("report goodput: {e}")))
            })
            .transpose()?;
        Ok(ReportValues {
            p50_us: us("report p50", &self.p50)?,
            p95_us: us("report p95", &self.p95)?,
            goodput_bps: goodput,
        })
    }
}

/// The UML sender guest of `sender_kernel = "uml"` cells.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UmlSpec {
    /// MTU of the guest's interface: 1280 gives the report's MSS of 1228.
    pub mtu: u32,
    /// Guest memory, MiB.
    pub mem: u32,
    /// The period of `cpu_quota`.
    pub cpu_period: String,
}

impl Default for UmlSpec {
    fn default() -> Self {
        UmlSpec {
            mtu: 1500,
            mem: 512,
            cpu_period: "10ms".into(),
        }
    }
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
    /// The bottleneck rate this column starts at, when the column's name is not a rate
    /// (e.g. `rate = ["2mbit-dip"]` with `rate = "2mbit"` here).
    pub rate: Option<String>,
    /// This column's bottleneck queue (in time, as `path.queue`), e.g. a shallow and a deep
    /// buffer as two columns of one rate.
    pub queue: Option<String>,
    /// `shaper` (default: HTB, excess waits in the queue) or `policer` (excess dropped as
    /// it arrives, `queue` the bucket's depth in time at the rate; emulated path only).
    pub bottleneck: Option<String>,
    /// Changes of the bottleneck during each cell, after the sender connected.
    pub schedule: Vec<rates::RateStep>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Axes {
    pub rate: Vec<String>,
    pub config: Vec<String>,
    pub write_size: Vec<String>,
    pub nodelay: Vec<bool>,
    pub cc: Vec<String>,
    /// host: sbm-send in the bed's snd namespace; uml: in a UML guest running the patched
    /// kernel (testbed/uml), attached to snd by a tap.
    pub sender_kernel: Vec<SenderKernel>,
    /// CPU quotas for the UML guest, percent of one CPU per `uml.cpu_period` (empty: no
    /// quota).
    pub cpu_quota: Vec<u32>,
    /// CPU slices for the UML guest (the other contention model: its share of every
    /// `uml.cpu_period` in one piece at a fixed phase), percent. Each value of `cpu_quota`
    /// and of `cpu_slices` is a cell of its own; a cell has at most one of them.
    pub cpu_slices: Vec<u32>,
}

impl Default for Axes {
    fn default() -> Self {
        Axes {
            rate: vec!["2mbit".into()],
            config: vec!["default".into()],
            write_size: vec!["64KiB".into()],
            nodelay: vec![false],
            cc: vec!["cubic".into()],
            sender_kernel: vec![SenderKernel::Host],
            cpu_quota: vec![],
            cpu_slices: vec![],
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
    pub sender_kernel: Option<SenderKernel>,
    pub cpu_quota: Option<u32>,
    pub cpu_slices: Option<u32>,
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
    /// A run counts as trapped (the report's §6: one write per round trip) when its median
    /// writes per RTT after the warm-up are at most this; table.md then counts them per cell.
    pub trapped_at_writes_per_rtt: Option<f64>,
    pub path: PathSpec,
    pub uml: UmlSpec,
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
            trapped_at_writes_per_rtt: None,
            path: PathSpec::default(),
            uml: UmlSpec::default(),
            axes: Axes::default(),
            configs: BTreeMap::new(),
            rates: BTreeMap::new(),
            exclude: vec![],
        }
    }
}

/// What a cell runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// sbm-send against sbm-sink.
    Send,
    /// An unmodified server (traced by sbm-trace) and its client, placeholders unexpanded.
    Command {
        server: Vec<String>,
        client: Vec<String>,
    },
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
    pub sender_kernel: SenderKernel,
    /// Percent of one CPU for the UML guest; None: no quota.
    pub cpu_quota: Option<u32>,
    /// The guest's share of every period in CPU slices; None: no slices.
    pub cpu_slices: Option<u32>,
    /// `(name, value)` sysctls for the UML guest.
    pub guest_sysctls: Vec<(String, String)>,
    /// Tracepoints the UML guest records (`SYSTEM:EVENT`).
    pub guest_trace_events: Vec<String>,
    /// `(name, value)` sysctls for the sender's namespace during the cell.
    pub sysctls: Vec<(String, String)>,
    pub workload: Workload,
    pub repetition: u32,
    pub duration: Duration,
    pub warmup: Duration,
    pub drain_timeout: Option<Duration>,
    /// sbm-send arguments beyond connection and output (sbm-trace's for command cells).
    pub args: Vec<String>,
    /// sbm-sink arguments beyond address and output.
    pub sink_args: Vec<String>,
    /// The bottleneck queue, in time at the rate (`path.queue` or the column's own).
    pub queue: Duration,
    /// Bottleneck changes during the cell.
    pub schedule: Vec<rates::ScheduledRate>,
    /// Shaper or policer.
    pub bottleneck: wan::BottleneckKind,
}

impl PathSpec {
    /// Where the bottleneck goes, as the test bed names it.
    pub fn shape_at(&self) -> Result<wan::ShapeAt, SpecError> {
        match self.shape_at {
            None | Some(ShapeAtSpec::Wan) => Ok(wan::ShapeAt::Wan),
            Some(ShapeAtSpec::Ingress) => Ok(wan::ShapeAt::Ingress),
            Some(other) => Err(SpecError::Invalid(format!(
                "path.shape_at '{}' is for real hosts: on the emulated path wan or ingress",
                other.name()
            ))),
        }
    }

    /// Whether the cells run on real hosts (`kind = "hosts"`).
    pub fn is_hosts(&self) -> bool {
        self.kind == PathKind::Hosts
    }

    /// Where a real path's bottleneck goes.
    pub fn host_shaping(&self) -> Result<pair::HostShaping, SpecError> {
        match self.shape_at {
            None | Some(ShapeAtSpec::ReceiverIngress) => Ok(pair::HostShaping::ReceiverIngress),
            Some(ShapeAtSpec::SenderEgress) => Ok(pair::HostShaping::SenderEgress),
            Some(other) => Err(SpecError::Invalid(format!(
                "path.shape_at '{}' is for the emulated path: on real hosts receiver-ingress or sender-egress",
                other.name()
            ))),
        }
    }

    /// The path's round trip as the report's text and a run's identity name it.
    pub fn rtt_label(&self) -> &str {
        if self.is_hosts() {
            "measured"
        } else {
            &self.rtt
        }
    }
}

impl ShapeAtSpec {
    /// As the matrix file writes it.
    pub fn name(self) -> &'static str {
        match self {
            ShapeAtSpec::Wan => "wan",
            ShapeAtSpec::Ingress => "ingress",
            ShapeAtSpec::ReceiverIngress => "receiver-ingress",
            ShapeAtSpec::SenderEgress => "sender-egress",
        }
    }
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

/// A column's `bottleneck`: shaper (the default) or policer.
pub fn parse_bottleneck(s: Option<&str>) -> Result<wan::BottleneckKind, String> {
    match s {
        None | Some("shaper") => Ok(wan::BottleneckKind::Shaper),
        Some("policer") => Ok(wan::BottleneckKind::Policer),
        Some(other) => Err(format!("'{other}': shaper or policer")),
    }
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
        match self.path.kind {
            PathKind::Emulated => {
                self.path.shape_at()?;
                if !self.path.hosts.is_empty() {
                    return Err(SpecError::Invalid(
                        "path.hosts is for kind = \"hosts\" (the emulated path has no hosts)"
                            .into(),
                    ));
                }
            }
            PathKind::Hosts => {
                self.host_pairs()?;
            }
        }
        if !self.axes.cpu_quota.is_empty() && self.axes.sender_kernel.contains(&SenderKernel::Host)
        {
            return Err(SpecError::Invalid(
                "axes.cpu_quota limits the UML guest: use it with sender_kernel = [\"uml\"]".into(),
            ));
        }
        if let Some(q) = self.axes.cpu_quota.iter().find(|q| !(1..=100).contains(*q)) {
            return Err(SpecError::Invalid(format!(
                "axes.cpu_quota {q}: percent of one CPU, 1 to 100"
            )));
        }
        if !self.axes.cpu_slices.is_empty() && self.axes.sender_kernel.contains(&SenderKernel::Host)
        {
            return Err(SpecError::Invalid(
                "axes.cpu_slices deals CPU to the UML guest: use it with sender_kernel = [\"uml\"]"
                    .into(),
            ));
        }
        if let Some(q) = self
            .axes
            .cpu_slices
            .iter()
            .find(|q| !(5..=100).contains(*q))
        {
            return Err(SpecError::Invalid(format!(
                "axes.cpu_slices {q}: percent of one CPU, 5 to 100 (the host's RT throttling leaves normal threads 5 %)"
            )));
        }
        dur("uml.cpu_period", &self.uml.cpu_period)?;
        if !(576..=65535).contains(&self.uml.mtu) {
            return Err(SpecError::Invalid(format!(
                "uml.mtu {}: 576 to 65535",
                self.uml.mtu
            )));
        }
        for (name, c) in &self.configs {
            for kv in &c.guest_sysctls {
                parse_sysctl(kv).map_err(|e| {
                    SpecError::Invalid(format!("configs.{name}.guest_sysctls: {e}"))
                })?;
            }
            for e in &c.guest_trace_events {
                crate::testbed::parse_trace_event(e).map_err(|e| {
                    SpecError::Invalid(format!("configs.{name}.guest_trace_events: {e}"))
                })?;
            }
            for kv in &c.sysctls {
                parse_sysctl(kv)
                    .map_err(|e| SpecError::Invalid(format!("configs.{name}.sysctls: {e}")))?;
            }
            let host_only = !c.sysctls.is_empty() || c.workload.is_some();
            if host_only
                && (self.path.is_hosts()
                    || self
                        .axes
                        .sender_kernel
                        .iter()
                        .any(|&k| k != SenderKernel::Host))
            {
                return Err(SpecError::Invalid(format!(
                    "configs.{name}: sysctls and workload run on the emulated path's host kernel (path.kind = \"emulated\", sender_kernel = [\"host\"])"
                )));
            }
            c.workload()
                .map_err(|e| SpecError::Invalid(format!("configs.{name}: {e}")))?;
        }
        if let Some(t) = self
            .trapped_at_writes_per_rtt
            .filter(|t| !(t.is_finite() && *t > 0.0))
        {
            return Err(SpecError::Invalid(format!(
                "trapped_at_writes_per_rtt {t}: a number of writes per RTT above 0"
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
            parse_rate(self.start_rate(r))?;
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
            for (r, figure) in &c.report {
                if !a.rate.contains(r) {
                    return Err(SpecError::Invalid(format!(
                        "configs.{name}.report names rate '{r}', which is not in axes.rate"
                    )));
                }
                figure.values().map_err(|e| {
                    SpecError::Invalid(format!("configs.{name}.report.\"{r}\": {e}"))
                })?;
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
            let duration = dur("duration", o.duration.as_deref().unwrap_or(&self.duration))?;
            rates::parse(&format!("rates.\"{r}\""), &o.schedule, duration)?;
            parse_bottleneck(o.bottleneck.as_deref())
                .map_err(|e| SpecError::Invalid(format!("rates.\"{r}\".bottleneck: {e}")))?;
            if self.path.is_hosts() && o.bottleneck.as_deref() == Some("policer") {
                return Err(SpecError::Invalid(format!(
                    "rates.\"{r}\".bottleneck: policers are on the emulated path only"
                )));
            }
            for (what, v) in [
                ("duration", &o.duration),
                ("warmup", &o.warmup),
                ("drain_timeout", &o.drain_timeout),
                ("queue", &o.queue),
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

    /// The checked sender/receiver pairs of a real path, with what such a path cannot do
    /// (guest senders, CPU axes, bottleneck changes mid-cell) refused.
    pub fn host_pairs(&self) -> Result<Vec<pair::Pair>, SpecError> {
        let shaping = self.path.host_shaping()?;
        if self.path.hosts.is_empty() {
            return Err(SpecError::Invalid(
                "path.kind = \"hosts\" needs at least one [[path.hosts]] pair".into(),
            ));
        }
        let a = &self.axes;
        if a.sender_kernel.iter().any(|&k| k != SenderKernel::Host)
            || !a.cpu_quota.is_empty()
            || !a.cpu_slices.is_empty()
        {
            return Err(SpecError::Invalid(
                "real hosts run sbm-send on the sender's own kernel: sender_kernel = [\"host\"], no cpu_quota or cpu_slices".into(),
            ));
        }
        if let Some(r) = self.rates.iter().find(|(_, o)| !o.schedule.is_empty()) {
            return Err(SpecError::Invalid(format!(
                "[rates.\"{}\"] schedule: bottleneck changes during a cell need the emulated path",
                r.0
            )));
        }
        let mut shaped = false;
        for r in &a.rate {
            shaped |= parse_rate(self.start_rate(r))?.is_some();
        }
        let pairs: Vec<_> = self
            .path
            .hosts
            .iter()
            .enumerate()
            .map(|(k, p)| p.check(k, shaping, shaped))
            .collect::<Result<_, _>>()?;
        for (k, p) in pairs.iter().enumerate() {
            if pairs[..k].iter().any(|q| q.name == p.name) {
                return Err(SpecError::Invalid(format!(
                    "path.hosts: two pairs are named '{}'",
                    p.name
                )));
            }
        }
        Ok(pairs)
    }

    /// The bottleneck queue of a rate column: its `[rates]` entry's `queue`, else
    /// `path.queue`.
    pub fn queue_for<'a>(&'a self, column: &str) -> &'a str {
        self.rates
            .get(column)
            .and_then(|o| o.queue.as_deref())
            .unwrap_or(&self.path.queue)
    }

    /// The bottleneck rate a rate column starts at: its `[rates]` entry's `rate`, else the
    /// column's name.
    pub fn start_rate<'a>(&'a self, column: &'a str) -> &'a str {
        self.rates
            .get(column)
            .and_then(|o| o.rate.as_deref())
            .unwrap_or(column)
    }

    fn excluded(&self, k: &CellKey<'_>) -> bool {
        self.exclude.iter().any(|e| {
            e.rate.as_deref().is_none_or(|x| x == k.rate)
                && e.config.as_deref().is_none_or(|x| x == k.config)
                && e.write_size.as_deref().is_none_or(|x| x == k.write_size)
                && e.nodelay.is_none_or(|x| x == k.nodelay)
                && e.cc.as_deref().is_none_or(|x| x == k.cc)
                && e.sender_kernel.is_none_or(|x| x == k.sender_kernel)
                && e.cpu_quota.is_none_or(|x| Some(x) == k.cpu_quota)
                && e.cpu_slices.is_none_or(|x| Some(x) == k.cpu_slices)
        })
    }

    /// The cross product of the axes, less exclusions, in run order: round by round (one
    /// repetition of every cell per round), the first round in table order (rate, then
    /// config) and each later round rotated by one more cell, so that a slow drift of the
    /// machine spreads over every cell instead of landing on the cells run last.
    pub fn cells(&self) -> Result<Vec<Cell>, SpecError> {
        self.validate()?;
        let a = &self.axes;
        // (quota, slices): each value of either axis a cell of its own, or neither.
        let cpus: Vec<(Option<u32>, Option<u32>)> =
            if a.cpu_quota.is_empty() && a.cpu_slices.is_empty() {
                vec![(None, None)]
            } else {
                a.cpu_quota
                    .iter()
                    .map(|&q| (Some(q), None))
                    .chain(a.cpu_slices.iter().map(|&s| (None, Some(s))))
                    .collect()
            };
        let mut groups = vec![];
        for rate in &a.rate {
            let over = self.rates.get(rate).cloned().unwrap_or_default();
            for config in &a.config {
                for ws in &a.write_size {
                    for &nodelay in &a.nodelay {
                        for cc in &a.cc {
                            for sender_kernel in &a.sender_kernel {
                                for &(cpu_quota, cpu_slices) in &cpus {
                                    let key = CellKey {
                                        rate,
                                        config,
                                        write_size: ws,
                                        nodelay,
                                        cc,
                                        sender_kernel: *sender_kernel,
                                        cpu_quota,
                                        cpu_slices,
                                    };
                                    if !self.excluded(&key) {
                                        groups.push((key, over.clone()));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        if groups.is_empty() {
            return Err(SpecError::Invalid("every cell is excluded".into()));
        }
        let mut cells = Vec::with_capacity(groups.len() * self.repetitions as usize);
        for rep in 1..=self.repetitions {
            let shift = (rep as usize - 1) % groups.len();
            for i in 0..groups.len() {
                let (key, over) = &groups[(i + shift) % groups.len()];
                cells.push(self.cell(key, over, rep)?);
            }
        }
        Ok(cells)
    }

    fn cell(&self, k: &CellKey<'_>, over: &RateOverride, rep: u32) -> Result<Cell, SpecError> {
        let a = &self.axes;
        let write_size = over
            .write_size
            .clone()
            .unwrap_or_else(|| k.write_size.to_string());
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
        let spec = self.configs.get(k.config).cloned().unwrap_or_default();
        let mut args = spec.args.clone();
        args.extend(spec.by_rate.get(k.rate).cloned().unwrap_or_default());
        let mut name = format!("{}-{}", slug(k.rate), slug(k.config));
        if a.write_size.len() > 1 || over.write_size.is_some() {
            name.push_str(&format!("-{}", slug(&write_size)));
        }
        if a.nodelay.len() > 1 && k.nodelay {
            name.push_str("-nodelay");
        }
        if a.cc.len() > 1 {
            name.push_str(&format!("-{}", slug(k.cc)));
        }
        if a.sender_kernel.len() > 1 {
            name.push_str(&format!("-{}", k.sender_kernel));
        }
        if let Some(q) = k.cpu_quota {
            name.push_str(&format!("-cpu{q}"));
        }
        if let Some(q) = k.cpu_slices {
            name.push_str(&format!("-slices{q}"));
        }
        if self.repetitions > 1 {
            name.push_str(&format!("-r{rep}"));
        }
        let sysctls = spec
            .sysctls
            .iter()
            .map(|kv| parse_sysctl(kv).map_err(SpecError::Invalid))
            .collect::<Result<_, _>>()?;
        let workload = spec.workload().map_err(SpecError::Invalid)?;
        let guest_sysctls = if k.sender_kernel == SenderKernel::Uml {
            spec.guest_sysctls
                .iter()
                .map(|kv| parse_sysctl(kv).map_err(SpecError::Invalid))
                .collect::<Result<_, _>>()?
        } else {
            vec![]
        };
        let guest_trace_events = if k.sender_kernel == SenderKernel::Uml {
            spec.guest_trace_events.clone()
        } else {
            vec![]
        };
        Ok(Cell {
            name,
            rate: k.rate.to_string(),
            rate_bps: parse_rate(self.start_rate(k.rate))?,
            config: k.config.to_string(),
            label: spec.label.unwrap_or_else(|| k.config.to_string()),
            write_size,
            nodelay: k.nodelay,
            cc: k.cc.to_string(),
            sender_kernel: k.sender_kernel,
            cpu_quota: k.cpu_quota,
            cpu_slices: k.cpu_slices,
            guest_sysctls,
            guest_trace_events,
            sysctls,
            workload,
            repetition: rep,
            duration,
            warmup,
            drain_timeout,
            args,
            sink_args: spec.sink_args.clone(),
            queue: dur("queue", self.queue_for(k.rate))?,
            schedule: rates::parse(&format!("rates.\"{}\"", k.rate), &over.schedule, duration)?,
            bottleneck: parse_bottleneck(over.bottleneck.as_deref()).map_err(SpecError::Invalid)?,
        })
    }
}

/// The axis values that pick one cell.
struct CellKey<'a> {
    rate: &'a str,
    config: &'a str,
    write_size: &'a str,
    nodelay: bool,
    cc: &'a str,
    sender_kernel: SenderKernel,
    cpu_quota: Option<u32>,
    cpu_slices: Option<u32>,
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
    fn repetitions_are_interleaved_with_the_order_rotated_per_round() {
        let m = MatrixSpec::parse(
            "repetitions = 3\n[axes]\nconfig = [\"a\", \"b\", \"c\"]\n[configs.a]\n[configs.b]\n[configs.c]\n",
        )
        .unwrap();
        let names: Vec<String> = m.cells().unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "2mbit-a-r1",
                "2mbit-b-r1",
                "2mbit-c-r1",
                "2mbit-b-r2",
                "2mbit-c-r2",
                "2mbit-a-r2",
                "2mbit-c-r3",
                "2mbit-a-r3",
                "2mbit-b-r3",
            ]
        );
    }

    #[test]
    fn uml_cells_carry_quota_and_guest_sysctls() {
        let m = MatrixSpec::parse(
            "[axes]\nsender_kernel = [\"uml\"]\ncpu_quota = [100, 35]\nconfig = [\"off\"]\n[configs.off]\nguest_sysctls = [\"net.ipv4.tcp_replenish_submss=0\"]\n[[exclude]]\ncpu_quota = 100\nconfig = \"off\"\n",
        )
        .unwrap();
        let cells = m.cells().unwrap();
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].name, "2mbit-off-cpu35");
        assert_eq!(cells[0].cpu_quota, Some(35));
        assert_eq!(
            cells[0].guest_sysctls,
            [("net.ipv4.tcp_replenish_submss".to_string(), "0".to_string())]
        );
        let traced = MatrixSpec::parse(
            "[axes]\nsender_kernel = [\"host\", \"uml\"]\nconfig = [\"t\"]\n[configs.t]\nguest_trace_events = [\"tcp_bbr:bbr_ack\"]\n",
        )
        .unwrap()
        .cells()
        .unwrap();
        assert!(
            traced[0].guest_trace_events.is_empty(),
            "no guest, no guest trace"
        );
        assert_eq!(traced[1].guest_trace_events, ["tcp_bbr:bbr_ack"]);
        let m = MatrixSpec::parse("[axes]\nsender_kernel = [\"host\", \"uml\"]\n").unwrap();
        let names: Vec<String> = m.cells().unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["2mbit-default-host", "2mbit-default-uml"]);
    }

    #[test]
    fn each_quota_and_each_slice_share_is_a_cell_of_its_own() {
        let m = MatrixSpec::parse(
            "[axes]\nsender_kernel = [\"uml\"]\ncpu_quota = [100, 35]\ncpu_slices = [35]\n[[exclude]]\ncpu_quota = 100\n",
        )
        .unwrap();
        let cells = m.cells().unwrap();
        let got: Vec<(String, Option<u32>, Option<u32>)> = cells
            .into_iter()
            .map(|c| (c.name, c.cpu_quota, c.cpu_slices))
            .collect();
        assert_eq!(
            got,
            [
                ("2mbit-default-cpu35".to_string(), Some(35), None),
                ("2mbit-default-slices35".to_string(), None, Some(35)),
            ]
        );
    }

    #[test]
    fn a_rate_column_may_bring_its_own_queue() {
        let m = MatrixSpec::parse(
            "[path]\nqueue = \"20ms\"\n[axes]\nrate = [\"100mbit\", \"100mbit-shallow\"]\n\
             [rates.\"100mbit-shallow\"]\nrate = \"100mbit\"\nqueue = \"5ms\"\n",
        )
        .unwrap();
        let cells = m.cells().unwrap();
        let queues: Vec<(&str, u64, Option<u64>)> = cells
            .iter()
            .map(|c| (c.rate.as_str(), c.queue.as_millis() as u64, c.rate_bps))
            .collect();
        assert_eq!(
            queues,
            [
                ("100mbit", 20, Some(100_000_000)),
                ("100mbit-shallow", 5, Some(100_000_000))
            ]
        );
        assert_eq!(m.queue_for("100mbit-shallow"), "5ms");
        assert_eq!(m.queue_for("100mbit"), "20ms");
    }

    #[test]
    fn mistakes_are_reported() {
        for (text, want) in [
            ("[axes]\nrate = [\"2mbyte\"]", "axes.rate"),
            ("[axes]\nconfig = [\"nope\"]", "no [configs.nope]"),
            ("duration = \"40\"", "duration"),
            ("bogus = 1", "unknown field"),
            ("[path]\nshape_at = \"sender\"", "shape_at"),
            // Keys with a fixed set of values name the key's line and the values.
            (
                "[path]\nkind = \"cloud\"",
                "kind = \"cloud\"",
            ),
            (
                "[path]\nkind = \"cloud\"",
                "expected `emulated` or `hosts`",
            ),
            (
                "[path]\ndelay_impl = \"tc\"",
                "expected one of `auto`, `netem`, `nfqueue`",
            ),
            (
                "[configs.x]\nworkload = \"batch\"\n[axes]\nconfig = [\"x\"]",
                "expected `send` or `command`",
            ),
            (
                "[rates.\"2mbit\"]\nbottleneck = \"wall\"",
                "shaper or policer",
            ),
            ("[path]\nkind = \"hosts\"", "at least one [[path.hosts]]"),
            (
                "[path]\nkind = \"hosts\"\nshape_at = \"wan\"\n[[path.hosts]]\nreceiver = \"ssh://198.18.2.1\"\nreceiver_dev = \"eth0\"",
                "receiver-ingress or sender-egress",
            ),
            (
                "[[path.hosts]]\nreceiver = \"ssh://198.18.2.1\"",
                "is for kind = \"hosts\"",
            ),
            (
                "[path]\nkind = \"hosts\"\n[[path.hosts]]\nreceiver = \"ssh://198.18.2.1\"\nreceiver_dev = \"eth0\"\n[axes]\nsender_kernel = [\"uml\"]",
                "sender's own kernel",
            ),
            (
                "[path]\nkind = \"hosts\"\n[[path.hosts]]\nreceiver = \"ssh://198.18.2.1\"\nreceiver_dev = \"eth0\"\n[[path.hosts]]\nreceiver = \"ssh://198.18.2.2\"\nreceiver_dev = \"eth0\"\nname = \"pair-1\"",
                "two pairs are named 'pair-1'",
            ),
            (
                "[path]\nkind = \"hosts\"\n[[path.hosts]]\nreceiver = \"ssh://198.18.2.1\"\nreceiver_dev = \"eth0\"\n[rates.\"2mbit\"]\nschedule = [{ at = \"5s\", rate = \"1mbit\" }]",
                "need the emulated path",
            ),
            ("repetitions = 0", "repetitions"),
            ("[[exclude]]\nrate = \"2mbit\"", "every cell is excluded"),
            ("[rates.\"5mbit\"]\nduration = \"1s\"", "not in axes.rate"),
            ("[axes]\nsender_kernel = [\"vm\"]", "expected `host` or `uml`"),
            (
                "[configs.x]\nreport = { \"2mbit\" = { p50 = \"fast\" } }\n[axes]\nconfig = [\"x\"]",
                "configs.x.report",
            ),
            (
                "[configs.x]\nreport = { \"9mbit\" = { p50 = \"1s\" } }\n[axes]\nconfig = [\"x\"]",
                "not in axes.rate",
            ),
            ("[axes]\ncpu_quota = [50]", "sender_kernel = [\"uml\"]"),
            (
                "[axes]\nsender_kernel = [\"uml\"]\ncpu_quota = [0]",
                "1 to 100",
            ),
            ("[axes]\ncpu_slices = [50]", "sender_kernel = [\"uml\"]"),
            (
                "[axes]\nsender_kernel = [\"uml\"]\ncpu_slices = [4]",
                "5 to 100",
            ),
            (
                "[configs.x]\nguest_sysctls = [\"nonsense\"]\n[axes]\nconfig = [\"x\"]",
                "NAME=VALUE",
            ),
            (
                "[configs.x]\nguest_trace_events = [\"tcp_bbr\"]\n[axes]\nconfig = [\"x\"]",
                "is not SYSTEM:EVENT",
            ),
            (
                "[axes]\nrate = [\"s\"]\n[rates.s]\nrate = \"2mbit\"\nqueue = \"deep\"",
                "queue",
            ),
        ] {
            let err = MatrixSpec::parse(text)
                .and_then(|m| m.cells())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
