//! The HTML report in a real browser: a small matrix run this test produces (two
//! configurations × two repetitions on the emulated path), every page loaded in headless
//! chromium over the DevTools protocol with its console captured. No page may log an error
//! or throw; every image must have loaded with a size; every link must point at a file that
//! exists; every plot must have drawn data, with no label cut at its edge or printed over
//! another (laid out by the browser: the text's boxes), and a status shown in the colour
//! of what it means, times as UTC dates. A screenshot of the index page is saved under
//! the test's output directory (not committed). Needs root (the emulated path) and
//! Debian's chromium-headless-shell (or chromium; $SBM_CHROMIUM names another).

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::*;
use serde_json::{json, Value};

const MATRIX: &str = r#"
name = "browser"
description = "The browser test's run: two configurations, two repetitions, 8 s cells."
duration = "8s"
warmup = "2s"
drain_timeout = "5s"
pause = "1s"
repetitions = 2

[path]
rtt = "40ms"
queue = "100ms"

[axes]
rate = ["2mbit"]
config = ["default", "replenish-15ms"]
write_size = ["16KiB"]
cc = ["cubic"]

[configs.default]
label = "Default (256 KiB sndbuf)"
args = ["--sndbuf", "256KiB"]

[configs.replenish-15ms]
label = "REPLENISH_TIME = 15 ms <emulated> & \"quoted\""
args = ["--replenish-time", "15ms"]
"#;

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("SBM_CHROMIUM") {
        return PathBuf::from(p);
    }
    for name in ["chromium-headless-shell", "chromium", "chromium-browser"] {
        for dir in ["/usr/bin", "/usr/local/bin", "/usr/lib/chromium"] {
            let p = Path::new(dir).join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!("no chromium found: install Debian's chromium-headless-shell (scripts/setup does), or set SBM_CHROMIUM");
}

/// A headless browser of this test's own, ended (by its PID) when dropped.
struct Browser {
    proc: std::process::Child,
    profile: PathBuf,
    ws: tungstenite::WebSocket<TcpStream>,
    next_id: u64,
    /// Events that arrived while waiting for a reply: (sessionId, method, params).
    events: Vec<(String, String, Value)>,
}

impl Browser {
    fn start(profile: PathBuf) -> Browser {
        let mut proc = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1280,1600",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium starts");
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID" on stderr.
        let stderr = proc.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(u) => u,
            Err(_) => {
                let _ = proc.kill();
                let _ = proc.wait();
                panic!("chromium printed no DevTools address within 30 s");
            }
        };
        let host = url
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let stream = TcpStream::connect(&host).expect("DevTools port");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let (ws, _) = tungstenite::client(url.as_str(), stream).expect("websocket handshake");
        Browser {
            proc,
            profile,
            ws,
            next_id: 1,
            events: vec![],
        }
    }

    /// Sends a command (to a page's session, or the browser) and waits for its reply.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .expect("send to chromium");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(
                Instant::now() < deadline,
                "no reply to {method} within 60 s"
            );
            let v = self.read();
            if v["id"].as_u64() == Some(id) {
                assert!(v["error"].is_null(), "{method}: {}", v["error"]);
                return v["result"].clone();
            }
        }
    }

    fn read(&mut self) -> Value {
        let msg = self.ws.read().expect("read from chromium");
        let text = msg.to_text().unwrap_or("{}").to_string();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if let Some(method) = v["method"].as_str() {
            self.events.push((
                v["sessionId"].as_str().unwrap_or("").to_string(),
                method.to_string(),
                v["params"].clone(),
            ));
        }
        v
    }

    /// Waits until `method` arrived for `session`.
    fn wait_event(&mut self, session: &str, method: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self
            .events
            .iter()
            .any(|(s, m, _)| s == session && m == method)
        {
            assert!(Instant::now() < deadline, "no {method} within 60 s");
            self.read();
        }
    }
}

