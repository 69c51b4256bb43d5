//! Lists and tables: a `.txt` of paths or URLs, CSV/TSV/JSONL/Parquet
//! tables with a path column, and Parquet with the image bytes inside.

use std::io::{BufRead, BufReader};
use std::path::Path;

use arrow_array::{
    Array, BinaryArray, LargeBinaryArray, LargeStringArray, StringArray, StructArray,
};
use arrow_schema::DataType;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use pipeline_core::{DataSpec, Entries, InputFormat, Location, Manifest, is_url};

use super::{IMAGE_COLUMNS, Listing, PATH_COLUMNS, SourceError, absolute, read_all};
use crate::remote::Remote;

/// Lines of a list file, to `push`: trimmed, blank lines skipped.
pub(super) fn lines(bytes: &[u8], push: &mut dyn FnMut(String)) {
    BufReader::new(bytes)
        .lines()
        .map_while(Result::ok)
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .for_each(push);
}

fn pick_column(data: &str, columns: &[String], wanted: Option<&str>) -> Result<usize, SourceError> {
    let found = match wanted {
        Some(w) => columns.iter().position(|c| c == w),
        None => PATH_COLUMNS
            .iter()
            .find_map(|w| columns.iter().position(|c| c == w)),
    };
    found.ok_or_else(|| SourceError::Column {
        path: data.to_owned(),
        wanted: wanted.map_or_else(|| PATH_COLUMNS.join("`, `"), str::to_owned),
        available: if columns.is_empty() {
            "none".to_owned()
        } else {
            columns.join(", ")
        },
        flag: "--path-column",
    })
}

pub(super) fn csv_column(
    data: &str,
    bytes: &[u8],
    format: InputFormat,
    wanted: Option<&str>,
    push: &mut dyn FnMut(String),
) -> Result<(), SourceError> {
    let bad = |e: csv::Error| SourceError::Read {
        path: data.to_owned(),
        message: e.to_string(),
    };
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(if format == InputFormat::Tsv {
            b'\t'
        } else {
            b','
        })
        .from_reader(bytes);
    let headers: Vec<String> = reader
        .headers()
        .map_err(bad)?
        .iter()
        .map(str::to_owned)
        .collect();
    let column = pick_column(data, &headers, wanted)?;
    for record in reader.records() {
        let record = record.map_err(bad)?;
        push(record.get(column).unwrap_or_default().trim().to_owned());
    }
    Ok(())
}

