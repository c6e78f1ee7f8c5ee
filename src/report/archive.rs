//! A finished cell as one file: `CELL.tar.xz` in place of the directory `CELL/`, holding the
//! directory's files byte for byte (the per-write files stay xz-compressed inside, as
//! [`super::compressed`] stored them). A committed run is packed this way so that results/
//! stays a tree that generic tools can walk; `sbm-matrix pack` makes the archives, `sbm-matrix
//! unpack` restores the directories, and [`super::compressed`] opens a cell's file by its
//! path whichever form the cell is in, so no reader knows the difference.
//!
//! The archive is deterministic (names sorted, owner 0, mode 0644, time 0): packing the same
//! directory twice gives the same bytes, so a re-packed run shows no change in git.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What follows the cell's name.
pub const SUFFIX: &str = ".tar.xz";
/// xz preset: the text files of a cell (logs, JSON, interval CSVs) compress ~8× at 6, the
/// already-compressed per-write files are stored as they are.
const LEVEL: u32 = 6;
/// Archives kept decompressed in memory: readers go through a run cell by cell, each cell
/// several times (its row, then its plots), so a few suffice.
const CACHED: usize = 4;

/// The archive that stands for the directory `dir`.
pub fn archive_path(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(SUFFIX);
    PathBuf::from(name)
}

/// The directory an archive stands for (None: not a cell archive's name).
pub fn dir_of(archive: &Path) -> Option<PathBuf> {
    let name = archive.file_name()?.to_str()?.strip_suffix(SUFFIX)?;
    (!name.is_empty()).then(|| archive.with_file_name(name))
}

/// An archive's files: their paths inside the cell (`summary.json`, `flow-1/writes.csv.xz`)
/// and their bytes.
#[derive(Debug, Default, PartialEq)]
pub struct Members(BTreeMap<PathBuf, Arc<[u8]>>);

impl Members {
    pub fn get(&self, path: &Path) -> Option<Arc<[u8]>> {
        self.0.get(path).cloned()
    }

    /// Whether any file lies under `dir` (a subdirectory of the cell, e.g. `flow-1`).
    pub fn has_dir(&self, dir: &Path) -> bool {
        self.0.keys().any(|p| p.starts_with(dir) && p != dir)
    }

    /// The names of the files directly in `dir` (`""`: the cell's own directory), sorted.
    pub fn files_in(&self, dir: &Path) -> Vec<String> {
        self.0
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect()
    }

    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.0.keys().map(PathBuf::as_path)
    }
}

