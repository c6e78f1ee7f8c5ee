//! README.md and docs/ cannot go stale unseen: the README stays short and starts with the
//! two commands CI runs, every relative link in the documentation leads to a file (and an
//! anchor to a heading), and the loopback run the README shows is run as written, its output
//! compared line by line in shape with the sample printed there.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The documents a reader is sent to: README.md, docs/*.md and the test bed's README.
fn documents() -> Vec<PathBuf> {
    let mut v = vec![repo().join("README.md"), repo().join("testbed/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces
/// to '-'.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(md: &str) -> Vec<String> {
    let mut inside_code = false;
    md.lines()
        .filter(|l| {
            if l.starts_with("```") {
                inside_code = !inside_code;
            }
            !inside_code && l.starts_with('#')
        })
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

/// Relative link targets `](path#anchor)` outside code blocks.
fn links(md: &str) -> Vec<String> {
    let mut out = vec![];
    let mut inside_code = false;
    for line in md.lines() {
        if line.starts_with("```") {
            inside_code = !inside_code;
        }
        if inside_code {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(end) = rest.find(')') {
                let target = &rest[..end];
                if !target.contains("://") && !target.starts_with("mailto:") {
                    out.push(target.to_string());
                }
                rest = &rest[end..];
            }
        }
    }
    out
}

#[test]
fn the_readme_is_short_and_starts_with_the_two_commands_ci_runs() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines (at most 300)");
    let (_, first) = code_blocks(&readme)
        .into_iter()
        .next()
        .expect("a code block");
    assert!(
        first[0].starts_with("scripts/setup && scripts/matrix run quick"),
        "{first:?}"
    );
    let test_cmd = first[1].split('#').next().unwrap().trim().to_string();
    assert_eq!(test_cmd, "cargo test --release");
    // CI runs exactly that command, last.
    let ci = read(".ci/run");
    let last = ci
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .unwrap();
    assert_eq!(
        last.trim(),
        test_cmd,
        ".ci/run must end with README's test command"
    );
    // Everything a reader is sent to exists, and the table of contents names every doc.
    for doc in documents().iter().skip(2) {
        let rel = doc.strip_prefix(repo()).unwrap().display().to_string();
        assert!(
            readme.contains(&format!("]({rel})")),
            "README.md does not link {rel}"
        );
    }
}

#[test]
fn every_relative_link_in_the_documentation_leads_somewhere() {
    let mut broken = vec![];
    let mut checked = 0;
    for doc in documents() {
        let md = std::fs::read_to_string(&doc).unwrap();
        let dir = doc.parent().unwrap();
        for target in links(&md) {
            checked += 1;
            let (path, frag) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file: PathBuf = if path.is_empty() {
                doc.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!("{}: {target} (no such file)", doc.display()));
                continue;
            }
            if let Some(frag) = frag {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                if !anchors(&text).iter().any(|a| a == frag) {
                    broken.push(format!("{}: {target} (no such heading)", doc.display()));
                }
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} links found: is the parser right?"
    );
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

#[test]
fn shapes_ignore_values_but_not_labels() {
    assert_eq!(shape("rows: 74466 exact, 1824 coalesced"), "rows");
    assert_eq!(shape("0.00-1.00 s      2.32 GiB"), "<interval>");
    assert_eq!(
        shape("sbm-send 0.1.0: 127.0.0.1:1 -> 127.0.0.1:2"),
        "sbm-send 9.9.9"
    );
    assert_eq!(shape("written 4.66 GiB in 76290 writes"), "written");
    assert_ne!(shapes("rows: 1\nreceiver: 2"), shapes("rows: 1\nsink: 2"));
    assert_eq!(shapes("0.0 a\n1.0 b\nrows: 3"), ["<interval>", "rows"]);
    assert_eq!(shape("[2/3] x (ETA 1:08)"), shape("[2/3] x (ETA 0:34)"));
}

/// README's first run on loopback, run as written (a free port and a scratch directory in
/// place of 5301 and /tmp/lb): both programs succeed and sbm-send prints the same kinds of
/// lines in the same order as the sample under it.
#[test]
fn the_readme_loopback_run_prints_what_the_readme_shows() {
    let _g = serial();
    let readme = read("README.md");
    let blocks = code_blocks(&readme);
    let at = blocks
        .iter()
        .position(|(before, _)| before.contains("checked by tests/docs.rs"))
        .expect("README's loopback commands are marked for this test");
    let commands = &blocks[at].1;
    let sample = blocks[at + 1].1.join("\n");
    assert_eq!(commands.len(), 2, "{commands:?}");
    let port = common::free_loopback_port();
    let dir = tempdir("readme-loopback");
    let out = dir.join("lb");
    let argv = |line: &str| -> (String, Vec<String>) {
        let mut words = line
            .trim()
            .trim_end_matches('&')
            .split_whitespace()
            .map(|w| {
                w.replace("5301", &port)
                    .replace("/tmp/lb", out.to_str().unwrap())
            });
        let program = words.next().unwrap();
        let name = program
            .strip_prefix("target/release/")
            .unwrap_or_else(|| panic!("README's loopback commands run target/release/…: {line}"));
        (name.to_string(), words.collect())
    };
    let (sink_bin, sink_args) = argv(&commands[0]);
    let (send_bin, send_args) = argv(&commands[1]);
    assert_eq!(
        (sink_bin.as_str(), send_bin.as_str()),
        ("sbm-sink", "sbm-send")
    );
    let sink_args: Vec<&str> = sink_args.iter().map(String::as_str).collect();
    let send_args: Vec<&str> = send_args.iter().map(String::as_str).collect();
    let mut sink = Running::spawn("sbm-sink", &sink_args);
    sink.wait_line("listening on", Duration::from_secs(10));
    let send = run("sbm-send", &send_args, Duration::from_secs(60));
    let sink = sink.wait(Duration::from_secs(20));
    assert_eq!(send.code(), Some(0), "{}{}", send.stdout, send.stderr);
    assert_eq!(sink.code(), Some(0), "the sink's --once: {}", sink.stderr);
    assert!(out.join("summary.json").is_file() && out.join("writes.csv").is_file());
    assert_eq!(
        shapes(&send.stdout),
        shapes(&sample),
        "README's sample output is not what sbm-send prints now:\n{}",
        send.stdout
    );
}

/// docs/matrix.md's `compare` sample is what `sbm-matrix compare` prints for those
/// committed runs now, to the character.
#[test]
fn the_compare_sample_in_the_matrix_doc_is_current() {
    let doc = read("docs/matrix.md");
    let command =
        "$ scripts/matrix compare results/kernel-vs-emulation results/kernel-vs-emulation-v2";
    let (_, sample) = code_blocks(&doc)
        .into_iter()
        .find(|(_, body)| body.first().map(String::as_str) == Some(command))
        .expect("docs/matrix.md shows the compare command and its output");
    let mut cmd = std::process::Command::new(bin("sbm-matrix"));
    cmd.current_dir(repo()).args([
        "compare",
        "results/kernel-vs-emulation",
        "results/kernel-vs-emulation-v2",
    ]);
    let res = output_within(cmd, Duration::from_secs(60));
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    assert_eq!(
        sample[1..].join("\n").trim_end(),
        res.stdout.trim_end(),
        "docs/matrix.md's compare sample is stale"
    );
}
