//! The matrix presets and the UML kernel's inputs (patches, config fragment), compiled
//! into the binaries by build.rs so that an install without the source tree
//! (`cargo install --path .`) still runs `sbm-matrix run paper` and builds the guest kernel.
//!
//! The tree's own directory wins whenever it exists: an edited preset or patch applies at
//! once. Without it, the embedded copies are written once into a cache directory named by
//! their content (so a kernel built from them gets the same cache key as one built from the
//! identical tree) and used from there.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

mod files {
    include!(concat!(env!("OUT_DIR"), "/embedded_files.rs"));
}

/// One embedded set of files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// scripts/matrices/*.toml
    Presets,
    /// kernel/patches/*.patch and kernel/uml.config
    Kernel,
}

impl Set {
    /// (path relative to the set's root, contents), sorted by path.
    pub fn files(self) -> &'static [(&'static str, &'static [u8])] {
        match self {
            Set::Presets => files::PRESETS,
            Set::Kernel => files::KERNEL,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Set::Presets => "matrices",
            Set::Kernel => "kernel",
        }
    }

    /// The cache directory's name: the set and a digest of every name and byte in it.
    fn dir_name(self) -> String {
        let mut h = Sha256::new();
        for (name, bytes) in self.files() {
            h.update(name.as_bytes());
            h.update([0]);
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        }
        let digest = h.finalize();
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}-{hex}", self.name())
    }
}

/// Where embedded sets are written: `$SBM_CACHE`, else `$XDG_CACHE_HOME/sbm`, else
/// `~/.cache/sbm`, else /var/cache/sbm.
pub fn cache_root() -> PathBuf {
    if let Some(p) = std::env::var_os("SBM_CACHE") {
        return PathBuf::from(p);
    }
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"))
        .join("sbm")
}

/// `tree` if it is a directory, else the embedded `set` written out under [`cache_root`].
/// A failure to write it is said on stderr and `tree` returned, so that the caller's own
/// error names the directory it looked for.
pub fn tree_or_embedded(tree: PathBuf, set: Set) -> PathBuf {
    if tree.is_dir() {
        return tree;
    }
    let root = cache_root().join("embedded");
    match write_out(set, &root) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!(
                "sbm: {} is not there and the built-in copy could not be written under {}: {e}",
                tree.display(),
                root.display()
            );
            tree
        }
    }
}

/// Writes `set` into `root/<set>-<digest>` unless it is there already; returns that
/// directory. Written into a temporary sibling first and renamed, so that a concurrent
/// run never sees half a set.
pub fn write_out(set: Set, root: &Path) -> io::Result<PathBuf> {
    let dir = root.join(set.dir_name());
    if dir.is_dir() {
        return Ok(dir);
    }
    std::fs::create_dir_all(root)?;
    let tmp = root.join(format!(".{}.tmp-{}", set.dir_name(), std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    for (name, bytes) in set.files() {
        let path = tmp.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, bytes)?;
    }
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another process wrote the same content first.
        Err(_) if dir.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of the tree's sets is embedded byte for byte, and nothing else.
    fn assert_matches_tree(set: Set, tree: &Path, wanted: impl Fn(&Path) -> bool) {
        let mut on_disk: Vec<String> = Vec::new();
        let mut stack = vec![tree.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if wanted(&p) {
                    on_disk.push(p.strip_prefix(tree).unwrap().to_string_lossy().into());
                }
            }
        }
        on_disk.sort();
        let embedded: Vec<String> = set.files().iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(embedded, on_disk, "{set:?}");
        for (name, bytes) in set.files() {
            assert_eq!(std::fs::read(tree.join(name)).unwrap(), *bytes, "{name}");
        }
    }

    #[test]
    fn the_embedded_sets_are_the_trees_files() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        assert_matches_tree(Set::Presets, &root.join("scripts/matrices"), |p| {
            p.extension().is_some_and(|x| x == "toml")
        });
        // The kernel the guests run: kernel/patches and uml.config (kernel/lab's patches are
        // built only on request, from a copy of kernel/, so they are not embedded).
        let kernel = root.join("kernel");
        assert_matches_tree(Set::Kernel, &kernel, |p| {
            (p.parent() == Some(&kernel.join("patches"))
                && p.extension().is_some_and(|x| x == "patch"))
                || p == kernel.join("uml.config")
        });
    }

    #[test]
    fn written_out_once_and_identical() {
        let root = std::env::temp_dir().join(format!("sbm-embedded-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = write_out(Set::Kernel, &root).unwrap();
        for (name, bytes) in Set::Kernel.files() {
            assert_eq!(std::fs::read(dir.join(name)).unwrap(), *bytes, "{name}");
        }
        // A second call finds it; a missing tree resolves to it.
        assert_eq!(write_out(Set::Kernel, &root).unwrap(), dir);
        let leftovers: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
