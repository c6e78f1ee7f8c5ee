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
    #[serde(default)]
    table: Vec<TableCheck>,
}

/// A table of the document whose cells are the figures of a rendered file (a run's
/// table.md): each checked cell's figures, as the cell rounds them, are all figures of one
/// line of the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TableCheck {
    /// The table's header row, verbatim: it finds the table (the first after `after`).
    header: String,
    /// A line the table follows (its section's heading), where two tables share a header.
    after: Option<String>,
    #[serde(default = "default_doc")]
    doc: String,
    /// The rendered files (a `*` matches within one path component).
    rows: String,
    /// A second set of files (a run's aggregates.csv beside its table.md): a cell's figures
    /// may then be split between one line of `rows` and one line of `also`.
    also: Option<String>,
    /// The columns checked, counted from 1.
    columns: Vec<usize>,
    /// A source figure also stands for itself times each of these (1e-3: µs read as ms,
    /// 1e-6: bit/s as Mb/s), rounded as the text writes it.
    #[serde(default)]
    scales: Vec<f64>,
    /// Rows left to claims: those whose first cells, joined by " | ", start with one of these.
    #[serde(default)]
    except: Vec<String>,
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
    /// Text (a table an analysis script made, which a test remakes): the number right after
    /// this text in each file.
    after: Option<String>,
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
        if let Some(after) = &c.after {
            let at = text
                .find(after.as_str())
                .ok_or_else(|| format!("{}: no '{after}'", f.display()))?;
            let number: String = text[at + after.len()..]
                .chars()
                .take_while(|ch| ch.is_ascii_digit() || *ch == '.')
                .collect();
            let x: f64 = number
                .trim_end_matches('.')
                .parse()
                .map_err(|_| format!("{}: no number after '{after}'", f.display()))?;
            out.push(x * c.scale + c.offset);
            continue;
        }
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
    ungrouped_lined(s).0
}

