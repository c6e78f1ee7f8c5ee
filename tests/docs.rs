//! README.md and docs/ cannot go stale unseen: the README stays short and starts with the
//! two commands CI runs, every relative link in the documentation leads to a file (and an
//! anchor to a heading), the loopback run the README shows is run as written, its output
//! compared line by line in shape with the sample printed there, every command the
//! documentation shows for sbm's programs is accepted by its program as written, and the
//! usage doc's short loopback runs run.

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
    let mut v = vec![
        repo().join("README.md"),
        repo().join("testbed/README.md"),
        repo().join("results/README.md"),
    ];
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
    // The sample is a run as root on a kernel with BPF TX timestamping; elsewhere the default
    // source is the error queue, whose run has no line counting the program's reports.
    let mut expected = shapes(&sample);
    if !send.stdout.contains("timestamp source: auto: bpf") {
        expected.retain(|s| s != "reports");
    }
    assert_eq!(
        shapes(&send.stdout),
        expected,
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
        "$ scripts/matrix compare results/python-vs-sbm-send results/python-vs-sbm-send-reader";
    let (_, sample) = code_blocks(&doc)
        .into_iter()
        .find(|(_, body)| body.first().map(String::as_str) == Some(command))
        .expect("docs/matrix.md shows the compare command and its output");
    let mut cmd = std::process::Command::new(bin("sbm-matrix"));
    cmd.current_dir(repo()).args([
        "compare",
        "results/python-vs-sbm-send",
        "results/python-vs-sbm-send-reader",
    ]);
    let res = output_within(cmd, Duration::from_secs(60));
    assert_eq!(res.code(), Some(0), "{}", res.stderr);
    assert_eq!(
        sample[1..].join("\n").trim_end(),
        res.stdout.trim_end(),
        "docs/matrix.md's compare sample is stale"
    );
}

/// One command line of the documentation as the program it runs sees it: the program's
/// name and its arguments, or None for a line that runs none of sbm's programs.
fn sbm_command(line: &str) -> Option<(String, Vec<String>)> {
    let line = line.trim().trim_start_matches("$ ");
    // Shell: what follows a comment mark, a pipe or a background `&` is not the program's.
    let line = line.split(" #").next()?.split(" | ").next()?;
    let mut words: Vec<&str> = line.split_whitespace().collect();
    if words.last() == Some(&"&") {
        words.pop();
    }
    if words.starts_with(&["ip", "netns", "exec"]) && words.len() > 3 {
        words.drain(..4);
    }
    let program = words.first()?.trim_start_matches("target/release/");
    // A sample of output ("sbm-send 0.1.0: …"), not a command.
    if words.get(1).is_some_and(|w| w.ends_with(':')) {
        return None;
    }
    let (name, mut args): (&str, Vec<String>) = match program {
        "sbm-send" | "sbm-sink" | "sbm-trace" | "sbm-matrix" | "sbm-testbed" | "sbm-delay"
        | "sbm-rpm" | "sbm-rpm-server" => (program, vec![]),
        "scripts/matrix" => ("sbm-matrix", vec![]),
        "testbed/wan" => ("sbm-testbed", vec!["wan".into()]),
        "testbed/shape" => ("sbm-testbed", vec!["shape".into()]),
        "testbed/uml" => ("sbm-testbed", vec!["uml".into()]),
        _ => return None,
    };
    args.extend(words[1..].iter().map(|w| w.to_string()));
    Some((name.to_string(), args))
}

/// The command lines of a code block, continuation lines (`\`) joined.
fn command_lines(body: &[String]) -> Vec<String> {
    let mut out = vec![];
    let mut pending = String::new();
    for line in body {
        match line.trim_end().strip_suffix('\\') {
            Some(part) => pending.push_str(part),
            None => {
                pending.push_str(line);
                out.push(std::mem::take(&mut pending));
            }
        }
    }
    out
}

