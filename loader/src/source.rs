//! `--data` as it is stored: a folder, a list file, a table (CSV, TSV,
//! JSONL, Parquet) of paths or URLs, Parquet with the image bytes inside,
//! WebDataset tar shards, and any of them in object storage.
//!
//! Each is read into the same [`Manifest`]: entries in input order (a
//! manifest's row order; sorted keys for folders and prefixes; shard order
//! then member order for WebDataset), each with the name the output's
//! `path` carries and the [`Location`] a worker reads.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use arrow_array::{
    Array, BinaryArray, LargeBinaryArray, LargeStringArray, StringArray, StructArray,
};
use arrow_schema::DataType;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use pipeline_core::{
    ByteRange, DataSpec, Fnv64, IMAGE_EXTENSIONS, InputFormat, ItemIndex, Location, Manifest,
    ManifestEntry, RemoteSpec, ScanError, ScanProblem, is_url,
};

use crate::remote::{Remote, RemoteError};

/// Columns tried, in order, when `--path-column` is not given.
pub const PATH_COLUMNS: [&str; 3] = ["path", "url", "image_path"];

/// Columns tried, in order, for image bytes when a Parquet table has no path
/// column and `--image-column` is not given (Hugging Face's `image`).
pub const IMAGE_COLUMNS: [&str; 2] = ["image", "jpg"];

/// WebDataset members that are the image, in order of preference.
pub const SHARD_IMAGE_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// `--data` could not be read into a manifest: one line for the user.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A local folder that is not one.
    #[error(transparent)]
    Scan(#[from] ScanError),
    /// The file or object could not be read.
    #[error("--data {path}: {message}")]
    Read {
        /// What.
        path: String,
        /// Why.
        message: String,
    },
    /// A table without the column it needs.
    #[error("--data {path}: no column `{wanted}` (it has: {available}); name one with {flag}")]
    Column {
        /// The table.
        path: String,
        /// The column looked for (or the list of defaults).
        wanted: String,
        /// The table's columns.
        available: String,
        /// The flag that names it.
        flag: &'static str,
    },
    /// Nothing to run.
    #[error("--data {0}: no items (an empty manifest, or no images in it)")]
    Empty(String),
    /// The kind cannot be told from the argument.
    #[error(
        "--data {0}: cannot tell the layout from the name; give --input-format \
         (folder, list, csv, tsv, jsonl, parquet, webdataset)"
    )]
    Unknown(String),
    /// A layout that is not read from where it is.
    #[error("--data {path}: {message}")]
    Unsupported {
        /// What.
        path: String,
        /// Why, and what to do instead.
        message: String,
    },
    /// Object storage or a web server refused.
    #[error("--data {0}")]
    Remote(#[from] RemoteError),
}

/// Reads `spec` into a manifest; `remote` says how to reach URLs.
pub fn open(spec: &DataSpec, remote: RemoteSpec) -> Result<Manifest, SourceError> {
    let format = detect(spec)?;
    let data = spec.data.as_str();
    let client = || Remote::shared(remote).map_err(SourceError::Remote);
    let manifest = match format {
        InputFormat::Folder if is_url(data) => list_prefix(data, client()?)?,
        InputFormat::Folder => Manifest::scan(Path::new(data))?,
        InputFormat::Webdataset => webdataset(data, &client)?,
        InputFormat::Parquet => parquet(spec, &client)?,
        InputFormat::List | InputFormat::Csv | InputFormat::Tsv | InputFormat::Jsonl => {
            let bytes = read_all(data, &client)?;
            let names = match format {
                InputFormat::List => lines(&bytes),
                InputFormat::Jsonl => jsonl_column(data, &bytes, spec.path_column.as_deref())?,
                _ => csv_column(data, &bytes, format, spec.path_column.as_deref())?,
            };
            from_names(data, names)
        }
    };
    if manifest.entries.is_empty() && format != InputFormat::Folder {
        return Err(SourceError::Empty(data.to_owned()));
    }
    Ok(manifest)
}

/// The layout `spec` names or implies.
pub fn detect(spec: &DataSpec) -> Result<InputFormat, SourceError> {
    if let Some(format) = spec.format {
        return Ok(format);
    }
    let data = spec.data.as_str();
    if let Some(format) = InputFormat::from_name(data) {
        return Ok(format);
    }
    if data.starts_with("s3://") || data.starts_with("S3://") {
        return Ok(InputFormat::Folder);
    }
    if is_url(data) {
        return Err(SourceError::Unknown(data.to_owned()));
    }
    let path = Path::new(data);
    if path.is_dir() {
        return Ok(if is_shard_folder(path) {
            InputFormat::Webdataset
        } else {
            InputFormat::Folder
        });
    }
    if path.exists() {
        return Err(SourceError::Unknown(data.to_owned()));
    }
    // A missing path: let the folder scan say so.
    Ok(InputFormat::Folder)
}