/// `ungrouped(s)`, and for each of its bytes the line of `s` it comes from.
fn ungrouped_lined(s: &str) -> (String, Vec<usize>) {
    // White space collapsed, each char with its line.
    let mut chars: Vec<(char, usize)> = Vec::with_capacity(s.len());
    let (mut line, mut space) = (1, false);
    for ch in s.chars() {
        if ch.is_whitespace() {
            space = !chars.is_empty();
            if ch == '\n' {
                line += 1;
            }
            continue;
        }
        if space {
            chars.push((' ', line));
            space = false;
        }
        chars.push((ch, line));
    }
    let digit = |i: usize| chars.get(i).is_some_and(|(c, _)| c.is_ascii_digit());
    let (mut out, mut lines) = (String::with_capacity(s.len()), Vec::with_capacity(s.len()));
    for (i, &(ch, line)) in chars.iter().enumerate() {
        let grouped =
            ch == ' ' && i > 0 && digit(i - 1) && (i + 1..i + 4).all(digit) && !digit(i + 4);
        if !grouped {
            out.push(ch);
            lines.extend(std::iter::repeat_n(line, ch.len_utf8()));
        }
    }
    (out, lines)
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

fn load_all() -> Claims {
    let text = std::fs::read_to_string(repo().join("results/claims.toml")).unwrap();
    toml::from_str::<Claims>(&text).unwrap_or_else(|e| panic!("results/claims.toml: {e}"))
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

/// Whether the figure `written` (as the text rounds it) is `source` rounded alike: "1.3"
/// and "22.0" stand for 1.31 and 22.00, "203" for 203; a figure with more decimals than its
/// source never does.
fn rounds_to(written: &str, source: &str) -> bool {
    decimals(written) <= decimals(source) && scaled_rounds_to(written, source, 1.0)
}

/// Whether `written` is the figure `source` times `scale`, rounded as `written` is.
fn scaled_rounds_to(written: &str, source: &str, scale: f64) -> bool {
    let places = decimals(written);
    source
        .parse::<f64>()
        .is_ok_and(|v| format!("{:.places$}", v * scale) == written)
}

/// How many decimals a figure is written with.
fn decimals(figure: &str) -> usize {
    figure.split_once('.').map_or(0, |(_, d)| d.len())
}

/// The cells of a markdown table row, trimmed (`| a | b |` -> [a, b]).
fn cells(row: &str) -> Vec<&str> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// Checks one table against its rendered files: the problems, and the (line, figure) pairs
/// it checked.
fn check_table(
    t: &TableCheck,
    doc: &str,
) -> (Vec<String>, std::collections::BTreeSet<(usize, String)>) {
    let mut wrong = vec![];
    let mut checked = std::collections::BTreeSet::new();
    let lines: Vec<&str> = doc.lines().collect();
    let from = match &t.after {
        Some(after) => lines.iter().position(|l| l.trim() == after.trim()),
        None => Some(0),
    };
    let Some(start) =
        from.and_then(|from| (from..lines.len()).find(|&i| lines[i].trim() == t.header.trim()))
    else {
        return (
            vec![format!("{}: no table with the header {}", t.doc, t.header)],
            checked,
        );
    };
    // Each line of the files, as its figures.
    let lines_of = |pattern: &str| -> Result<Vec<Vec<String>>, String> {
        let files = expand(pattern);
        if files.is_empty() {
            return Err(format!("{}: no file matches {pattern}", t.doc));
        }
        Ok(files
            .iter()
            .flat_map(|f| read_text(f).lines().map(figures).collect::<Vec<_>>())
            .collect())
    };
    let source = match lines_of(&t.rows) {
        Ok(s) => s,
        Err(e) => return (vec![e], checked),
    };
    // Without `also`, one empty line: every figure must then be in `rows`.
    let also = match t.also.as_deref().map(lines_of) {
        None => vec![vec![]],
        Some(Ok(s)) => s,
        Some(Err(e)) => return (vec![e], checked),
    };
    let holds = |line: &[String], w: &str| {
        line.iter()
            .any(|g| rounds_to(w, g) || t.scales.iter().any(|&scale| scaled_rounds_to(w, g, scale)))
    };
    for (i, row) in lines.iter().enumerate().skip(start + 2) {
        if !row.trim_start().starts_with('|') {
            break;
        }
        let row_cells = cells(row);
        let key = row_cells.join(" | ");
        if t.except.iter().any(|e| key.starts_with(e.as_str())) {
            continue;
        }
        for &c in &t.columns {
            let Some(cell) = row_cells.get(c - 1) else {
                wrong.push(format!("{} line {}: no column {c}", t.doc, i + 1));
                continue;
            };
            let written: Vec<String> = prose_figures(&ungrouped(cell))
                .into_iter()
                .map(|(_, f)| f)
                .collect();
            let found = source.iter().any(|line| {
                also.iter()
                    .any(|other| written.iter().all(|w| holds(line, w) || holds(other, w)))
            });
            if found {
                checked.extend(written.into_iter().map(|w| (i + 1, w)));
            } else {
                wrong.push(format!(
                    "{} line {}: '{cell}' — its figures are in no one line of {}",
                    t.doc,
                    i + 1,
                    t.rows
                ));
            }
        }
    }
    (wrong, checked)
}

/// The figures a reader reads as measurements in `text` (already ungrouped), each with its
/// byte offset: those of `figures`, less names — digits inside code spans, in a word with a
/// letter (`r219`, `mss1228`, a commit, a path, §4), in dates and in versions (6.12.117).
fn prose_figures(text: &str) -> Vec<(usize, String)> {
    let name_char = |c: char| c.is_ascii_alphanumeric() || "_-/.:#§^@".contains(c);
    let mut out = vec![];
    let mut in_code = false;
    let mut rest = text.char_indices().peekable();
    while let Some((at, ch)) = rest.next() {
        if ch == '`' {
            in_code = !in_code;
            continue;
        }
        if in_code || !name_char(ch) {
            continue;
        }
        let mut end = at + ch.len_utf8();
        while let Some(&(i, c)) = rest.peek() {
            if !name_char(c) {
                break;
            }
            end = i + c.len_utf8();
            rest.next();
        }
        let word = &text[at..end];
        let date = word.len() >= 10
            && word.as_bytes()[4] == b'-'
            && word.as_bytes()[7] == b'-'
            && word[..4].bytes().all(|b| b.is_ascii_digit());
        if date
            || word
                .chars()
                .any(|c| c.is_alphabetic() || "_§#@".contains(c))
        {
            continue;
        }
        let mut from = 0;
        for figure in figures(word) {
            let i = from + word[from..].find(&figure).unwrap();
            from = i + figure.len();
            // A version (6.12.117) names a release.
            if figure.matches('.').count() < 2 {
                out.push((at + i, figure));
            }
        }
    }
    out
}

/// The figures of `doc` outside every claim's text: (line, figure, the line's words around it).
fn unchecked_figures(
    doc: &str,
    claim_texts: &[String],
    in_tables: &std::collections::BTreeSet<(usize, String)>,
) -> Vec<(usize, String, String)> {
    let (text, lines) = ungrouped_lined(doc);
    let mut covered = vec![false; text.len()];
    for t in claim_texts {
        for (at, m) in text.match_indices(t.as_str()) {
            covered[at..at + m.len()].iter_mut().for_each(|c| *c = true);
        }
    }
    prose_figures(&text)
        .into_iter()
        .filter(|(at, figure)| !covered[*at] && !in_tables.contains(&(lines[*at], figure.clone())))
        .map(|(at, figure)| {
            let line = lines[at];
            let words = doc.lines().nth(line - 1).unwrap_or("").trim().to_string();
            (line, figure, words)
        })
        .collect()
}

/// `doc` with the lines of its "## Contents" section blank (the line numbers kept).
fn without_contents(doc: &str) -> String {
    let mut inside = false;
    doc.lines()
        .map(|l| {
            if l.starts_with("## ") {
                inside = l.trim() == "## Contents";
            }
            if inside {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
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
    let Claims {
        claim: claims,
        table: tables,
    } = load_all();
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
    // Over the whole document: the figures a reader reads as measurements, and those outside
    // every claim's text (listed in a file, line by line, for whoever covers them next).
    // The tables checked against their rendered files.
    let mut in_tables = std::collections::BTreeSet::new();
    for t in &tables {
        let text = std::fs::read_to_string(repo().join(&t.doc)).unwrap();
        let (problems, checked) = check_table(t, &text);
        wrong.extend(problems);
        if t.doc == "results/README.md" {
            in_tables.extend(checked);
        }
    }
    // The contents list repeats the headings: its lines are blanked, not counted twice.
    let counted = without_contents(&readme);
    let all = prose_figures(&ungrouped(&counted)).len();
    let unchecked = unchecked_figures(&counted, &claimed, &in_tables);
    let list = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("claims-unchecked.txt");
    let listing: String = unchecked
        .iter()
        .map(|(line, figure, words)| format!("{line}: {figure}\t{words}\n"))
        .collect();
    std::fs::write(&list, listing).unwrap();
    eprintln!(
        "results/README.md: {} claims and {} tables checked; {} of its {all} figures are in a claim's text or a checked table, {} not yet ({}); findings page: {} bold figures, {unchecked_findings} unchecked",
        claims.len(),
        tables.len(),
        all - unchecked.len(),
        unchecked.len(),
        list.display(),
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
    let figures_only = |t: &str| -> Vec<String> {
        prose_figures(&ungrouped(t))
            .into_iter()
            .map(|(_, f)| f)
            .collect()
    };
    assert_eq!(
        figures_only(
            "§6: 15 of 20 (r219, `mss1228`, 7ac7b152, log-2026-12-07.txt, 2026-12-07, 6.12.117) at 1.89–2.5 Mb/s, n = 5."
        ),
        ["15", "20", "1.89", "2.5", "5"]
    );
    assert!(rounds_to("22.0", "22.00") && rounds_to("1.3", "1.31") && rounds_to("203", "203"));
    assert!(!rounds_to("1.31", "1.3") && !rounds_to("203", "202") && !rounds_to("22", "22.9"));
    // A table against a rendered file: a cell whose figures one line of the file holds
    // passes; one figure changed, and it fails.
    let table = TableCheck {
        header: "| rule | ours |".into(),
        after: None,
        doc: "test".into(),
        rows: "results/paper/table.md".into(),
        also: None,
        columns: vec![2],
        scales: vec![],
        except: vec!["left".into()],
    };
    let (problems, checked) = check_table(
        &table,
        "x\n| rule | ours |\n|---|---|\n| a | 22.90 s (22.90–22.92) @ 1.89 Mb/s |\n\
         | b | 22.91 s |\n| left | 1 |\n\nafter 7\n",
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("line 5"), "{problems:?}");
    assert!(checked.contains(&(4, "22.92".to_string())) && checked.len() == 3);
    assert_eq!(
        without_contents("# t\n## Contents\n- [a 1](#a-1)\n## a 1\nx 2"),
        "# t\n\n\n## a 1\nx 2"
    );
    let (text, lines) = ungrouped_lined("a 7 068\nb\n\n  19.5 c");
    assert_eq!(text, "a 7068 b 19.5 c");
    assert_eq!(lines[text.find("19.5").unwrap()], 4);
    assert_eq!(
        unchecked_figures(
            "x 12 and 13\ny 14",
            &["and 13 y".to_string()],
            &Default::default()
        ),
        [
            (1, "12".to_string(), "x 12 and 13".to_string()),
            (2, "14".to_string(), "y 14".to_string())
        ]
    );
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
        after: None,
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
    // A figure of a script's table, read after its words.
    let c = Claim {
        rows: "results/paper/table.md".into(),
        after: Some("| Default (8 MB sndbuf) | 2 Mb/s | median ".into()),
        filter: vec![],
        column: None,
        delay: false,
        decimals: 2,
        ..c
    };
    assert_eq!(rendered(&c).unwrap(), "22.00");
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
