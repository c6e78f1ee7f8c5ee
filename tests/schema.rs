//! Every committed summary.json, old ones included, reads back into the type that writes
//! it — and nothing in it is lost on the way: every key and value of the file is in the
//! typed value serialized again (fields added since read as their defaults). sbm-send's
//! summary.json is a `SendSummary`; sbm-trace's (command cells) are a `TraceSummary`
//! (trace.json) and a `TraceConnSummary` per connection (conn-N/summary.json); a UML
//! cell's uml.json is a `RunRecord`. Packed cells (CELL.tar.xz) are read in their archives.

use std::path::{Path, PathBuf};

use sbm::matrix::record::Meta;
use sbm::report::schema::{SendSummary, TraceConnSummary, TraceSummary, SUMMARY_SCHEMA_VERSION};
use sbm::report::{archive, compressed};
use sbm::testbed::uml::RunRecord;
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;

/// Every file named `name` under `dir`, those in packed cells (CELL.tar.xz) by the paths
/// they would have unpacked (sbm's readers open them there).
fn files_named(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files_named(&p, name, out);
        } else if p.file_name().is_some_and(|n| n == name) {
            out.push(p);
        } else if let Some(cell) = archive::dir_of(&p) {
            let members = archive::members(&p).unwrap();
            out.extend(
                members
                    .paths()
                    .filter(|m| m.file_name().is_some_and(|n| n == name))
                    .map(|m| cell.join(m)),
            );
        }
    }
}

/// A traced connection's summary (sbm-trace's conn-N/), not sbm-send's.
fn is_traced_connection(p: &Path) -> bool {
    p.parent()
        .and_then(|d| d.file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with("conn-"))
}

/// `path` read as `T` and serialized again: what of the file did not survive.
fn round_trip<T: DeserializeOwned + Serialize>(path: &Path) -> Result<(T, Vec<String>), String> {
    let text = compressed::read_to_string(path).unwrap();
    let original: Value = serde_json::from_str(&text).unwrap();
    let typed: T = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let again = serde_json::to_value(&typed).unwrap();
    let mut missing = vec![];
    contained(&original, &again, "", &mut missing);
    Ok((
        typed,
        missing
            .into_iter()
            .map(|m| format!("{}: {m}", path.display()))
            .collect(),
    ))
}

fn results() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/results"))
}

/// Every leaf of `original` is in `again` with the same value.
fn contained(original: &Value, again: &Value, path: &str, missing: &mut Vec<String>) {
    match (original, again) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => contained(v, w, &format!("{path}.{k}"), missing),
                    None => missing.push(format!("{path}.{k}: not in the type")),
                }
            }
        }
        // Element by element: a newer type may add fields to the objects in a list.
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                contained(v, w, &format!("{path}[{i}]"), missing);
            }
        }
        (Value::Number(a), Value::Number(b)) => {
            if a.as_f64() != b.as_f64() {
                missing.push(format!("{path}: {a} read as {b}"));
            }
        }
        (a, b) if a == b => {}
        (a, b) => missing.push(format!("{path}: {a} read as {b}")),
    }
}

#[test]
fn every_committed_summary_reads_back_into_the_types() {
    let mut files = vec![];
    files_named(&results(), "summary.json", &mut files);
    let (traced, sent): (Vec<PathBuf>, Vec<PathBuf>) =
        files.into_iter().partition(|p| is_traced_connection(p));
    assert!(sent.len() >= 50, "found only {} summaries", sent.len());
    let mut problems = vec![];
    for f in &sent {
        match round_trip::<SendSummary>(f) {
            Ok((typed, missing)) => {
                assert!(typed.schema_version <= SUMMARY_SCHEMA_VERSION);
                problems.extend(missing);
            }
            Err(e) => problems.push(e),
        }
    }
    for f in &traced {
        match round_trip::<TraceConnSummary>(f) {
            Ok((_, missing)) => problems.extend(missing),
            Err(e) => problems.push(e),
        }
    }
    let mut traces = vec![];
    files_named(&results(), "trace.json", &mut traces);
    assert!(
        traces.len() >= traced.len().min(1),
        "traced connections without their trace.json"
    );
    for f in &traces {
        match round_trip::<TraceSummary>(f) {
            Ok((_, missing)) => problems.extend(missing),
            Err(e) => problems.push(e),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The matrix's report reads a UML cell's uml.json through `RunRecord`, the type the test
/// bed writes it with: every committed one, of every version, reads back with nothing lost.
#[test]
fn every_committed_uml_record_reads_back_into_its_type() {
    let mut files = vec![];
    files_named(&results(), "uml.json", &mut files);
    assert!(files.len() >= 100, "found only {} uml.json", files.len());
    let mut problems = vec![];
    let (mut quotas, mut slices) = (0, 0);
    for f in &files {
        match round_trip::<RunRecord>(f) {
            Ok((typed, missing)) => {
                problems.extend(missing);
                quotas += usize::from(typed.cpu_quota.is_some());
                slices += usize::from(typed.cpu_slices.is_some());
            }
            Err(e) => problems.push(e),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        quotas > 0 && slices > 0,
        "{quotas} quota and {slices} slice records"
    );
}

/// Every committed cell's meta.json reads back into `Meta` (the test bed's status before and
/// after typed, sbm-delay's statistics and tc's own document included) with every value it
/// holds.
#[test]
fn every_committed_meta_reads_back_into_its_type() {
    let mut files = vec![];
    files_named(&results(), "meta.json", &mut files);
    assert!(files.len() >= 1000, "found only {} meta.json", files.len());
    let mut problems = vec![];
    let mut with_testbed = 0;
    for f in &files {
        match round_trip::<Meta>(f) {
            Ok((typed, missing)) => {
                problems.extend(missing);
                with_testbed += usize::from(
                    typed
                        .testbed_before
                        .as_ref()
                        .is_some_and(|s| s.delay_line.is_some() && s.qdisc.is_some()),
                );
            }
            Err(e) => problems.push(e),
        }
    }
    problems.truncate(20);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        with_testbed >= 1000,
        "{with_testbed} with the test bed typed"
    );
}

#[test]
fn a_summary_without_newer_fields_reads_with_defaults() {
    let old = r#"{"sbm_version": "0.1.0", "complete": true, "totals": {"writes": 3}}"#;
    let s: SendSummary = serde_json::from_str(old).unwrap();
    assert_eq!(s.schema_version, 0, "written before versions were recorded");
    assert_eq!(s.totals.writes, 3);
    assert!(!s.receiver.replied);
    assert!(s.trip_estimators.is_empty());
}
