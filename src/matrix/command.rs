//! `workload = "command"` cells: an unmodified server in the sender's namespace, run under
//! sbm-trace (which records its writes and, if asked, steers them with the BPF
//! REPLENISH_TIME), and its client in the receiver's namespace. The client ends the cell
//! (its own time limit); sbm-trace is then stopped, which stops the server and writes the
//! trace.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::process::{
    bin_dir, in_netns, last_error_line, now_unix_s, spawn_logged, stop_child, testbed_status,
    wait_child, NsSysctls, Waited,
};
use super::record::Meta;
use super::record::{CellStatus, Status};
use super::spec::{Cell, MatrixSpec};
use crate::signals::StopSignals;
use crate::testbed::wan;

/// Where the server listens, in the sender's namespace.
pub const SERVER_PORT: u16 = 5380;

/// How long the server may take to listen.
const LISTEN_PATIENCE: Duration = Duration::from_secs(15);

pub(super) struct CommandCell<'a> {
    pub spec: &'a MatrixSpec,
    pub prefix: &'a str,
    pub cell: &'a Cell,
    pub dir: &'a Path,
    pub server: &'a [String],
    pub client: &'a [String],
    pub sysctls: &'a NsSysctls,
}

/// The values a command line's placeholders stand for.
struct Placeholders {
    dir: PathBuf,
    tmp: PathBuf,
    seconds: u64,
    bytes: u64,
}

impl Placeholders {
    fn of(cell: &Cell, dir: &Path, tmp: &Path) -> Placeholders {
        let seconds = cell.duration.as_secs_f64().ceil() as u64;
        // Twice what the bottleneck carries in the cell (an unshaped path: 10 Gb/s).
        let rate = cell.rate_bps.unwrap_or(10_000_000_000);
        Placeholders {
            dir: dir.into(),
            tmp: tmp.into(),
            seconds,
            bytes: (rate / 8).saturating_mul(seconds.max(1)).saturating_mul(2),
        }
    }

    fn expand(&self, arg: &str) -> String {
        arg.replace("{addr}", wan::SND_ADDR)
            .replace("{port}", &SERVER_PORT.to_string())
            .replace("{dir}", &self.dir.to_string_lossy())
            .replace("{tmp}", &self.tmp.to_string_lossy())
            .replace("{seconds}", &self.seconds.to_string())
            .replace("{bytes}", &self.bytes.to_string())
    }
}

/// The cell's sbm-trace command line through sbm-trace's own parser: one line on a typo.
#[cfg(feature = "bpf")]
pub(super) fn check_trace_args(
    spec: &MatrixSpec,
    cell: &Cell,
    server: &[String],
) -> Result<(), String> {
    use clap::Parser as _;
    let argv = trace_command(spec, cell, Path::new("OUT"), server);
    crate::trace::cli::TraceArgs::try_parse_from(&argv)
        .map(drop)
        .map_err(|e| crate::cli::one_line("sbm-trace", &e.render().to_string()))
}

/// Command cells run their server under sbm-trace, which is BPF: a build without it refuses
/// them before anything is built.
#[cfg(not(feature = "bpf"))]
pub(super) fn check_trace_args(_: &MatrixSpec, _: &Cell, _: &[String]) -> Result<(), String> {
    Err(crate::cli::built_without_bpf(
        "workload = \"command\" (sbm-trace)",
    ))
}

/// sbm-trace's command line for the cell (`sbm-trace … -- server…`), placeholders in
/// `server` as given (the check before a run parses it with them unexpanded).
pub(super) fn trace_command(
    spec: &MatrixSpec,
    cell: &Cell,
    dir: &Path,
    server: &[String],
) -> Vec<String> {
    let mut cmd: Vec<String> = vec![
        bin_dir().join("sbm-trace").to_string_lossy().into_owned(),
        "--out".into(),
        dir.to_string_lossy().into_owned(),
        "--port".into(),
        SERVER_PORT.to_string(),
        "--warmup".into(),
        format!("{}ms", cell.warmup.as_millis()),
        "-i".into(),
        spec.interval.clone(),
        // The row's congestion control on the server's connections: an unmodified server
        // picks none, and would run the machine's default (BBR on some) beside sbm-send
        // cells that run the `cc` axis.
        "--cc".into(),
        cell.cc.clone(),
    ];
    cmd.extend(cell.args.iter().cloned());
    cmd.push("--".into());
    cmd.extend(server.iter().cloned());
    cmd
}

/// A scratch directory for the cell's server (its files, a large file to serve), removed
/// when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether something listens on TCP `port` in the network namespace of process `pid`.
fn listening(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                // local_address is HEXADDR:PORT; state 0A is LISTEN.
                cols.get(1)
                    .is_some_and(|a| format!("{a} ").ends_with(&want))
                    && cols.get(3) == Some(&"0A")
            })
        })
    })
}

