//! `--keep-columns`: which of a source's columns (a table's, or a
//! WebDataset sample's other members by extension) go into the output, and
//! their values as JSON text.
//!
//! Values keep their JSON type where the source has one (a JSONL value, a
//! Parquet number or boolean, a `.json` member); CSV/TSV cells and other
//! members are strings. A named column no item has is an error; with `*`
//! the columns are every one seen, in order of first appearance.

use std::cell::RefCell;
use std::rc::Rc;

use arrow_array::{Array, ArrayRef, BooleanArray};
use arrow_cast::display::ArrayFormatter;
use arrow_schema::DataType;
use pipeline_core::Kept;

use super::SourceError;

/// Output columns a kept column may not shadow.
const RESERVED: [&str; 7] = [
    "index",
    "path",
    "top_k",
    "embedding",
    "error",
    "error_kind",
    "error_message",
];

/// Which columns to read.
#[derive(Debug, Clone)]
pub(super) struct KeepFilter {
    /// `None`: `*`.
    named: Option<Vec<String>>,
    /// Columns `*` never keeps (the path and image columns).
    skip: Vec<String>,
    /// Every column asked about, shared by clones: what the source has,
    /// for the error that names a missing one.
    offered: Rc<RefCell<Vec<String>>>,
}

impl KeepFilter {
    /// Whether anything is kept at all.
    pub(super) fn active(&self) -> bool {
        self.named.as_ref().is_none_or(|n| !n.is_empty())
    }

    /// Whether `column` is one to read; `*` leaves out `primary` (the
    /// source's path or image columns) as well.
    pub(super) fn wants(&self, column: &str, primary: &[&str]) -> bool {
        let mut offered = self.offered.borrow_mut();
        if !offered.iter().any(|o| o == column) {
            offered.push(column.to_owned());
        }
        match &self.named {
            Some(named) => named.iter().any(|n| n == column),
            None => !self.skip.iter().any(|s| s == column) && !primary.contains(&column),
        }
    }
}

/// The kept values of a manifest as it is read.
pub(super) struct Keeping {
    data: String,
    filter: KeepFilter,
    kept: Kept,
    /// `*`: rows held until every column is known.
    pending: Vec<Vec<(String, String)>>,
    seen: Vec<String>,
}

impl Keeping {
    /// `wanted` as `--keep-columns` gave it; `skip` what `*` leaves out.
    pub(super) fn new(data: &str, wanted: &[String], skip: &[&str]) -> Result<Self, SourceError> {
        let wanted: Vec<String> = wanted
            .iter()
            .map(|w| w.trim().to_owned())
            .filter(|w| !w.is_empty())
            .collect();
        let all = wanted.iter().any(|w| w == "*");
        if let Some(bad) = wanted.iter().find(|w| RESERVED.contains(&w.as_str())) {
            return Err(SourceError::Unsupported {
                path: data.to_owned(),
                message: format!(
                    "--keep-columns {bad}: `{bad}` is an output column already; keep the others"
                ),
            });
        }
        let named = (!all).then_some(wanted);
        Ok(Self {
            data: data.to_owned(),
            kept: Kept::new(named.clone().unwrap_or_default()),
            filter: KeepFilter {
                named,
                skip: skip
                    .iter()
                    .map(|s| (*s).to_owned())
                    .chain(RESERVED.iter().map(|s| (*s).to_owned()))
                    .collect(),
                offered: Rc::default(),
            },
            pending: Vec::new(),
            seen: Vec::new(),
        })
    }

    /// Which columns to read.
    pub(super) fn filter(&self) -> &KeepFilter {
        &self.filter
    }

    /// The next item's values: `(column, JSON text)` for the columns it has.
    pub(super) fn push(&mut self, values: Vec<(String, String)>) {
        if !self.filter.active() {
            return;
        }
        for (column, _) in &values {
            if !self.seen.contains(column) {
                self.seen.push(column.clone());
            }
        }
        match &self.filter.named {
            Some(named) => {
                let row: Vec<Option<String>> = named
                    .iter()
                    .map(|n| values.iter().find(|(c, _)| c == n).map(|(_, v)| v.clone()))
                    .collect();
                self.kept.push(&row);
            }
            None => self.pending.push(values),
        }
    }

