//! `--model URL.onnx` (#41 item 1): a model at any location the loader
//! reads (`s3://`, `http://`, `https://`), fetched by the coordinator
//! before any worker starts into the model cache (`$PIPELINE_MODELS_DIR`,
//! else `~/.cache/pipeline/models`), with the config files its upstream
//! keeps beside it (`preprocessor_config.json`, `config.json`) and the
//! external-data files its graph names (a model over 2 GB keeps its
//! weights in them); then run as a local file.
//!
//! Each file is streamed to a temporary file in the cache through a
//! bounded buffer and hashed as it arrives ([`Download`]): external data
//! is never held whole in memory. The cache holds a folder per object
//! (its URL as `object_url` names it: no user information, no signature,
//! so a presigned and a plain URL of one object share it) and in it a
//! folder per content: the model, its external data and its config files
//! (or their absence), all hashed. Everything in a content folder is
//! therefore fixed by its name: files are renamed into place whole (a
//! second run renames the same bytes over them), and nothing is ever
//! deleted, so no run removes a file another run is reading. A presigned
//! URL fetches no config files (a sibling's signature would differ), so
//! its folder is another than the plain URL's where the plain location
//! has them; where it has none, they share one.
//!
//! Decisions where the issue is silent: the model is fetched on every run
//! (its fingerprint, taken from what came, is the run's identity, so a
//! changed object is a changed model and resume refuses it); retries are
//! `--io-retries`', the timeout `--io-timeout` but ten minutes at least
//! (one large object); a config file that is not there (404, or S3's 403
//! to a caller that may not list) is no config, any other failure is the
//! run's error; a model with external data at a URL with a query is
//! refused, naming the files, since a sibling's signature would differ;
//! every message shows the URL without its credentials (`redact_url`);
//! content folders of objects that changed are left for the user to
//! remove (a run cannot know that no other run still reads one).

use std::io::{BufWriter, Seek, Write};
use std::path::{Path, PathBuf};

use loader::remote::{BodySink, Remote};
use pipeline_core::{ItemErrorKind, RemoteSpec, object_url, redact_url};

/// The buffer between the network and a downloaded file: what a download
/// holds at most besides the HTTP layer's own chunk.
const DOWNLOAD_BUFFER: usize = 64 << 10;

/// The config files an upstream keeps beside its model.
const CONFIG_FILES: [&str; 2] = ["preprocessor_config.json", "config.json"];

/// Whether `--model` names a remote location.
pub(super) fn is_remote(model: &str) -> bool {
    ["s3://", "http://", "https://"]
        .iter()
        .any(|scheme| model.starts_with(scheme))
}

/// `$PIPELINE_MODELS_DIR`, else the user's cache folder's `models`.
fn models_dir() -> Result<PathBuf, String> {
    match std::env::var_os("PIPELINE_MODELS_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => Ok(dir.into()),
        None => pipeline_core::cache_dir()
            .map(|c| c.join("models"))
            .ok_or_else(|| "no cache folder for remote models: set PIPELINE_MODELS_DIR".to_owned()),
    }
}

/// The model at `url` and the config files beside it, fetched into the
/// cache: the model's local path; or why not, in one line.
pub(super) fn fetch(url: &str, spec: RemoteSpec) -> Result<PathBuf, String> {
    fetch_into(&models_dir()?, url, spec)
}

