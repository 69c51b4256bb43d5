//! `--data` as it is stored: a folder, a list file, a table (CSV, TSV,
//! JSONL, Parquet) of paths or URLs, Parquet with the image bytes inside,
//! WebDataset tar shards, and any of them in object storage.
//!
//! Each is read into the same [`Manifest`]: entries in input order (a
//! manifest's row order; sorted keys for folders and prefixes; shard order
//! then member order for WebDataset), each with the name the output's
//! `path` carries and the [`Location`] a worker reads.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use pipeline_core::{
    DataSpec, Entries, Fnv64, IMAGE_EXTENSIONS, InputFormat, Kept, Location, Manifest, RemoteSpec,
    ScanError, is_url, object_url, redact_text, redact_url,
};

use crate::remote::{Remote, RemoteError};

mod keep;
mod shards;
mod table;

use keep::Keeping;

pub use shards::shards;

/// Columns tried, in order, when `--path-column` is not given.
pub const PATH_COLUMNS: [&str; 3] = ["path", "url", "image_path"];

/// Columns tried, in order, for image bytes when a Parquet table has no path
/// column and `--image-column` is not given (Hugging Face's `image`).
pub const IMAGE_COLUMNS: [&str; 2] = ["image", "jpg"];

/// WebDataset members that are the image, in order of preference.
pub const SHARD_IMAGE_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// `--data` could not be read into a manifest: one line for the user, its
/// URL shown without credentials (`pipeline_core::redact_url`).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A local folder that is not one.
    #[error(transparent)]
    Scan(#[from] ScanError),
    /// The file or object could not be read.
    #[error("--data {}: {}", redact_url(.path), redact_text(.message))]
    Read {
        /// What.
        path: String,
        /// Why.
        message: String,
    },
    /// A table without the column it needs.
    #[error(
        "--data {}: no column `{wanted}` (it has: {available}); name one with {flag}",
        redact_url(.path)
    )]
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
    #[error(
        "--data {}: no items (an empty manifest, or no images in it)",
        redact_url(.0)
    )]
    Empty(String),
    /// The kind cannot be told from the argument.
    #[error(
        "--data {}: cannot tell the layout from the name; give --input-format \
         (folder, list, csv, tsv, jsonl, parquet, webdataset)",
        redact_url(.0)
    )]
    Unknown(String),
    /// A layout that is not read from where it is.
    #[error("--data {}: {message}", redact_url(.path))]
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
    let keeping = Keeping::new(data, &spec.keep_columns, &[])?;
    if keeping.filter().active() && matches!(format, InputFormat::Folder | InputFormat::List) {
        return Err(SourceError::Unsupported {
            path: data.to_owned(),
            message: format!(
                "--keep-columns: a {format} has no columns; keep them from a table (CSV, TSV, \
                 JSONL, Parquet) or WebDataset shards"
            ),
        });
    }
    let manifest = match format {
        InputFormat::Folder if is_url(data) => list_prefix(data, client()?)?,
        InputFormat::Folder => Manifest::scan(Path::new(data))?,
        InputFormat::Webdataset => shards::webdataset(data, keeping, &client)?,
        InputFormat::Parquet => table::parquet(spec, keeping, &client)?,
        InputFormat::List | InputFormat::Csv | InputFormat::Tsv | InputFormat::Jsonl => {
            let bytes = read_all(data, &client)?;
            let filter = keeping.filter().clone();
            let mut listing = Listing::new(data, keeping);
            let mut push = |name: String, kept| listing.push(name, kept);
            let wanted = spec.path_column.as_deref();
            match format {
                InputFormat::List => table::lines(&bytes, &mut |name| push(name, Vec::new())),
                InputFormat::Jsonl => {
                    table::jsonl_column(data, &bytes, wanted, &filter, &mut push)?
                }
                _ => table::csv_column(data, &bytes, format, wanted, &filter, &mut push)?,
            }
            listing.finish(data)?
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

/// The whole file or object `data` names.
fn read_all(
    data: &str,
    client: &dyn Fn() -> Result<&'static Remote, SourceError>,
) -> Result<bytes::Bytes, SourceError> {
    if is_url(data) {
        return client()?.get(data, None).map_err(|e| SourceError::Read {
            path: data.to_owned(),
            message: e.message,
        });
    }
    std::fs::read(data)
        .map(bytes::Bytes::from)
        .map_err(|e| SourceError::Read {
            path: data.to_owned(),
            message: e.to_string(),
        })
}

/// Entries for paths or URLs listed in the manifest at `data`, pushed one
/// at a time as the manifest is read. A relative path is relative to the
/// manifest's folder (or URL), so a run works from any working directory.
struct Listing {
    entries: Entries,
    keeping: Keeping,
    base_url: Option<url::Url>,
    base_dir: PathBuf,
    /// Each URL item's name: its line (from 1), its object
    /// (`object_identity`) and its URL.
    named: std::collections::HashMap<String, (usize, String, String)>,
    /// The first two URLs of different objects given one name.
    clash: Option<(usize, String, usize, String)>,
    count: usize,
}

impl Listing {
    fn new(data: &str, keeping: Keeping) -> Self {
        Self {
            entries: Entries::new(),
            keeping,
            base_url: is_url(data).then(|| url::Url::parse(data).ok()).flatten(),
            base_dir: Path::new(data)
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
            named: std::collections::HashMap::new(),
            clash: None,
            count: 0,
        }
    }

    /// The next item: its path or URL, and its kept values. A URL's item
    /// is named by its object (`object_url`): no credential reaches the
    /// output's `path`, and the names, and so the run's identity, stay the
    /// same when the URLs are signed again.
    /// Two URLs of one object (signed twice, say) are one item twice; two
    /// objects whose names agree only because an unsigned URL's credential
    /// is hidden in them would be two rows with one `path`, and are
    /// refused at [`Self::finish`].
    fn push(&mut self, name: String, kept: Vec<(String, String)>) {
        self.keeping.push(kept);
        self.count += 1;
        if is_url(&name) {
            let location = Location::Url {
                url: name.clone(),
                range: None,
            };
            let object = object_url(&name).into_owned();
            let identity = pipeline_core::object_identity(&name).into_owned();
            match self.named.get(&object) {
                Some((line, first, url)) if self.clash.is_none() && *first != identity => {
                    self.clash = Some((*line, url.clone(), self.count, name.clone()));
                }
                Some(_) => {}
                None => {
                    self.named
                        .insert(object.clone(), (self.count, identity, name));
                }
            }
            self.entries.push(object, location);
            return;
        }
        let location = if let Some(base) = &self.base_url {
            Location::Url {
                url: base.join(&name).map_or_else(|_| name.clone(), String::from),
                range: None,
            }
        } else {
            Location::File {
                path: absolute(&self.base_dir.join(&name)),
                range: None,
            }
        };
        self.entries.push(name, location);
    }

    fn finish(self, data: &str) -> Result<Manifest, SourceError> {
        if let Some((first, a, second, b)) = self.clash {
            return Err(SourceError::Unsupported {
                path: data.to_owned(),
                message: format!(
                    "items {first} ({}) and {second} ({}) are different URLs that the \
                     output would name alike, {} (a credential is left out of an item's \
                     name); give each object its own path",
                    redact_url(&a),
                    redact_url(&b),
                    object_url(&a)
                ),
            });
        }
        Ok(Manifest {
            source: data.to_owned(),
            entries: self.entries,
            kept: self.keeping.finish()?,
            problems: Vec::new(),
            revision: None,
        })
    }
}

#[cfg(test)]
mod same_name_tests {
    use super::*;

    /// The items' names, or the words of the refusal.
    type Outcome = Result<&'static [&'static str], &'static [&'static str]>;

    fn listed(names: &[&str]) -> Result<Manifest, SourceError> {
        let data = "/lists/urls.txt";
        let mut listing = Listing::new(data, Keeping::new(data, &[], &[]).expect("none kept"));
        for name in names {
            listing.push((*name).to_owned(), Vec::new());
        }
        listing.finish(data)
    }

    #[test]
    fn two_objects_with_one_name_are_refused_naming_both_without_secrets() {
        // (the list, the items' names, or the words of the refusal)
        let table: &[(&[&str], Outcome)] = &[
            (
                &["https://api/get?key=a.jpg", "https://api/get?key=b.jpg"],
                Err(&[
                    "items 1 (https://api/get?key=REDACTED) and 2 (https://api/get?key=REDACTED)",
                ]),
            ),
            (
                &[
                    "https://h/x.jpg?token=t1",
                    "https://h/y.jpg",
                    "https://u:pw@h/x.jpg?token=t2",
                ],
                Err(&["items 1 (https://h/x.jpg?token=REDACTED) and 3"]),
            ),
            // One signed object signed twice, and one URL twice: one name
            // each, as before.
            (
                &[
                    "https://b.s3.amazonaws.com/k.jpg?X-Amz-Credential=A&X-Amz-Signature=s1",
                    "https://b.s3.amazonaws.com/k.jpg?X-Amz-Credential=A&X-Amz-Signature=s2",
                    "https://h/a.jpg",
                    "https://h/a.jpg",
                ],
                Ok(&[
                    "https://b.s3.amazonaws.com/k.jpg",
                    "https://b.s3.amazonaws.com/k.jpg",
                    "https://h/a.jpg",
                    "https://h/a.jpg",
                ]),
            ),
            (
                &["https://api/get?key=a.jpg", "https://api/get?id=b.jpg"],
                Ok(&["https://api/get?key=REDACTED", "https://api/get?id=b.jpg"]),
            ),
        ];
        for (list, want) in table {
            match (listed(list), want) {
                (Ok(manifest), Ok(names)) => {
                    let got: Vec<String> = (0..manifest.entries.len())
                        .map(|i| manifest.entries.name(i).to_string_lossy().into_owned())
                        .collect();
                    assert_eq!(got, *names, "{list:?}");
                }
                (Err(e), Err(words)) => {
                    let line = e.to_string();
                    for w in *words {
                        assert!(line.contains(w), "{list:?}: {line}");
                    }
                    for secret in ["a.jpg", "b.jpg", "t1", "t2", "pw"] {
                        assert!(!line.contains(secret), "{list:?}: {line}");
                    }
                    assert!(!line.contains('\n'), "{line}");
                }
                (got, _) => panic!("{list:?}: {:?}", got.map(|_| "a manifest")),
            }
        }
    }
}

