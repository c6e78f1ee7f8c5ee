//! A fresh cgroup v2 directory for the life of a value, joined by this process or by a
//! command it runs: sock_ops programs attach to a cgroup and act on the sockets its
//! processes create afterwards.
//!
//! The cgroup2 hierarchy is found in /proc/self/mountinfo. Under `ip netns exec` /sys is
//! remounted and the host's cgroup mounts are gone, so when none is visible one is mounted
//! on a temporary directory (the same single hierarchy) and unmounted at the end.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::BpfError;

/// The cgroup2 hierarchy's mount point and the path of its root inside the hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup2Mount {
    pub dir: PathBuf,
    /// mountinfo's "root" field: `/` unless a container shows a subtree.
    pub root: String,
}

/// mountinfo's octal escapes (`\040` for a space) decoded.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The first cgroup2 mount in a mountinfo text.
pub fn find_cgroup2(mountinfo: &str) -> Option<Cgroup2Mount> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        if fstype != "cgroup2" {
            return None;
        }
        let f: Vec<&str> = left.split_whitespace().collect();
        Some(Cgroup2Mount {
            root: unescape(f.get(3)?),
            dir: PathBuf::from(unescape(f.get(4)?)),
        })
    })
}

/// This process's cgroup v2 path (the `0::` line of /proc/self/cgroup).
pub fn own_cgroup2_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// `path` (a cgroup path in the hierarchy) as a directory under `mount`.
fn dir_of(mount: &Cgroup2Mount, path: &str) -> PathBuf {
    let rel = path
        .strip_prefix(mount.root.trim_end_matches('/'))
        .unwrap_or(path)
        .trim_start_matches('/');
    mount.dir.join(rel)
}

/// A cgroup2 directory created by sbm, removed on drop (after this process, if it joined,
/// has gone back to the cgroup it came from); a cgroup2 mount of sbm's own is undone too.
#[derive(Debug)]
pub struct FreshCgroup {
    dir: PathBuf,
    handle: File,
    /// cgroup.procs of where this process was before [`FreshCgroup::join_self`].
    home: Option<PathBuf>,
    /// The hierarchy's root cgroup.procs: where to go when home refuses us back.
    root_procs: PathBuf,
    mount: Cgroup2Mount,
    mounted_here: Option<PathBuf>,
}

/// The PID in `PREFIX-PID` or `PREFIX-PID-N`, when `name` is one of sbm's.
pub fn owner_pid(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('-')?;
    rest.split('-').next()?.parse().ok()
}

/// Removes what a process killed outright (SIGKILL: no destructor ran) left behind: empty
/// cgroups named `PREFIX-PID-N` in `dir` and mount points `sbm-cgroup2-PID` in the temporary
/// directory whose PID is gone. rmdir only removes empty, unmounted directories, so nothing
/// in use can go.
fn sweep_leftovers(dir: &Path, prefixes: &[&str]) {
    let gone = |pid: u32| !Path::new(&format!("/proc/{pid}")).exists();
    let sweep = |dir: &Path, prefixes: &[&str]| {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if prefixes
                .iter()
                .filter_map(|p| owner_pid(&name, p))
                .any(gone)
            {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    };
    sweep(dir, prefixes);
    sweep(&std::env::temp_dir(), &["sbm-cgroup2"]);
}

impl FreshCgroup {
    /// Creates `PREFIX-PID-N` at the top of the cgroup2 hierarchy (first removing empty ones
    /// of processes that were killed outright).
    pub fn create(prefix: &str) -> Result<FreshCgroup, BpfError> {
        static SERIAL: AtomicU32 = AtomicU32::new(0);
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| BpfError::cgroup("reading", "/proc/self/mountinfo", e))?;
        let (mount, mounted_here) = match find_cgroup2(&mountinfo) {
            Some(m) => (m, None),
            None => {
                let dir = mount_cgroup2()?;
                (
                    Cgroup2Mount {
                        dir: dir.clone(),
                        root: "/".into(),
                    },
                    Some(dir),
                )
            }
        };
        sweep_leftovers(&mount.dir, &["sbm-bpf", "sbm-trace", "sbm-depart"]);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let dir = mount.dir.join(name);
        let undo_mount = |e: BpfError| {
            if let Some(m) = &mounted_here {
                unmount(m);
            }
            e
        };
        std::fs::create_dir(&dir).map_err(|e| undo_mount(BpfError::cgroup("creating", &dir, e)))?;
        let handle = File::open(&dir).map_err(|e| {
            let _ = std::fs::remove_dir(&dir);
            undo_mount(BpfError::cgroup("opening", &dir, e))
        })?;
        Ok(FreshCgroup {
            root_procs: mount.dir.join("cgroup.procs"),
            dir,
            handle,
            home: None,
            mount,
            mounted_here,
        })
    }

    /// Moves this process (every thread) into the cgroup; drop moves it back.
    pub fn join_self(&mut self) -> Result<(), BpfError> {
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| own_cgroup2_path(&t))
            .unwrap_or_else(|| "/".into());
        let home = dir_of(&self.mount, &own).join("cgroup.procs");
        let procs = self.procs_file();
        std::fs::write(&procs, std::process::id().to_string())
            .map_err(|e| BpfError::cgroup("joining", &procs, e))?;
        self.home = Some(home);
        Ok(())
    }

    /// The cgroup directory (what a program attaches to).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Its cgroup.procs: writing a PID there moves that process in.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

