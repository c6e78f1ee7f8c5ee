//! A hand-formatted CSV file for the one row written per write (writes.csv): the serde
//! path (`csv::Writer::serialize`) costs about 2 % of sbm-send's CPU at loopback rates
//! (perf, results/bench/README.md), this one a fraction of it. The bytes are the same as
//! the csv crate writes for the same row; a unit test holds the two side by side.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::csv_file::CsvError;

/// Appends CSV fields to a line buffer.
pub struct Line<'a> {
    buf: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Line<'a> {
    pub fn new(buf: &'a mut Vec<u8>) -> Line<'a> {
        buf.clear();
        Line { buf, first: true }
    }

    fn sep(&mut self) {
        if !self.first {
            self.buf.push(b',');
        }
        self.first = false;
    }

    pub fn u64(&mut self, v: u64) {
        self.sep();
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }

    pub fn i64(&mut self, v: i64) {
        self.sep();
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }

    pub fn opt_u64(&mut self, v: Option<u64>) {
        match v {
            Some(v) => self.u64(v),
            None => self.sep(),
        }
    }

    pub fn opt_i64(&mut self, v: Option<i64>) {
        match v {
            Some(v) => self.i64(v),
            None => self.sep(),
        }
    }

    pub fn bool(&mut self, v: bool) {
        self.str(if v { "true" } else { "false" });
    }

    /// A text field, quoted as the csv crate quotes it when it needs to be.
    pub fn str(&mut self, s: &str) {
        self.sep();
        if s.bytes().any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r')) {
            self.buf.push(b'"');
            for b in s.bytes() {
                if b == b'"' {
                    self.buf.push(b'"');
                }
                self.buf.push(b);
            }
            self.buf.push(b'"');
        } else {
            self.buf.extend_from_slice(s.as_bytes());
        }
    }

    pub fn end(self) {
        self.buf.push(b'\n');
    }
}

/// A row that formats itself.
pub trait CsvRow {
    /// The header line's field names, in field order.
    const FIELDS: &'static [&'static str];
    fn fields(&self, line: &mut Line<'_>);
}

/// A CSV file of `CsvRow`s, buffered and flushed on demand; errors name the file, as
/// [`CsvFile`](super::CsvFile)'s do.
pub struct RowFile {
    path: PathBuf,
    out: BufWriter<File>,
    line: Vec<u8>,
    rows: u64,
}

impl RowFile {
    /// Creates (truncates) the file and writes the header.
    pub fn create<T: CsvRow>(path: &Path) -> Result<RowFile, CsvError> {
        let named = |e: std::io::Error| CsvError {
            path: path.into(),
            source: e.into(),
        };
        let mut out = BufWriter::with_capacity(1 << 16, File::create(path).map_err(named)?);
        out.write_all(T::FIELDS.join(",").as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .map_err(named)?;
        Ok(RowFile {
            path: path.into(),
            out,
            line: Vec::with_capacity(512),
            rows: 0,
        })
    }

    pub fn write<T: CsvRow>(&mut self, row: &T) -> Result<(), CsvError> {
        let mut line = Line::new(&mut self.line);
        row.fields(&mut line);
        line.end();
        self.rows += 1;
        self.out.write_all(&self.line).map_err(|e| self.error(e))
    }

    pub fn flush(&mut self) -> Result<(), CsvError> {
        self.out.flush().map_err(|e| self.error(e))
    }

    fn error(&self, e: std::io::Error) -> CsvError {
        CsvError {
            path: self.path.clone(),
            source: e.into(),
        }
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
