//! Datasets in every layout, the runs over them, and the S3-compatible
//! server, for the tests that read `--data` from files and from servers
//! (`inputs.rs`, `network.rs`).
#![allow(dead_code)] // each test binary uses its own part

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::{ArrayRef, RecordBatch};
use fixtures::DatasetSpec;
use parquet::arrow::ArrowWriter;
use serde_json::Value;
use tempfile::TempDir;

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `infer --data DATA` with `tiny` on the CPU; the output's records.
pub(crate) fn infer(cwd: &Path, data: &str, name: &str, extra: &[&str]) -> (Output, Vec<Value>) {
    infer_with_env(cwd, data, name, extra, &[])
}

/// [`infer`] with environment variables set (S3 credentials, endpoint).
pub(crate) fn infer_with_env(
    cwd: &Path,
    data: &str,
    name: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Output, Vec<Value>) {
    let out = cwd.join(format!("{name}.jsonl"));
    let mut args = vec![
        "infer",
        "--data",
        data,
        "--out",
        out.to_str().expect("utf-8 temp path"),
        "--model",
        "tiny",
        "--gpus",
        "cpu",
        "--chunk-size",
        "5",
        "--batch-size",
        "4",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let output = super::pipeline(cwd)
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .expect("the pipeline binary runs");
    let records = fs::read_to_string(&out)
        .map(|text| {
            text.lines()
                .map(|l| serde_json::from_str(l).expect("each line is JSON"))
                .collect()
        })
        .unwrap_or_default();
    (output, records)
}

/// A record without its `path`: what must not depend on the layout.
pub(crate) fn without_path(records: &[Value]) -> Vec<Value> {
    records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.as_object_mut().expect("an object").remove("path");
            r
        })
        .collect()
}

pub(crate) fn paths(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["path"].as_str().expect("a path").to_owned())
        .collect()
}

/// Good images only, in a temporary folder; their sorted relative names.
pub(crate) fn images(count: usize) -> (TempDir, PathBuf, Vec<String>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = fixtures::generate(
        &dir.path().join("data"),
        &DatasetSpec {
            images: count,
            seed: 5,
            broken: false,
        },
    )
    .expect("fixtures are written");
    let names = data
        .good
        .iter()
        .map(|p| {
            p.strip_prefix(&data.root)
                .expect("under the root")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    (dir, data.root, names)
}

pub(crate) fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).expect("a batch");
    let file = fs::File::create(path).expect("parquet file");
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).expect("writer");
    writer.write(&batch).expect("written");
    writer.close().expect("closed");
}

pub(crate) fn strings(values: impl IntoIterator<Item = String>) -> ArrayRef {
    let mut b = StringBuilder::new();
    for v in values {
        b.append_value(v);
    }
    Arc::new(b.finish())
}

/// Tar shards of `names` (read from `root`), `per_shard` samples each, each
/// sample `KEY.EXT` plus a `KEY.txt` caption; keys are `sample_NNNN`.
pub(crate) fn write_shards(
    root: &Path,
    names: &[String],
    dir: &Path,
    per_shard: usize,
) -> Vec<PathBuf> {
    fs::create_dir_all(dir).expect("shard folder");
    let mut shards = Vec::new();
    for (s, group) in names.chunks(per_shard).enumerate() {
        let path = dir.join(format!("shard-{s:05}.tar"));
        let mut builder = tar::Builder::new(fs::File::create(&path).expect("shard"));
        for (i, name) in group.iter().enumerate() {
            let key = format!("sample_{:04}", s * per_shard + i);
            let caption = format!("caption of {name}");
            append(&mut builder, &format!("{key}.txt"), caption.as_bytes());
            let ext = Path::new(name)
                .extension()
                .map_or("jpg".into(), |e| e.to_string_lossy().into_owned());
            let bytes = fs::read(root.join(name)).expect("image");
            append(&mut builder, &format!("{key}.{ext}"), &bytes);
        }
        builder.finish().expect("shard written");
        shards.push(path);
    }
    shards
}

pub(crate) fn append(builder: &mut tar::Builder<fs::File>, name: &str, bytes: &[u8]) {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder
        .append_data(&mut header, name, bytes)
        .expect("member written");
}

/// `count` fixtures, keeping the formats every layout carries (WebDataset
/// members are jpg, png or webp), copied to `folder/`; the folder run's
/// records are the reference the other layouts must match.
pub(crate) fn shard_images(count: usize) -> (TempDir, PathBuf, Vec<String>, Vec<Value>) {
    let (dir, root, all) = images(count);
    let names: Vec<String> = all
        .into_iter()
        .filter(|n| SHARD_FORMATS.contains(&n.rsplit('.').next().unwrap_or_default()))
        .collect();
    let folder = dir.path().join("folder");
    for name in &names {
        let to = folder.join(name);
        fs::create_dir_all(to.parent().expect("a parent")).expect("folder");
        fs::copy(root.join(name), &to).expect("copied");
    }
    let (out, reference) = infer(dir.path(), folder.to_str().expect("utf-8"), "folder", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    (dir, folder, names, reference)
}

pub(crate) const SHARD_FORMATS: [&str; 3] = ["jpg", "png", "webp"];

/// The repository root.
pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// moto's S3 server on 127.0.0.1, killed when dropped.
pub(crate) struct S3Server {
    pub(crate) port: u16,
    pid: String,
    python: String,
}

impl S3Server {
    pub(crate) fn start(run: &Path) -> Self {
        let out = std::process::Command::new("bash")
            .arg(repo().join("scripts/s3/start.sh"))
            .arg(run)
            .output()
            .expect("bash runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "the S3 server did not start: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let field = |name: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or_else(|| panic!("start.sh prints {name}: {stdout}"))
                .to_owned()
        };
        Self {
            port: field("PORT=").parse().expect("a port"),
            pid: field("PID="),
            python: field("PYTHON="),
        }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Makes `bucket`, uploads `files` (key, local path), denies `deny`.
    pub(crate) fn put(&self, bucket: &str, files: &[(String, PathBuf)], deny: &[&str]) {
        use std::io::Write;
        let spec = serde_json::json!({ "files": files, "deny": deny });
        let mut child = std::process::Command::new(&self.python)
            .arg(repo().join("scripts/s3/put.py"))
            .arg(self.endpoint())
            .arg(bucket)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("python runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(spec.to_string().as_bytes())
            .expect("spec written");
        assert!(
            child.wait().expect("put.py ends").success(),
            "put.py failed"
        );
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").arg(&self.pid).status();
    }
}