/// [`fetch`] into the cache at `models`.
fn fetch_into(models: &Path, url: &str, spec: RemoteSpec) -> Result<PathBuf, String> {
    let shown = redact_url(url);
    let (location, query) = url.split_once('?').unwrap_or((url, ""));
    let name = location
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("--model {shown}: the URL names no file"))?;
    let folder = &location[..location.len() - name.len()];
    // A model is one large object: a limit on its whole read fails any
    // file slower to arrive than it (and, without an ETag, starts it over
    // each time), so `--io-timeout` limits only a silence.
    let spec = RemoteSpec {
        idle_only: true,
        ..spec
    };
    let remote = Remote::new(spec).map_err(|e| format!("--model {e}"))?;
    // One folder per object, whatever signed its URL or logged in to it.
    let object = models.join(fingerprint(object_url(location).as_bytes()));
    std::fs::create_dir_all(&object).map_err(|e| format!("{}: {e}", object.display()))?;
    let download = |at: &str| -> Result<Downloaded, String> {
        let mut file = Download::new(&object)?;
        remote.get_into(at, &mut file).map_err(|e| {
            // The loader's messages start with the URL (redacted), or say it.
            if e.message.starts_with(&*redact_url(at)) {
                format!("--model {}", e.message)
            } else {
                format!("--model {}: {}", redact_url(at), e.message)
            }
        })?;
        file.finish()
    };
    let model = download(url)?;
    // A file that is no model names no files; reading its graph says why.
    // The graph is read whole, as ONNX Runtime will: protobuf caps it at
    // 2 GB, and what is larger is in the external data.
    let graph = std::fs::read(model.path()).map_err(|e| format!("--model {shown}: {e}"))?;
    let external = gpu_worker::onnx::external::external_files(&graph)
        .map_err(|e| format!("--model {shown}: {e}"))?
        .unwrap_or_default();
    drop(graph);
    if !query.is_empty() && !external.is_empty() {
        return Err(format!(
            "--model {}: the model keeps its weights in {} beside it (its \
             external data), which a URL with a query (a presigned one) cannot reach; \
             give a location without one",
            redact_url(location),
            external.join(", ")
        ));
    }
    let external = external
        .into_iter()
        .map(|file| download(&format!("{folder}{file}")).map(|got| (file, got)))
        .collect::<Result<Vec<_>, _>>()?;
    // Config files are small; a presigned URL's siblings cannot be reached.
    let mut configs = Vec::new();
    if query.is_empty() {
        for config in CONFIG_FILES {
            let at = format!("{folder}{config}");
            match remote.get(&at, None) {
                Ok(bytes) => configs.push((config, bytes)),
                // S3 answers a missing key 403 to a caller that may not list.
                Err(e) if matches!(e.kind, ItemErrorKind::NotFound | ItemErrorKind::Permission) => {
                }
                Err(e) => return Err(format!("--model {}", e.message)),
            }
        }
    }
    // The content folder's name: every file it will hold, and which config
    // files it does not hold.
    let mut content = Vec::new();
    content.extend(model.digest.to_le_bytes());
    for (file, got) in &external {
        content.extend(file.as_bytes());
        content.push(0);
        content.extend(got.digest.to_le_bytes());
    }
    for config in CONFIG_FILES {
        content.extend(config.as_bytes());
        match configs.iter().find(|(c, _)| *c == config) {
            Some((_, bytes)) => {
                content.push(1);
                content.extend(xxhash_rust::xxh3::xxh3_64(bytes).to_le_bytes());
            }
            None => content.push(0),
        }
    }
    let dir = object.join(fingerprint(&content));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (file, got) in external {
        got.persist(&dir.join(file))?;
    }
    for (config, bytes) in &configs {
        let mut file = Download::new(&object)?;
        file.append(bytes)
            .map_err(|e| format!("{}: {e}", object.display()))?;
        file.finish()?.persist(&dir.join(config))?;
    }
    // The model last: a folder with the model holds everything with it.
    let path = dir.join(name);
    model.persist(&path)?;
    Ok(path)
}

/// 16 hex digits of xxh3-64 over `bytes`: a cache folder's name.
fn fingerprint(bytes: &[u8]) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes))
}

/// A file being downloaded: a temporary file in the cache, written through
/// a buffer of [`DOWNLOAD_BUFFER`] bytes and hashed as the bytes arrive.
/// Dropped before [`Downloaded::persist`], it removes its file.
struct Download {
    file: BufWriter<tempfile::NamedTempFile>,
    hash: xxhash_rust::xxh3::Xxh3,
}

/// A download that arrived whole: its file and its xxh3-64.
struct Downloaded {
    file: tempfile::NamedTempFile,
    digest: u64,
}

impl Download {
    /// An empty temporary file in `dir`.
    fn new(dir: &Path) -> Result<Self, String> {
        let file = tempfile::Builder::new()
            .prefix(".download-")
            .tempfile_in(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self {
            file: BufWriter::with_capacity(DOWNLOAD_BUFFER, file),
            hash: xxhash_rust::xxh3::Xxh3::new(),
        })
    }

    /// The file, flushed to the disk.
    fn finish(self) -> Result<Downloaded, String> {
        let digest = self.hash.digest();
        let path = self.file.get_ref().path().display().to_string();
        let file = self
            .file
            .into_inner()
            .map_err(|e| format!("{path}: {}", e.error()))?;
        file.as_file()
            .sync_all()
            .map_err(|e| format!("{}: {e}", file.path().display()))?;
        Ok(Downloaded { file, digest })
    }
}

impl BodySink for Download {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        self.hash.update(bytes);
        Ok(())
    }

    fn restart(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        let file = self.file.get_mut();
        file.as_file().set_len(0)?;
        file.rewind()?;
        self.hash.reset();
        Ok(())
    }
}

impl Downloaded {
    /// The file renamed to `path` in one step: a reader sees the file that
    /// was there (which keeps its bytes while open) or this one, never part
    /// of either.
    fn persist(self, path: &Path) -> Result<(), String> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        self.file
            .persist(path)
            .map_err(|e| format!("{}: {}", path.display(), e.error))?;
        Ok(())
    }

    /// Its path, until it is persisted.
    fn path(&self) -> &Path {
        self.file.path()
    }
}

#[cfg(test)]
mod tests;
