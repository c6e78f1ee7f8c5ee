//! Figures quoted in prose are claims, and claims are checked by a machine, as the tables
//! are. results/claims.toml says, for each figure results/README.md quotes, where it comes
//! from — a committed CSV's rows and column (or JSON files and a pointer), a statistic over
//! them — and how the text writes it; this test recomputes each one and fails when the text
//! and the files disagree (a changed figure in either fails it). The findings page at the top
//! of results/README.md writes each of its figures in bold, and every bold figure there must
//! be one a claim checks. Over the whole document it prints how many figures claims cover
//! and how many they do not yet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Debug, Deserialize)]
struct Claims {
    claim: Vec<Claim>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Claim {
    /// The document's words around the figure, verbatim (digit groups may be spaced).
    text: String,
    /// The document (default results/README.md).
    #[serde(default = "default_doc")]
    doc: String,
    /// The files: CSVs, or JSON with `pointer`; a `*` matches within one path component.
    rows: String,
    /// JSON: the value in each file.
    pointer: Option<String>,
    /// The files as a commit holds them (a history section's results, no longer in the
    /// tree): `rows` is then one path, read with `git show COMMIT:PATH`.
    at: Option<String>,
    /// CSV: `column=a|b` (one of), `column!=a` (none of); all must hold.
    #[serde(default, rename = "where")]
    filter: Vec<String>,
    /// CSV: the column the statistic reads.
    column: Option<String>,
    /// Each value times this (1e-6: bit/s to Mb/s), plus `offset`.
    #[serde(default = "one")]
    scale: f64,
    #[serde(default)]
    offset: f64,
    /// `value` (every value the same), `min`, `max`, `median`, `mean`, `sum`, `count` (rows),
    /// `range` (min–max), `count_in LO HI` (K of N: how many values lie in [LO, HI]).
    stat: String,
    /// CSV: one value per file, the mean of its rows' values, and `stat` over those (each
    /// run's mean writes per RTT, then their range).
    #[serde(default)]
    per_file_mean: bool,
    /// How the text writes a number: this many decimals (default 0), or `delay` (µs as
    /// the tables write delays: 273 ms, 22.90 s).
    #[serde(default)]
    decimals: usize,
    #[serde(default)]
    delay: bool,
    /// Without the unit (`[1.11–1.13]` after `1.12 s`).
    #[serde(default)]
    bare: bool,
}

fn default_doc() -> String {
    "results/README.md".into()
}

fn one() -> f64 {
    1.0
}

/// The files `pattern` names: each `*` in a component matches any run of characters there.
fn expand(pattern: &str) -> Vec<PathBuf> {
    let mut paths = vec![repo()];
    for part in pattern.split('/') {
        let mut next = vec![];
        for base in &paths {
            match part.contains('*') {
                false => next.push(base.join(part)),
                true => {
                    let Ok(rd) = std::fs::read_dir(base) else {
                        continue;
                    };
                    // A packed cell, CELL.tar.xz, is matched as the directory CELL it
                    // stands for (the files in it are read from the archive).
                    let mut found: Vec<PathBuf> = rd
                        .flatten()
                        .map(|e| {
                            let n = e.file_name().to_string_lossy().into_owned();
                            match n.strip_suffix(sbm::report::archive::SUFFIX) {
                                Some(cell) if e.path().is_file() => cell.to_string(),
                                _ => n,
                            }
                        })
                        .filter(|n| glob_match(part, n))
                        .map(|n| base.join(n))
                        .collect();
                    found.sort();
                    found.dedup();
                    next.extend(found);
                }
            }
        }
        paths = next;
    }
    paths
        .into_iter()
        .filter(|p| sbm::report::compressed::exists(p))
        .collect()
}

/// Whether `name` matches `pattern`, in which each `*` stands for any run of characters.
fn glob_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.len() >= part.len() && rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

fn read_text(path: &Path) -> String {
    let mut s = String::new();
    std::io::Read::read_to_string(
        &mut sbm::report::compressed::open(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        &mut s,
    )
    .unwrap();
    s
}

/// `git ARGS` in the repository: its standard output, or why not.
fn git(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo())
        .args(args)
        .output()
        .map_err(|e| format!("git {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("git {}: {e}", args.join(" ")))
}

/// Whether this clone is shallow (it then holds no commit a history claim reads).
fn shallow() -> bool {
    git(&["rev-parse", "--is-shallow-repository"]).is_ok_and(|o| o.trim() == "true")
}

/// The values a claim reads, or why it cannot.
fn values(c: &Claim) -> Result<Vec<f64>, String> {
    let texts: Vec<(String, String)> = match &c.at {
        Some(commit) => {
            let at = format!("{commit}:{}", c.rows);
            vec![(at.clone(), git(&["show", &at])?)]
        }
        None => expand(&c.rows)
            .iter()
            .map(|f| (f.display().to_string(), read_text(f)))
            .collect(),
    };
    if texts.is_empty() {
        return Err(format!("no file matches {}", c.rows));
    }
    let mut out = vec![];
    for (name, text) in &texts {
        let f = Path::new(name);
        if let Some(pointer) = &c.pointer {
            let v: serde_json::Value =
                serde_json::from_str(text).map_err(|e| format!("{}: {e}", f.display()))?;
            let x = v
                .pointer(pointer)
                .and_then(serde_json::Value::as_f64)
                .ok_or_else(|| format!("{}: no number at {pointer}", f.display()))?;
            out.push(x * c.scale + c.offset);
            continue;
        }
        let mut rdr = csv::Reader::from_reader(text.as_bytes());
        let headers = rdr.headers().map_err(|e| e.to_string())?.clone();
        let col = |name: &str| {
            headers
                .iter()
                .position(|h| h == name)
                .ok_or_else(|| format!("{}: no column {name}", f.display()))
        };
        let mut tests = vec![];
        for w in &c.filter {
            let (name, negate, alts) = match w.split_once("!=") {
                Some((n, v)) => (n, true, v),
                None => {
                    let (n, v) = w
                        .split_once('=')
                        .ok_or_else(|| format!("where '{w}': column=value"))?;
                    (n, false, v)
                }
            };
            let alts: Vec<String> = alts.split('|').map(str::to_string).collect();
            tests.push((col(name)?, negate, alts));
        }
        let value_col = c.column.as_deref().map(col).transpose()?;
        let first = out.len();
        for rec in rdr.records() {
            let rec = rec.map_err(|e| e.to_string())?;
            let keep = tests.iter().all(|(i, negate, alts)| {
                alts.iter().any(|a| rec.get(*i) == Some(a.as_str())) != *negate
            });
            if !keep {
                continue;
            }
            match value_col {
                None => out.push(1.0),
                Some(i) => {
                    let cell = rec.get(i).unwrap_or("");
                    let x: f64 = cell.parse().map_err(|_| {
                        format!(
                            "{}: '{cell}' in {:?} is not a number",
                            f.display(),
                            c.column
                        )
                    })?;
                    out.push(x * c.scale + c.offset);
                }
            }
        }
        if c.per_file_mean && out.len() > first {
            let these = out.split_off(first);
            out.push(these.iter().sum::<f64>() / these.len() as f64);
        }
    }
    if out.is_empty() {
        return Err(format!("no row of {} passes {:?}", c.rows, c.filter));
    }
    Ok(out)
}

fn number(c: &Claim, x: f64) -> String {
    let s = if c.delay {
        sbm::matrix::format::fmt_delay(x.round() as u64)
    } else {
        format!("{x:.*}", c.decimals)
    };
    match (c.bare, s.split_once(' ')) {
        (true, Some((n, _))) => n.to_string(),
        _ => s,
    }
}

/// What the text must say, from the files.
fn rendered(c: &Claim) -> Result<String, String> {
    let v = values(c)?;
    let sorted = {
        let mut s = v.clone();
        s.sort_by(f64::total_cmp);
        s
    };
    let (lo, hi) = (sorted[0], sorted[sorted.len() - 1]);
    let mut words = c.stat.split_whitespace();
    Ok(match words.next().unwrap_or("") {
        "count" => v.len().to_string(),
        "min" => number(c, lo),
        "max" => number(c, hi),
        "sum" => number(c, v.iter().sum()),
        "mean" => number(c, v.iter().sum::<f64>() / v.len() as f64),
        "median" => {
            let n = sorted.len();
            let m = if n % 2 == 1 {
                sorted[n / 2]
            } else {
                (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
            };
            number(c, m)
        }
        "range" => format!("{}–{}", number(c, lo), number(c, hi)),
        "value" => {
            let first = number(c, lo);
            if number(c, hi) != first {
                return Err(format!(
                    "the values differ ({first} to {}): not one value",
                    number(c, hi)
                ));
            }
            first
        }
        "count_in" => {
            let bound = |w: Option<&str>| -> Result<f64, String> {
                w.and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("stat '{}': count_in LO HI", c.stat))
            };
            let (a, b) = (bound(words.next())?, bound(words.next())?);
            let k = v.iter().filter(|x| (a..=b).contains(*x)).count();
            format!("{k} of {}", v.len())
        }
        other => return Err(format!("unknown stat '{other}'")),
    })
}

/// The text as the checker reads it: every run of white space (a line break in a wrapped
/// paragraph too) one space, and digit groups written apart ("7 068", "5 417 448") one
/// number.
fn ungrouped(s: &str) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &ch) in chars.iter().enumerate() {
        let grouped = (ch == ' ' || ch == '\u{202f}')
            && i > 0
            && chars[i - 1].is_ascii_digit()
            && chars.len() > i + 3
            && chars[i + 1..i + 4].iter().all(char::is_ascii_digit)
            && chars.get(i + 4).is_none_or(|c| !c.is_ascii_digit());
        if !grouped {
            out.push(ch);
        }
    }
    out
}

/// Whether `text` writes `figure` as a figure of its own: "18" is in "18 ms (18–18)" but
/// not in "118 ms" or "1.18".
fn contains_figure(text: &str, figure: &str) -> bool {
    let b = text.as_bytes();
    let numeric = |i: usize| {
        b[i].is_ascii_digit()
            || (b[i] == b'.'
                && i > 0
                && b[i - 1].is_ascii_digit()
                && b.get(i + 1).is_some_and(u8::is_ascii_digit))
    };
    text.match_indices(figure).any(|(at, m)| {
        let end = at + m.len();
        (at == 0 || !numeric(at - 1)) && (end >= b.len() || !numeric(end))
    })
}

fn load() -> Vec<Claim> {
    let text = std::fs::read_to_string(repo().join("results/claims.toml")).unwrap();
    toml::from_str::<Claims>(&text)
        .unwrap_or_else(|e| panic!("results/claims.toml: {e}"))
        .claim
}

/// The figures of `text`: runs of digits with their decimals, digit groups joined.
fn figures(text: &str) -> Vec<String> {
    let text = ungrouped(text);
    let mut out = vec![];
    let mut cur = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &ch) in chars.iter().enumerate() {
        let decimal_point =
            ch == '.' && !cur.is_empty() && chars.get(i + 1).is_some_and(char::is_ascii_digit);
        if ch.is_ascii_digit() || decimal_point {
            cur.push(ch);
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The findings page: from its heading to the next second-level heading.
fn findings(doc: &str) -> &str {
    let start = doc
        .find("\n## Findings")
        .expect("results/README.md opens with a '## Findings' page");
    let rest = &doc[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

/// The bold spans of `md` that hold a figure.
fn bold_figures(md: &str) -> Vec<String> {
    md.split("**")
        .skip(1)
        .step_by(2)
        .filter(|s| s.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_claim_in_the_results_readme_is_what_its_files_say() {
    let claims = load();
    let mut docs: BTreeMap<String, String> = BTreeMap::new();
    let mut wrong = vec![];
    let mut unread_history = 0;
    let shallow = shallow();
    for c in &claims {
        let doc = docs
            .entry(c.doc.clone())
            .or_insert_with(|| ungrouped(&std::fs::read_to_string(repo().join(&c.doc)).unwrap()));
        let text = ungrouped(&c.text);
        if !doc.contains(&text) {
            wrong.push(format!("{}: the text '{}' is not there", c.doc, c.text));
            continue;
        }
        if c.at.is_some() && shallow {
            // A shallow clone holds no history; a full one must hold the commit.
            unread_history += 1;
            continue;
        }
        match rendered(c) {
            Ok(r) if contains_figure(&text, &r) => {}
            Ok(r) => wrong.push(format!(
                "{}: '{}' — the files say {r} ({} {} over {})",
                c.doc,
                c.text,
                c.stat,
                c.column
                    .as_deref()
                    .or(c.pointer.as_deref())
                    .unwrap_or("rows"),
                c.rows
            )),
            Err(e) => wrong.push(format!("{}: '{}': {e}", c.doc, c.text)),
        }
    }
    // The findings page: each figure bold, each bold figure a checked claim's.
    let readme = std::fs::read_to_string(repo().join("results/README.md")).unwrap();
    let page = findings(&readme);
    let claimed: Vec<String> = claims
        .iter()
        .filter(|c| c.doc == "results/README.md")
        .map(|c| ungrouped(&c.text))
        .collect();
    let mut unchecked_findings = 0;
    for b in bold_figures(page) {
        let b = ungrouped(&b);
        if !claimed.iter().any(|t| t.contains(&b)) {
            unchecked_findings += 1;
            wrong.push(format!(
                "results/README.md findings: '**{b}**' is no claim's (results/claims.toml)"
            ));
        }
    }
    // Over the whole document: the figures inside a claim's text, and the rest.
    let all = figures(&readme).len();
    // (Each text once: several claims may check the figures of one phrase.)
    let texts: std::collections::BTreeSet<&String> = claimed.iter().collect();
    let covered: usize = texts.iter().map(|t| figures(t).len()).sum();
    eprintln!(
        "results/README.md: {} claims checked; {covered} of its {all} figures are in a claim's text, {} not yet; findings page: {} bold figures, {unchecked_findings} unchecked",
        claims.len(),
        all.saturating_sub(covered),
        bold_figures(page).len()
    );
    if unread_history > 0 {
        eprintln!(
            "{unread_history} claims on earlier commits not read: this clone is shallow (git fetch --unshallow)"
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_checker_reads_figures_as_the_text_writes_them() {
    assert_eq!(
        ungrouped("7 068 writes, 5 417 448 B, 2 of 111"),
        "7068 writes, 5417448 B, 2 of 111"
    );
    assert_eq!(
        figures("1.89 Mb/s (1.88–1.89), n = 5, 7 068"),
        ["1.89", "1.88", "1.89", "5", "7068"]
    );
    assert_eq!(
        bold_figures("**The §4 ordering** a **22.90 s** b **bold** c **80 of 80**"),
        ["22.90 s", "80 of 80"]
    );
    assert_eq!(ungrouped("at\n  MSS 1 228"), "at MSS 1228");
    assert!(contains_figure("18 ms (18–18)", "18"));
    assert!(!contains_figure("118 ms or 1.18 or 18.5", "18"));
    assert!(contains_figure("at 1.89.", "1.89"));
    assert!(glob_match(
        "2mbit-*-clause-off*",
        "2mbit-kernel-clause-off-r1"
    ));
    assert!(glob_match(
        "2mbit-*-clause-off*",
        "2mbit-emulated-clause-off-latest-r5"
    ));
    assert!(!glob_match(
        "2mbit-*-clause-off*",
        "2mbit-kernel-clause-on-r1"
    ));
    assert!(!glob_match("a*b*c", "a-c-b"));
    assert!(glob_match("*", "anything"));
    let c = Claim {
        text: String::new(),
        doc: default_doc(),
        rows: "results/paper/aggregates.csv".into(),
        pointer: None,
        at: None,
        filter: vec!["config=default".into(), "rate=2mbit".into()],
        column: Some("p50_median_us".into()),
        scale: 1.0,
        offset: 0.0,
        stat: "value".into(),
        per_file_mean: false,
        decimals: 0,
        delay: true,
        bare: false,
    };
    assert_eq!(rendered(&c).unwrap(), "22.90 s");
}

/// `scripts/uml-alarm-trace ARGS`'s output; it must succeed.
fn uml_alarm_trace(args: &[&str]) -> String {
    let out = std::process::Command::new(repo().join("scripts/uml-alarm-trace"))
        .args(args)
        .output()
        .expect("scripts/uml-alarm-trace runs (python3)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// results/README.md says the host generated and delivered a SIGALRM for every expiry the
/// traced guests' idle loops found (151 in r201, 193 in r204), recoveries included; this
/// reads the committed traces again with the script the text names, and shows that a
/// stretch without its SIGALRMs would have been found.
#[test]
fn the_traced_recoveries_show_no_host_side_loss() {
    let analyze = |trace: &str, extra: &[&str]| -> String {
        let path = repo()
            .join("results/uml-hang-stress/alarm-traces")
            .join(trace);
        let mut args = vec!["analyze", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        uml_alarm_trace(&args)
    };
    let readme = read_text(&repo().join("results/README.md"));
    let readme = ungrouped(&readme);
    for (trace, cell) in [
        ("100mbit-stock-4f-cpu100-r201-1.trace.xz", "r201"),
        ("100mbit-stock-4f-cpu100-r204-1.trace.xz", "r204"),
    ] {
        let out = analyze(trace, &[]);
        let found: usize = out
            .lines()
            .next()
            .and_then(|l| l.split(": ").nth(1))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{trace}: {out}"));
        assert!(
            out.contains(&format!(
                "{found}: SIGALRMs since the last re-arm: generated one, delivered one"
            )) && out
                .contains("host-side losses (an expiry with no SIGALRM generated or delivered): 0"),
            "{trace}: {out}"
        );
        assert!(
            readme.contains(&format!("{found} in {cell}"))
                || readme.contains(&format!("{found} times in {cell}")),
            "results/README.md does not say {found} for {cell}"
        );
        let planted = analyze(trace, &["--plant", "3"]);
        assert!(
            planted
                .contains("host-side losses (an expiry with no SIGALRM generated or delivered): 1"),
            "{trace} with a stretch's SIGALRMs removed: {planted}"
        );
    }
}

/// The ring kernel/lab/0001 prints, decoded by `scripts/uml-alarm-trace ring`, for the loss
/// tests/uml.rs makes on purpose (gdb returns from the SIGALRM handler before it does
/// anything): the host's SIGALRM reached the handler (HARD, signal 14) and nothing followed —
/// no recorded signal, no timer interrupt — until the idle loop found the timer expired with
/// nothing pending and recovered. The results README quotes this as the known loss's trace.
#[test]
fn the_ring_shows_a_forced_loss_as_a_handler_entry_and_nothing_after() {
    let console = repo().join("results/uml-hang-stress-ring/forced-loss-console.log");
    let text = uml_alarm_trace(&["ring", console.to_str().unwrap()]);
    // The events of the first dump, up to its recovery.
    let events: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("recovery 1,"))
        .take_while(|l| !l.contains("um-atrace: end"))
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|t| t.parse::<f64>().is_ok())
        })
        .collect();
    let name = |l: &str| l.split_whitespace().nth(2).unwrap_or("").to_string();
    let recover = events
        .iter()
        .rposition(|l| name(l) == "RECOVER")
        .unwrap_or_else(|| panic!("no RECOVER in the first dump:\n{text}"));
    assert!(
        events[recover - 1].contains("EXPIRED, NOTHING PENDING"),
        "{}",
        events[recover - 1]
    );
    // The last SIGALRM before the recovery entered the handler and was neither run nor
    // recorded: no ALRM, UNBLK or timer interrupt between it and the recovery.
    let last_alarm = events[..recover]
        .iter()
        .rposition(|l| name(l) == "HARD" && l.ends_with("signal 14"))
        .expect("a SIGALRM before the recovery");
    let between: Vec<String> = events[last_alarm + 1..recover]
        .iter()
        .map(|l| name(l))
        .collect();
    assert!(
        between
            .iter()
            .all(|n| !["ALRM", "REAL", "DOIRQ", "UMTIMER", "UNBLK"].contains(&n.as_str())),
        "the dropped SIGALRM was handled after all: {between:?}"
    );
}