    /// The kept columns and values; a named column no item had is an error.
    pub(super) fn finish(mut self) -> Result<Kept, SourceError> {
        match &self.filter.named {
            Some(named) => {
                if let Some(missing) = named.iter().find(|n| !self.seen.contains(n)) {
                    let offered = self.filter.offered.borrow();
                    return Err(SourceError::Column {
                        path: self.data.clone(),
                        wanted: missing.clone(),
                        available: if offered.is_empty() {
                            "none".to_owned()
                        } else {
                            offered.join(", ")
                        },
                        flag: "--keep-columns",
                    });
                }
                Ok(self.kept)
            }
            None => {
                let mut kept = Kept::new(self.seen.clone());
                for values in std::mem::take(&mut self.pending) {
                    let row: Vec<Option<String>> = self
                        .seen
                        .iter()
                        .map(|n| values.iter().find(|(c, _)| c == n).map(|(_, v)| v.clone()))
                        .collect();
                    kept.push(&row);
                }
                Ok(kept)
            }
        }
    }
}

/// A string as JSON text.
pub(super) fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// Row `row` of an Arrow column as JSON text: numbers and booleans as
/// such, text as a string, anything else as its display text; `None` for
/// null.
pub(super) fn arrow_json(column: &ArrayRef, row: usize) -> Option<String> {
    if column.is_null(row) {
        return None;
    }
    if let Some(b) = column.as_any().downcast_ref::<BooleanArray>() {
        return Some(b.value(row).to_string());
    }
    let text = ArrayFormatter::try_new(column.as_ref(), &Default::default())
        .ok()?
        .value(row)
        .to_string();
    let number = matches!(
        column.data_type(),
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float32
            | DataType::Float64
    );
    Some(if number && text.parse::<f64>().is_ok_and(f64::is_finite) {
        text
    } else {
        json_string(&text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_columns_keep_their_order_and_a_missing_one_is_an_error() {
        let mut k = Keeping::new("m.jsonl", &["caption".into(), "id".into()], &[]).expect("ok");
        k.push(vec![
            ("id".into(), "1".into()),
            ("caption".into(), "\"a\"".into()),
        ]);
        k.push(vec![("id".into(), "2".into())]);
        let kept = k.finish().expect("both seen");
        assert_eq!(kept.columns, ["caption", "id"]);
        assert_eq!(kept.get(0), [Some("\"a\""), Some("1")]);
        assert_eq!(kept.get(1), [None, Some("2")]);

        let mut k = Keeping::new("m.jsonl", &["nope".into()], &[]).expect("ok");
        k.push(vec![("id".into(), "1".into())]);
        let err = k.finish().expect_err("never seen").to_string();
        assert!(
            err.contains("nope") && err.contains("--keep-columns"),
            "{err}"
        );
        assert!(Keeping::new("m.csv", &["path".into()], &[]).is_err());
    }

    #[test]
    fn star_keeps_every_column_seen_in_first_seen_order() {
        let mut k = Keeping::new("s.tar", &["*".into()], &["jpg"]).expect("ok");
        let f = k.filter();
        assert!(!f.wants("jpg", &[]) && f.wants("txt", &[]) && !f.wants("path", &[]));
        assert!(!f.wants("txt", &["txt"]));
        k.push(vec![("txt".into(), "\"x\"".into())]);
        k.push(vec![
            ("json".into(), "{}".into()),
            ("txt".into(), "\"y\"".into()),
        ]);
        let kept = k.finish().expect("ok");
        assert_eq!(kept.columns, ["txt", "json"]);
        assert_eq!(kept.get(0), [Some("\"x\""), None]);
        assert_eq!(kept.get(1), [Some("\"y\""), Some("{}")]);
    }
}
