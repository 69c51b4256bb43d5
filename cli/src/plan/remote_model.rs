//! `--model URL.onnx` (#41 item 1): a model at any location the loader
//! reads (`s3://`, `http://`, `https://`), fetched by the coordinator
//! before any worker starts into the model cache (`$PIPELINE_MODELS_DIR`,
//! else `~/.cache/pipeline/models`), one folder per URL, with the config
//! files its upstream keeps beside it (`preprocessor_config.json`,
//! `config.json`) and the external-data files its graph names (a model
//! over 2 GB keeps its weights in them); then run as a local file.
//!
//! Decisions where the issue is silent: each download goes to a temporary
//! file renamed into place, in a folder per location and per content, so
//! runs that share a cache never read half a file nor another run's
//! newer copy; the model is fetched on every run (its fingerprint, taken
//! from what came, is the run's identity, so a changed object is a changed
//! model and resume refuses it); retries are `--io-retries`', the timeout
//! `--io-timeout` but ten minutes at least (one large object); a config
//! file that is not there (404, or S3's 403 to a caller that may not list)
//! is no config, any other failure is the run's error; a URL with a query
//! (a presigned one) fetches no config files, since a sibling's signature
//! would differ, and a model with external data there is refused for the
//! same reason, naming the files; external data is held in memory between
//! its read and its write, as the model is; every message shows the URL
//! without its credentials (`redact_url`).

use std::io::Write;
use std::path::{Path, PathBuf};

use pipeline_core::{Fnv64, ItemErrorKind, RemoteSpec, redact_url};

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
    let (location, query) = url.split_once('?').unwrap_or((url, ""));
    let name = location
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("--model {}: the URL names no file", redact_url(url)))?;
    // A model is one large object: its read gets ten minutes at least.
    let spec = RemoteSpec {
        timeout_s: spec.timeout_s.max(600.0),
        ..spec
    };
    let remote = loader::remote::Remote::new(spec).map_err(|e| format!("--model {e}"))?;
    // The loader's messages start with the URL (redacted), or say it.
    let failed = |url: &str, e: pipeline_core::ItemError| {
        let shown = redact_url(url);
        if e.message.starts_with(&*shown) {
            format!("--model {}", e.message)
        } else {
            format!("--model {shown}: {}", e.message)
        }
    };
    let model = remote.get(url, None).map_err(|e| failed(url, e))?;
    let folder = &location[..location.len() - name.len()];
    // A file that is no model names no files; reading its graph says why.
    let external = gpu_worker::onnx::external::external_files(&model)
        .map_err(|e| format!("--model {}: {e}", redact_url(url)))?
        .unwrap_or_default();
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
        .map(|file| {
            let at = format!("{folder}{file}");
            remote
                .get(&at, None)
                .map(|bytes| (file, bytes))
                .map_err(|e| failed(&at, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // One folder per location (a presigned URL's query left out) and per
    // content, external data included: a run's workers open the very
    // bytes its identity holds, whatever another run fetches meanwhile.
    let fingerprint = |parts: &[&[u8]]| {
        let mut hash = Fnv64::default();
        for part in parts {
            hash.write(part);
        }
        format!("{:016x}", hash.finish())
    };
    let mut content: Vec<&[u8]> = vec![&model[..]];
    for (file, bytes) in &external {
        content.extend([file.as_bytes(), &bytes[..]]);
    }
    let dir = models_dir()?
        .join(fingerprint(&[location.as_bytes()]))
        .join(fingerprint(&content));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (file, bytes) in &external {
        let local = dir.join(file);
        if let Some(parent) = local.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        write_atomically(&local, bytes)?;
    }
    let path = dir.join(name);
    write_atomically(&path, &model)?;
    for config in ["preprocessor_config.json", "config.json"] {
        let local = dir.join(config);
        if !query.is_empty() {
            remove_stale(&local)?;
            continue;
        }
        match remote.get(&format!("{folder}{config}"), None) {
            Ok(bytes) => write_atomically(&local, &bytes)?,
            // S3 answers a missing key 403 to a caller that may not list.
            Err(e) if matches!(e.kind, ItemErrorKind::NotFound | ItemErrorKind::Permission) => {
                remove_stale(&local)?;
            }
            Err(e) => return Err(failed(&format!("{folder}{config}"), e)),
        }
    }
    Ok(path)
}

/// `bytes` into `path` through a temporary file in the same folder, so a
/// reader sees the old file or the new one, never part of either.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let shown = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(shown)?;
    file.write_all(bytes).map_err(shown)?;
    file.as_file().sync_all().map_err(shown)?;
    file.persist(path).map_err(|e| shown(e.error))?;
    Ok(())
}

/// A config file an earlier fetch left, which the location no longer has.
fn remove_stale(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("{}: {e}", path.display()))
        }
        _ => Ok(()),
    }
}
