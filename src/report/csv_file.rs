//! A streamed CSV file: buffered, flushed on demand (each interval, on errors and at the
//! end) so that memory stays bounded and a crash loses at most one interval of rows.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use serde::Serialize;

#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct CsvError {
    pub path: PathBuf,
    #[source]
    pub source: csv::Error,
}

pub struct CsvFile {
    path: PathBuf,
    writer: csv::Writer<BufWriter<File>>,
    rows: u64,
}

impl CsvFile {
    /// Creates (truncates) the file and writes the header of `T` at the first row.
    pub fn create(path: &Path) -> Result<CsvFile, CsvError> {
        let file = File::create(path).map_err(|e| CsvError {
            path: path.into(),
            source: e.into(),
        })?;
        Ok(CsvFile {
            path: path.into(),
            writer: csv::Writer::from_writer(BufWriter::with_capacity(1 << 16, file)),
            rows: 0,
        })
    }

    pub fn write<T: Serialize>(&mut self, row: &T) -> Result<(), CsvError> {
        self.rows += 1;
        self.writer.serialize(row).map_err(|source| CsvError {
            path: self.path.clone(),
            source,
        })
    }

    pub fn flush(&mut self) -> Result<(), CsvError> {
        self.writer.flush().map_err(|e| CsvError {
            path: self.path.clone(),
            source: e.into(),
        })
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The header line serde would write for `T`, for documentation checks.
pub fn header_of<T: Serialize>(example: &T) -> Vec<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.serialize(example).expect("serializing to memory");
    let bytes = w.into_inner().expect("in-memory writer");
    let text = String::from_utf8(bytes).expect("csv is utf-8");
    text.lines()
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::to_string)
        .collect()
}
