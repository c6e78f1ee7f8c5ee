//! sbm's BPF programs (C in `bpf/` at the top of the tree, built by build.rs) loaded and
//! attached from Rust through libbpf-rs.
//!
//! - [`cgroup`]: a fresh cgroup v2 directory that this process joins, so that a sock_ops
//!   program acts on its sockets and no one else's.
//! - [`probe`]: whether the kernel offers BPF TX timestamping, asked before choosing it.
//! - [`replenish`]: TCP_REPLENISH_TIME on a stock kernel — a sock_ops program that keeps
//!   each socket's TCP_NOTSENT_LOWAT at a multiple of drain rate × T.
//! - [`send_tap`]: the tracer's program on sbm-send's own connection (`--exact-departures`,
//!   `--timestamps bpf`).
//! - [`trace`]: the tracer's program — per-write TX timestamps and per-packet departures of
//!   any program's connections, through a ring buffer.
//!
//! Everything attached is detached and removed when its owner is dropped (the end of a
//! run, a signal, an error).

pub mod cgroup;
pub mod probe;
pub mod replenish;
pub mod send_tap;
pub mod trace;

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use libbpf_rs::{Link, Map, MapCore, MapFlags, Object, ObjectBuilder};

/// Why a BPF feature could not be set up: one line each, naming what failed.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error("BPF programs need root (CAP_BPF, CAP_NET_ADMIN and write access to cgroups): run sbm as root")]
    NotRoot,
    #[error("no cgroup v2 hierarchy is mounted and mounting one on {} failed: {reason}", dir.display())]
    NoCgroup2 { dir: PathBuf, reason: String },
    #[error("{what} {}: {source}", path.display())]
    Cgroup {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the kernel ({release}) refused the BPF program {program}: {reason}")]
    Load {
        program: &'static str,
        release: String,
        reason: String,
    },
    #[error("attaching {program} to cgroup {}: {reason}", path.display())]
    Attach {
        program: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("BPF map {map}: {reason}")]
    Map { map: &'static str, reason: String },
}

impl BpfError {
    fn cgroup(what: &'static str, path: impl AsRef<Path>, source: std::io::Error) -> BpfError {
        BpfError::Cgroup {
            what,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }
}

/// libbpf's own messages (warnings and the verifier's log), kept to explain a failure
/// instead of being printed over sbm's output.
static LIBBPF_LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn capture_libbpf_log() {
    fn keep(_level: libbpf_rs::PrintLevel, msg: String) {
        let mut log = LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() >= 200 {
            log.remove(0);
        }
        log.push(msg.trim_end().to_string());
    }
    libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, keep)));
}

/// The last lines libbpf said, joined on one line (the verifier's verdict ends its log).
fn libbpf_log_tail(lines: usize) -> String {
    let log = LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner());
    let relevant: Vec<&str> = log
        .iter()
        .flat_map(|m| m.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("libbpf: elf:") && !l.starts_with("--"))
        .collect();
    relevant[relevant.len().saturating_sub(lines)..].join(" | ")
}

/// A map of `object` by name.
fn find_map<'o>(object: &'o Object, name: &'static str) -> Result<Map<'o>, BpfError> {
    object
        .maps()
        .find(|m| m.name() == name)
        .ok_or(BpfError::Map {
            map: name,
            reason: "not in the object".into(),
        })
}

/// One of sbm's BPF objects (`bytes`, built by build.rs) loaded, `config` written at index 0
/// of its `config_map`, and its sock_ops `program` attached to the cgroup `cgroup` (a
/// directory's fd). Dropping the link detaches the program.
fn load_and_attach(
    bytes: &[u8],
    program: &'static str,
    config_map: &'static str,
    config: &[u8],
    cgroup: BorrowedFd<'_>,
) -> Result<(Object, Link), BpfError> {
    require_root()?;
    capture_libbpf_log();
    let load_error = |e: libbpf_rs::Error| BpfError::Load {
        program,
        release: crate::sysinfo::kernel_release(),
        reason: format!("{e}; libbpf: {}", libbpf_log_tail(3)),
    };
    let object = ObjectBuilder::default()
        .open_memory(bytes)
        .map_err(load_error)?
        .load()
        .map_err(load_error)?;
    find_map(&object, config_map)?
        .update(&0u32.to_ne_bytes(), config, MapFlags::ANY)
        .map_err(|e| BpfError::Map {
            map: config_map,
            reason: e.to_string(),
        })?;
    let link = object
        .progs_mut()
        .find(|p| p.name() == program)
        .ok_or(BpfError::Map {
            map: program,
            reason: "program not in the object".into(),
        })?
        .attach_cgroup(cgroup.as_raw_fd())
        .map_err(|e| BpfError::Attach {
            program,
            path: std::fs::read_link(format!("/proc/self/fd/{}", cgroup.as_raw_fd()))
                .unwrap_or_default(),
            reason: e.to_string(),
        })?;
    Ok((object, link))
}

fn require_root() -> Result<(), BpfError> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(BpfError::NotRoot)
    }
}