fn invalid(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

/// A member's path is relative and stays inside the cell.
fn is_inner(path: &Path) -> bool {
    !path.as_os_str().is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Reads a whole archive.
pub fn read(archive: &Path) -> io::Result<Members> {
    let file = File::open(archive)?;
    let mut tar = tar::Archive::new(xz2::read::XzDecoder::new(BufReader::new(file)));
    let mut members = BTreeMap::new();
    for entry in tar.entries().map_err(|e| invalid(archive, e))? {
        let mut entry = entry.map_err(|e| invalid(archive, e))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().map_err(|e| invalid(archive, e))?.into_owned();
        if !is_inner(&path) {
            return Err(invalid(
                archive,
                format!("member {} leaves the cell", path.display()),
            ));
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| invalid(archive, e))?;
        members.insert(path, Arc::from(bytes));
    }
    Ok(Members(members))
}

/// The files of `dir`, recursively, as paths relative to it, sorted. Anything but regular
/// files and directories (a symlink, a socket) is refused: the archive would not be the
/// directory.
fn files_under(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = vec![];
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        for entry in std::fs::read_dir(dir.join(&rel))? {
            let entry = entry?;
            let path = rel.join(entry.file_name());
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                out.push(path);
            } else {
                return Err(invalid(&dir.join(&path), "neither a file nor a directory"));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// What [`pack`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    pub files: usize,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Replaces the directory `dir` by `dir.tar.xz`. The directory is removed only once the
/// archive is complete on disk and reads back equal to it, file for file and byte for byte.
pub fn pack(dir: &Path) -> io::Result<Packed> {
    let files = files_under(dir)?;
    let target = archive_path(dir);
    let partial = PathBuf::from(format!("{}.partial", target.display()));
    let out = BufWriter::new(File::create(&partial)?);
    let mut builder = tar::Builder::new(xz2::write::XzEncoder::new(out, LEVEL));
    let mut bytes_in = 0;
    for rel in &files {
        let mut f = File::open(dir.join(rel))?;
        let len = f.metadata()?.len();
        let mut header = tar::Header::new_gnu();
        header.set_size(len);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, rel, &mut f)?;
        bytes_in += len;
    }
    let mut out = builder.into_inner()?.finish()?;
    out.flush()?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    let back = read(&partial)?;
    let mut disk = BTreeMap::new();
    for rel in &files {
        disk.insert(rel.clone(), Arc::from(std::fs::read(dir.join(rel))?));
    }
    if back != Members(disk) {
        let _ = std::fs::remove_file(&partial);
        return Err(invalid(
            dir,
            "the archive does not read back as the directory",
        ));
    }
    std::fs::rename(&partial, &target)?;
    forget(&target);
    std::fs::remove_dir_all(dir)?;
    Ok(Packed {
        files: files.len(),
        bytes_in,
        bytes_out: std::fs::metadata(&target)?.len(),
    })
}

/// Restores the directory an archive stands for and removes the archive. Refuses when the
/// directory already exists.
pub fn unpack(archive: &Path) -> io::Result<PathBuf> {
    let dir = dir_of(archive).ok_or_else(|| invalid(archive, format!("not a *{SUFFIX} cell")))?;
    if dir.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{}: already exists", dir.display()),
        ));
    }
    let members = read(archive)?;
    let partial = PathBuf::from(format!("{}.partial", dir.display()));
    let _ = std::fs::remove_dir_all(&partial);
    for path in members.paths() {
        let target = partial.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let bytes = members.get(path).unwrap_or_else(|| Arc::from(Vec::new()));
        let mut f = File::create(&target)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
    }
    std::fs::create_dir_all(&partial)?;
    std::fs::rename(&partial, &dir)?;
    forget(archive);
    std::fs::remove_file(archive)?;
    Ok(dir)
}

/// Where `path` (a file or directory inside a cell) is kept when the cell is packed: the
/// archive and the path inside it. None when no enclosing directory has an archive in its
/// place (a directory on disk always wins over an archive beside it).
pub fn locate(path: &Path) -> Option<(PathBuf, PathBuf)> {
    for dir in path.ancestors().skip(1) {
        if dir.as_os_str().is_empty() || dir.parent().is_none() {
            break;
        }
        let archive = archive_path(dir);
        if archive.is_file() && !dir.is_dir() {
            let inner = path.strip_prefix(dir).ok()?.to_path_buf();
            return Some((archive, inner));
        }
    }
    None
}

/// An archive's identity on disk: a re-packed archive is read again.
type Stamp = (PathBuf, Option<std::time::SystemTime>, u64);

static CACHE: Mutex<Vec<(Stamp, Arc<Members>)>> = Mutex::new(Vec::new());

fn stamp(archive: &Path) -> io::Result<Stamp> {
    let m = std::fs::metadata(archive)?;
    Ok((archive.to_path_buf(), m.modified().ok(), m.len()))
}

/// An archive's files, from the last few read or read now.
pub fn members(archive: &Path) -> io::Result<Arc<Members>> {
    let key = stamp(archive)?;
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = cache.iter().position(|(k, _)| *k == key) {
        let hit = cache.remove(i);
        let members = hit.1.clone();
        cache.push(hit);
        return Ok(members);
    }
    let members = Arc::new(read(archive)?);
    if cache.len() >= CACHED {
        cache.remove(0);
    }
    cache.push((key, members.clone()));
    Ok(members)
}