/// A folder with `.tar` files and no images directly in it.
fn is_shard_folder(path: &Path) -> bool {
    let Ok(read) = std::fs::read_dir(path) else {
        return false;
    };
    let mut tars = false;
    for entry in read.flatten() {
        let name = entry.file_name();
        let ext = Path::new(&name)
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        match ext.as_deref() {
            Some("tar") => tars = true,
            Some(e) if IMAGE_EXTENSIONS.contains(&e) => return false,
            _ => {}
        }
    }
    tars
}

fn read_all(
    data: &str,
    client: &dyn Fn() -> Result<&'static Remote, SourceError>,
) -> Result<Vec<u8>, SourceError> {
    if is_url(data) {
        return client()?.get(data, None).map_err(|e| SourceError::Read {
            path: data.to_owned(),
            message: e.message,
        });
    }
    std::fs::read(data).map_err(|e| SourceError::Read {
        path: data.to_owned(),
        message: e.to_string(),
    })
}

/// Lines of a list file: trimmed, blank lines skipped.
fn lines(bytes: &[u8]) -> Vec<String> {
    BufReader::new(bytes)
        .lines()
        .map_while(Result::ok)
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
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

fn csv_column(
    data: &str,
    bytes: &[u8],
    format: InputFormat,
    wanted: Option<&str>,
) -> Result<Vec<String>, SourceError> {
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
    let mut names = Vec::new();
    for record in reader.records() {
        let record = record.map_err(bad)?;
        names.push(record.get(column).unwrap_or_default().trim().to_owned());
    }
    Ok(names)
}

fn jsonl_column(
    data: &str,
    bytes: &[u8],
    wanted: Option<&str>,
) -> Result<Vec<String>, SourceError> {
    let mut names = Vec::new();
    for (n, line) in lines(bytes).into_iter().enumerate() {
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
        names.push(match &object[column] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    Ok(names)
}

/// Entries for paths or URLs listed in the manifest at `data`. A relative
/// path is relative to the manifest's folder (or URL), so a run works from
/// any working directory.
fn from_names(data: &str, names: Vec<String>) -> Manifest {
    let base_url = is_url(data).then(|| url::Url::parse(data).ok()).flatten();
    let base_dir = Path::new(data)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut h = Fnv64::default();
    let entries = names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let location = if is_url(&name) {
                Location::Url {
                    url: name.clone(),
                    range: None,
                }
            } else if let Some(base) = &base_url {
                Location::Url {
                    url: base.join(&name).map_or_else(|_| name.clone(), String::from),
                    range: None,
                }
            } else {
                Location::File {
                    path: absolute(&base_dir.join(&name)),
                    range: None,
                }
            };
            h.write(name.as_bytes());
            ManifestEntry {
                index: i as ItemIndex,
                name: PathBuf::from(name),
                location,
            }
        })
        .collect();
    Manifest {
        source: data.to_owned(),
        entries,
        problems: Vec::new(),
        revision: None,
    }
}

fn absolute(path: &Path) -> Vec<u8> {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .as_os_str()
        .as_bytes()
        .to_vec()
}

/// An `s3://bucket/prefix/` listed as a folder: its image objects, sorted
/// by key; names are keys relative to the prefix.
fn list_prefix(data: &str, remote: &Remote) -> Result<Manifest, SourceError> {
    let prefix = if data.ends_with('/') {
        data.to_owned()
    } else {
        format!("{data}/")
    };
    let objects = remote.list(&prefix)?;
    let mut h = Fnv64::default();
    let mut entries = Vec::new();
    for object in objects {
        let ext = object
            .url
            .rsplit_once('.')
            .map(|(_, e)| e.to_ascii_lowercase());
        if !ext.is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.as_str())) {
            continue;
        }
        h.write(&object.size.to_le_bytes());
        h.write(object.etag.as_deref().unwrap_or_default().as_bytes());
        h.write(&[0]);
        let name = object
            .url
            .strip_prefix(&prefix)
            .unwrap_or(&object.url)
            .to_owned();
        entries.push(ManifestEntry {
            index: entries.len() as ItemIndex,
            name: PathBuf::from(name),
            location: Location::Url {
                url: object.url,
                range: None,
            },
        });
    }
    Ok(Manifest {
        source: data.to_owned(),
        entries,
        problems: Vec::new(),
        revision: Some(h.finish()),
    })
}

