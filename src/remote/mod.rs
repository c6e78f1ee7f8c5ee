//! Other machines, reached with OpenSSH and nothing of our own: an [`Endpoint`] is `local`
//! or `ssh://[user@]host[:port]`; a [`Host`] runs commands there — on a remote one through
//! one multiplexed master connection (BatchMode, a connect timeout, keepalives) opened once
//! and reused for every command of a run. [`install`] puts sbm's binaries on a remote host.

pub mod install;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Where a program runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Local,
    Ssh {
        user: Option<String>,
        host: String,
        port: Option<u16>,
    },
}

impl Endpoint {
    /// `local` or `ssh://[user@]host[:port]` (an IPv6 host in brackets: `ssh://[2001:2::1]:22`).
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        if s == "local" {
            return Ok(Endpoint::Local);
        }
        let Some(rest) = s.strip_prefix("ssh://") else {
            return Err(format!("'{s}': local or ssh://[user@]host[:port]"));
        };
        let (user, hostport) = match rest.split_once('@') {
            Some((u, h)) if !u.is_empty() => (Some(u.to_string()), h),
            Some(_) => return Err(format!("'{s}': empty user name before @")),
            None => (None, rest),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("'{s}': missing ] after an IPv6 address"))?;
            match after {
                "" => (h.to_string(), None),
                p => (
                    h.to_string(),
                    Some(parse_port(s, p.trim_start_matches(':'))?),
                ),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(parse_port(s, p)?)),
                None => (hostport.to_string(), None),
            }
        };
        if host.is_empty() || host.contains(['/', ' ']) {
            return Err(format!("'{s}': no host name"));
        }
        Ok(Endpoint::Ssh { user, host, port })
    }

    /// The host name or address of a remote endpoint.
    pub fn host(&self) -> Option<&str> {
        match self {
            Endpoint::Local => None,
            Endpoint::Ssh { host, .. } => Some(host),
        }
    }
}

fn parse_port(s: &str, p: &str) -> Result<u16, String> {
    p.parse::<u16>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("'{s}': port '{p}' is not 1-65535"))
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Local => write!(f, "local"),
            Endpoint::Ssh { user, host, port } => {
                write!(f, "ssh://")?;
                if let Some(u) = user {
                    write!(f, "{u}@")?;
                }
                if host.contains(':') {
                    write!(f, "[{host}]")?;
                } else {
                    write!(f, "{host}")?;
                }
                if let Some(p) = port {
                    write!(f, ":{p}")?;
                }
                Ok(())
            }
        }
    }
}

/// What went wrong on a host, in one line that names the host.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{host}: {reason}")]
pub struct RemoteError {
    pub host: String,
    pub reason: String,
}

/// A word for a POSIX shell: itself when it is plain, else in single quotes.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// How long ssh may take to reach a host before it gives up.
const CONNECT_TIMEOUT_S: u32 = 10;

/// A machine that runs commands: this one, or a remote one behind an ssh master connection
/// (closed, and its process ended, when the Host is dropped).
pub struct Host {
    pub endpoint: Endpoint,
    ssh: Option<Master>,
}

