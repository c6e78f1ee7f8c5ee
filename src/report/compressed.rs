//! Per-write CSVs kept compact: a finished matrix cell's files with a row per write, message
//! or frame ([`PER_WRITE_FILES`]) are stored xz-compressed (`writes.csv.xz`), a committed
//! cell is packed into one archive ([`super::archive`]), and every reader opens a cell file
//! by its plain path whichever form is on disk: `cell/writes.csv`, `cell/writes.csv.xz`, or
//! either inside `cell.tar.xz`.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::archive;

/// The files of a cell that have one row per write, message or frame.
pub const PER_WRITE_FILES: [&str; 4] = [
    "writes.csv",
    "sink-messages.csv",
    "frames.csv",
    "messages.csv",
];

const SUFFIX: &str = "xz";
/// xz preset: 6 is xz's own default (a 1.4 MB writes.csv compresses ~5× in well under a
/// second).
const LEVEL: u32 = 6;

fn compressed_path(plain: &Path) -> PathBuf {
    let mut name = plain.as_os_str().to_owned();
    name.push(".");
    name.push(SUFFIX);
    PathBuf::from(name)
}

/// Opens `plain` (e.g. `cell/writes.csv`), or `plain.xz` decompressing, whichever exists, on
/// disk or in the archive of a packed cell.
pub fn open(plain: &Path) -> io::Result<Box<dyn Read>> {
    match File::open(plain) {
        Ok(f) => Ok(Box::new(BufReader::new(f))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Ok(f) = File::open(compressed_path(plain)) {
                return Ok(Box::new(xz2::read::XzDecoder::new(BufReader::new(f))));
            }
            match archived(plain) {
                Some((bytes, false)) => Ok(Box::new(io::Cursor::new(bytes))),
                Some((bytes, true)) => {
                    Ok(Box::new(xz2::read::XzDecoder::new(io::Cursor::new(bytes))))
                }
                None => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// `plain` in its packed cell's archive: its bytes, and whether they are the `.xz` form.
fn archived(plain: &Path) -> Option<(std::sync::Arc<[u8]>, bool)> {
    let (archive, inner) = archive::locate(plain)?;
    let members = archive::members(&archive).ok()?;
    if let Some(bytes) = members.get(&inner) {
        return Some((bytes, false));
    }
    members.get(&compressed_path(&inner)).map(|b| (b, true))
}

/// A cell's JSON file read through its type (None: missing, or not that type).
pub fn read_json<T: serde::de::DeserializeOwned>(plain: &Path) -> Option<T> {
    serde_json::from_str(&read_to_string(plain).ok()?).ok()
}

/// A cell file's text, in whichever form it is stored.
pub fn read_to_string(plain: &Path) -> io::Result<String> {
    let mut text = String::new();
    open(plain)?.read_to_string(&mut text)?;
    Ok(text)
}

/// Whether `plain` exists in any form.
pub fn exists(plain: &Path) -> bool {
    plain.exists() || compressed_path(plain).exists() || archived(plain).is_some()
}

/// Whether `dir` is a directory of a cell (the cell's own or one inside it, e.g. `flow-1`),
/// on disk or in its archive.
pub fn is_dir(dir: &Path) -> bool {
    dir.is_dir()
        || archive::archive_path(dir).is_file()
        || archive::locate(dir).is_some_and(|(archive, inner)| {
            archive::members(&archive).is_ok_and(|m| m.has_dir(&inner))
        })
}

/// Where a cell's files are, for a reader that lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// The files directly in the directory on disk, sorted.
    Dir(Vec<String>),
    /// The cell is packed: the archive's name, and the files directly in the cell's own
    /// directory inside it, sorted.
    Archive { archive: String, files: Vec<String> },
}

/// The files directly in a cell's directory, as it is stored (an empty directory listing
/// when there is neither a directory nor an archive).
pub fn list_cell(dir: &Path) -> Listing {
    if !dir.is_dir() {
        let path = archive::archive_path(dir);
        if let Ok(m) = archive::members(&path) {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            return Listing::Archive {
                archive: name.unwrap_or_default(),
                files: m.files_in(Path::new("")),
            };
        }
    }
    Listing::Dir(files_in(dir))
}

/// The regular files directly in the directory `dir` on disk, sorted (none when it cannot
/// be read).
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| {
                let e = e.ok()?;
                e.file_type().ok()?.is_file().then_some(())?;
                e.file_name().to_str().map(str::to_string)
            })
            .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Replaces `plain` by `plain.xz`; the plain file is removed only once the compressed one
/// is complete on disk. Returns false when there was no plain file.
pub fn compress(plain: &Path) -> io::Result<bool> {
    let mut input = match File::open(plain) {
        Ok(f) => BufReader::new(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let target = compressed_path(plain);
    let partial = target.with_extension(format!("{SUFFIX}.partial"));
    let out = BufWriter::new(File::create(&partial)?);
    let mut encoder = xz2::write::XzEncoder::new(out, LEVEL);
    io::copy(&mut input, &mut encoder)?;
    let mut out = encoder.finish()?;
    out.flush()?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&partial, &target)?;
    std::fs::remove_file(plain)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compressed_file_reads_back_by_its_plain_name() {
        let dir = std::env::temp_dir().join(format!("sbm-compressed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("writes.csv");
        let text = "a,b\n".to_string() + &"1,2\n".repeat(10_000);
        std::fs::write(&plain, &text).unwrap();
        assert!(compress(&plain).unwrap());
        assert!(!plain.exists() && exists(&plain));
        let stored = std::fs::metadata(dir.join("writes.csv.xz")).unwrap().len();
        assert!(stored < text.len() as u64 / 10, "{stored} B");
        let mut back = String::new();
        open(&plain).unwrap().read_to_string(&mut back).unwrap();
        assert_eq!(back, text);
        assert!(!compress(&plain).unwrap(), "nothing left to compress");
        let missing = open(&dir.join("none.csv")).err().unwrap();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_packed_cells_files_read_by_their_plain_paths() {
        let run = std::env::temp_dir().join(format!("sbm-compressed-pk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run);
        let cell = run.join("2mbit-default-r1");
        std::fs::create_dir_all(cell.join("flow-1")).unwrap();
        let text = "a,b\n".to_string() + &"1,2\n".repeat(1_000);
        std::fs::write(cell.join("writes.csv"), &text).unwrap();
        assert!(compress(&cell.join("writes.csv")).unwrap());
        std::fs::write(cell.join("summary.json"), "{}\n").unwrap();
        std::fs::write(cell.join("flow-1/intervals.csv"), "t\n1\n").unwrap();
        archive::pack(&cell).unwrap();
        assert!(!cell.exists());
        // The per-write file, xz-compressed inside the archive, by its plain name.
        assert_eq!(read_to_string(&cell.join("writes.csv")).unwrap(), text);
        assert_eq!(read_to_string(&cell.join("summary.json")).unwrap(), "{}\n");
        assert_eq!(
            read_to_string(&cell.join("flow-1/intervals.csv")).unwrap(),
            "t\n1\n"
        );
        assert!(exists(&cell.join("writes.csv")) && exists(&cell.join("flow-1/intervals.csv")));
        assert!(!exists(&cell.join("trace.json")) && !exists(&run.join("other/summary.json")));
        assert_eq!(
            open(&cell.join("trace.json")).err().unwrap().kind(),
            io::ErrorKind::NotFound
        );
        assert!(is_dir(&cell) && is_dir(&cell.join("flow-1")) && !is_dir(&cell.join("flow-2")));
        assert_eq!(
            list_cell(&cell),
            Listing::Archive {
                archive: "2mbit-default-r1.tar.xz".into(),
                files: vec!["summary.json".into(), "writes.csv.xz".into()]
            }
        );
        archive::unpack(&archive::archive_path(&cell)).unwrap();
        assert_eq!(
            list_cell(&cell),
            Listing::Dir(vec!["summary.json".into(), "writes.csv.xz".into()])
        );
        std::fs::remove_dir_all(&run).unwrap();
    }
}