/// A Parquet table: paths/URLs in a column, or the image bytes in one.
fn parquet(
    spec: &DataSpec,
    client: &dyn Fn() -> Result<&'static Remote, SourceError>,
) -> Result<Manifest, SourceError> {
    let data = spec.data.as_str();
    let bad = |e: parquet::errors::ParquetError| SourceError::Read {
        path: data.to_owned(),
        message: e.to_string(),
    };
    let bytes = bytes::Bytes::from(read_all(data, client)?);
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
        let names = strings(builder.with_projection(mask).build().map_err(bad)?, data)?;
        return Ok(from_names(data, names));
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
    let mut names: Vec<Option<String>> = match name_leaf {
        Some(mask) => {
            let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                .map_err(bad)?
                .with_projection(mask)
                .build()
                .map_err(bad)?;
            optional_strings(reader, data)?
        }
        None => Vec::new(),
    };
    names.resize(rows as usize, None);
    let file = absolute(Path::new(data));
    let entries = names
        .into_iter()
        .enumerate()
        .map(|(row, name)| ManifestEntry {
            index: row as ItemIndex,
            name: PathBuf::from(name.unwrap_or_else(|| format!("{file_name}#{row}"))),
            location: Location::Cell {
                file: file.clone(),
                column: image_name.clone(),
                row: row as u64,
            },
        })
        .collect();
    Ok(Manifest {
        source: data.to_owned(),
        entries,
        problems: Vec::new(),
        revision: None,
    })
}

/// The one (string) column of every batch, nulls as empty names.
fn strings(
    reader: parquet::arrow::arrow_reader::ParquetRecordBatchReader,
    data: &str,
) -> Result<Vec<String>, SourceError> {
    Ok(optional_strings(reader, data)?
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect())
}

fn optional_strings(
    reader: parquet::arrow::arrow_reader::ParquetRecordBatchReader,
    data: &str,
) -> Result<Vec<Option<String>>, SourceError> {
    let mut out = Vec::new();
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
            out.extend(a.iter().map(|v| v.map(str::to_owned)));
        } else if let Some(a) = any.downcast_ref::<LargeStringArray>() {
            out.extend(a.iter().map(|v| v.map(str::to_owned)));
        } else if let Some(a) = any.downcast_ref::<BinaryArray>() {
            out.extend(
                a.iter()
                    .map(|v| v.map(|b| String::from_utf8_lossy(b).into_owned())),
            );
        } else if let Some(a) = any.downcast_ref::<LargeBinaryArray>() {
            out.extend(
                a.iter()
                    .map(|v| v.map(|b| String::from_utf8_lossy(b).into_owned())),
            );
        } else {
            return Err(SourceError::Unsupported {
                path: data.to_owned(),
                message: format!("the path column is {}, not text", column.data_type()),
            });
        }
    }
    Ok(out)
}

/// The shards `data` names: one `.tar`, a folder of them, or a brace
/// pattern (`shards/{00000..00099}.tar`), local or remote.
pub fn shards(data: &str) -> Result<Vec<String>, SourceError> {
    if data.contains('{') {
        let expanded = bracoxide::bracoxidize(data).map_err(|e| SourceError::Read {
            path: data.to_owned(),
            message: format!("bad brace pattern: {e:?}"),
        })?;
        return Ok(expanded);
    }
    let path = Path::new(data);
    if !is_url(data) && path.is_dir() {
        let mut tars: Vec<String> = std::fs::read_dir(path)
            .map_err(|e| SourceError::Read {
                path: data.to_owned(),
                message: e.to_string(),
            })?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("tar")))
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        tars.sort();
        return Ok(tars);
    }
    Ok(vec![data.to_owned()])
}

/// WebDataset shards: an item per key with an image member, named
/// `SHARD/KEY`, located as a byte range of its shard. A key without an image
/// member becomes an item on its first member, which fails as `unsupported`
/// or `decode`: nothing in a shard vanishes silently.
fn webdataset(
    data: &str,
    client: &dyn Fn() -> Result<&'static Remote, SourceError>,
) -> Result<Manifest, SourceError> {
    let shards = shards(data)?;
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    let mut h = Fnv64::default();
    for shard in &shards {
        let members = if is_url(shard) {
            let bytes = client()?.get(shard, None).map_err(|e| SourceError::Read {
                path: shard.clone(),
                message: e.message,
            })?;
            h.write(&(bytes.len() as u64).to_le_bytes());
            scan_tar(bytes.as_slice())
        } else {
            match File::open(shard) {
                Ok(file) => scan_tar(BufReader::new(file)),
                Err(e) => {
                    return Err(SourceError::Read {
                        path: shard.clone(),
                        message: e.to_string(),
                    });
                }
            }
        };
        let (members, problem) = members;
        if let Some(message) = problem {
            problems.push(ScanProblem {
                path: PathBuf::from(shard),
                message,
            });
        }
        let shard_name = shard_name(data, shard);
        for (key, range) in samples(members) {
            let location = if is_url(shard) {
                Location::Url {
                    url: shard.clone(),
                    range: Some(range),
                }
            } else {
                Location::File {
                    path: absolute(Path::new(shard)),
                    range: Some(range),
                }
            };
            entries.push(ManifestEntry {
                index: entries.len() as ItemIndex,
                name: PathBuf::from(format!("{shard_name}/{key}")),
                location,
            });
        }
    }
    Ok(Manifest {
        source: data.to_owned(),
        entries,
        problems,
        revision: shards.iter().any(|s| is_url(s)).then(|| h.finish()),
    })
}

