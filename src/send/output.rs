//! sbm-send's output directory: writes.csv and intervals.csv streamed, summary.json at the
//! end. Without `--out` nothing is written and every call is a no-op.

use std::path::{Path, PathBuf};

use crate::report::csv_file::CsvError;
use crate::report::csv_row::RowFile;
use crate::report::schema::{IntervalRow, SendSummary, WriteRow};
use crate::report::CsvFile;

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot create output directory {path}: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Csv(#[from] CsvError),
}

pub struct Outputs {
    dir: Option<PathBuf>,
    /// One row per write: hand-formatted (the hot path).
    writes: Option<RowFile>,
    intervals: Option<CsvFile>,
}

impl Outputs {
    /// The outputs in `dir` (none without one); writes.csv only with `write_log`.
    pub fn create(dir: Option<&Path>, write_log: bool) -> Result<Outputs, OutputError> {
        let Some(dir) = dir else {
            return Ok(Outputs {
                dir: None,
                writes: None,
                intervals: None,
            });
        };
        std::fs::create_dir_all(dir).map_err(|source| OutputError::Dir {
            path: dir.into(),
            source,
        })?;
        Ok(Outputs {
            dir: Some(dir.into()),
            writes: if write_log {
                Some(RowFile::create::<WriteRow>(&dir.join("writes.csv"))?)
            } else {
                None
            },
            intervals: Some(CsvFile::create(&dir.join("intervals.csv"))?),
        })
    }

    pub fn write_row(&mut self, row: &WriteRow) -> Result<(), OutputError> {
        if let Some(w) = &mut self.writes {
            w.write(row)?;
        }
        Ok(())
    }

    pub fn write_interval(&mut self, row: &IntervalRow) -> Result<(), OutputError> {
        if let Some(w) = &mut self.intervals {
            w.write(row)?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<(), OutputError> {
        if let Some(w) = &mut self.writes {
            w.flush()?;
        }
        if let Some(f) = &mut self.intervals {
            f.flush()?;
        }
        Ok(())
    }

    /// Writes a JSON document into the output directory.
    pub fn write_json(&self, name: &str, v: &impl serde::Serialize) -> Result<(), OutputError> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let path = dir.join(name);
        let text = serde_json::to_string_pretty(v).expect("json serializes");
        std::fs::write(&path, text + "\n").map_err(|source| OutputError::Write { path, source })
    }

    /// Writes messages.csv (trip times) in one go.
    pub fn write_messages(
        &self,
        rows: &[crate::report::schema::TripMessageRow],
    ) -> Result<(), OutputError> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let mut f = CsvFile::create(&dir.join("messages.csv"))?;
        for r in rows {
            f.write(r)?;
        }
        Ok(f.flush()?)
    }

    /// Writes frames.csv and content-age.csv (application-limited sources) in one go.
    pub fn write_frames(
        &self,
        frames: &[crate::report::schema::FrameRow],
        intervals: &[crate::report::schema::ContentAgeRow],
    ) -> Result<(), OutputError> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let mut f = CsvFile::create(&dir.join("frames.csv"))?;
        for r in frames {
            f.write(r)?;
        }
        f.flush()?;
        let mut f = CsvFile::create(&dir.join("content-age.csv"))?;
        for r in intervals {
            f.write(r)?;
        }
        Ok(f.flush()?)
    }

    /// Flushes the CSVs and writes summary.json; says where everything went (`tag` starts
    /// the line: a `-P` flow's "[  K] ").
    pub fn finish(&mut self, summary: &SendSummary, tag: &str) -> Result<(), OutputError> {
        self.flush()?;
        let Some(dir) = &self.dir else { return Ok(()) };
        let path = dir.join("summary.json");
        let json = serde_json::to_string_pretty(summary).expect("summary serializes");
        std::fs::write(&path, json + "\n").map_err(|source| OutputError::Write {
            path: path.clone(),
            source,
        })?;
        crate::say!(
            "{tag}output: {} ({}intervals.csv, summary.json)",
            dir.display(),
            if self.writes.is_some() {
                "writes.csv, "
            } else {
                ""
            }
        );
        Ok(())
    }
}
