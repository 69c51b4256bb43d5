//! `--data` in every layout (#16): the same images as a folder, a list
//! file, CSV/TSV/JSONL/Parquet manifests, Parquet with the bytes inside,
//! WebDataset shards, and URLs on a real HTTP server on 127.0.0.1 give the
//! same records in the same order; broken sources give the right records
//! or one clear line with exit 2; a web server's faults end as retried
//! successes or the right error kinds, and nothing hangs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch, StructArray};
use fixtures::DatasetSpec;
use parquet::arrow::ArrowWriter;
use serde_json::Value;
use tempfile::TempDir;

mod common;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `infer --data DATA` with `tiny` on the CPU; the output's records.
fn infer(cwd: &Path, data: &str, name: &str, extra: &[&str]) -> (Output, Vec<Value>) {
    infer_with_env(cwd, data, name, extra, &[])
}

/// [`infer`] with environment variables set (S3 credentials, endpoint).
fn infer_with_env(
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
    let output = common::pipeline(cwd)
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
fn without_path(records: &[Value]) -> Vec<Value> {
    records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.as_object_mut().expect("an object").remove("path");
            r
        })
        .collect()
}

fn paths(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["path"].as_str().expect("a path").to_owned())
        .collect()
}

/// Good images only, in a temporary folder; their sorted relative names.
fn images(count: usize) -> (TempDir, PathBuf, Vec<String>) {
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

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).expect("a batch");
    let file = fs::File::create(path).expect("parquet file");
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).expect("writer");
    writer.write(&batch).expect("written");
    writer.close().expect("closed");
}

fn strings(values: impl IntoIterator<Item = String>) -> ArrayRef {
    let mut b = StringBuilder::new();
    for v in values {
        b.append_value(v);
    }
    Arc::new(b.finish())
}