pub(super) fn jsonl_column(
    data: &str,
    bytes: &[u8],
    wanted: Option<&str>,
    push: &mut dyn FnMut(String),
) -> Result<(), SourceError> {
    let lines = BufReader::new(bytes).lines().map_while(Result::ok);
    for (n, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| SourceError::Read {
                path: data.to_owned(),
                message: format!("line {}: {e}", n + 1),
            })?;
        let object = value.as_object().ok_or_else(|| SourceError::Read {
            path: data.to_owned(),
            message: format!("line {}: not a JSON object", n + 1),
        })?;
        let columns: Vec<String> = object.keys().cloned().collect();
        let column = &columns[pick_column(data, &columns, wanted)?];
        push(match &object[column] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    Ok(())
}

/// A Parquet table: paths/URLs in a column, or the image bytes in one.
pub(super) fn parquet(
    spec: &DataSpec,
    client: &dyn Fn() -> Result<&'static Remote, SourceError>,
) -> Result<Manifest, SourceError> {
    let data = spec.data.as_str();
    let bad = |e: parquet::errors::ParquetError| SourceError::Read {
        path: data.to_owned(),
        message: e.to_string(),
    };
    let bytes = read_all(data, client)?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).map_err(bad)?;
    let schema = builder.schema().clone();
    let columns: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let path_column = match &spec.path_column {
        Some(_) => Some(pick_column(data, &columns, spec.path_column.as_deref())?),
        None => pick_column(data, &columns, None).ok(),
    };
    let image_column =
        match &spec.image_column {
            Some(wanted) => Some(columns.iter().position(|c| c == wanted).ok_or_else(|| {
                SourceError::Column {
                    path: data.to_owned(),
                    wanted: wanted.clone(),
                    available: columns.join(", "),
                    flag: "--image-column",
                }
            })?),
            None if path_column.is_none() => IMAGE_COLUMNS
                .iter()
                .find_map(|w| columns.iter().position(|c| c == w)),
            None => None,
        };
    let Some(image_column) = image_column else {
        // Paths or URLs in a column.
        let column = match path_column {
            Some(column) => column,
            None => pick_column(data, &columns, None)?,
        };
        let mask = ProjectionMask::roots(builder.parquet_schema(), [column]);
        let reader = builder.with_projection(mask).build().map_err(bad)?;
        let mut listing = Listing::new(data);
        each_string(reader, data, &mut |name| {
            listing.push(name.unwrap_or_default())
        })?;
        return Ok(listing.finish(data));
    };
    if is_url(data) {
        return Err(SourceError::Unsupported {
            path: data.to_owned(),
            message: "Parquet with image bytes is read from a local file; copy it here first \
                      (paths and URLs in a remote Parquet table are fine)"
                .to_owned(),
        });
    }
    let image_name = columns[image_column].clone();
    let image_type = schema.field(image_column).data_type().clone();
    let is_struct = match &image_type {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => false,
        DataType::Struct(fields) if fields.iter().any(|f| f.name() == "bytes") => true,
        other => {
            return Err(SourceError::Unsupported {
                path: data.to_owned(),
                message: format!(
                    "column `{image_name}` is {other}, not image bytes (binary, or a struct \
                     with `bytes`)"
                ),
            });
        }
    };
    let rows = builder.metadata().file_metadata().num_rows().max(0) as u64;
    // Names: the path column; else the struct's `path` (Hugging Face's
    // original file name); else FILE#ROW.
    let parquet_schema = builder.parquet_schema();
    let name_leaf = match path_column {
        Some(column) => Some(ProjectionMask::roots(parquet_schema, [column])),
        None if is_struct => parquet_schema
            .columns()
            .iter()
            .position(|c| c.path().string() == format!("{image_name}.path"))
            .map(|leaf| ProjectionMask::leaves(parquet_schema, [leaf])),
        None => None,
    };
    let file_name = Path::new(data)
        .file_name()
        .map_or_else(|| data.to_owned(), |n| n.to_string_lossy().into_owned());
    let file = absolute(Path::new(data));
    let mut entries = Entries::new();
    let push = |entries: &mut Entries, name: Option<String>| {
        let row = entries.len() as u64;
        let name = name.unwrap_or_else(|| format!("{file_name}#{row}"));
        let location = Location::Cell {
            file: file.clone(),
            column: image_name.clone(),
            row,
        };
        entries.push(name, location);
    };
    if let Some(mask) = name_leaf {
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .map_err(bad)?
            .with_projection(mask)
            .build()
            .map_err(bad)?;
        each_string(reader, data, &mut |name| push(&mut entries, name))?;
    }
    while (entries.len() as u64) < rows {
        push(&mut entries, None);
    }
    Ok(Manifest {
        source: data.to_owned(),
        entries,
        problems: Vec::new(),
        revision: None,
    })
}

/// The one (string) column of every batch, to `push`, a row at a time.
fn each_string(
    reader: parquet::arrow::arrow_reader::ParquetRecordBatchReader,
    data: &str,
    push: &mut dyn FnMut(Option<String>),
) -> Result<(), SourceError> {
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for batch in reader {
        let batch = batch.map_err(|e| SourceError::Read {
            path: data.to_owned(),
            message: e.to_string(),
        })?;
        let mut column = batch.column(0).clone();
        if let Some(s) = column.as_any().downcast_ref::<StructArray>() {
            column = s.column(0).clone();
        }
        let any = column.as_any();
        if let Some(a) = any.downcast_ref::<StringArray>() {
            a.iter().for_each(|v| push(v.map(str::to_owned)));
        } else if let Some(a) = any.downcast_ref::<LargeStringArray>() {
            a.iter().for_each(|v| push(v.map(str::to_owned)));
        } else if let Some(a) = any.downcast_ref::<BinaryArray>() {
            a.iter().for_each(|v| push(v.map(lossy)));
        } else if let Some(a) = any.downcast_ref::<LargeBinaryArray>() {
            a.iter().for_each(|v| push(v.map(lossy)));
        } else {
            return Err(SourceError::Unsupported {
                path: data.to_owned(),
                message: format!("the path column is {}, not text", column.data_type()),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_without_the_column_names_what_it_has() {
        let err = csv_column(
            "m.csv",
            b"id,caption\n1,x\n",
            InputFormat::Csv,
            None,
            &mut drop,
        )
        .expect_err("no path column");
        let text = err.to_string();
        assert!(
            text.contains("id, caption") && text.contains("--path-column"),
            "{text}"
        );
    }
}
