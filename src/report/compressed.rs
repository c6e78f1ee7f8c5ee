//! Per-write CSVs kept compact: a finished matrix cell's files with a row per write, message
//! or frame ([`PER_WRITE_FILES`]) are stored xz-compressed (`writes.csv.xz`), and every
//! reader opens a cell file by its plain name whichever form is on disk.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

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

/// Opens `plain` (e.g. `cell/writes.csv`), or `plain.xz` decompressing, whichever exists.
pub fn open(plain: &Path) -> io::Result<Box<dyn Read>> {
    match File::open(plain) {
        Ok(f) => Ok(Box::new(BufReader::new(f))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let f = File::open(compressed_path(plain)).map_err(|_| e)?;
            Ok(Box::new(xz2::read::XzDecoder::new(BufReader::new(f))))
        }
        Err(e) => Err(e),
    }
}

/// Whether `plain` exists in either form.
pub fn exists(plain: &Path) -> bool {
    plain.exists() || compressed_path(plain).exists()
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
}
