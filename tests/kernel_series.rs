//! The posting copy of the replenish series (kernel/patches/v3: a cover letter, 1/2 and 2/2)
//! against the stack the tests build and run (kernel/patches/0001 and 0010): each posted
//! patch must make the same change with the same commit message as the stack's, and the
//! cover letter must list them and their diffstat. The copies differ only where they must:
//! their subjects, and 2/2's context, which is the tree without the stack's 0009.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn kernel_patches() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernel/patches")
}

/// The one file in `dir` whose name starts with `prefix`.
fn one(dir: &Path, prefix: &str) -> (String, String) {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{}: want one file named {prefix}*, found {found:?}",
        dir.display()
    );
    let p = found.pop().unwrap();
    let name = p.file_name().unwrap().to_string_lossy().into_owned();
    (name, std::fs::read_to_string(&p).unwrap())
}

/// The mail's Subject header, its continuation lines unfolded.
fn subject(mail: &str) -> String {
    let mut lines = mail.lines().skip_while(|l| !l.starts_with("Subject: "));
    let mut s = lines.next().expect("a Subject header")["Subject: ".len()..].to_string();
    for l in lines.take_while(|l| l.starts_with(' ')) {
        s.push_str(l);
    }
    s
}

/// The commit message: from the blank line after the headers to the "---" line.
fn message(mail: &str) -> String {
    mail.lines()
        .skip_while(|l| !l.is_empty())
        .skip(1)
        .take_while(|l| *l != "---")
        .collect::<Vec<_>>()
        .join("\n")
}

/// Per file, the lines the patch adds and removes (sorted): the change itself, whatever
/// the context lines, hunk headers and index lines around it.
fn changes(mail: &str) -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let mut files: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    let mut current: Option<String> = None;
    for l in mail.lines() {
        if l == "-- " {
            break; // the signature
        }
        if let Some(rest) = l.strip_prefix("diff --git a/") {
            let name = rest.split(" b/").next().unwrap().to_string();
            files.entry(name.clone()).or_default();
            current = Some(name);
            continue;
        }
        let Some(file) = &current else { continue };
        if l.starts_with("+++ ") || l.starts_with("--- ") {
            continue;
        }
        let entry = files.get_mut(file).unwrap();
        if let Some(added) = l.strip_prefix('+') {
            entry.0.push(added.to_string());
        } else if let Some(removed) = l.strip_prefix('-') {
            entry.1.push(removed.to_string());
        }
    }
    for (added, removed) in files.values_mut() {
        added.sort();
        removed.sort();
    }
    files
}

/// The subject without its "[PATCH ...]" prefix.
fn title(subject: &str) -> &str {
    subject.split_once("] ").map_or(subject, |(_, t)| t)
}

#[test]
fn the_posted_series_is_the_stack_the_tests_run() {
    let v3 = kernel_patches().join("v3");
    let (_, cover) = one(&v3, "v3-0000-cover-letter");
    let (_, one_of_two) = one(&v3, "v3-0001-");
    let (_, two_of_two) = one(&v3, "v3-0002-");
    let (_, stack_option) = one(&kernel_patches(), "0001-");
    let (_, stack_selftest) = one(&kernel_patches(), "0010-");

    for (mail, n) in [(&cover, 0), (&one_of_two, 1), (&two_of_two, 2)] {
        let s = subject(mail);
        assert!(
            s.starts_with(&format!("[PATCH net-next v3 {n}/2] ")),
            "subject of {n}/2: {s}"
        );
    }
    for (posted, stack, n) in [
        (&one_of_two, &stack_option, "1/2 and 0001"),
        (&two_of_two, &stack_selftest, "2/2 and 0010"),
    ] {
        assert_eq!(
            title(&subject(posted)),
            title(&subject(stack)),
            "{n}: titles"
        );
        assert_eq!(message(posted), message(stack), "{n}: commit messages");
        let (p, s) = (changes(posted), changes(stack));
        assert!(!p.is_empty(), "{n}: no diff found");
        assert_eq!(
            p.keys().collect::<Vec<_>>(),
            s.keys().collect::<Vec<_>>(),
            "{n}: files"
        );
        for (file, change) in &p {
            assert!(
                change == &s[file],
                "{n}: {file} is changed differently (added or removed lines differ)"
            );
        }
    }

    // The cover letter lists both patches and their diffstat's totals.
    for patch in [&one_of_two, &two_of_two] {
        let t = title(&subject(patch)).to_string();
        assert!(
            cover.contains(&format!("\n  {t}\n")),
            "the cover letter's shortlog lacks '{t}'"
        );
    }
    let (files, added, removed) =
        [&one_of_two, &two_of_two]
            .iter()
            .map(|m| changes(m))
            .fold((0, 0, 0), |(f, a, r), c| {
                (
                    f + c.len(),
                    a + c.values().map(|x| x.0.len()).sum::<usize>(),
                    r + c.values().map(|x| x.1.len()).sum::<usize>(),
                )
            });
    let total = format!(
        "{files} files changed, {added} insertions(+), {removed} deletion{}(-)",
        if removed == 1 { "" } else { "s" }
    );
    assert!(
        cover.contains(&total),
        "the cover letter's diffstat is not the series' ({total})"
    );
    assert!(
        !cover.contains("*** SUBJECT HERE ***") && !cover.contains("*** BLURB HERE ***"),
        "the cover letter still has git's placeholders"
    );
}