struct Master {
    /// The control socket's directory (ours, removed on drop).
    dir: PathBuf,
    control: PathBuf,
    options: Vec<String>,
    child: Child,
    /// What the master printed once connected (read all along, so its pipe never fills):
    /// why it ended, when it did.
    said: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Host {
    /// This machine.
    pub fn local() -> Host {
        Host {
            endpoint: Endpoint::Local,
            ssh: None,
        }
    }

    /// Opens the master connection to a remote endpoint (`options`: extra ssh arguments
    /// such as `-i KEY`), waiting until it is up or ssh has said why not.
    pub fn connect(endpoint: &Endpoint, options: &[String]) -> Result<Host, RemoteError> {
        let Endpoint::Ssh { .. } = endpoint else {
            return Ok(Host::local());
        };
        let error = |reason: String| RemoteError {
            host: endpoint.to_string(),
            reason,
        };
        let dir = std::env::temp_dir().join(format!(
            "sbm-ssh-{}-{}",
            std::process::id(),
            NEXT_MASTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| error(format!("control directory {}: {e}", dir.display())))?;
        let control = dir.join("ctl");
        let mut options = options.to_vec();
        options.extend(
            [
                "-o",
                "BatchMode=yes",
                "-o",
                &format!("ConnectTimeout={CONNECT_TIMEOUT_S}"),
                "-o",
                "ServerAliveInterval=5",
                "-o",
                "ServerAliveCountMax=3",
                "-o",
                "LogLevel=ERROR",
            ]
            .map(String::from),
        );
        if let Endpoint::Ssh { port: Some(p), .. } = endpoint {
            options.extend(["-p".into(), p.to_string()]);
        }
        let mut cmd = Command::new("ssh");
        cmd.args(&options)
            .args(["-M", "-N", "-o", "ControlPersist=no", "-S"])
            .arg(&control)
            .arg(destination(endpoint))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // Its own process group: a Ctrl-C at the terminal must not end the connection
        // that the clean-up (remote shaping, outputs) still needs.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .spawn()
            .map_err(|e| error(format!("cannot run ssh: {e}")))?;
        let mut master = Master {
            dir,
            control,
            options,
            child,
            said: Default::default(),
        };
        let deadline = Instant::now() + Duration::from_secs(u64::from(CONNECT_TIMEOUT_S) + 5);
        loop {
            if let Ok(Some(_)) = master.child.try_wait() {
                let mut text = String::new();
                if let Some(mut e) = master.child.stderr.take() {
                    let _ = e.read_to_string(&mut text);
                }
                let line = text
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("ssh exited without a message")
                    .trim()
                    .to_string();
                let line = if line.starts_with("ssh:") {
                    line
                } else {
                    format!("ssh: {line}")
                };
                return Err(error(line));
            }
            if master.control.exists() && master.check() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(error(format!(
                    "ssh did not connect within {}s",
                    CONNECT_TIMEOUT_S + 5
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(mut e) = master.child.stderr.take() {
            let said = master.said.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n @ 1..) = e.read(&mut buf) {
                    let mut s = said.lock().unwrap_or_else(|p| p.into_inner());
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if s.len() > 16_384 {
                        let cut = s.len() - 8_192;
                        let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(0);
                        s.drain(..cut);
                    }
                }
            });
        }
        Ok(Host {
            endpoint: endpoint.clone(),
            ssh: Some(master),
        })
    }

    /// `argv` as a command that runs on this host (through the master connection when
    /// remote; in its own process group there, so a Ctrl-C here does not reach it).
    pub fn command(&self, argv: &[String]) -> Command {
        match &self.ssh {
            None => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
            Some(m) => {
                let mut c = Command::new("ssh");
                c.args(&m.options)
                    .arg("-S")
                    .arg(&m.control)
                    .arg(destination(&self.endpoint))
                    .arg("--")
                    .arg(
                        argv.iter()
                            .map(|a| shell_quote(a))
                            .collect::<Vec<_>>()
                            .join(" "),
                    );
                std::os::unix::process::CommandExt::process_group(&mut c, 0);
                c
            }
        }
    }

    /// A shell command line run by `sh -c` on this host (for pipes and redirections).
    pub fn shell(&self, script: &str) -> Command {
        self.command(&["sh".into(), "-c".into(), script.into()])
    }

    /// Runs `cmd` to its end (at most `timeout`) and returns its stdout; a failure is one
    /// line: the last line of its stderr, or how it ended.
    pub fn output(
        &self,
        mut cmd: Command,
        what: &str,
        timeout: Duration,
    ) -> Result<String, RemoteError> {
        let error = |reason: String| self.error(format!("{what}: {reason}"));
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| error(format!("cannot start: {e}")))?;
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let read_out = std::thread::spawn(move || read_all(out));
        let read_err = std::thread::spawn(move || read_all(err));
        let status = wait_until(&mut child, Instant::now() + timeout);
        let out = read_out.join().unwrap_or_default();
        let err = read_err.join().unwrap_or_default();
        match status {
            Some(st) if st.success() => Ok(out),
            Some(st) => Err(error(
                last_line(&err).unwrap_or_else(|| format!("exited with {st}")),
            )),
            None => Err(error(format!("no answer within {}s", timeout.as_secs()))),
        }
    }

    /// Writes `data` to `path` on this host.
    pub fn put(&self, data: &[u8], path: &str, timeout: Duration) -> Result<(), RemoteError> {
        use std::io::Write;
        let mut cmd = self.shell(&format!("cat > {}", shell_quote(path)));
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.error(format!("copying to {path}: {e}")))?;
        let err = child.stderr.take();
        let read_err = std::thread::spawn(move || read_all(err));
        let written = child.stdin.take().map(|mut i| i.write_all(data));
        let status = wait_until(&mut child, Instant::now() + timeout);
        let err = read_err.join().unwrap_or_default();
        match (status, written) {
            (Some(st), Some(Ok(()))) if st.success() => Ok(()),
            (Some(_), _) => Err(self.error(format!(
                "copying to {path}: {}",
                last_line(&err).unwrap_or_else(|| "the copy failed".into())
            ))),
            (None, _) => Err(self.error(format!(
                "copying to {path}: not done within {}s",
                timeout.as_secs()
            ))),
        }
    }

    /// Whether the master connection still works (always true here).
    pub fn alive(&mut self) -> bool {
        match &mut self.ssh {
            None => true,
            Some(m) => matches!(m.child.try_wait(), Ok(None)) && m.check(),
        }
    }

    /// The master connection's last message (e.g. why it ended), if it printed one.
    pub fn last_words(&self) -> Option<String> {
        let m = self.ssh.as_ref()?;
        let s = m.said.lock().unwrap_or_else(|p| p.into_inner());
        last_line(&s)
    }

    pub fn error(&self, reason: String) -> RemoteError {
        RemoteError {
            host: self.endpoint.to_string(),
            reason,
        }
    }

    pub fn is_local(&self) -> bool {
        self.ssh.is_none()
    }
}

/// Runs a program tied to its ssh session: `sh -c TIED sbm-tied LOG PROGRAM ARGS…`. The
/// program gets SIGINT (and ends as on Ctrl-C, writing its outputs) when the session's
/// stdin reaches end-of-file — we closed it, or the connection died — and its exit status
/// is the session's. With a LOG its output goes to that file there instead of over ssh.
/// (A background job of a non-interactive shell reads /dev/null, so the watcher reads the
/// session's stdin through fd 3.)
const TIED: &str = r#"log=$1; shift
exec 3<&0
if [ -n "$log" ]; then exec >"$log" 2>&1; fi
"$@" </dev/null 3<&- & p=$!
{ cat <&3; kill -INT $p; } >/dev/null 2>&1 &
w=$!
exec 3<&-
wait $p; rc=$?
kill $w 2>/dev/null
exit $rc"#;

/// A program started by [`Host::spawn_tied`].
pub struct Job {
    pub child: Child,
    stdin: Option<ChildStdin>,
    remote: bool,
}

impl Host {
    /// Starts `argv` on this host so that [`Job::stop`] ends it as Ctrl-C would: a local one
    /// by SIGINT, a remote one through its session (which also ends it if the connection
    /// dies). `log`: a remote file for its output (else it comes back over ssh).
    pub fn spawn_tied(
        &self,
        argv: &[String],
        log: Option<&str>,
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<Job, RemoteError> {
        let cmd = if self.is_local() {
            self.command(argv)
        } else {
            let mut full: Vec<String> = vec![
                "sh".into(),
                "-c".into(),
                TIED.into(),
                "sbm-tied".into(),
                log.unwrap_or("").into(),
            ];
            full.extend(argv.iter().cloned());
            self.command(&full)
        };
        self.spawn_job(cmd, &argv[0], stdout, stderr)
    }

    /// Starts `argv`, a program that ends by itself when its stdin reaches end-of-file
    /// (`sbm-testbed shape hold`): [`Job::stop`] closes it, as does a dying connection.
    pub fn spawn_until_eof(
        &self,
        argv: &[String],
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<Job, RemoteError> {
        self.spawn_job(self.command(argv), &argv[0], stdout, stderr)
    }

    fn spawn_job(
        &self,
        mut cmd: Command,
        name: &str,
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<Job, RemoteError> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| self.error(format!("cannot start {name}: {e}")))?;
        Ok(Job {
            stdin: child.stdin.take(),
            child,
            remote: !self.is_local(),
        })
    }

    /// Copies the remote directory `remote` into `local` (tar over the session).
    pub fn fetch_dir(
        &self,
        remote: &str,
        local: &Path,
        timeout: Duration,
    ) -> Result<(), RemoteError> {
        let what = format!("bringing back {remote}");
        let mut src = self
            .command(&[
                "tar".into(),
                "-C".into(),
                remote.into(),
                "-cf".into(),
                "-".into(),
                ".".into(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.error(format!("{what}: {e}")))?;
        let Some(out) = src.stdout.take() else {
            return Err(self.error(format!("{what}: no pipe")));
        };
        let mut dst = Command::new("tar")
            .arg("-C")
            .arg(local)
            .args(["-xf", "-"])
            .stdin(Stdio::from(out))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.error(format!("{what}: local tar: {e}")))?;
        let src_err = src.stderr.take();
        let read_err = std::thread::spawn(move || read_all(src_err));
        let deadline = Instant::now() + timeout;
        let (a, b) = (
            wait_until(&mut src, deadline),
            wait_until(&mut dst, deadline),
        );
        let src_msg = read_err.join().unwrap_or_default();
        let dst_msg = read_all(dst.stderr.take());
        match (a, b) {
            (Some(a), Some(b)) if a.success() && b.success() => Ok(()),
            (Some(a), _) if !a.success() => Err(self.error(format!(
                "{what}: {}",
                last_line(&src_msg).unwrap_or_else(|| format!("tar exited with {a}"))
            ))),
            (Some(_), Some(b)) => Err(self.error(format!(
                "{what}: local tar: {}",
                last_line(&dst_msg).unwrap_or_else(|| format!("exited with {b}"))
            ))),
            _ => Err(self.error(format!("{what}: not done within {}s", timeout.as_secs()))),
        }
    }
}

/// Waits for `child` until `deadline`; kills it then.
pub fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

impl Job {
    /// Asks the program to end as on Ctrl-C.
    pub fn stop(&mut self) {
        self.stdin = None;
        if !self.remote {
            let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGINT);
        }
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits up to `timeout`; None if it is still running.
    pub fn wait_for(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.try_wait() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops it and waits `grace`; then ends our own process of it (the program, or the
    /// ssh client whose end ends the remote program).
    pub fn finish(&mut self, grace: Duration) -> Option<ExitStatus> {
        self.stop();
        if let Some(st) = self.wait_for(grace) {
            return Some(st);
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

static NEXT_MASTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Master {
    fn check(&self) -> bool {
        Command::new("ssh")
            .arg("-S")
            .arg(&self.control)
            .args(["-O", "check", "sbm-master"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = Command::new("ssh")
            .arg("-S")
            .arg(&self.control)
            .args(["-O", "exit", "sbm-master"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn destination(endpoint: &Endpoint) -> String {
    match endpoint {
        Endpoint::Local => "localhost".into(),
        Endpoint::Ssh { user, host, .. } => match user {
            Some(u) => format!("{u}@{host}"),
            None => host.clone(),
        },
    }
}

fn read_all(r: Option<impl Read>) -> String {
    let mut s = String::new();
    if let Some(mut r) = r {
        let _ = r.read_to_string(&mut s);
    }
    s
}

/// The last non-empty line of a program's messages.
pub fn last_line(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// `dir/name` as a remote path string.
pub fn join(dir: &str, name: &str) -> String {
    Path::new(dir).join(name).to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_print_back() {
        for s in [
            "local",
            "ssh://host",
            "ssh://root@198.18.2.1",
            "ssh://root@198.18.2.1:2222",
            "ssh://[2001:2::1]:22",
            "ssh://me@[2001:2::1]",
        ] {
            let e = Endpoint::parse(s).unwrap();
            assert_eq!(e.to_string(), s);
        }
        assert_eq!(
            Endpoint::parse("ssh://a@b:22").unwrap(),
            Endpoint::Ssh {
                user: Some("a".into()),
                host: "b".into(),
                port: Some(22)
            }
        );
        for bad in [
            "remote",
            "ssh://",
            "ssh://@h",
            "ssh://h:0",
            "ssh://h:x",
            "ssh://[::1",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shell_words_survive_quoting() {
        assert_eq!(shell_quote("--rate"), "--rate");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }
}