impl Drop for Browser {
    /// Asks chromium to close (its helper processes end with it), and kills it by its PID
    /// only if it has not within 10 s.
    fn drop(&mut self) {
        let close = json!({"id": 0, "method": "Browser.close", "params": {}});
        let _ = self.ws.send(tungstenite::Message::text(close.to_string()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.proc.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Ok(None) = self.proc.try_wait() {
            let _ = self.proc.kill();
            let _ = self.proc.wait();
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// What one page did in the browser.
struct Loaded {
    errors: Vec<String>,
    images: Vec<(String, bool, u64)>,
    links: Vec<String>,
    screenshot: Option<Vec<u8>>,
}

/// A new tab with `page` loaded, its console and log watched: (target, session).
fn open_tab(b: &mut Browser, page: &Path) -> (String, String) {
    let target = b.call(None, "Target.createTarget", json!({"url": "about:blank"}));
    let target_id = target["targetId"].as_str().unwrap().to_string();
    let attached = b.call(
        None,
        "Target.attachToTarget",
        json!({"targetId": target_id, "flatten": true}),
    );
    let s = attached["sessionId"].as_str().unwrap().to_string();
    for domain in ["Runtime.enable", "Log.enable", "Page.enable"] {
        b.call(Some(s.as_str()), domain, json!({}));
    }
    let url = format!("file://{}", page.display());
    let nav = b.call(Some(s.as_str()), "Page.navigate", json!({ "url": url }));
    assert!(nav["errorText"].is_null(), "{url}: {}", nav["errorText"]);
    b.wait_event(&s, "Page.loadEventFired");
    (target_id, s)
}

fn load(b: &mut Browser, page: &Path, screenshot: bool) -> Loaded {
    let (target_id, s) = open_tab(b, page);
    let probe = "JSON.stringify({\
        images: Array.from(document.images).map(i => [i.src, i.complete, i.naturalWidth]),\
        links: Array.from(document.links).map(a => a.href)})";
    let r = b.call(
        Some(s.as_str()),
        "Runtime.evaluate",
        json!({"expression": probe, "returnByValue": true}),
    );
    let found: Value = serde_json::from_str(r["result"]["value"].as_str().unwrap()).unwrap();
    let shot = screenshot.then(|| {
        let png = b.call(
            Some(s.as_str()),
            "Page.captureScreenshot",
            json!({"format": "png"}),
        );
        base64::engine::general_purpose::STANDARD
            .decode(png["data"].as_str().unwrap())
            .unwrap()
    });
    b.call(None, "Target.closeTarget", json!({"targetId": target_id}));
    let errors = b
        .events
        .iter()
        .filter(|(sess, _, _)| *sess == s)
        .filter_map(|(_, m, p)| match m.as_str() {
            "Runtime.exceptionThrown" => Some(format!("exception: {}", p["exceptionDetails"])),
            "Runtime.consoleAPICalled" if p["type"] == "error" || p["type"] == "warning" => {
                Some(format!("console.{}: {}", p["type"], p["args"]))
            }
            "Log.entryAdded"
                if p["entry"]["level"] == "error" || p["entry"]["level"] == "warning" =>
            {
                Some(format!("log: {} {}", p["entry"]["text"], p["entry"]["url"]))
            }
            _ => None,
        })
        .collect();
    let images = found["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i[0].as_str().unwrap().to_string(),
                i[1].as_bool().unwrap(),
                i[2].as_u64().unwrap(),
            )
        })
        .collect();
    let links = found["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect();
    Loaded {
        errors,
        images,
        links,
        screenshot: shot,
    }
}

/// Opens `page` in a new tab, evaluates `expression` (returning a JSON string) and closes it.
fn evaluate(b: &mut Browser, page: &Path, expression: &str) -> Value {
    let (target_id, s) = open_tab(b, page);
    let r = b.call(
        Some(s.as_str()),
        "Runtime.evaluate",
        json!({"expression": expression, "returnByValue": true}),
    );
    b.call(None, "Target.closeTarget", json!({"targetId": target_id}));
    serde_json::from_str(r["result"]["value"].as_str().unwrap_or("null")).unwrap()
}

/// What is wrong with the plots in `page` as the browser lays them out — an SVG file (the
/// document itself) or a page's inline plots (`div.plot svg`): a plot with no data drawn
/// (only its frame), a label outside the picture (a legend cut at the edge reads
/// "NOTSENT_LOWAT tuned to th"), two labels over one another, a bare TX_SCHED legend.
/// Returns how many plots it checked, and the problems.
fn plot_problems(b: &mut Browser, page: &Path, inline: bool) -> (usize, Vec<String>) {
    let select = if inline {
        "Array.from(document.querySelectorAll('div.plot svg'))"
    } else {
        "[document.documentElement]"
    };
    // Boxes in the picture's own units (an inline plot may be scaled to the page).
    let found = evaluate(
        b,
        page,
        &format!(
            "JSON.stringify({select}.map(svg => {{\
                const width = svg.viewBox.baseVal.width;\
                const origin = svg.getBoundingClientRect();\
                const scale = origin.width / width;\
                const boxes = Array.from(svg.querySelectorAll('text'))\
                    .filter(t => t.textContent.trim() !== '')\
                    .map(t => {{ const b = t.getBoundingClientRect(); return [t.textContent, (b.left - origin.left) / scale, (b.top - origin.top) / scale, (b.right - origin.left) / scale, (b.bottom - origin.top) / scale]; }});\
                const drawn = svg.querySelector('polyline, path.points') !== null;\
                return {{width, boxes, drawn}};\
            }}))"
        ),
    );
    let name = page.file_name().unwrap().to_string_lossy().into_owned();
    let plots = found.as_array().unwrap();
    let mut problems = vec![];
    for (k, plot) in plots.iter().enumerate() {
        let name = if inline {
            format!("{name}: plot {}", k + 1)
        } else {
            name.clone()
        };
        let width = plot["width"].as_f64().unwrap();
        let boxes: Vec<(String, [f64; 4])> = plot["boxes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                let n = |i: usize| b[i].as_f64().unwrap();
                (b[0].as_str().unwrap().to_string(), [n(1), n(2), n(3), n(4)])
            })
            .collect();
        if !plot["drawn"].as_bool().unwrap() {
            problems.push(format!("{name}: no data drawn"));
        }
        for (text, r) in &boxes {
            if r[0] < -0.5 || r[2] > width + 0.5 {
                problems.push(format!(
                    "{name}: \"{text}\" is cut at the picture's edge ({:.0}–{:.0} of {width})",
                    r[0], r[2]
                ));
            }
            // A TX_SCHED series says whether it is a measurement or an upper bound.
            if text == "TX_SCHED" {
                problems.push(format!(
                    "{name}: a bare TX_SCHED legend (own report or bound?)"
                ));
            }
        }
        // Overlap by more than a pixel each way (glyph boxes of neighbouring lines touch).
        for (i, (ta, a)) in boxes.iter().enumerate() {
            for (tb, b) in &boxes[i + 1..] {
                let dx = a[2].min(b[2]) - a[0].max(b[0]);
                let dy = a[3].min(b[3]) - a[1].max(b[1]);
                if dx > 1.0 && dy > 1.0 {
                    problems.push(format!(
                        "{name}: \"{ta}\" and \"{tb}\" print over each other"
                    ));
                }
            }
        }
    }
    (plots.len(), problems)
}

fn file_of(url: &str) -> PathBuf {
    let path = url.strip_prefix("file://").unwrap_or(url);
    let path = path.split(['#', '?']).next().unwrap();
    // The report's names are plain; only spaces would be percent-encoded.
    PathBuf::from(path.replace("%20", " "))
}

/// What a run's report must show: its pages, a line of the answer per rate, the table's
/// coloured cells, and links from the index to cell pages.
struct Expect {
    pages: usize,
    answers: usize,
    /// Exactly this many coloured cells (None: some where the answer ranks a delay, none
    /// where it does not).
    heat: Option<usize>,
    cell_links: usize,
    /// Exactly this many plots, the run's and those drawn into its pages (None: at least
    /// one).
    plots: Option<usize>,
}

impl Expect {
    /// Read from a committed run's summary.csv: a page per configuration and rate, a line per rate with a
    /// finished cell, a link per configuration and rate.
    fn of_run(run: &Path) -> Expect {
        let mut rdr = csv::Reader::from_path(run.join("summary.csv")).unwrap();
        let headers = rdr.headers().unwrap().clone();
        let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
        let (rate, config, status) = (col("rate"), col("config"), col("status"));
        let (cell, repetition) = (col("cell"), col("repetition"));
        let rows: Vec<csv::StringRecord> = rdr.records().map(Result::unwrap).collect();
        let finished = |r: &&csv::StringRecord| &r[status] == "ok";
        let rates: std::collections::BTreeSet<&str> =
            rows.iter().filter(finished).map(|r| &r[rate]).collect();
        let groups: std::collections::BTreeSet<(&str, &str)> = rows
            .iter()
            .filter(finished)
            .map(|r| (&r[config], &r[rate]))
            .collect();
        // A page per configuration and rate, named after its runs without `-rN`.
        let pages: std::collections::BTreeSet<&str> = rows
            .iter()
            .map(|r| {
                let suffix = format!("-r{}", &r[repetition]);
                r[cell].strip_suffix(suffix.as_str()).unwrap_or(&r[cell])
            })
            .collect();
        Expect {
            pages: 1 + pages.len(),
            answers: rates.len(),
            heat: None,
            cell_links: groups.len(),
            plots: None,
        }
    }
}

/// $SBM_BROWSER_RUN: the same checks on a committed run's report (as `sbm-matrix report`
/// wrote it), instead of a run of the test's own. Run by hand; needs no root.
#[test]
fn a_committed_runs_report_loads_clean() {
    let Some(run) = std::env::var_os("SBM_BROWSER_RUN") else {
        eprintln!("SBM_BROWSER_RUN not set: nothing to check");
        return;
    };
    let _g = serial();
    let run = std::fs::canonicalize(&run)
        .unwrap_or_else(|e| panic!("SBM_BROWSER_RUN={}: {e}", PathBuf::from(&run).display()));
    let dir = tempdir("browser-committed");
    // $SBM_BROWSER_SCREENSHOT: where the index page's screenshot goes (it is made under
    // the test's temporary directory, removed at the end, otherwise).
    let screenshot = std::env::var_os("SBM_BROWSER_SCREENSHOT")
        .map_or_else(|| dir.join("index.png"), PathBuf::from);
    let mut browser = Browser::start(dir.join("profile"));
    let (problems, pages) =
        report_problems(&mut browser, &run, &Expect::of_run(&run), Some(&screenshot));
    drop(browser);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!(
        "{}: {pages} pages clean; screenshot {}",
        run.display(),
        screenshot.display()
    );
}

#[test]
fn every_report_page_loads_clean_with_its_plots_and_links() {
    let _g = serial();
    assert!(
        nix::unistd::geteuid().is_root(),
        "the browser test builds an emulated path: run it as root"
    );
    let dir = tempdir("browser");
    let matrix = dir.join("browser.toml");
    std::fs::write(&matrix, MATRIX).unwrap();
    let run = dir.join("run");
    let prefix = format!("br{}", std::process::id() % 100_000);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sbm-matrix"));
    cmd.args([
        "run",
        matrix.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
        "--prefix",
        &prefix,
    ]);
    let res = output_within(cmd, Duration::from_secs(300));
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);

    let mut browser = Browser::start(dir.join("profile"));
    let expect = Expect {
        // Two configurations at one rate, two runs each: a page each.
        pages: 1 + 2,
        answers: 1,
        heat: Some(2),
        cell_links: 4,
        // The two run-wide plots (the sojourn CDF, goodput against sojourn) and each
        // configuration's representative run.
        plots: Some(2 + 2),
    };
    let (problems, pages) =
        report_problems(&mut browser, &run, &expect, Some(&dir.join("index.png")));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Every run's plot on request.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sbm-matrix"));
    cmd.args(["report", run.to_str().unwrap(), "--every-plot"]);
    let res = output_within(cmd, Duration::from_secs(120));
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
    let every = Expect {
        plots: Some(2 + 4),
        ..expect
    };
    let (problems, _) = report_problems(&mut browser, &run, &every, None);
    assert!(problems.is_empty(), "--every-plot: {}", problems.join("\n"));
    // $SBM_BROWSER_BASELINE: an older sbm-matrix, whose report of the same run the checks
    // must find fault with (they bite); run once by hand, its findings recorded in
    // docs/development.md.
    if let Some(old) = std::env::var_os("SBM_BROWSER_BASELINE") {
        let old_run = dir.join("run-baseline");
        let status = Command::new("cp")
            .args(["-a", run.to_str().unwrap(), old_run.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        let mut cmd = Command::new(old);
        cmd.args(["report", old_run.to_str().unwrap()]);
        let res = output_within(cmd, Duration::from_secs(120));
        assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
        let (old_problems, _) = report_problems(&mut browser, &old_run, &expect, None);
        eprintln!(
            "the baseline's report of the same run: {} problems\n{}",
            old_problems.len(),
            old_problems.join("\n")
        );
        assert!(
            !old_problems.is_empty(),
            "the checks find nothing wrong with the baseline"
        );
        std::fs::remove_dir_all(&old_run).unwrap();
    }
    drop(browser);
    // The run's data goes; the screenshot stays as the test's output.
    std::fs::remove_dir_all(&run).unwrap();
    eprintln!(
        "browser test: {pages} pages clean; screenshot {}",
        dir.join("index.png").display()
    );
}

/// What is wrong with the report of `run` in the browser (nothing, for a good one), and how
/// many pages it has. With `screenshot`, the index page's is saved there.
fn report_problems(
    browser: &mut Browser,
    run: &Path,
    expect: &Expect,
    screenshot: Option<&Path>,
) -> (Vec<String>, usize) {
    let mut pages = vec![run.join("index.html")];
    for e in std::fs::read_dir(run.join("cells")).unwrap() {
        pages.push(e.unwrap().path());
    }
    assert_eq!(
        pages.len(),
        expect.pages,
        "an index and a page per configuration and rate: {pages:?}"
    );

    let mut problems = vec![];
    let mut plots_seen = 0;
    let mut svg_checked = std::collections::HashSet::new();
    for page in &pages {
        let is_index = page.ends_with("index.html");
        let loaded = load(browser, page, is_index && screenshot.is_some());
        let name = page.display();
        for e in &loaded.errors {
            problems.push(format!("{name}: {e}"));
        }
        for (src, complete, width) in &loaded.images {
            if !complete || *width == 0 {
                problems.push(format!("{name}: image {src} did not load"));
                continue;
            }
            plots_seen += 1;
            if svg_checked.insert(src.clone()) {
                problems.extend(plot_problems(browser, &file_of(src), false).1);
            }
        }
        // A configuration's page draws its runs' plots over time inline.
        let (inline_plots, inline_problems) = if is_index {
            (0, vec![])
        } else {
            plot_problems(browser, page, true)
        };
        plots_seen += inline_plots;
        problems.extend(inline_problems);
        for link in &loaded.links {
            if !file_of(link).exists() {
                problems.push(format!("{name}: link {link} leads nowhere"));
            }
        }
        // Status in the colour of what it means (an `ok` in red reads as a failure), and
        // times as dates.
        let look = evaluate(
            browser,
            page,
            "JSON.stringify({\
                ok: Array.from(document.querySelectorAll('.status-ok')).map(e => getComputedStyle(e).color),\
                statuses: document.querySelectorAll('[class^=status-]').length,\
                heat: document.querySelectorAll('td.heat').length,\
                answer: Array.from(document.querySelectorAll('.answer li')).map(e => e.innerText),\
                text: document.body.innerText})",
        );
        if is_index {
            // The answer first: a line for the rate, and the table coloured by delay.
            let answer = look["answer"].as_array().unwrap();
            let says = |a: &Value, what: &str| a.as_str().unwrap().contains(what);
            if answer.len() != expect.answers
                || !answer
                    .iter()
                    .all(|a| says(a, "lowest median sojourn") || says(a, "nothing to rank"))
            {
                problems.push(format!(
                    "{name}: not an answer line per rate at the top ({} rates): {answer:?}",
                    expect.answers
                ));
            }
            // Coloured by delay where there is one to colour by.
            let ranked = answer.iter().any(|a| says(a, "lowest median sojourn"));
            let heat = look["heat"].as_u64().unwrap() as usize;
            if expect.heat.map_or(ranked != (heat > 0), |n| heat != n) {
                problems.push(format!(
                    "{name}: {heat} coloured table cells, not {}",
                    expect.heat.map_or_else(
                        || if ranked {
                            "at least 1"
                        } else {
                            "none (no delay to rank)"
                        }
                        .into(),
                        |n| n.to_string()
                    )
                ));
            }
        }
        for color in look["ok"].as_array().unwrap() {
            if color != "rgb(0, 102, 0)" {
                problems.push(format!("{name}: status ok drawn in {color}"));
            }
        }
        let text = look["text"].as_str().unwrap_or("");
        let finished = !look["ok"].as_array().unwrap().is_empty();
        if !is_index && look["statuses"] == 0 {
            problems.push(format!("{name}: no status shown"));
        }
        if is_index && (!text.contains(" UTC") || text.contains("unix time")) {
            problems.push(format!("{name}: the wall time is not given as UTC dates"));
        }
        if is_index {
            // Every figure of the table links to its runs' pages.
            let to_cells = loaded
                .links
                .iter()
                .filter(|l| l.contains("/cells/"))
                .count();
            if to_cells < expect.cell_links {
                problems.push(format!(
                    "{name}: {to_cells} links to cell pages, not {}",
                    expect.cell_links
                ));
            }
            if let (Some(path), Some(png)) = (screenshot, &loaded.screenshot) {
                assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
                std::fs::write(path, png).unwrap();
            }
        } else if finished && inline_plots == 0 {
            problems.push(format!(
                "{name}: a finished configuration's page without a plot"
            ));
        }
    }
    if expect.plots.map_or(plots_seen == 0, |n| plots_seen != n) {
        problems.push(format!(
            "{plots_seen} plots seen, not {}",
            expect.plots.map_or("at least 1".into(), |n| n.to_string())
        ));
    }
    (problems, pages.len())
}
