//! `testbed/uml build`: the patched User-Mode Linux kernel, built from Debian's
//! linux-source-6.12 (the LTS) with kernel/patches and kernel/uml.config, cached under a key of
//! source version + patches + config so that a clean clone on the same machine reuses it.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The Debian package whose tarball the kernel is built from.
pub const SOURCE_PACKAGE: &str = "linux-source-6.12";

/// Programs the build runs, with the Debian packages that provide them.
const BUILD_TOOLS: &[(&str, &str)] = &[
    ("make", "make"),
    ("gcc", "gcc"),
    ("flex", "flex"),
    ("bison", "bison"),
    ("bc", "bc"),
    ("patch", "patch"),
    ("tar", "tar"),
    ("xz", "xz-utils"),
    ("perl", "perl"),
];

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{0} not found: install the Debian package {SOURCE_PACKAGE} (apt-get install {SOURCE_PACKAGE})")]
    NoSource(PathBuf),
    #[error("'{0}' not found: install the Debian package {1}")]
    MissingTool(&'static str, &'static str),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{cmd}` failed (last lines of {log}):\n{tail}")]
    Step {
        cmd: String,
        log: PathBuf,
        tail: String,
    },
    #[error("kernel/uml.config asks for {0}, but the kernel's configuration does not have it (not an option of this source?)")]
    ConfigNotApplied(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What goes into a build, and where it is cached.
#[derive(Debug, Clone)]
pub struct BuildInputs {
    /// linux-source-6.12.tar.xz
    pub source_tar: PathBuf,
    /// The package version (dpkg), or the tarball's size and mtime without dpkg.
    pub source_version: String,
    /// kernel/patches/*.patch in order.
    pub patches: Vec<PathBuf>,
    /// kernel/uml.config
    pub config: PathBuf,
    /// ~/.cache/sbm/uml (or $XDG_CACHE_HOME/sbm/uml, or $SBM_UML_CACHE).
    pub cache_root: PathBuf,
}

/// Recorded beside each cached kernel.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BuildRecord {
    pub key: String,
    pub source_package: String,
    pub source_version: String,
    pub patches: Vec<String>,
    pub config: String,
    pub build_seconds: f64,
}

/// A built kernel.
#[derive(Debug, Clone)]
pub struct Built {
    pub kernel: PathBuf,
    pub record: BuildRecord,
    /// false when the cache already had it.
    pub fresh: bool,
}

/// The repository's kernel/ directory (patches and config): $SBM_KERNEL_DIR, else the
/// source tree's, else the copies built into the binary (an install without the tree).
pub fn default_kernel_dir() -> PathBuf {
    std::env::var_os("SBM_KERNEL_DIR").map_or_else(
        || {
            crate::embedded::tree_or_embedded(
                PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/kernel")),
                crate::embedded::Set::Kernel,
            )
        },
        PathBuf::from,
    )
}

pub fn default_cache_root() -> PathBuf {
    if let Some(p) = std::env::var_os("SBM_UML_CACHE") {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"));
    base.join("sbm").join("uml")
}

fn source_version(tar: &Path) -> Result<String, BuildError> {
    let dpkg = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", SOURCE_PACKAGE])
        .stderr(Stdio::null())
        .output();
    if let Ok(out) = dpkg {
        let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !v.is_empty() {
            return Ok(v);
        }
    }
    let md = fs::metadata(tar).map_err(io_err(tar))?;
    let mtime = md
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    Ok(format!("size{}-mtime{}", md.len(), mtime))
}

impl BuildInputs {
    /// The inputs found in `kernel_dir` and the installed source package.
    pub fn discover(kernel_dir: &Path, cache_root: PathBuf) -> Result<BuildInputs, BuildError> {
        let source_tar = PathBuf::from(format!("/usr/src/{SOURCE_PACKAGE}.tar.xz"));
        if !source_tar.is_file() {
            return Err(BuildError::NoSource(source_tar));
        }
        let patches = patch_files(&kernel_dir.join("patches"))?;
        let config = kernel_dir.join("uml.config");
        if !config.is_file() {
            return Err(BuildError::Io {
                path: config,
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        Ok(BuildInputs {
            source_version: source_version(&source_tar)?,
            source_tar,
            patches,
            config,
            cache_root,
        })
    }

    /// Hash of everything that changes the kernel: the source version, each patch's name
    /// and bytes, and the config fragment's bytes.
    pub fn key(&self) -> Result<String, BuildError> {
        let mut h = Sha256::new();
        h.update(SOURCE_PACKAGE.as_bytes());
        h.update([0]);
        h.update(self.source_version.as_bytes());
        for p in &self.patches {
            h.update([0]);
            h.update(p.file_name().unwrap_or_default().as_encoded_bytes());
            h.update([0]);
            h.update(fs::read(p).map_err(io_err(p))?);
        }
        h.update([1]);
        h.update(fs::read(&self.config).map_err(io_err(&self.config))?);
        let digest = h.finalize();
        Ok(digest[..8].iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn kernel_path(&self, key: &str) -> PathBuf {
        self.cache_root.join(key).join("linux")
    }
}

/// The options a fragment line asks for: (name, wanted value or None for "not set").
pub fn fragment_options(text: &str) -> Vec<(String, Option<String>)> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            if let Some(rest) = l.strip_prefix("# CONFIG_") {
                let name = rest.strip_suffix(" is not set")?;
                Some((format!("CONFIG_{name}"), None))
            } else if l.starts_with("CONFIG_") {
                let (k, v) = l.split_once('=')?;
                Some((k.to_string(), Some(v.to_string())))
            } else {
                None
            }
        })
        .collect()
}

/// The first option of the fragment that the final .config does not carry.
pub fn unapplied_option(fragment: &str, dotconfig: &str) -> Option<String> {
    let have: std::collections::HashMap<&str, &str> = dotconfig
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    fragment_options(fragment)
        .into_iter()
        .find(|(name, want)| match want {
            Some(v) => have.get(name.as_str()) != Some(&v.as_str()),
            None => have.get(name.as_str()).is_some_and(|v| *v != "n"),
        })
        .map(|(name, want)| match want {
            Some(v) => format!("{name}={v}"),
            None => format!("{name} unset"),
        })
}

fn check_tools() -> Result<(), BuildError> {
    for (tool, package) in BUILD_TOOLS {
        let found = std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()));
        if !found {
            return Err(BuildError::MissingTool(tool, package));
        }
    }
    Ok(())
}

/// Runs one build step with its output appended to `log`.
fn step(cmd: &mut Command, log: &Path) -> Result<(), BuildError> {
    let line = format!("{cmd:?}").replace('"', "");
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io_err(log))?;
    let _ = writeln!(f, "+ {line}");
    let f2 = f.try_clone().map_err(io_err(log))?;
    let status = cmd
        .stdin(Stdio::null())
        .stdout(f)
        .stderr(f2)
        .status()
        .map_err(io_err(log))?;
    if status.success() {
        return Ok(());
    }
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    Err(BuildError::Step {
        cmd: line,
        log: log.to_path_buf(),
        tail,
    })
}

/// Builds (or finds in the cache) the patched UML kernel. `progress` gets one line per step.
pub fn build(
    inputs: &BuildInputs,
    jobs: usize,
    force: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<Built, BuildError> {
    let key = inputs.key()?;
    let dir = inputs.cache_root.join(&key);
    let kernel = dir.join("linux");
    let record_path = dir.join("build.json");
    fs::create_dir_all(&inputs.cache_root).map_err(io_err(&inputs.cache_root))?;
    // One build at a time per cache: a second caller waits, then finds the kernel.
    let lock_path = inputs.cache_root.join(".lock");
    let lock_file = File::create(&lock_path).map_err(io_err(&lock_path))?;
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive).map_err(
        |(_, e)| BuildError::Io {
            path: lock_path.clone(),
            source: e.into(),
        },
    )?;
    if !force && kernel.is_file() && dir.join(KSELFTEST_DIR).is_dir() {
        if let Some(record) = fs::read(&record_path)
            .ok()
            .and_then(|b| serde_json::from_slice::<BuildRecord>(&b).ok())
        {
            return Ok(Built {
                kernel,
                record,
                fresh: false,
            });
        }
    }
    check_tools()?;
    let started = Instant::now();
    let work = inputs.cache_root.join(format!("{key}.build"));
    if work.exists() {
        fs::remove_dir_all(&work).map_err(io_err(&work))?;
    }
    fs::create_dir_all(&work).map_err(io_err(&work))?;
    let log = inputs.cache_root.join(format!("{key}.log"));
    let _ = fs::remove_file(&log);

    progress(&format!(
        "extracting {} ({})",
        inputs.source_tar.display(),
        inputs.source_version
    ));
    step(
        Command::new("tar")
            .arg("-xf")
            .arg(&inputs.source_tar)
            .arg("-C")
            .arg(&work)
            .arg("--strip-components=1"),
        &log,
    )?;
    for p in &inputs.patches {
        progress(&format!("applying {}", p.display()));
        step(
            Command::new("patch")
                .args(["-p1", "-N", "--no-backup-if-mismatch", "-d"])
                .arg(&work)
                .arg("-i")
                .arg(p),
            &log,
        )?;
    }
    progress(&format!("configuring with {}", inputs.config.display()));
    step(
        Command::new("make")
            .args(["-C"])
            .arg(&work)
            .args(["ARCH=um", "defconfig"]),
        &log,
    )?;
    step(
        Command::new("sh")
            .arg(work.join("scripts/kconfig/merge_config.sh"))
            .args(["-m", "-O"])
            .arg(&work)
            .arg(work.join(".config"))
            .arg(&inputs.config)
            .current_dir(&work),
        &log,
    )?;
    step(
        Command::new("make")
            .args(["-C"])
            .arg(&work)
            .args(["ARCH=um", "olddefconfig"]),
        &log,
    )?;
    let fragment = fs::read_to_string(&inputs.config).map_err(io_err(&inputs.config))?;
    let dotconfig_path = work.join(".config");
    let dotconfig = fs::read_to_string(&dotconfig_path).map_err(io_err(&dotconfig_path))?;
    if let Some(opt) = unapplied_option(&fragment, &dotconfig) {
        return Err(BuildError::ConfigNotApplied(opt));
    }
    progress(&format!(
        "compiling with -j{jobs} (a few minutes; log: {})",
        log.display()
    ));
    step(
        Command::new("make").args(["-C"]).arg(&work).args([
            "ARCH=um",
            &format!("-j{jobs}"),
            "linux",
        ]),
        &log,
    )?;
    fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    progress("building the series' selftests in the tree");
    build_selftests(&work, &dir.join(KSELFTEST_DIR), &log)?;
    let built = work.join("linux");
    fs::copy(&built, &kernel).map_err(io_err(&kernel))?;
    fs::copy(&dotconfig_path, dir.join("config")).map_err(io_err(&dir))?;
    let record = BuildRecord {
        key: key.clone(),
        source_package: SOURCE_PACKAGE.into(),
        source_version: inputs.source_version.clone(),
        patches: inputs
            .patches
            .iter()
            .map(|p| p.file_name().unwrap_or_default().to_string_lossy().into())
            .collect(),
        config: inputs.config.display().to_string(),
        build_seconds: started.elapsed().as_secs_f64(),
    };
    let json = serde_json::to_vec_pretty(&record).expect("record serializes");
    fs::write(&record_path, json).map_err(io_err(&record_path))?;
    // The tree is 1.5 GB; the kernel and its config are what later runs need.
    let _ = fs::remove_dir_all(&work);
    Ok(Built {
        kernel,
        record,
        fresh: true,
    })
}

/// Beside the cached kernel: the selftests the patches add, built in the patched tree, with
/// kselftest's runner, laid out as `make install` of the selftests lays them out
/// (`kselftest/runner.sh`, `net/...`), so that a guest runs them as CI systems do.
pub const KSELFTEST_DIR: &str = "kselftest";

/// The selftests (C programs and scripts) that kernel/patches add under
/// tools/testing/selftests/net.
pub const SERIES_SELFTESTS: &[(&str, &str)] = &[
    ("tcp_replenish_time", "tcp_replenish_time.sh"),
    ("tcp_tstamp_backlog", "tcp_tstamp_backlog.sh"),
];

/// Builds SERIES_SELFTESTS in the configured tree `work` against its own exported headers
/// (`make headers`, for the host's architecture: UML exports none) and copies them, with
/// kselftest's runner and the net collection's settings, to `out`.
fn build_selftests(work: &Path, out: &Path, log: &Path) -> Result<(), BuildError> {
    step(
        Command::new("make")
            .arg("-C")
            .arg(work)
            .args([&format!("ARCH={}", host_kernel_arch()), "headers"]),
        log,
    )?;
    let net = work.join("tools/testing/selftests/net");
    let mut make = Command::new("make");
    make.arg("-C").arg(&net);
    // By their full path, so that the selftests' own rule (lib.mk's `$(OUTPUT)/%`) and the
    // net Makefile's per-program flags apply.
    for (program, _) in SERIES_SELFTESTS {
        make.arg(net.join(program));
    }
    step(&mut make, log)?;
    if out.exists() {
        fs::remove_dir_all(out).map_err(io_err(out))?;
    }
    let out_net = out.join("net");
    fs::create_dir_all(&out_net).map_err(io_err(&out_net))?;
    step(
        Command::new("cp")
            .arg("-a")
            .arg(work.join("tools/testing/selftests/kselftest"))
            .arg(out),
        log,
    )?;
    let mut files: Vec<&str> = vec!["settings"];
    for (program, script) in SERIES_SELFTESTS {
        files.extend([*program, *script]);
    }
    for f in files {
        let from = net.join(f);
        fs::copy(&from, out_net.join(f)).map_err(io_err(&from))?;
    }
    Ok(())
}

/// The kernel's name for this machine's architecture (`make ARCH=`), for exported headers.
fn host_kernel_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" | "x86" => "x86",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Finds the inputs in `kernel_dir` and builds (or finds in `cache_root`) the kernel,
/// with `jobs` compile jobs or one per CPU.
pub fn build_from(
    kernel_dir: &Path,
    cache_root: PathBuf,
    jobs: Option<usize>,
    force: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<Built, BuildError> {
    let inputs = BuildInputs::discover(kernel_dir, cache_root)?;
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    build(&inputs, jobs, force, progress)
}

/// The patches of the posting copy of the replenish series (kernel/patches/v3) without its
/// cover letter, which has no diff: checkpatch reads them too. None in an install without the
/// source tree (they are not embedded: nothing builds them).
fn posting_copy(inputs: &BuildInputs) -> Result<Vec<PathBuf>, BuildError> {
    let Some(dir) = inputs
        .patches
        .first()
        .and_then(|p| p.parent())
        .map(|d| d.join("v3"))
    else {
        return Ok(Vec::new());
    };
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut found = patch_files(&dir)?;
    found.retain(|p| !p.to_string_lossy().ends_with("cover-letter.patch"));
    Ok(found)
}

/// The `*.patch` files directly in `dir` (not in its subdirectories), in name order: the
/// order `git am` and the build apply them in.
fn patch_files(dir: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "patch"))
        .collect();
    found.sort();
    Ok(found)
}

/// Runs the source's scripts/checkpatch.pl (strict, as netdev does) on the patches and on
/// the posting copy's.
/// Returns checkpatch's report; an error when it finds anything.
pub fn checkpatch(inputs: &BuildInputs) -> Result<String, BuildError> {
    let tmp = inputs.cache_root.join("checkpatch");
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    let log = tmp.join("extract.log");
    // checkpatch reads its word lists from beside itself.
    let top = format!("{SOURCE_PACKAGE}/scripts");
    let mut tar = Command::new("tar");
    tar.arg("-xf")
        .arg(&inputs.source_tar)
        .arg("-C")
        .arg(&tmp)
        .arg("--strip-components=1");
    for f in ["checkpatch.pl", "spelling.txt", "const_structs.checkpatch"] {
        tar.arg(format!("{top}/{f}"));
    }
    step(&mut tar, &log)?;
    let out = Command::new("perl")
        .arg(tmp.join("scripts/checkpatch.pl"))
        // --no-tree cannot read MAINTAINERS, so every new file draws "does MAINTAINERS
        // need updating?"; the selftest's directory is covered there (NETWORKING [GENERAL]).
        .args([
            "--no-tree",
            "--strict",
            "--no-color",
            "--ignore",
            "FILE_PATH_CHANGES",
        ])
        .args(&inputs.patches)
        .args(posting_copy(inputs)?)
        .output()
        .map_err(io_err(&tmp))?;
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(report)
    } else {
        Err(BuildError::Step {
            cmd: "checkpatch.pl --no-tree --strict kernel/patches/*.patch".into(),
            log: tmp,
            tail: report,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragment_lines_become_wanted_options() {
        let f = "# comment\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=\"x\"\n\n";
        assert_eq!(
            fragment_options(f),
            vec![
                ("CONFIG_A".into(), Some("y".into())),
                ("CONFIG_B".into(), None),
                ("CONFIG_C".into(), Some("\"x\"".into())),
            ]
        );
    }

    #[test]
    fn an_option_kconfig_dropped_is_named() {
        let f = "CONFIG_A=y\n# CONFIG_B is not set\n";
        assert_eq!(
            unapplied_option(f, "CONFIG_A=y\n# CONFIG_B is not set\n"),
            None
        );
        assert_eq!(
            unapplied_option(f, "# CONFIG_A is not set\n"),
            Some("CONFIG_A=y".into())
        );
        assert_eq!(
            unapplied_option(f, "CONFIG_A=y\nCONFIG_B=y\n"),
            Some("CONFIG_B unset".into())
        );
    }

    #[test]
    fn the_key_changes_with_every_input() {
        let d = std::env::temp_dir().join(format!("sbm-uml-key-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        let p = d.join("0001-a.patch");
        let c = d.join("uml.config");
        fs::write(&p, "one").unwrap();
        fs::write(&c, "CONFIG_A=y\n").unwrap();
        let mut inputs = BuildInputs {
            source_tar: d.join("src.tar.xz"),
            source_version: "6.1.1-1".into(),
            patches: vec![p.clone()],
            config: c.clone(),
            cache_root: d.clone(),
        };
        let k0 = inputs.key().unwrap();
        assert_eq!(k0.len(), 16);
        assert_eq!(inputs.key().unwrap(), k0);
        fs::write(&p, "two").unwrap();
        let k1 = inputs.key().unwrap();
        fs::write(&c, "CONFIG_A=n\n").unwrap();
        let k2 = inputs.key().unwrap();
        inputs.source_version = "6.1.2-1".into();
        let k3 = inputs.key().unwrap();
        let all = [k0, k1, k2, k3];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        fs::remove_dir_all(&d).unwrap();
    }
}