/// How a shard is named in outputs: relative to a folder of shards, else
/// as given.
fn shard_name(data: &str, shard: &str) -> String {
    let dir = data.trim_end_matches('/');
    match shard.strip_prefix(dir).and_then(|s| s.strip_prefix('/')) {
        Some(rest) if Path::new(data).is_dir() => rest.to_owned(),
        _ => shard.to_owned(),
    }
}

/// A tar member: its path and where its body is.
type Member = (String, ByteRange);

/// The regular files of a tar stream, in order, and what stopped the scan
/// early (a truncated or corrupt shard).
fn scan_tar(reader: impl Read) -> (Vec<Member>, Option<String>) {
    let mut archive = tar::Archive::new(reader);
    let mut members = Vec::new();
    let entries = match archive.entries() {
        Ok(entries) => entries,
        Err(e) => return (members, Some(format!("not a tar file: {e}"))),
    };
    for entry in entries {
        match entry {
            Ok(entry) => {
                if !entry.header().entry_type().is_file() {
                    continue;
                }
                let path = match entry.path() {
                    Ok(p) => p.to_string_lossy().into_owned(),
                    Err(e) => return (members, Some(format!("bad member name: {e}"))),
                };
                members.push((
                    path,
                    ByteRange {
                        offset: entry.raw_file_position(),
                        len: entry.size(),
                    },
                ));
            }
            Err(e) => {
                return (
                    members,
                    Some(format!("shard ends early (truncated or corrupt): {e}")),
                );
            }
        }
    }
    (members, None)
}

/// Members grouped into samples by key (the path up to the first dot of its
/// file name), in order of first appearance; each sample's image member.
fn samples(members: Vec<Member>) -> Vec<(String, ByteRange)> {
    let mut order: Vec<String> = Vec::new();
    let mut by_key: BTreeMap<String, Vec<(String, ByteRange)>> = BTreeMap::new();
    for (path, range) in members {
        let (dir, file) = path
            .rsplit_once('/')
            .map_or(("", path.as_str()), |(d, f)| (d, f));
        let (stem, ext) = file.split_once('.').unwrap_or((file, ""));
        let key = if dir.is_empty() {
            stem.to_owned()
        } else {
            format!("{dir}/{stem}")
        };
        let group = by_key.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            Vec::new()
        });
        group.push((ext.to_ascii_lowercase(), range));
    }
    order
        .into_iter()
        .map(|key| {
            let members = &by_key[&key];
            let image = SHARD_IMAGE_EXTENSIONS
                .iter()
                .find_map(|want| members.iter().find(|(ext, _)| ext == want))
                .unwrap_or(&members[0]);
            (key, image.1)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_group_members_by_key_and_pick_the_image() {
        let r = |offset| ByteRange { offset, len: 1 };
        let members = vec![
            ("a/000.txt".to_owned(), r(0)),
            ("a/000.png".to_owned(), r(1)),
            ("a/000.jpg".to_owned(), r(2)),
            ("b.cls".to_owned(), r(3)),
            ("a/001.seg.png".to_owned(), r(4)),
        ];
        let got = samples(members);
        assert_eq!(
            got,
            vec![
                ("a/000".to_owned(), r(2)),
                ("b".to_owned(), r(3)),
                ("a/001".to_owned(), r(4)),
            ]
        );
    }

    #[test]
    fn brace_patterns_expand_in_order() {
        let got = shards("s/{00..02}.tar").expect("expands");
        assert_eq!(got, ["s/00.tar", "s/01.tar", "s/02.tar"]);
    }

    #[test]
    fn a_table_without_the_column_names_what_it_has() {
        let err = csv_column("m.csv", b"id,caption\n1,x\n", InputFormat::Csv, None)
            .expect_err("no path column");
        let text = err.to_string();
        assert!(
            text.contains("id, caption") && text.contains("--path-column"),
            "{text}"
        );
    }
}
