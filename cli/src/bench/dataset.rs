//! What the bench reads: `--data`, or photo-like JPEGs it writes itself.

use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;

use crate::args::BenchArgs;

/// Where the bench reads its images from.
pub(super) struct Dataset {
    /// Read once; every run of the bench reads the same list.
    pub(super) manifest: pipeline_core::Manifest,
    /// What end-to-end runs read.
    pub(super) spec: pipeline_core::DataSpec,
    pub(super) source: DatasetSource,
}

/// What the bench read, as the JSON report names it.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum DatasetSource {
    /// `--data`: a folder, manifest, shards or URL.
    Data(String),
    /// `--synthetic N` photo-like JPEGs.
    Synthetic {
        images: u64,
        width: u32,
        height: u32,
        jpeg_quality: u8,
    },
}

/// `--data`, or `--synthetic N` photo-like JPEGs written under `scratch`.
pub(super) fn dataset(
    args: &BenchArgs,
    spec: Option<&pipeline_core::DataSpec>,
    remote: pipeline_core::RemoteSpec,
    (width, height): (u32, u32),
    scratch: &Path,
) -> Result<Dataset, String> {
    let open = |spec: &pipeline_core::DataSpec| {
        loader::source::open(spec, remote).map_err(|e| e.to_string())
    };
    if let Some(spec) = spec {
        return Ok(Dataset {
            manifest: open(spec)?,
            spec: spec.clone(),
            source: DatasetSource::Data(spec.data.clone()),
        });
    }
    let count = args.synthetic.unwrap_or(0);
    let dir = scratch.join("synthetic");
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !args.quiet {
        eprintln!(
            "pipeline bench: writing {count} synthetic {width}x{height} JPEGs to {}",
            dir.display()
        );
    }
    (0..count).into_par_iter().try_for_each(|i| {
        let bytes = loader::synthetic::jpeg_photo(width, height, i, 90)
            .map_err(|e| format!("cannot make a synthetic JPEG: {e}"))?;
        let path = dir.join(format!("{i:08}.jpg"));
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))
    })?;
    let spec = pipeline_core::DataSpec::new(dir.to_string_lossy());
    Ok(Dataset {
        manifest: open(&spec)?,
        spec,
        source: DatasetSource::Synthetic {
            images: count,
            width,
            height,
            jpeg_quality: 90,
        },
    })
}
