//! Every committed summary.json, old ones included, reads back into the type that writes
//! it — and nothing in it is lost on the way: every key and value of the file is in the
//! typed value serialized again (fields added since read as their defaults).

use std::path::{Path, PathBuf};

use sbm::report::schema::{SendSummary, SUMMARY_SCHEMA_VERSION};
use serde_json::Value;

fn summaries(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            summaries(&p, out);
        } else if p.file_name().is_some_and(|n| n == "summary.json") {
            out.push(p);
        }
    }
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
    summaries(
        &PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/results")),
        &mut files,
    );
    assert!(files.len() >= 50, "found only {} summaries", files.len());
    let mut problems = vec![];
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let original: Value = serde_json::from_str(&text).unwrap();
        let typed: SendSummary = match serde_json::from_str(&text) {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("{}: {e}", f.display()));
                continue;
            }
        };
        assert!(typed.schema_version <= SUMMARY_SCHEMA_VERSION);
        let again = serde_json::to_value(&typed).unwrap();
        let mut missing = vec![];
        contained(&original, &again, "", &mut missing);
        problems.extend(missing.into_iter().map(|m| format!("{}: {m}", f.display())));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
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
