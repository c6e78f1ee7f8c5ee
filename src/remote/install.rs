//! sbm's binaries on a remote host: checked by version, copied over the host's own ssh
//! connection when missing or different, into a cache directory keyed by the build, and
//! run once there before anything relies on them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{join, shell_quote, Host, RemoteError};

/// The binaries one build of sbm consists of (those a remote end needs).
#[derive(Debug, Clone)]
pub struct Build {
    /// Where the local binaries are.
    pub dir: PathBuf,
    /// The binaries' names.
    pub names: Vec<String>,
    /// `VERSION-HASH`: sbm's version and the first 16 hex digits of the binaries' SHA-256.
    pub key: String,
}

impl Build {
    /// This build: `names` in `dir`, hashed.
    pub fn local(dir: &Path, names: &[&str]) -> Result<Build, String> {
        let mut h = Sha256::new();
        for n in names {
            let p = dir.join(n);
            let bytes = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            h.update(n.as_bytes());
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(&bytes);
        }
        let digest = h.finalize();
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        Ok(Build {
            dir: dir.to_path_buf(),
            names: names.iter().map(|s| s.to_string()).collect(),
            key: format!("{}-{hex}", env!("CARGO_PKG_VERSION")),
        })
    }
}

/// Where the binaries are on `host`, and whether they were copied now.
#[derive(Debug, Clone)]
pub struct Installed {
    pub dir: String,
    pub copied: bool,
}

impl Installed {
    /// The path of one binary on the host.
    pub fn bin(&self, name: &str) -> String {
        join(&self.dir, name)
    }
}

/// Makes sure the binaries `needs` of `build` are on `host` under `cache/KEY` (a local host
/// uses the build where it is). Each is run with `--version` afterwards: a build that
/// cannot run there (an older C library, another architecture) is one line, not a failed
/// cell later.
pub fn ensure(
    host: &Host,
    build: &Build,
    needs: &[&str],
    cache: &str,
) -> Result<Installed, RemoteError> {
    if host.is_local() {
        return Ok(Installed {
            dir: build.dir.to_string_lossy().into_owned(),
            copied: false,
        });
    }
    let dir = join(cache, &build.key);
    let listing = needs
        .iter()
        .map(|n| format!("test -x {p} || echo {n}", p = shell_quote(&join(&dir, n))))
        .collect::<Vec<_>>()
        .join("; ");
    let missing: Vec<String> = host
        .output(
            host.shell(&listing),
            "looking for sbm's binaries",
            Duration::from_secs(30),
        )?
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if !missing.is_empty() {
        host.output(
            host.command(&["mkdir".into(), "-p".into(), dir.clone()]),
            "making the cache directory",
            Duration::from_secs(30),
        )?;
    }
    for n in &missing {
        // Under a temporary name first, renamed when complete: an interrupted copy never
        // looks like an installed binary.
        let local = build.dir.join(n);
        let data =
            std::fs::read(&local).map_err(|e| host.error(format!("{}: {e}", local.display())))?;
        // Unique per copy: two pairs of one run may share a host (and a cache).
        let (part, path) = (
            join(
                &dir,
                &format!(
                    ".{n}.part{}-{}",
                    std::process::id(),
                    crate::clock::realtime_ns()
                ),
            ),
            join(&dir, n),
        );
        host.put(&data, &part, Duration::from_secs(600))?;
        host.output(
            host.shell(&format!(
                "chmod 755 {p} && mv -f {p} {f}",
                p = shell_quote(&part),
                f = shell_quote(&path)
            )),
            "installing sbm's binaries",
            Duration::from_secs(30),
        )?;
    }
    for n in needs {
        let path = join(&dir, n);
        let out = host.output(
            host.command(&[path.clone(), "--version".into()]),
            &format!("the copied {n} does not run there"),
            Duration::from_secs(30),
        )?;
        if !out.contains(env!("CARGO_PKG_VERSION")) {
            return Err(host.error(format!(
                "{path} --version says {:?}, not sbm {}",
                out.trim(),
                env!("CARGO_PKG_VERSION")
            )));
        }
    }
    Ok(Installed {
        dir,
        copied: !missing.is_empty(),
    })
}
