//! A result record, what writes records, and how a kept column's value
//! becomes a table's cell.

use std::io;

use pipeline_core::{ItemError, ItemIndex, Prediction};

/// One line of output: an item and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Index in the manifest.
    pub index: ItemIndex,
    /// Path relative to `--data` (lossy UTF-8).
    pub path: String,
    /// `--keep-columns`: each kept column and its value as JSON text
    /// (`None`: null).
    pub kept: Vec<(String, Option<String>)>,
    /// The prediction, or why there is none.
    pub result: Result<Prediction, ItemError>,
}

/// Writes records in order; `finish` flushes and closes.
pub(crate) trait RecordSink {
    fn write(&mut self, record: &Record) -> io::Result<()>;
    fn finish(self: Box<Self>) -> io::Result<()>;
}

/// A kept value (JSON text) as a CSV or Parquet cell: a string's text, or
/// the JSON of anything else; empty for null.
pub(super) fn kept_text(json: Option<&str>) -> String {
    match json.map(serde_json::from_str::<serde_json::Value>) {
        Some(Ok(serde_json::Value::String(s))) => s,
        Some(_) => json.unwrap_or_default().to_owned(),
        None => String::new(),
    }
}