/// Drops a cached archive (it is being replaced or removed).
fn forget(archive: &Path) {
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    cache.retain(|((p, _, _), _)| p != archive);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sbm-archive-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn cell(run: &Path) -> PathBuf {
        let dir = run.join("2mbit-default-r1");
        std::fs::create_dir_all(dir.join("flow-1")).unwrap();
        std::fs::write(dir.join("summary.json"), "{\"a\": 1}\n").unwrap();
        std::fs::write(dir.join("empty.log"), "").unwrap();
        std::fs::write(dir.join("flow-1/writes.csv.xz"), [0xfd, b'7', 0, 1, 2]).unwrap();
        dir
    }

    #[test]
    fn a_packed_cell_reads_back_byte_for_byte_and_unpacks_to_the_same_directory() {
        let run = scratch("round");
        let dir = cell(&run);
        let packed = pack(&dir).unwrap();
        assert_eq!(packed.files, 3);
        assert_eq!(packed.bytes_in, 9 + 5);
        assert!(!dir.exists() && archive_path(&dir).is_file());
        let m = members(&archive_path(&dir)).unwrap();
        assert_eq!(&*m.get(Path::new("summary.json")).unwrap(), b"{\"a\": 1}\n");
        assert_eq!(m.files_in(Path::new("")), ["empty.log", "summary.json"]);
        assert_eq!(m.files_in(Path::new("flow-1")), ["writes.csv.xz"]);
        assert!(m.has_dir(Path::new("flow-1")) && !m.has_dir(Path::new("flow-2")));
        let (a, inner) = locate(&dir.join("flow-1/writes.csv.xz")).unwrap();
        assert_eq!(
            (a, inner),
            (archive_path(&dir), PathBuf::from("flow-1/writes.csv.xz"))
        );
        assert_eq!(
            &*m.get(Path::new("flow-1/writes.csv.xz")).unwrap(),
            [0xfd, b'7', 0, 1, 2]
        );
        assert_eq!(unpack(&archive_path(&dir)).unwrap(), dir);
        assert!(!archive_path(&dir).exists());
        assert_eq!(
            std::fs::read(dir.join("flow-1/writes.csv.xz")).unwrap(),
            [0xfd, b'7', 0, 1, 2]
        );
        assert_eq!(std::fs::read(dir.join("empty.log")).unwrap(), b"");
        assert!(
            locate(&dir.join("summary.json")).is_none(),
            "the directory is back"
        );
        std::fs::remove_dir_all(&run).unwrap();
    }

    #[test]
    fn packing_is_deterministic_and_a_repacked_archive_is_read_again() {
        let run = scratch("same");
        let dir = cell(&run);
        pack(&dir).unwrap();
        let first = std::fs::read(archive_path(&dir)).unwrap();
        let before = members(&archive_path(&dir)).unwrap();
        unpack(&archive_path(&dir)).unwrap();
        std::fs::write(dir.join("summary.json"), "{\"a\": 2, \"b\": 3}\n").unwrap();
        pack(&dir).unwrap();
        let after = members(&archive_path(&dir)).unwrap();
        assert_ne!(before, after, "the cache must not serve the old archive");
        unpack(&archive_path(&dir)).unwrap();
        std::fs::write(dir.join("summary.json"), "{\"a\": 1}\n").unwrap();
        pack(&dir).unwrap();
        assert_eq!(std::fs::read(archive_path(&dir)).unwrap(), first);
        std::fs::remove_dir_all(&run).unwrap();
    }

    #[test]
    fn unpack_refuses_to_overwrite_and_what_is_not_a_cell_archive() {
        let run = scratch("refuse");
        let dir = cell(&run);
        pack(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let e = unpack(&archive_path(&dir)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(
            locate(&dir.join("summary.json")).is_none(),
            "a directory on disk wins over the archive beside it"
        );
        assert!(unpack(&run.join("x.zip")).is_err());
        std::fs::write(run.join("bad.tar.xz"), b"not xz").unwrap();
        assert_eq!(
            read(&run.join("bad.tar.xz")).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        std::fs::remove_dir_all(&run).unwrap();
    }
}
