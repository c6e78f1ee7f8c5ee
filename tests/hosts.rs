//! The matrix on real hosts over ssh (root): a real OpenSSH server in the emulated path's
//! receiver namespace (its own host and client keys, key-only login, bound to its
//! 198.18.0.0/15 address, stopped and removed at the end) and the sender local in the
//! sender namespace. The quick matrix over ssh matches the emulated quick run shaped the
//! same way; two receivers share the cells; each failure is one line and leaves nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const SSHD: &str = "/usr/sbin/sshd";

fn matrix_bin() -> String {
    env!("CARGO_BIN_EXE_sbm-matrix").to_string()
}

fn quick_text() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/matrices/quick.toml"
    ))
    .unwrap()
}

/// The quick preset with its `[path]` replaced by `path` (a `[path]` table and any
/// `[[path.hosts]]`).
fn quick_with_path(name: &str, path: &str) -> String {
    let q = quick_text();
    let old = "[path]\nrtt = \"172ms\"\nqueue = \"200ms\"\n";
    assert!(
        q.contains(old),
        "quick.toml's [path] changed: update this test"
    );
    q.replace("name = \"quick\"", &format!("name = \"{name}\""))
        .replace(old, path)
}

fn run(cmd: &[&str], timeout: Duration) -> Finished {
    run_program(cmd[0], &cmd[1..], timeout)
}

/// /run/sshd, which sshd insists on; made if missing and removed again.
struct PrivsepDir(bool);

impl PrivsepDir {
    fn ensure() -> PrivsepDir {
        let p = Path::new("/run/sshd");
        let made = !p.exists();
        if made {
            std::fs::create_dir_all(p).unwrap();
        }
        PrivsepDir(made)
    }
}

impl Drop for PrivsepDir {
    fn drop(&mut self) {
        if self.0 {
            let _ = std::fs::remove_dir("/run/sshd");
        }
    }
}

/// Keys for one test: a host key, an authorized client key and an unauthorized one.
struct Keys {
    dir: PathBuf,
    client: PathBuf,
    stranger: PathBuf,
    host_pub: String,
}