/// Runs a command cell; its status and whether the run was interrupted.
pub(super) fn run_cell(
    c: &CommandCell<'_>,
    mut st: CellStatus,
    signals: &StopSignals,
) -> (CellStatus, bool) {
    let names = wan::Names::new(c.prefix);
    let scratch = Scratch(std::env::temp_dir().join(format!(
        "sbm-cell-{}-{}",
        std::process::id(),
        c.cell.name
    )));
    if let Err(e) = std::fs::create_dir_all(&scratch.0) {
        st.error = Some(format!("{}: {e}", scratch.0.display()));
        st.ended_unix_s = now_unix_s();
        return (st, false);
    }
    let ph = Placeholders::of(c.cell, c.dir, &scratch.0);
    let server: Vec<String> = c.server.iter().map(|a| ph.expand(a)).collect();
    let trace_cmd = in_netns(&names.snd, trace_command(c.spec, c.cell, c.dir, &server));
    let client_cmd = in_netns(&names.rcv, c.client.iter().map(|a| ph.expand(a)));
    let before = testbed_status(c.prefix);

    let trace_log = c.dir.join("trace.log");
    let client_log = c.dir.join("client.log");
    let mut trace = match spawn_logged(&trace_cmd, &trace_log) {
        Ok(t) => t,
        Err(e) => {
            st.error = Some(e);
            st.ended_unix_s = now_unix_s();
            return (st, false);
        }
    };
    let deadline = Instant::now() + LISTEN_PATIENCE;
    while !listening(trace.id(), SERVER_PORT) {
        let exited = trace.try_wait().ok().flatten().is_some();
        if exited || Instant::now() >= deadline {
            st.error = Some(last_error_line(&trace_log, "sbm-trace").unwrap_or_else(|| {
                format!(
                    "the server did not listen on port {SERVER_PORT} within {}s",
                    LISTEN_PATIENCE.as_secs()
                )
            }));
            stop_child(&mut trace, Signal::SIGINT, Duration::from_secs(10));
            st.ended_unix_s = now_unix_s();
            return (st, false);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut interrupted = false;
    let client_status = match spawn_logged(&client_cmd, &client_log) {
        Ok(mut client) => {
            let limit = c.cell.duration + Duration::from_secs(60);
            match wait_child(&mut client, limit, signals) {
                Waited::Exited(s) => Some(s),
                Waited::TimedOut => {
                    st.error = Some(format!(
                        "the client was still running after {}s: stopped",
                        limit.as_secs()
                    ));
                    stop_child(&mut client, Signal::SIGTERM, Duration::from_secs(5))
                }
                Waited::Interrupted => {
                    interrupted = true;
                    stop_child(&mut client, Signal::SIGTERM, Duration::from_secs(5))
                }
            }
        }
        Err(e) => {
            st.error = Some(e);
            None
        }
    };
    // sbm-trace stops the server (SIGTERM) and writes what it recorded.
    let trace_status = stop_child(&mut trace, Signal::SIGINT, Duration::from_secs(30));
    st.send_exit = trace_status.and_then(|s| s.code());
    st.sink_exit = client_status.and_then(|s| s.code());
    let mut meta = Meta::new(c.cell, client_cmd, trace_cmd);
    meta.ns_sysctls = c.sysctls.applied();
    meta.testbed_before = before;
    meta.testbed_after = testbed_status(c.prefix);
    meta.write(c.dir);
    st.status = if interrupted {
        Status::Interrupted
    } else if st.error.is_none() && st.send_exit == Some(0) && st.sink_exit == Some(0) {
        Status::Ok
    } else {
        st.error.get_or_insert_with(|| {
            if st.sink_exit != Some(0) {
                last_error_line(&client_log, "client")
                    .map(|l| format!("client exited with {:?}: {l}", st.sink_exit))
                    .unwrap_or_else(|| format!("client exited with {:?}", st.sink_exit))
            } else {
                last_error_line(&trace_log, "sbm-trace")
                    .unwrap_or_else(|| format!("sbm-trace exited with {:?}", st.send_exit))
            }
        });
        Status::Failed
    };
    st.ended_unix_s = now_unix_s();
    (st, interrupted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand_to_the_cells_values() {
        let cell = crate::matrix::spec::MatrixSpec::parse(
            "duration = \"9.5s\"\n[axes]\nrate = [\"2mbit\"]\n",
        )
        .unwrap()
        .cells()
        .unwrap()
        .remove(0);
        let ph = Placeholders::of(&cell, Path::new("/r/c"), Path::new("/tmp/x"));
        assert_eq!(
            ph.expand("http://{addr}:{port}/f?{seconds}&{bytes}&{dir}&{tmp}"),
            format!(
                "http://{}:{SERVER_PORT}/f?10&5000000&/r/c&/tmp/x",
                wan::SND_ADDR
            )
        );
    }
}
