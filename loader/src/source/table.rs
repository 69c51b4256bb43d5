//! Lists and tables: a `.txt` of paths or URLs, CSV/TSV/JSONL/Parquet
//! tables with a path column, and Parquet with the image bytes inside.

use std::io::{BufRead, BufReader};
use std::path::Path;

use arrow_array::{
    Array, ArrayRef, BinaryArray, LargeBinaryArray, LargeStringArray, StringArray, StructArray,
};
use arrow_schema::DataType;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use pipeline_core::{DataSpec, Entries, InputFormat, Location, Manifest, is_url};

use super::keep::{KeepFilter, Keeping, arrow_json, json_string};
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
    keep: &KeepFilter,
    push: &mut dyn FnMut(String, Vec<(String, String)>),
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
    let kept: Vec<usize> = (0..headers.len())
        .filter(|&i| keep.wants(&headers[i], &[headers[column].as_str()]))
        .collect();
    for record in reader.records() {
        let record = record.map_err(bad)?;
        let values = kept
            .iter()
            .filter_map(|&i| Some((headers[i].clone(), json_string(record.get(i)?))))
            .collect();
        push(
            record.get(column).unwrap_or_default().trim().to_owned(),
            values,
        );
    }
    Ok(())
}

pub(super) fn jsonl_column(
    data: &str,
    bytes: &[u8],
    wanted: Option<&str>,
    keep: &KeepFilter,
    push: &mut dyn FnMut(String, Vec<(String, String)>),
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
        let values = object
            .iter()
            .filter(|(k, _)| keep.wants(k, &[column.as_str()]))
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
        let name = match &object[column] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        push(name, values);
    }
    Ok(())
}

/// A Parquet table: paths/URLs in a column, or the image bytes in one.
pub(super) fn parquet(
    spec: &DataSpec,
    mut keeping: Keeping,
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
        let kept = kept_roots(&columns, keeping.filter(), &[&columns[column]]);
        let roots = std::iter::once(column).chain(kept.iter().copied());
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        let reader = builder.with_projection(mask).build().map_err(bad)?;
        let kept = names_of(&columns, &kept);
        let mut listing = Listing::new(data, keeping);
        each_row(
            reader,
            data,
            Some(&columns[column]),
            &kept,
            &mut |name, values| listing.push(name.unwrap_or_default(), values),
        )?;
        return listing.finish(data);
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
    let mut primary = vec![image_name.as_str()];
    primary.extend(path_column.map(|c| columns[c].as_str()));
    let kept = kept_roots(&columns, keeping.filter(), &primary);
    let name_leaf = match path_column {
        Some(column) => Some((vec![column], columns[column].clone())),
        None if is_struct => parquet_schema
            .columns()
            .iter()
            .position(|c| c.path().string() == format!("{image_name}.path"))
            .map(|leaf| (vec![leaf], image_name.clone())),
        None => None,
    };
    // The kept columns' leaves, with the name's.
    let leaves_of = |roots: &[usize]| -> Vec<usize> {
        (0..parquet_schema.num_columns())
            .filter(|&leaf| roots.contains(&parquet_schema.get_column_root_idx(leaf)))
            .collect()
    };
    let (mut leaves, name_column) = match &name_leaf {
        Some((ids, name)) if path_column.is_some() => (leaves_of(ids), Some(name.clone())),
        Some((ids, name)) => (ids.clone(), Some(name.clone())),
        None => (Vec::new(), None),
    };
    leaves.extend(leaves_of(&kept));
    let mask = ProjectionMask::leaves(parquet_schema, leaves.iter().copied());
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
    if !leaves.is_empty() {
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .map_err(bad)?
            .with_projection(mask)
            .build()
            .map_err(bad)?;
        let kept = names_of(&columns, &kept);
        each_row(
            reader,
            data,
            name_column.as_deref(),
            &kept,
            &mut |name, values| {
                keeping.push(values);
                push(&mut entries, name)
            },
        )?;
    }
    while (entries.len() as u64) < rows {
        push(&mut entries, None);
    }
    Ok(Manifest {
        source: data.to_owned(),
        entries,
        kept: keeping.finish()?,
        problems: Vec::new(),
        revision: None,
    })
}

/// The top-level columns `keep` wants, besides `primary`.
fn kept_roots(columns: &[String], keep: &KeepFilter, primary: &[&str]) -> Vec<usize> {
    (0..columns.len())
        .filter(|&i| keep.wants(&columns[i], primary))
        .collect()
}

fn names_of(columns: &[String], ids: &[usize]) -> Vec<String> {
    ids.iter().map(|&i| columns[i].clone()).collect()
}

/// Every row of `reader`, to `push`: the text of column `name` (the first
/// field of a struct: Hugging Face's `image.path`), and the `kept` columns
/// as JSON text.
fn each_row(
    reader: parquet::arrow::arrow_reader::ParquetRecordBatchReader,
    data: &str,
    name: Option<&str>,
    kept: &[String],
    push: &mut dyn FnMut(Option<String>, Vec<(String, String)>),
) -> Result<(), SourceError> {
    for batch in reader {
        let batch = batch.map_err(|e| SourceError::Read {
            path: data.to_owned(),
            message: e.to_string(),
        })?;
        let names = match name.and_then(|n| batch.column_by_name(n)) {
            Some(column) => texts(column, data)?,
            None => vec![None; batch.num_rows()],
        };
        let kept: Vec<(&String, &ArrayRef)> = kept
            .iter()
            .filter_map(|k| Some((k, batch.column_by_name(k)?)))
            .collect();
        for (row, name) in names.into_iter().enumerate() {
            let values = kept
                .iter()
                .filter_map(|(k, c)| Some(((*k).clone(), arrow_json(c, row)?)))
                .collect();
            push(name, values);
        }
    }
    Ok(())
}

/// A column of paths as text, row by row (nulls as `None`).
fn texts(column: &ArrayRef, data: &str) -> Result<Vec<Option<String>>, SourceError> {
    let mut column = column.clone();
    if let Some(s) = column.as_any().downcast_ref::<StructArray>() {
        column = s.column(0).clone();
    }
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let any = column.as_any();
    Ok(if let Some(a) = any.downcast_ref::<StringArray>() {
        a.iter().map(|v| v.map(str::to_owned)).collect()
    } else if let Some(a) = any.downcast_ref::<LargeStringArray>() {
        a.iter().map(|v| v.map(str::to_owned)).collect()
    } else if let Some(a) = any.downcast_ref::<BinaryArray>() {
        a.iter().map(|v| v.map(lossy)).collect()
    } else if let Some(a) = any.downcast_ref::<LargeBinaryArray>() {
        a.iter().map(|v| v.map(lossy)).collect()
    } else {
        return Err(SourceError::Unsupported {
            path: data.to_owned(),
            message: format!("the path column is {}, not text", column.data_type()),
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_without_the_column_names_what_it_has() {
        let keep = Keeping::new("m.csv", &[], &[]).expect("none kept");
        let err = csv_column(
            "m.csv",
            b"id,caption\n1,x\n",
            InputFormat::Csv,
            None,
            keep.filter(),
            &mut |_, _| {},
        )
        .expect_err("no path column");
        let text = err.to_string();
        assert!(
            text.contains("id, caption") && text.contains("--path-column"),
            "{text}"
        );
    }
}
