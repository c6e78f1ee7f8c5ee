//! Output schemas and writers. One serde struct per row or document: the struct *is* the
//! schema, and docs/output.md documents every field (tests check it).

pub mod archive;
pub mod compressed;
pub mod csv_file;
pub mod csv_row;
pub mod human;
pub mod own_reports;
pub mod schema;

pub use csv_file::CsvFile;