/// Whether `name` accepts `args` as its command line (clap's parse, and sbm-send's and
/// sbm-sink's checks of values beyond it; names are not resolved).
fn accepted(name: &str, args: &[String]) -> Result<(), String> {
    use clap::Parser;
    let argv = std::iter::once(name.to_string()).chain(args.iter().cloned());
    let parsed = |e: clap::Error| e.to_string().lines().next().unwrap_or("").to_string();
    match name {
        "sbm-send" => sbm::send::cli::SendArgs::try_parse_from(argv)
            .map_err(parsed)?
            .check()
            .map(|_| ()),
        "sbm-sink" => sbm::sink::cli::SinkArgs::try_parse_from(argv)
            .map_err(parsed)?
            .listen_spec()
            .map(|_| ()),
        "sbm-matrix" => sbm::matrix::Cli::try_parse_from(argv)
            .map(|_| ())
            .map_err(parsed),
        "sbm-testbed" => sbm::testbed::Cli::try_parse_from(argv)
            .map(|_| ())
            .map_err(parsed),
        #[cfg(feature = "bpf")]
        "sbm-trace" => sbm::trace::cli::TraceArgs::try_parse_from(argv)
            .map(|_| ())
            .map_err(parsed),
        _ => Ok(()),
    }
}

/// Every command the documentation shows for sbm's programs (README.md, docs/, the test
/// bed's README) is one its program accepts as written: no renamed flag, no value out of
/// range, no unit it refuses. A command that another runs after `--` (testbed/uml run …
/// -- sbm-send …) is checked too; `…` marks a line left to the reader and is not.
#[test]
fn every_command_the_documentation_shows_is_accepted_as_written() {
    let mut checked = 0;
    let mut refused = vec![];
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (_, body) in code_blocks(&text) {
            for line in command_lines(&body) {
                let Some((name, args)) = sbm_command(&line) else {
                    continue;
                };
                // The outer command, up to `--`, and the inner one after it.
                let split = args.iter().position(|a| a == "--");
                // (The outer one with a stand-in for the command it runs.)
                let (outer, inner) = match split {
                    Some(i) => (
                        [&args[..=i], &["true".to_string()][..]].concat(),
                        Some(&args[i + 1..]),
                    ),
                    None => (args.clone(), None),
                };
                let mut runs = vec![(name.clone(), outer)];
                if let Some(inner) = inner.and_then(|w| sbm_command(&w.join(" "))) {
                    runs.push(inner);
                }
                for (name, args) in runs {
                    if args
                        .iter()
                        .any(|a| a.contains('…') || a == "..." || a == "CMD")
                    {
                        continue;
                    }
                    checked += 1;
                    if let Err(e) = accepted(&name, &args) {
                        refused.push(format!(
                            "{}: `{name} {}`: {e}",
                            doc.strip_prefix(repo()).unwrap().display(),
                            args.join(" ")
                        ));
                    }
                }
            }
        }
    }
    eprintln!("{checked} documented commands checked");
    assert!(
        checked >= 30,
        "only {checked} commands found: is the parser of the docs right?"
    );
    assert!(
        refused.is_empty(),
        "refused as written:\n{}",
        refused.join("\n")
    );
}

/// The usage doc's short loopback runs run as written (a free port added): each ends with
/// status 0 and its summary.
#[test]
fn the_usage_docs_short_loopback_runs_run() {
    let _g = serial();
    let doc = read("docs/usage.md");
    let runs: Vec<(String, Vec<String>)> = code_blocks(&doc)
        .into_iter()
        .flat_map(|(_, body)| command_lines(&body))
        .filter_map(|l| sbm_command(&l))
        .filter(|(name, args)| {
            name == "sbm-send"
                && args
                    .iter()
                    .any(|a| a == "127.0.0.1" || a.starts_with("[::1]"))
                && !args.iter().any(|a| a == "--out")
        })
        .collect();
    assert!(runs.len() >= 2, "{runs:?}");
    for (_, args) in runs {
        let sink = Sink::start("[::]:0", &["-q"]);
        let port = sink.addr.rsplit_once(':').unwrap().1.to_string();
        let mut args: Vec<String> = args
            .into_iter()
            .map(|a| match a.strip_suffix(":5301") {
                Some(host) => format!("{host}:{port}"),
                None => a,
            })
            .collect();
        if !args.iter().any(|a| a.ends_with(&format!(":{port}"))) {
            args.extend(["-p".to_string(), port.clone()]);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let res = run("sbm-send", &argv, Duration::from_secs(60));
        assert_eq!(
            res.code(),
            Some(0),
            "sbm-send {}: {}",
            args.join(" "),
            res.stderr
        );
        assert!(
            res.stdout
                .lines()
                .any(|l| l.ends_with("complete") || l.starts_with("complete: ")),
            "sbm-send {}: {}",
            args.join(" "),
            res.stdout
        );
        sink.stop();
    }
}