/// Tar shards of `names` (read from `root`), `per_shard` samples each, each
/// sample `KEY.EXT` plus a `KEY.txt` caption; keys are `sample_NNNN`.
fn write_shards(root: &Path, names: &[String], dir: &Path, per_shard: usize) -> Vec<PathBuf> {
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

fn append(builder: &mut tar::Builder<fs::File>, name: &str, bytes: &[u8]) {
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
fn shard_images(count: usize) -> (TempDir, PathBuf, Vec<String>, Vec<Value>) {
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

const SHARD_FORMATS: [&str; 3] = ["jpg", "png", "webp"];

#[test]
fn every_layout_gives_the_same_records_in_the_same_order() {
    let (dir, folder, names, reference) = shard_images(30);
    assert!(names.len() >= 12, "{names:?}");
    let cwd = dir.path();
    assert_eq!(paths(&reference), names);
    let expected = without_path(&reference);

    // A list file of relative paths (relative to the list's folder).
    let list = folder.join("list.txt");
    fs::write(&list, names.join("\n") + "\n\n").expect("list");
    // CSV, TSV and JSONL manifests with extra columns; absolute paths.
    let absolute: Vec<String> = names
        .iter()
        .map(|n| folder.join(n).to_string_lossy().into_owned())
        .collect();
    let mut csv = String::from("id,path,caption\n");
    let mut tsv = String::from("image_path\tid\n");
    let mut jsonl = String::new();
    for (i, path) in absolute.iter().enumerate() {
        csv += &format!("{i},{path},\"a, caption\"\n");
        tsv += &format!("{path}\t{i}\n");
        jsonl += &format!("{{\"id\": {i}, \"url\": \"{path}\"}}\n");
    }
    fs::write(cwd.join("m.csv"), csv).expect("csv");
    fs::write(cwd.join("m.tsv"), tsv).expect("tsv");
    fs::write(cwd.join("m.jsonl"), jsonl).expect("jsonl");
    // Parquet of paths, in a column named by --path-column.
    write_parquet(
        &cwd.join("paths.parquet"),
        vec![("file", strings(absolute.clone()))],
    );
    // Parquet with the bytes: Hugging Face's struct{bytes, path}.
    let mut bytes = BinaryBuilder::new();
    for name in &names {
        bytes.append_value(fs::read(folder.join(name)).expect("image"));
    }
    let image = StructArray::from(vec![
        (
            Arc::new(arrow_schema::Field::new(
                "bytes",
                arrow_schema::DataType::Binary,
                true,
            )),
            Arc::new(bytes.finish()) as ArrayRef,
        ),
        (
            Arc::new(arrow_schema::Field::new(
                "path",
                arrow_schema::DataType::Utf8,
                true,
            )),
            strings(names.clone()),
        ),
    ]);
    write_parquet(
        &cwd.join("bytes.parquet"),
        vec![("image", Arc::new(image) as ArrayRef)],
    );
    // WebDataset: 4 per shard, as a folder and as a brace pattern.
    let shards = write_shards(&folder, &names, &cwd.join("shards"), 4);
    let pattern = format!(
        "{}/shard-{{00000..{:05}}}.tar",
        cwd.join("shards").display(),
        shards.len() - 1
    );
    // URLs on a web server.
    let server = fixtures::fault_server::start(&folder, 0).expect("server starts");
    let urls: Vec<String> = names
        .iter()
        .map(|n| format!("{}/ok/{n}", server.base()))
        .collect();
    fs::write(cwd.join("urls.txt"), urls.join("\n")).expect("url list");
    // The list itself served by the server, with relative entries.
    fs::write(folder.join("served.txt"), names.join("\n")).expect("served list");

    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        ("list", list.to_string_lossy().into_owned(), vec![]),
        (
            "csv",
            cwd.join("m.csv").to_string_lossy().into_owned(),
            vec![],
        ),
        (
            "tsv",
            cwd.join("m.tsv").to_string_lossy().into_owned(),
            vec![],
        ),
        (
            "jsonl",
            cwd.join("m.jsonl").to_string_lossy().into_owned(),
            vec![],
        ),
        (
            "paths_parquet",
            cwd.join("paths.parquet").to_string_lossy().into_owned(),
            vec!["--path-column", "file"],
        ),
        (
            "bytes_parquet",
            cwd.join("bytes.parquet").to_string_lossy().into_owned(),
            vec![],
        ),
        (
            "shard_folder",
            cwd.join("shards").to_string_lossy().into_owned(),
            vec![],
        ),
        ("shard_pattern", pattern, vec![]),
        (
            "urls",
            cwd.join("urls.txt").to_string_lossy().into_owned(),
            vec![],
        ),
        (
            "served_list",
            format!("{}/ok/served.txt", server.base()),
            vec![],
        ),
    ];
    for (name, data, extra) in cases {
        let (out, records) = infer(cwd, &data, name, &extra);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        assert_eq!(without_path(&records), expected, "{name}: records differ");
        let got = paths(&records);
        match name {
            "list" => assert_eq!(got, names),
            "csv" | "tsv" | "jsonl" | "paths_parquet" => assert_eq!(got, absolute),
            "bytes_parquet" => assert_eq!(got, names, "the struct's path names the row"),
            "shard_folder" => assert_eq!(got[0], "shard-00000.tar/sample_0000"),
            "shard_pattern" => assert!(got[5].ends_with("shard-00001.tar/sample_0005"), "{got:?}"),
            "urls" => assert_eq!(got, urls),
            _ => assert_eq!(got, names),
        }
    }
}

#[test]
fn broken_sources_give_error_records_or_one_clear_line() {
    let (dir, root, names) = images(6);
    let cwd = dir.path();
    // A shard with a member that is not an image and a truncated last one.
    let shards = write_shards(&root, &names[..3], &cwd.join("shards"), 3);
    let mut builder = tar::Builder::new(fs::File::create(cwd.join("bad.tar")).expect("tar"));
    append(
        &mut builder,
        "good.png",
        &fs::read(root.join(&names[1])).expect("image"),
    );
    append(&mut builder, "text.jpg", b"this is not an image at all");
    append(&mut builder, "meta.json", b"{}");
    let big = fs::read(&shards[0]).expect("shard bytes");
    append(&mut builder, "last.png", &big);
    builder.finish().expect("tar written");
    drop(builder);
    let full = fs::read(cwd.join("bad.tar")).expect("tar bytes");
    // Cut inside the last member's body.
    fs::write(cwd.join("bad.tar"), &full[..full.len() - 3000]).expect("truncated");
    let (out, records) = infer(
        cwd,
        cwd.join("bad.tar").to_str().expect("utf-8"),
        "bad",
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let kinds: Vec<(String, Value)> = records
        .iter()
        .map(|r| {
            (
                r["path"].as_str().expect("path").to_owned(),
                r["error"]["kind"].clone(),
            )
        })
        .collect();
    let shard = cwd.join("bad.tar").to_string_lossy().into_owned();
    assert_eq!(
        kinds,
        vec![
            (format!("{shard}/good"), Value::Null),
            (format!("{shard}/text"), Value::from("unsupported")),
            (format!("{shard}/meta"), Value::from("unsupported")),
            (format!("{shard}/last"), Value::from("io")),
        ],
        "{}",
        stderr(&out)
    );

    // An empty manifest, one without its column, an unknown layout, a bad
    // --input-format: exit 2 and one line.
    fs::write(cwd.join("empty.csv"), "path\n").expect("csv");
    fs::write(cwd.join("nocol.csv"), "id,caption\n1,x\n").expect("csv");
    fs::write(cwd.join("data.bin"), "x").expect("file");
    let cases: [(&str, &[&str], &str); 5] = [
        ("empty.csv", &[], "no items"),
        (
            "nocol.csv",
            &[],
            "no column `path`, `url`, `image_path` (it has: id, caption)",
        ),
        ("nocol.csv", &["--path-column", "file"], "no column `file`"),
        ("data.bin", &[], "--input-format"),
        (
            "data.bin",
            &["--input-format", "zip"],
            "unknown input format `zip`",
        ),
    ];
    for (data, extra, expected) in cases {
        let (out, _) = infer(cwd, cwd.join(data).to_str().expect("utf-8"), "x", extra);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{data}: {text}");
        assert_eq!(text.lines().count(), 1, "{data}: {text}");
        assert!(text.contains(expected), "{data}: {text}");
    }
}

#[test]
fn a_web_servers_faults_end_as_retried_successes_or_the_right_kinds() {
    let (dir, root, names) = images(8);
    let cwd = dir.path();
    let server = fixtures::fault_server::start(&root, 0).expect("server starts");
    let base = server.base();
    let n = |i: usize| names[i].as_str();
    let lines = [
        format!("{base}/ok/{}", n(0)),
        format!("{base}/flaky/3/{}", n(1)),
        format!("{base}/throttle/2/{}", n(2)),
        format!("{base}/reset/{}", n(3)),
        format!("{base}/short/{}", n(4)),
        format!("{base}/slow/4000/{}", n(5)),
        format!("{base}/missing/{}", n(6)),
        format!("{base}/denied/{}", n(7)),
    ];
    fs::write(cwd.join("urls.txt"), lines.join("\n")).expect("list");
    let report = cwd.join("report.json");
    let started = std::time::Instant::now();
    let (out, records) = infer(
        cwd,
        cwd.join("urls.txt").to_str().expect("utf-8"),
        "faults",
        &[
            "--io-timeout",
            "1",
            "--io-retries",
            "4",
            "--report",
            report.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(started.elapsed().as_secs() < 120, "nothing may hang");
    let kinds: Vec<Value> = records.iter().map(|r| r["error"]["kind"].clone()).collect();
    assert_eq!(paths(&records), lines, "every item once, in order");
    let ok = Value::Null;
    assert_eq!(
        kinds[..4],
        [ok.clone(), ok.clone(), ok.clone(), ok],
        "retried: {kinds:?}"
    );
    assert_eq!(kinds[4], "io", "a short body: {kinds:?}");
    assert_eq!(kinds[5], "io", "a body past the timeout: {kinds:?}");
    assert_eq!(kinds[6], "not_found");
    assert_eq!(kinds[7], "permission");
    let report: Value =
        serde_json::from_str(&fs::read_to_string(&report).expect("report")).expect("JSON");
    let retries = report["summary"]["remote_retries"]
        .as_u64()
        .expect("remote_retries");
    // 3 + 2 + 1 at least, and the failures' own retries.
    assert!(retries >= 6, "retries {retries}");
}

/// The repository root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// moto's S3 server on 127.0.0.1, killed when dropped.
struct S3Server {
    port: u16,
    pid: String,
    python: String,
}

impl S3Server {
    fn start(run: &Path) -> Self {
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

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Makes `bucket`, uploads `files` (key, local path), denies `deny`.
    fn put(&self, bucket: &str, files: &[(String, PathBuf)], deny: &[&str]) {
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

#[test]
fn object_storage_prefixes_manifests_and_shards_read_like_local_files() {
    let (dir, folder, names, reference) = shard_images(16);
    let cwd = dir.path();
    let expected = without_path(&reference);

    let server = S3Server::start(&cwd.join("s3"));
    let mut files: Vec<(String, PathBuf)> = names
        .iter()
        .map(|n| (format!("data/{n}"), folder.join(n)))
        .collect();
    files.push(("secret/x.jpg".into(), folder.join(&names[0])));
    // A Parquet manifest of s3:// keys, with a missing and a denied key.
    let mut keys: Vec<String> = names
        .iter()
        .map(|n| format!("s3://imgs/data/{n}"))
        .collect();
    keys.push("s3://imgs/data/missing.jpg".into());
    keys.push("s3://imgs/secret/x.jpg".into());
    write_parquet(
        &cwd.join("keys.parquet"),
        vec![("url", strings(keys.clone()))],
    );
    files.push(("manifests/keys.parquet".into(), cwd.join("keys.parquet")));
    let shards = write_shards(&folder, &names, &cwd.join("shards"), 3);
    for shard in &shards {
        let name = shard.file_name().expect("a name").to_string_lossy();
        files.push((format!("shards/{name}"), shard.clone()));
    }
    server.put("imgs", &files, &["secret/x.jpg"]);

    let endpoint = server.endpoint();
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ];
    let with_s3 =
        |data: &str, name: &str| infer_with_env(cwd, data, name, &["--io-retries", "1"], &env);

    let (out, records) = with_s3("s3://imgs/data/", "prefix");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        paths(&records),
        names,
        "keys relative to the prefix, sorted"
    );
    assert_eq!(without_path(&records), expected);

    let (out, records) = with_s3("s3://imgs/manifests/keys.parquet", "manifest");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(paths(&records), keys);
    assert_eq!(without_path(&records[..names.len()]), expected);
    assert_eq!(records[names.len()]["error"]["kind"], "not_found");
    assert_eq!(records[names.len() + 1]["error"]["kind"], "permission");

    let pattern = format!(
        "s3://imgs/shards/shard-{{00000..{:05}}}.tar",
        shards.len() - 1
    );
    let (out, records) = with_s3(&pattern, "shards");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(without_path(&records), expected);
    assert_eq!(
        records[0]["path"],
        "s3://imgs/shards/shard-00000.tar/sample_0000"
    );
}