impl AsFd for FreshCgroup {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.handle.as_fd()
    }
}

impl Drop for FreshCgroup {
    fn drop(&mut self) {
        if let Some(home) = &self.home {
            let pid = std::process::id().to_string();
            if std::fs::write(home, &pid).is_err() {
                let _ = std::fs::write(&self.root_procs, &pid);
            }
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!(
                "sbm: warning: could not remove cgroup {}: {e} (processes still in it? rmdir it when they are gone)",
                self.dir.display()
            );
        }
        if let Some(m) = &self.mounted_here {
            unmount(m);
        }
    }
}

/// Mounts the cgroup2 hierarchy on a fresh directory under the temporary directory.
fn mount_cgroup2() -> Result<PathBuf, BpfError> {
    let dir = std::env::temp_dir().join(format!("sbm-cgroup2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| BpfError::cgroup("creating", &dir, e))?;
    nix::mount::mount(
        Some("cgroup2"),
        &dir,
        Some("cgroup2"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| {
        let _ = std::fs::remove_dir(&dir);
        BpfError::NoCgroup2 {
            dir: dir.clone(),
            reason: io::Error::from(e).to_string(),
        }
    })?;
    Ok(dir)
}

fn unmount(dir: &Path) {
    if let Err(e) = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH) {
        eprintln!("sbm: warning: could not unmount {}: {e}", dir.display());
    }
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_among_v1_ones() {
        let text = "\
25 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:28 / /sys/fs/cgroup/cpu rw shared:11 - cgroup cgroup rw,cpu
";
        assert_eq!(
            find_cgroup2(text),
            Some(Cgroup2Mount {
                dir: "/sys/fs/cgroup/unified".into(),
                root: "/".into()
            })
        );
        assert_eq!(
            find_cgroup2("25 30 0:22 / /sys rw - sysfs sysfs rw\n"),
            None
        );
    }

    #[test]
    fn leftovers_are_recognised_by_their_owner() {
        assert_eq!(owner_pid("sbm-bpf-4242-0", "sbm-bpf"), Some(4242));
        assert_eq!(owner_pid("sbm-cgroup2-77", "sbm-cgroup2"), Some(77));
        assert_eq!(owner_pid("sbm-trace-9-3", "sbm-trace"), Some(9));
        assert_eq!(owner_pid("sbm-bpfx-1-0", "sbm-bpf"), None);
        assert_eq!(owner_pid("user.slice", "sbm-bpf"), None);
        assert_eq!(owner_pid("sbm-bpf-me-0", "sbm-bpf"), None);
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        let text = "40 1 0:50 / /tmp/a\\040b rw - cgroup2 none rw\n";
        assert_eq!(find_cgroup2(text).unwrap().dir, PathBuf::from("/tmp/a b"));
    }

    #[test]
    fn own_path_and_its_directory() {
        let pc = "12:cpu,cpuacct:/x\n0::/user.slice/session-1.scope\n";
        let own = own_cgroup2_path(pc).unwrap();
        let m = Cgroup2Mount {
            dir: "/sys/fs/cgroup".into(),
            root: "/".into(),
        };
        assert_eq!(
            dir_of(&m, &own),
            PathBuf::from("/sys/fs/cgroup/user.slice/session-1.scope")
        );
        // A container sees a subtree of the hierarchy as its root.
        let c = Cgroup2Mount {
            dir: "/sys/fs/cgroup".into(),
            root: "/lxc/c1".into(),
        };
        assert_eq!(
            dir_of(&c, "/lxc/c1/app"),
            PathBuf::from("/sys/fs/cgroup/app")
        );
        assert_eq!(dir_of(&m, "/"), PathBuf::from("/sys/fs/cgroup"));
    }
}