#[cfg(test)]
fn from_names(data: &str, names: Vec<String>) -> Manifest {
    let mut listing = Listing::new(data, Keeping::new(data, &[], &[]).expect("none kept"));
    names.into_iter().for_each(|n| listing.push(n, Vec::new()));
    listing.finish(data).expect("nothing to check")
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
    let mut entries = Entries::new();
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
        let stamp = pipeline_core::stamp_of(&[
            &object.size.to_le_bytes(),
            object.etag.as_deref().unwrap_or_default().as_bytes(),
        ]);
        entries.push_stamped(
            name,
            Location::Url {
                url: object.url,
                range: None,
            },
            stamp,
        );
    }
    Ok(Manifest {
        source: data.to_owned(),
        entries,
        kept: Kept::default(),
        problems: Vec::new(),
        revision: Some(h.finish()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_entries_resolve_against_the_manifest_not_the_working_folder() {
        let manifest = from_names(
            "/data/lists/m.txt",
            vec![
                "a/x.jpg".into(),
                "/abs/y.png".into(),
                "http://h/z.jpg".into(),
            ],
        );
        let locations: Vec<String> = manifest
            .entries
            .iter()
            .map(|e| e.location.to_string())
            .collect();
        assert_eq!(
            locations,
            ["/data/lists/a/x.jpg", "/abs/y.png", "http://h/z.jpg"]
        );
        let remote = from_names("s3://b/lists/m.txt", vec!["a/x.jpg".into()]);
        assert_eq!(
            remote.entries.get(0).location.to_string(),
            "s3://b/lists/a/x.jpg"
        );
    }
}
