//! The import graph of `src/` as src/lib.rs states it: no module imports a sibling that
//! imports it back (no cycle among the modules of any parent, from `crate::` and `super::`
//! paths in non-test code), and the top-level modules import only their own layer or the
//! layers below it. Read from the source text, so it needs no tool beyond the test itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// src/lib.rs's layers, lowest first: a module may import modules of its own layer (without
/// a cycle) and of the layers below.
const LAYERS: &[&[&str]] = &[
    // Helpers with no knowledge of TCP.
    &[
        "ne", "units", "clock", "addr", "signals", "cli", "stats", "sysinfo", "embedded", "wire",
        "peers", "tcpinfo",
    ],
    // The system calls (the only unsafe code) and socket options over them.
    &["sys", "sockopt"],
    // The measurement: TX timestamps and the write ledger, the readiness rule, the records.
    &["tstamp", "replenish", "report"],
    // The BPF programs (the `bpf` feature).
    &["bpf"],
    // The programs: each binary's logic, and the remote hosts' transport.
    &["send", "sink", "trace", "delay", "testbed", "remote", "rpm"],
    // The matrix runs the programs.
    &["matrix"],
];

type ModPath = Vec<String>;

/// Every module of `src/` by its path (`send::run::timing`), with its file.
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: ModPath = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            found.insert(parts, path);
        }
    }
    found
}

/// The file's code without its unit tests (a trailing `#[cfg(test)] mod tests`) and
/// without comment lines (doc comments name paths they do not import).
fn code_of(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads one path tree at `s[i..]` (`a::b`, `a::{b, c::d}`, `*`), each full path pushed
/// onto `out` after `prefix`. Returns where it stopped.
fn path_tree(s: &[u8], mut i: usize, prefix: &[String], out: &mut Vec<ModPath>) -> usize {
    let skip_ws = |mut i: usize| {
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut path = prefix.to_vec();
    loop {
        i = skip_ws(i);
        match s.get(i) {
            Some(b'{') => {
                i += 1;
                loop {
                    i = path_tree(s, i, &path, out);
                    i = skip_ws(i);
                    match s.get(i) {
                        Some(b',') => i += 1,
                        Some(b'}') => return i + 1,
                        _ => return i,
                    }
                    if skip_ws(i) < s.len() && s[skip_ws(i)] == b'}' {
                        return skip_ws(i) + 1;
                    }
                }
            }
            Some(b'*') => {
                out.push(path);
                return i + 1;
            }
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {
                let start = i;
                while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
                    i += 1;
                }
                path.push(String::from_utf8_lossy(&s[start..i]).into_owned());
                if s[i..].starts_with(b"::") {
                    i += 2;
                } else {
                    out.push(path);
                    return i;
                }
            }
            _ => {
                out.push(path);
                return i;
            }
        }
    }
}

/// The module paths `code` (of module `own`) names through `crate::` and `super::`.
fn named_paths(code: &str, own: &[String]) -> Vec<ModPath> {
    let s = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let starts_word =
            i == 0 || !(s[i - 1].is_ascii_alphanumeric() || matches!(s[i - 1], b'_' | b':'));
        if starts_word && s[i..].starts_with(b"crate::") {
            i = path_tree(s, i + "crate::".len(), &[], &mut out);
            continue;
        }
        if starts_word && s[i..].starts_with(b"super::") {
            let mut up = 0;
            while s[i..].starts_with(b"super::") {
                up += 1;
                i += "super::".len();
            }
            let base = own[..own.len().saturating_sub(up)].to_vec();
            i = path_tree(s, i, &base, &mut out);
            continue;
        }
        i += 1;
    }
    out
}

/// Module → the modules it imports (the longest module prefix of each path it names).
fn import_graph(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mods = modules(src);
    let mut graph = BTreeMap::new();
    for (own, file) in &mods {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let targets: BTreeSet<ModPath> = named_paths(&code, own)
            .into_iter()
            .filter_map(|p| {
                (1..=p.len())
                    .rev()
                    .map(|n| p[..n].to_vec())
                    .find(|m| mods.contains_key(m))
            })
            .filter(|m| m != own)
            .collect();
        graph.insert(own.clone(), targets);
    }
    graph
}

