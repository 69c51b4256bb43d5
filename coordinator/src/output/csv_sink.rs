//! CSV output: one row per item, top-k or features in columns.

use std::io::{self, Write};

use pipeline_core::{ClassLabels, Prediction, Task};

use super::format::OutputSpec;
use super::record::{Record, RecordSink, kept_text};

/// One row per item. Classification: `class_1,label_1,prob_1,…` up to
/// `top_k`; embedding: `f_0…f_{d-1}`; then `error_kind,error_message`.
pub(super) struct CsvSink<W: Write> {
    out: csv::Writer<W>,
    width: usize,
    kept: usize,
    row: Vec<String>,
    labels: ClassLabels,
}

impl<W: Write> CsvSink<W> {
    pub(super) fn new(out: W, spec: &OutputSpec, labels: ClassLabels) -> io::Result<Self> {
        let mut header = vec!["index".to_owned(), "path".to_owned()];
        header.extend(spec.kept.iter().cloned());
        let feature_dim = spec.feature_dim;
        let width = match spec.task {
            Task::Classify { top_k } => {
                for rank in 1..=top_k {
                    header.extend([
                        format!("class_{rank}"),
                        format!("label_{rank}"),
                        format!("prob_{rank}"),
                    ]);
                }
                3 * top_k
            }
            Task::Embed => {
                header.extend((0..feature_dim).map(|i| format!("f_{i}")));
                feature_dim
            }
            Task::Raw => return Err(io::Error::other("--task raw has no CSV form")),
        };
        header.extend(["error_kind".to_owned(), "error_message".to_owned()]);
        let mut out = csv::Writer::from_writer(out);
        out.write_record(&header).map_err(io::Error::other)?;
        Ok(Self {
            out,
            width,
            kept: spec.kept.len(),
            row: Vec::with_capacity(header.len()),
            labels,
        })
    }
}

impl<W: Write> RecordSink for CsvSink<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        let row = &mut self.row;
        row.clear();
        row.push(record.index.to_string());
        row.push(record.path.clone());
        row.extend(record.kept.iter().map(|(_, v)| kept_text(v.as_deref())));
        match &record.result {
            Ok(Prediction::TopK(scores)) => {
                for s in scores {
                    row.extend([
                        s.class.to_string(),
                        self.labels.get(s.class).to_owned(),
                        s.prob.to_string(),
                    ]);
                }
            }
            Ok(Prediction::Embedding(values)) => row.extend(values.iter().map(f32::to_string)),
            Ok(Prediction::Outputs(_)) => {
                return Err(io::Error::other("--task raw has no CSV form"));
            }
            Err(_) => {}
        }
        row.resize(2 + self.kept + self.width, String::new());
        match &record.result {
            Err(e) => row.extend([e.kind.to_string(), e.message.clone()]),
            Ok(_) => row.extend([String::new(), String::new()]),
        }
        self.out.write_record(&*row).map_err(io::Error::other)
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.flush()
    }
}
