//! One sbm-rpm run as one typed record (summary.json), its per-probe and per-interval rows
//! (probes.csv, intervals.csv, written as they happen), and the exporters, each a pure
//! function of the record: the human summary and networkQuality-style JSON (`-c`, `-J`).

use serde::{Deserialize, Serialize};

use super::method::{Confidence, Parameters, Responsiveness};

/// summary.json's schema version (a change of meaning or a removed field bumps it).
pub const SCHEMA_VERSION: u32 = 1;

/// Which load a stage put on the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageName {
    /// No load: the probes alone (the idle baseline).
    Idle,
    /// Downloads and uploads together (networkQuality's default).
    DownUp,
    Down,
    Up,
}

impl StageName {
    pub fn name(self) -> &'static str {
        match self {
            StageName::Idle => "idle",
            StageName::DownUp => "down+up",
            StageName::Down => "down",
            StageName::Up => "up",
        }
    }
}

/// Self probes that rode on one direction's load-generating connections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfProbes {
    pub count: usize,
    /// Their trimmed mean, ms.
    pub tm_ms: Option<f64>,
    /// Those answered by tcp_info's sRTT because the connection speaks HTTP/1.1 (the
    /// draft's substitute where a GET cannot be multiplexed).
    pub srtt_substitutes: usize,
}

/// One stage's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageResult {
    pub stage: StageName,
    pub intervals: usize,
    pub duration_s: f64,
    /// Goodput's moving average at the end, bits/s (None where the stage had no such load).
    pub dl_throughput_bps: Option<f64>,
    pub ul_throughput_bps: Option<f64>,
    pub dl_flows: usize,
    pub ul_flows: usize,
    /// "stable", "time limit" (the stage limit came first), "idle intervals done" or
    /// "error".
    pub ended_by: String,
    /// RPM over the last MAD intervals' probes; None without a foreign and a self probe.
    pub responsiveness: Option<Responsiveness>,
    pub self_on_down: SelfProbes,
    pub self_on_up: SelfProbes,
    /// None for the idle stage (no ramp).
    pub goodput_confidence: Option<Confidence>,
    pub rpm_confidence: Option<Confidence>,
    pub probes_launched: u64,
    pub probes_failed: u64,
    /// The first failure's reason, if any probe failed.
    pub probe_error: Option<String>,
}

/// A whole run: summary.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpmRun {
    pub schema_version: u32,
    pub program: String,
    pub version: String,
    pub started_unix_s: f64,
    pub config_url: String,
    pub server_addr: String,
    pub tls: bool,
    /// The HTTP of the load-generating connections.
    pub http: String,
    pub parameters: Parameters,
    /// sbm-rpm's rule on its upload sockets (its label, e.g. "replenish 5 ms (kernel)").
    pub upload_rule: String,
    pub upload_rule_detail: serde_json::Value,
    pub stages: Vec<StageResult>,
    /// False when the test ended before its stages did (the reason says why); what was
    /// measured up to then is kept.
    pub complete: bool,
    pub incomplete_reason: Option<String>,
    pub warnings: Vec<String>,
}

/// probes.csv: one row per probe, written when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRow {
    /// "STAGE-N-f" or "STAGE-N-s" (pair N's foreign or self probe); a self probe's id is
    /// the `probe_id` of sbm-rpm-server's probes.csv.
    pub probe_id: String,
    pub stage: String,
    /// "foreign" or "self".
    pub kind: String,
    /// For self probes: "down", "up" or "idle", the connection it rode on.
    pub on: String,
    pub http: String,
    /// Since the stage started.
    pub start_s: f64,
    /// The interval (1-based) in which it ended.
    pub interval: usize,
    pub tcp_ms: Option<f64>,
    pub tls_ms: Option<f64>,
    pub http_ms: Option<f64>,
    /// When a self probe's GET was sent (CLOCK_REALTIME, ns): with the server's
    /// probes.csv `ready_unix_ns`, the request's way to the server.
    pub sent_unix_ns: Option<u64>,
    /// http_ms is tcp_info's sRTT of an HTTP/1.1 connection, not a GET.
    pub srtt_substitute: bool,
    pub error: String,
}

/// intervals.csv: one row per interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalRow {
    pub stage: String,
    pub interval: usize,
    /// Seconds since the stage began: the interval's rates are its bytes over end − start.
    pub start_s: f64,
    pub end_s: f64,
    pub ramp_stage: String,
    pub dl_bps: f64,
    pub ul_bps: f64,
    pub goodput_average_bps: f64,
    pub dl_flows: usize,
    pub ul_flows: usize,
    pub rpm: Option<f64>,
    pub foreign_rpm: Option<f64>,
    pub self_rpm: Option<f64>,
    pub probes_ended: usize,
}

fn mbps(bps: f64) -> String {
    format!("{:.3} Mb/s", bps / 1e6)
}

fn conf(c: Option<Confidence>) -> &'static str {
    c.map(Confidence::name).unwrap_or("n/a")
}