/// For each parent module, the graph among its children that its descendants' imports make
/// (`a::x::y` importing `a::z` is an edge x → z under `a`). A module importing its own
/// ancestor or descendant is not a sibling edge.
fn sibling_graphs(
    graph: &BTreeMap<ModPath, BTreeSet<ModPath>>,
) -> BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> {
    let mut sib: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (a, targets) in graph {
        for b in targets {
            let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
            if common == a.len() || common == b.len() {
                continue;
            }
            sib.entry(a[..common].to_vec())
                .or_default()
                .entry(a[common].clone())
                .or_default()
                .insert(b[common].clone());
        }
    }
    sib
}

/// The strongly connected components of more than one node (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        g: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(st: &mut State<'g>, v: &'g str) {
        let n = st.index.len();
        st.index.insert(v, n);
        st.low.insert(v, n);
        st.stack.push(v);
        for w in st.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !st.index.contains_key(w) {
                visit(st, w);
                let lw = st.low[w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if st.stack.contains(&w) {
                let iw = st.index[w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if st.low[v] == st.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = st.stack.pop() {
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                st.found.push(comp);
            }
        }
    }
    let mut st = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in g.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.found
}

fn src() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let graph = import_graph(&src());
    let mut report = Vec::new();
    for (parent, g) in sibling_graphs(&graph) {
        for comp in cycles(&g) {
            let edges: Vec<String> = comp
                .iter()
                .map(|a| {
                    let to: Vec<&str> = g[a]
                        .iter()
                        .filter(|b| comp.contains(b))
                        .map(String::as_str)
                        .collect();
                    format!("{a} -> {}", to.join(", "))
                })
                .collect();
            let at = if parent.is_empty() {
                "crate".to_string()
            } else {
                parent.join("::")
            };
            report.push(format!("in {at}: {}", edges.join("; ")));
        }
    }
    assert!(report.is_empty(), "import cycles:\n{}", report.join("\n"));
}

#[test]
fn top_level_modules_import_only_their_layer_and_below() {
    let layer_of = |m: &str| LAYERS.iter().position(|l| l.contains(&m));
    let graph = import_graph(&src());
    let mut wrong = Vec::new();
    for (a, targets) in &graph {
        let Some(top) = a.first() else { continue };
        let Some(la) = layer_of(top) else {
            wrong.push(format!(
                "{top} is in no layer of tests/layers.rs (and src/lib.rs)"
            ));
            continue;
        };
        for b in targets {
            let Some(tb) = b.first().filter(|t| *t != top) else {
                continue;
            };
            match layer_of(tb) {
                Some(lb) if lb <= la => {}
                Some(_) => wrong.push(format!(
                    "{} imports {} from a higher layer",
                    a.join("::"),
                    b.join("::")
                )),
                None => wrong.push(format!("{tb} is in no layer")),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The check itself bites: a small tree with a cycle through `super::` and a group import,
/// and one without.
#[test]
fn the_check_finds_a_planted_cycle() {
    let dir = std::env::temp_dir().join(format!("sbm-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("m")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod m;\npub mod z;\n").unwrap();
    std::fs::write(dir.join("z.rs"), "// crate::m is named only here\n").unwrap();
    std::fs::write(dir.join("m/mod.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(
        dir.join("m/a.rs"),
        "use crate::{m::b::Thing, m::b};\nfn f() {}\n#[cfg(test)]\nmod tests { use super::super::c; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("m/b.rs"),
        "pub struct Thing;\nfn g() { super::a::f() }\n",
    )
    .unwrap();
    let graph = import_graph(&dir);
    let sib = sibling_graphs(&graph);
    assert_eq!(cycles(&sib[&vec!["m".to_string()]]), vec![vec!["a", "b"]]);
    assert!(
        !sib.contains_key(&Vec::new()),
        "a comment is not an import: {sib:?}"
    );
    std::fs::write(dir.join("m/b.rs"), "pub struct Thing;\n").unwrap();
    let graph = import_graph(&dir);
    assert!(cycles(&sibling_graphs(&graph)[&vec!["m".to_string()]]).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}