fn keygen(path: &Path) {
    let out = run(
        &[
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "sbm-test",
            "-f",
            path.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "ssh-keygen: {}", out.stderr);
}

impl Keys {
    fn new(dir: &Path) -> Keys {
        assert!(
            Path::new(SSHD).exists(),
            "these tests run a real sshd: apt-get install openssh-server"
        );
        let (host, client, stranger) = (
            dir.join("host_key"),
            dir.join("client_key"),
            dir.join("stranger_key"),
        );
        for k in [&host, &client, &stranger] {
            keygen(k);
        }
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
        let host_pub = std::fs::read_to_string(dir.join("host_key.pub")).unwrap();
        let host_pub = host_pub
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        Keys {
            dir: dir.to_path_buf(),
            client,
            stranger,
            host_pub,
        }
    }

    /// ssh options for the matrix file: this test's key and known hosts only.
    fn options(&self, key: &Path, hosts: &[(&str, u16)]) -> String {
        let kh = self.dir.join(format!("known_hosts-{}", hosts.len()));
        let lines: Vec<String> = hosts
            .iter()
            .map(|(a, p)| {
                if *p == 22 {
                    format!("{a} {}", self.host_pub)
                } else {
                    format!("[{a}]:{p} {}", self.host_pub)
                }
            })
            .collect();
        std::fs::write(&kh, lines.join("\n") + "\n").unwrap();
        format!(
            "[\"-F\", \"/dev/null\", \"-i\", \"{}\", \"-o\", \"IdentitiesOnly=yes\", \"-o\", \"UserKnownHostsFile={}\", \"-o\", \"StrictHostKeyChecking=yes\"]",
            key.display(),
            kh.display()
        )
    }
}

/// A real sshd in a namespace, on one address and port; stopped (by its PID) on drop.
struct Sshd {
    proc: Running,
}

impl Sshd {
    fn start(keys: &Keys, ns: &str, addr: &str, port: u16, extra: &str) -> Sshd {
        let conf = keys.dir.join(format!("sshd_config-{port}"));
        std::fs::write(
            &conf,
            format!(
                "ListenAddress {addr}:{port}\nHostKey {}\nPidFile none\nAuthorizedKeysFile {}\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nMaxSessions 50\n\
                 MaxStartups 50\n{extra}\n",
                keys.dir.join("host_key").display(),
                keys.dir.join("authorized_keys").display()
            ),
        )
        .unwrap();
        let proc = Running::spawn_program(
            "ip",
            &[
                "netns",
                "exec",
                ns,
                SSHD,
                "-D",
                "-e",
                "-f",
                conf.to_str().unwrap(),
            ],
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let needle = format!("{addr}:{port}");
        loop {
            let ss = run(
                &["ip", "netns", "exec", ns, "ss", "-ltnH"],
                Duration::from_secs(10),
            );
            if ss.stdout.contains(&needle) {
                break;
            }
            assert!(Instant::now() < deadline, "sshd did not listen on {needle}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Sshd { proc }
    }

    /// Ends every connection this sshd serves, as a dying link would: every sshd process
    /// below the listener (not the commands they run, which see their session end).
    fn drop_connections(&self) -> usize {
        let listener = self.proc.pid().as_raw();
        let parent_of = |pid: i32| -> Option<(i32, String)> {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (comm, rest) = stat.split_once(") ")?;
            let comm = comm.split_once(" (")?.1.to_string();
            let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((ppid, comm))
        };
        let mut victims = vec![];
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Some((_, comm)) = parent_of(pid) else {
                continue;
            };
            if comm != "sshd" || pid == listener {
                continue;
            }
            // A descendant of our listener?
            let mut p = pid;
            let mut ours = false;
            for _ in 0..16 {
                match parent_of(p) {
                    Some((pp, _)) if pp == listener => {
                        ours = true;
                        break;
                    }
                    Some((pp, _)) if pp > 1 => p = pp,
                    _ => break,
                }
            }
            if ours {
                victims.push(pid);
            }
        }
        for p in &victims {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        victims.len()
    }
}

/// Runs sbm-matrix in namespace `ns` (the sender's).
fn matrix_in(ns: &str, file: &Path, out: &Path, timeout: Duration) -> Finished {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, &matrix_bin(), "run"])
        .arg(file)
        .arg("--out")
        .arg(out);
    output_within(cmd, timeout)
}

/// What a cell on real hosts may leave: the IFB and ingress qdisc on the receiver's
/// interface, and processes naming the remote directory.
fn assert_nothing_left(bed: &Bed, dev: &str, remote_dir: &Path) {
    let links = run(
        &["ip", "-n", &bed.ns("rcv"), "-o", "link", "show"],
        Duration::from_secs(10),
    );
    assert!(
        !links.stdout.contains(&format!("ifb-{dev}")),
        "the IFB is gone: {}",
        links.stdout
    );
    let qdiscs = bed.tc("rcv", &["qdisc", "show", "dev", dev]);
    assert!(
        !qdiscs.contains("ingress"),
        "no ingress qdisc left: {qdiscs}"
    );
    let left = processes_mentioning(&remote_dir.to_string_lossy());
    assert!(left.is_empty(), "processes left: {left:?}");
}

fn hosts_path(receiver: &str, dev: &str, options: &str, remote_dir: &Path, extra: &str) -> String {
    format!(
        "[path]\nkind = \"hosts\"\nqueue = \"200ms\"\nshape_at = \"receiver-ingress\"\n\n\
         [[path.hosts]]\nreceiver = \"{receiver}\"\nreceiver_dev = \"{dev}\"\nssh_options = {options}\n\
         remote_dir = \"{}\"\n{extra}\n",
        remote_dir.display()
    )
}

#[test]
fn quick_matrix_over_ssh_matches_the_emulated_path_shaped_the_same_way() {
    let _g = serial();
    require_root();
    let dir = tempdir("hosts-quick");
    // The emulated quick run, its bottleneck on the receiver's ingress as over ssh.
    let emulated = dir.join("emulated.toml");
    std::fs::write(
        &emulated,
        quick_with_path(
            "quick-ingress",
            "[path]\nrtt = \"172ms\"\nqueue = \"200ms\"\nshape_at = \"ingress\"\n",
        ),
    )
    .unwrap();
    let emulated_out = dir.join("emulated");
    let mut cmd = Command::new(matrix_bin());
    cmd.arg("run")
        .arg(&emulated)
        .arg("--out")
        .arg(&emulated_out)
        .arg("--prefix")
        .arg(prefix("he"));
    let res = output_within(cmd, Duration::from_secs(300));
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);

    // The same cells with the receiver behind ssh: the bed gives only the delay.
    let _privsep = PrivsepDir::ensure();
    let keys = Keys::new(&dir);
    let bed = Bed::up("hs", &["--rtt", "172ms", "--rate", "off"]);
    let _sshd = Sshd::start(&keys, &bed.ns("rcv"), "198.18.2.1", 22, "");
    let remote_dir = dir.join("remote");
    let hosts = dir.join("hosts.toml");
    std::fs::write(
        &hosts,
        quick_with_path(
            "quick-hosts",
            &hosts_path(
                "ssh://root@198.18.2.1",
                "r0",
                &keys.options(&keys.client, &[("198.18.2.1", 22)]),
                &remote_dir,
                "",
            ),
        ),
    )
    .unwrap();
    let out = dir.join("hosts");
    let res = matrix_in(&bed.ns("snd"), &hosts, &out, Duration::from_secs(400));
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
    assert!(
        res.stdout.contains("copied sbm"),
        "the binaries went over ssh, and it says so: {}",
        res.stdout
    );
    let a = read_csv(&emulated_out.join("summary.csv"));
    let b = read_csv(&out.join("summary.csv"));
    assert_eq!(b.len(), 3);
    for config in ["default", "lowat-165KB", "replenish-15ms"] {
        let ra = a.iter().find(|r| r["config"] == config).unwrap();
        let rb = b.iter().find(|r| r["config"] == config).unwrap();
        assert_eq!(rb["status"], "ok", "{rb:?}");
        let (ga, gb) = (f(ra, "goodput_bps"), f(rb, "goodput_bps"));
        assert!(
            (gb - ga).abs() <= 0.05 * ga,
            "{config}: goodput over ssh {gb} vs emulated {ga}"
        );
        let (sa, sb) = (f(ra, "sojourn_p50_us"), f(rb, "sojourn_p50_us"));
        assert!(
            (sb - sa).abs() <= 0.10 * sa,
            "{config}: median sojourn over ssh {sb} µs vs emulated {sa} µs"
        );
    }
    // What a cell on real hosts records, and that its outputs came back.
    let cell = out.join("2mbit-default");
    assert!(
        cell.join("sink-intervals.csv").exists(),
        "the sink's outputs came back"
    );
    let meta = read_json(&cell.join("meta.json"));
    let h = &meta["hosts"];
    assert_eq!(h["pair"], "pair-1");
    assert_eq!(read_json(&cell.join("cell.json"))["pair"], "pair-1");
    let rtt = h["rtt_before"]["min_us"].as_u64().unwrap();
    assert!(
        (160_000..=220_000).contains(&rtt),
        "the path's RTT before the cell: {rtt} µs"
    );
    assert_eq!(
        h["clocks"]["trip_times_comparable"], true,
        "{}",
        h["clocks"]
    );
    let shaped = h["receiver_after"]["interfaces"][0]["ifb_qdiscs"]
        .as_str()
        .unwrap_or_default();
    assert!(
        shaped.contains("htb"),
        "the bottleneck was there during the cell: {shaped}"
    );
    assert!(h["receiver_before"]["interfaces"][0]["mtu"]
        .as_u64()
        .is_some());
    let cells_left = std::fs::read_dir(remote_dir.join("cells")).map_or(0, |d| d.count());
    assert_eq!(cells_left, 0, "the remote cell directories are removed");
    assert_nothing_left(&bed, "r0", &remote_dir);
}

#[test]
fn failures_are_one_line_each_and_leave_nothing_behind() {
    let _g = serial();
    require_root();
    let dir = tempdir("hosts-fail");
    let _privsep = PrivsepDir::ensure();
    let keys = Keys::new(&dir);
    let bed = Bed::up("hf", &["--rtt", "20ms", "--rate", "off"]);
    let _sshd = Sshd::start(&keys, &bed.ns("rcv"), "198.18.2.1", 22, "");
    // The same server, but every session runs as nobody.
    let _nobody = Sshd::start(
        &keys,
        &bed.ns("rcv"),
        "198.18.2.1",
        2222,
        "ForceCommand setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all /bin/sh -c \"$SSH_ORIGINAL_COMMAND\"",
    );
    let remote_dir = dir.join("remote");
    let matrix = |name: &str, receiver: &str, key: &Path, port: u16, duration: &str| {
        let file = dir.join(format!("{name}.toml"));
        let options = keys.options(key, &[("198.18.2.1", port)]);
        std::fs::write(
            &file,
            format!(
                "name = \"{name}\"\nduration = \"{duration}\"\nwarmup = \"1s\"\ndrain_timeout = \"5s\"\npause = \"0s\"\n{}\n[axes]\nrate = [\"2mbit\"]\n",
                hosts_path(receiver, "r0", &options, &remote_dir, "")
            ),
        )
        .unwrap();
        file
    };
    let error_of = |out: &Path| -> String {
        let st = read_json(&out.join("2mbit-default/cell.json"));
        assert_eq!(st["status"], "failed", "{st}");
        st["error"].as_str().unwrap().to_string()
    };
    let cases: [(&str, String, &Path, u16, &str); 3] = [
        (
            "unreachable",
            "ssh://root@198.18.2.77".into(),
            &keys.client,
            22,
            "198.18.2.77",
        ),
        (
            "refused-key",
            "ssh://root@198.18.2.1".into(),
            &keys.stranger,
            22,
            "Permission denied",
        ),
        (
            "not-root",
            "ssh://root@198.18.2.1:2222".into(),
            &keys.client,
            2222,
            "needs root or CAP_NET_ADMIN",
        ),
    ];
    for (name, receiver, key, port, want) in cases {
        let file = matrix(name, &receiver, key, port, "3s");
        let out = dir.join(name);
        let res = matrix_in(&bed.ns("snd"), &file, &out, Duration::from_secs(120));
        assert_eq!(
            res.code(),
            Some(1),
            "{name}: {}\n{}",
            res.stdout,
            res.stderr
        );
        let e = error_of(&out);
        assert!(!e.contains('\n') && e.contains(want), "{name}: {e}");
        assert!(
            res.stdout.contains(want),
            "{name}: said on the console: {}",
            res.stdout
        );
        assert_nothing_left(&bed, "r0", &remote_dir);
    }

    // A build there that cannot run: the binaries under this build's key are not programs.
    let bins = Path::new(env!("CARGO_BIN_EXE_sbm-sink")).parent().unwrap();
    let build =
        sbm::remote::install::Build::local(bins, &["sbm-send", "sbm-sink", "sbm-testbed"]).unwrap();
    let cached = remote_dir.join("bin").join(&build.key);
    std::fs::create_dir_all(&cached).unwrap();
    for n in ["sbm-sink", "sbm-testbed"] {
        let p = cached.join(n);
        std::fs::write(
            &p,
            "#!/bin/sh\necho \"cannot execute binary file: Exec format error\" >&2\nexit 126\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let file = matrix(
        "cannot-run",
        "ssh://root@198.18.2.1",
        &keys.client,
        22,
        "3s",
    );
    let out = dir.join("cannot-run");
    let res = matrix_in(&bed.ns("snd"), &file, &out, Duration::from_secs(120));
    assert_eq!(res.code(), Some(1), "{}\n{}", res.stdout, res.stderr);
    let e = error_of(&out);
    assert!(
        e.contains("does not run there") && e.contains("Exec format error"),
        "{e}"
    );
    std::fs::remove_dir_all(&cached).unwrap();

    // ssh dying mid-cell: the cell fails saying so, and the receiver is left unshaped.
    let file = matrix("ssh-dies", "ssh://root@198.18.2.1", &keys.client, 22, "30s");
    let out = dir.join("ssh-dies");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &bed.ns("snd"), &matrix_bin(), "run"])
        .arg(&file)
        .arg("--out")
        .arg(&out);
    let run_ = Running::spawn_command(cmd);
    let sink_log = out.join("2mbit-default/sink.log");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(&sink_log).is_ok_and(|t| t.contains("listening on")) {
        assert!(Instant::now() < deadline, "the cell never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        bed.tc("rcv", &["qdisc", "show", "dev", "r0"])
            .contains("ingress"),
        "shaped while the cell runs"
    );
    assert!(
        _sshd.drop_connections() > 0,
        "the connection was there to drop"
    );
    let res = run_.wait(Duration::from_secs(120));
    assert_eq!(res.code(), Some(1), "{}\n{}", res.stdout, res.stderr);
    let e = error_of(&out);
    assert!(!e.contains('\n') && e.contains("198.18.2.1"), "{e}");
    assert_nothing_left(&bed, "r0", &remote_dir);

    // --resume on real hosts: the failed cell runs again, over a new connection, and is ok.
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &bed.ns("snd"), &matrix_bin(), "run"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .arg("--resume");
    let res = output_within(cmd, Duration::from_secs(120));
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
    let st = read_json(&out.join("2mbit-default/cell.json"));
    assert_eq!(st["status"], "ok", "{st}");
    assert_nothing_left(&bed, "r0", &remote_dir);
}

/// A second receiver namespace hanging off the bed's wan: 198.18.4.1 on `r2`.
struct SecondReceiver {
    ns: String,
}

impl SecondReceiver {
    fn add(bed: &Bed) -> SecondReceiver {
        let ns = bed.ns("rcv2");
        let wan = bed.ns("wan");
        let cmds: Vec<Vec<&str>> = vec![
            vec!["ip", "netns", "add", &ns],
            vec![
                "ip", "-n", &wan, "link", "add", "wr2", "type", "veth", "peer", "name", "r2",
                "netns", &ns,
            ],
            vec![
                "ip",
                "-n",
                &wan,
                "addr",
                "add",
                "198.18.4.254/24",
                "dev",
                "wr2",
            ],
            vec!["ip", "-n", &wan, "link", "set", "wr2", "up"],
            vec!["ip", "-n", &ns, "link", "set", "lo", "up"],
            vec!["ip", "-n", &ns, "addr", "add", "198.18.4.1/24", "dev", "r2"],
            vec!["ip", "-n", &ns, "link", "set", "r2", "up"],
            vec![
                "ip",
                "-n",
                &ns,
                "route",
                "add",
                "default",
                "via",
                "198.18.4.254",
            ],
        ];
        let made = SecondReceiver { ns: ns.clone() };
        for c in cmds {
            let out = run(&c, Duration::from_secs(30));
            assert!(out.status.success(), "{c:?}: {}", out.stderr);
        }
        made
    }
}

impl Drop for SecondReceiver {
    fn drop(&mut self) {
        // The veth pair goes with the namespace.
        let _ = run(&["ip", "netns", "del", &self.ns], Duration::from_secs(30));
    }
}

#[test]
fn cells_spread_over_two_pairs_and_a_failing_pair_leaves_the_pool() {
    let _g = serial();
    require_root();
    let dir = tempdir("hosts-pairs");
    let _privsep = PrivsepDir::ensure();
    let keys = Keys::new(&dir);
    let bed = Bed::up("h2", &["--rtt", "20ms", "--rate", "off"]);
    let second = SecondReceiver::add(&bed);
    let _sshd1 = Sshd::start(&keys, &bed.ns("rcv"), "198.18.2.1", 22, "");
    let _sshd2 = Sshd::start(&keys, &second.ns, "198.18.4.1", 22, "");
    let options = keys.options(&keys.client, &[("198.18.2.1", 22), ("198.18.4.1", 22)]);
    let remote = |k: u32| dir.join(format!("remote-{k}"));
    // pair-3 reaches the second receiver but names an interface it does not have: its
    // first cell fails for the pair, which leaves the pool, and the cell runs elsewhere.
    let file = dir.join("pairs.toml");
    std::fs::write(
        &file,
        format!(
            "name = \"pairs\"\nduration = \"4s\"\nwarmup = \"1s\"\ndrain_timeout = \"5s\"\npause = \"0s\"\n\
             repetitions = 2\n\
             [path]\nkind = \"hosts\"\nqueue = \"200ms\"\n\n\
             [[path.hosts]]\nreceiver = \"ssh://root@198.18.2.1\"\nreceiver_dev = \"r0\"\nssh_options = {options}\nremote_dir = \"{}\"\n\n\
             [[path.hosts]]\nreceiver = \"ssh://root@198.18.4.1\"\nreceiver_dev = \"r2\"\nssh_options = {options}\nremote_dir = \"{}\"\n\n\
             [[path.hosts]]\nname = \"broken\"\nreceiver = \"ssh://root@198.18.4.1\"\nport = 5302\nreceiver_dev = \"nodev0\"\nssh_options = {options}\nremote_dir = \"{}\"\n\n\
             [axes]\nrate = [\"2mbit\"]\nconfig = [\"default\", \"lowat\"]\n\
             [configs.lowat]\nargs = [\"--notsent-lowat\", \"16KB\"]\n",
            remote(1).display(),
            remote(2).display(),
            remote(3).display()
        ),
    )
    .unwrap();
    let out = dir.join("pairs");
    let res = matrix_in(&bed.ns("snd"), &file, &out, Duration::from_secs(300));
    assert_eq!(res.code(), Some(0), "{}\n{}", res.stdout, res.stderr);
    assert!(
        res.stdout.contains("broken: out of the pool") && res.stdout.contains("nodev0"),
        "{}",
        res.stdout
    );
    let rows = read_csv(&out.join("summary.csv"));
    assert_eq!(rows.len(), 4);
    let mut used = std::collections::BTreeSet::new();
    for r in &rows {
        assert_eq!(r["status"], "ok", "{r:?}");
        let st = read_json(&out.join(&r["cell"]).join("cell.json"));
        used.insert(st["pair"].as_str().unwrap().to_string());
    }
    assert_eq!(
        used.into_iter().collect::<Vec<_>>(),
        ["pair-1", "pair-2"],
        "both working pairs ran cells, the broken one none"
    );
    if res.stdout.contains("retrying it on another pair") {
        // The broken pair took a cell first: it was rerun, and ran fine.
        assert!(rows.iter().all(|r| r["status"] == "ok"));
    }
    assert_nothing_left(&bed, "r0", &remote(1));
    let links = run(
        &["ip", "-n", &second.ns, "-o", "link", "show"],
        Duration::from_secs(10),
    );
    assert!(!links.stdout.contains("ifb-r2"), "{}", links.stdout);
    for k in 2..=3 {
        assert!(processes_mentioning(&remote(k).to_string_lossy()).is_empty());
    }
}