/// The human summary, networkQuality's order: throughput, flows, responsiveness.
pub fn human(run: &RpmRun) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "==== sbm-rpm: {} ({}, {}{}) ====\n",
        run.config_url,
        run.server_addr,
        run.http,
        if run.tls { ", TLS" } else { "" }
    ));
    s.push_str(&format!("Upload rule:             {}\n", run.upload_rule));
    for st in &run.stages {
        s.push_str(&format!(
            "-- {} ({} intervals, {:.1} s, ended: {})\n",
            st.stage.name(),
            st.intervals,
            st.duration_s,
            st.ended_by
        ));
        if let Some(d) = st.dl_throughput_bps {
            s.push_str(&format!(
                "Downlink capacity:       {} ({} flows)\n",
                mbps(d),
                st.dl_flows
            ));
        }
        if let Some(u) = st.ul_throughput_bps {
            s.push_str(&format!(
                "Uplink capacity:         {} ({} flows)\n",
                mbps(u),
                st.ul_flows
            ));
        }
        match &st.responsiveness {
            Some(r) => {
                s.push_str(&format!(
                    "Responsiveness:          {:.0} RPM ({:.1} ms), confidence {}\n",
                    r.rpm,
                    60_000.0 / r.rpm,
                    conf(st.rpm_confidence)
                ));
                let tls = r
                    .tm_tls_f_ms
                    .map(|t| format!(", TLS {t:.1} ms"))
                    .unwrap_or_default();
                s.push_str(&format!(
                    "  foreign probes:        {:.0} RPM (TCP {:.1} ms{tls}, HTTP {:.1} ms; n = {})\n",
                    r.foreign_rpm, r.tm_tcp_f_ms, r.tm_http_f_ms, r.foreign_probes
                ));
                s.push_str(&format!(
                    "  self probes:           {:.0} RPM (HTTP {:.1} ms; n = {})\n",
                    r.self_rpm, r.tm_http_l_ms, r.self_probes
                ));
                for (name, p) in [("down", &st.self_on_down), ("up", &st.self_on_up)] {
                    if let (Some(tm), true) = (p.tm_ms, p.count > 0) {
                        let sub = if p.srtt_substitutes > 0 {
                            format!(", {} from tcp_info's sRTT (HTTP/1.1)", p.srtt_substitutes)
                        } else {
                            String::new()
                        };
                        s.push_str(&format!(
                            "    on {name} connections:  {tm:.1} ms (n = {}{sub})\n",
                            p.count
                        ));
                    }
                }
            }
            None => s.push_str(
                "Responsiveness:          not measured (no foreign and self probe both answered)\n",
            ),
        }
        if st.goodput_confidence.is_some() {
            s.push_str(&format!(
                "Goodput confidence:      {}\n",
                conf(st.goodput_confidence)
            ));
        }
        if st.probes_failed > 0 {
            s.push_str(&format!(
                "Probes failed:           {} of {} ({})\n",
                st.probes_failed,
                st.probes_launched,
                st.probe_error.as_deref().unwrap_or("")
            ));
        }
    }
    for w in &run.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    if !run.complete {
        s.push_str(&format!(
            "INCOMPLETE: {}\n",
            run.incomplete_reason.as_deref().unwrap_or("unknown")
        ));
    }
    s
}

/// networkQuality's JSON (`-c`) for the notions both tools share — throughputs in bits/s,
/// flows, responsiveness in RPM, base RTT in ms for an idle run — plus sbm's own fields
/// under "sbm".
pub fn nq_json(run: &RpmRun) -> serde_json::Value {
    let mut o = serde_json::Map::new();
    let by = |name: StageName| run.stages.iter().find(|s| s.stage == name);
    let put_stage =
        |o: &mut serde_json::Map<String, serde_json::Value>, st: &StageResult, prefix: &str| {
            if let Some(d) = st.dl_throughput_bps {
                o.insert("dl_throughput".into(), (d.round() as u64).into());
                o.insert("dl_flows".into(), st.dl_flows.into());
            }
            if let Some(u) = st.ul_throughput_bps {
                o.insert("ul_throughput".into(), (u.round() as u64).into());
                o.insert("ul_flows".into(), st.ul_flows.into());
            }
            if let Some(r) = &st.responsiveness {
                o.insert(
                    format!("{prefix}responsiveness"),
                    (r.rpm.round() as u64).into(),
                );
                o.insert(
                    format!("{prefix}responsiveness_confidence"),
                    conf(st.rpm_confidence).into(),
                );
            }
        };
    if let Some(st) = by(StageName::DownUp) {
        put_stage(&mut o, st, "");
    }
    if let Some(st) = by(StageName::Down) {
        put_stage(&mut o, st, "dl_");
    }
    if let Some(st) = by(StageName::Up) {
        put_stage(&mut o, st, "ul_");
    }
    if let Some(st) = by(StageName::Idle) {
        if let Some(r) = &st.responsiveness {
            o.insert("base_rtt".into(), (60_000.0 / r.rpm).into());
            o.insert("idle_responsiveness".into(), (r.rpm.round() as u64).into());
        }
    }
    o.insert("test_endpoint".into(), run.server_addr.clone().into());
    o.insert(
        "sbm".into(),
        serde_json::json!({
            "complete": run.complete,
            "incomplete_reason": run.incomplete_reason,
            "upload_rule": run.upload_rule,
            "http": run.http,
            "tls": run.tls,
            "stages": run.stages,
        }),
    );
    serde_json::Value::Object(o)
}
