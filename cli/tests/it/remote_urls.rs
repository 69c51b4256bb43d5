//! URLs that carry credentials, end to end, against HTTP servers on
//! 127.0.0.1 that the tests start (`fixtures::fault_server`): presigned
//! URLs (`X-Amz-Signature=…`, `sig=…`, `token=…`) and `user:password@`
//! ones, of data items, of a `--data` list and of a `--model`, served,
//! missing (404), denied (403) and refused. No secret reaches stdout,
//! stderr, the output, the `--report` or `run.json`; nor do the
//! environment's `HF_TOKEN` and `AWS_SECRET_ACCESS_KEY`. An item is named
//! by its object, so a run resumes over URLs signed again. And a model
//! fetched through a presigned and a plain URL side by side runs both
//! times from the one cache.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use fixtures::fault_server::{self, FaultServer};
use serde_json::Value;

use crate::common;

use common::data::{SHARD_FORMATS, images, stderr, write_shards};

/// Every secret these tests put in a URL or the environment starts so.
const SECRET: &str = "SECRET";

/// The environment's secrets, as a user's shell would hold them.
const SECRET_ENV: [(&str, &str); 3] = [
    ("HF_TOKEN", "hf_SECRETHFTOKEN0123456789"),
    ("AWS_SECRET_ACCESS_KEY", "SECRETAWSKEY0123456789abcdef"),
    ("AWS_SESSION_TOKEN", "SECRETSESSION0123456789"),
];

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    listener.local_addr().expect("an address").port()
}

/// `pipeline ARGS` in `cwd` with the secret environment and debug logs
/// (each retry is a line naming its URL).
fn pipeline(cwd: &Path, args: &[&str]) -> Output {
    common::pipeline(cwd)
        .envs(SECRET_ENV)
        .env("PIPELINE_LOG", "debug")
        .env("PIPELINE_MODELS_DIR", cwd.join("models"))
        .args(args)
        .output()
        .expect("the pipeline binary runs")
}

/// `what` holds no secret.
fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "a secret in {what}:\n{text}");
    for (name, value) in SECRET_ENV {
        assert!(!text.contains(value), "{name}'s value in {what}:\n{text}");
    }
}

/// A run's stdout and stderr hold no secret.
fn assert_clean_run(what: &str, run: &Output) {
    assert_clean(
        &format!("{what}'s stdout"),
        &String::from_utf8_lossy(&run.stdout),
    );
    assert_clean(&format!("{what}'s stderr"), &stderr(run));
}

/// A file's text, which must be there.
fn text(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The presigned-style query of signing number `n`: each signing has its
/// own date, credential and signature, as S3's presigner gives.
fn signed(n: u32) -> String {
    format!(
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=SECRETAKIA{n}%2F2026112{n}%2Fus-east-1\
         %2Fs3%2Faws4_request&X-Amz-Date=2026112{n}T000000Z&X-Amz-Expires=3600\
         &X-Amz-SignedHeaders=host&X-Amz-Security-Token=SECRETSTS{n}&X-Amz-Signature=SECRETSIG{n}"
    )
}

/// The data list's lines for signing `n`, and the names the output must
/// give them, in order.
fn list(server: &FaultServer, names: &[String], closed: u16, n: u32) -> (String, Vec<String>) {
    let base = server.base();
    let port = server.port;
    let lines = [
        (
            format!("{base}/ok/{}?{}", names[0], signed(n)),
            format!("{base}/ok/{}", names[0]),
        ),
        (
            format!("http://user:SECRETPW{n}@127.0.0.1:{port}/ok/{}", names[1]),
            format!("{base}/ok/{}", names[1]),
        ),
        (
            format!("{base}/ok/missing.jpg?{}", signed(n)),
            format!("{base}/ok/missing.jpg"),
        ),
        (
            format!(
                "http://u:SECRETPW{n}@127.0.0.1:{closed}/{}?sig=SECRETSAS{n}",
                names[2]
            ),
            format!("http://127.0.0.1:{closed}/{}", names[2]),
        ),
        (
            format!("{base}/refuse/always/{}?token=SECRETTOKEN{n}&v=1", names[3]),
            // Unsigned: a token may choose the object, so its name keeps
            // the parameter, its value hidden.
            format!("{base}/refuse/always/{}?token=REDACTED&v=1", names[3]),
        ),
        (
            format!("{base}/denied/{}?access_token=SECRETOAUTH{n}", names[3]),
            format!("{base}/denied/{}?access_token=REDACTED", names[3]),
        ),
    ];
    let text = lines
        .iter()
        .map(|(line, _)| line.as_str())
        .collect::<Vec<_>>();
    let expected = lines.iter().map(|(_, name)| name.clone()).collect();
    (text.join("\n") + "\n", expected)
}

/// `infer` over the list at `data` with `tiny` on the CPU into `out`.
fn infer_args<'a>(data: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "infer",
        "--data",
        data,
        "--input-format",
        "list",
        "--out",
        out,
        "--model",
        "tiny",
        "--gpus",
        "cpu",
        "--chunk-size",
        "2",
        "--batch-size",
        "2",
        "--io-timeout",
        "2",
        "--io-retries",
        "1",
    ];
    args.extend_from_slice(extra);
    args
}

/// Items at presigned, logged-in, missing, refused and denied URLs, read
/// from a list that is itself at a presigned URL, in two shards whose URLs
/// were signed apart: the shards make one run (an item is named by its
/// object, whatever signed it), and no secret is in either run's stdout
/// or stderr (debug logs included), in `run.json`, in the output (names
/// and error records) or in the report.
#[test]
fn no_credential_of_a_data_url_reaches_any_output() {
    let (dir, root, names) = images(4);
    let cwd = dir.path();
    let server = fault_server::start(&root, 0).expect("the server starts");
    let closed = closed_port();
    let (first, expected) = list(&server, &names, closed, 1);
    let (second, again) = list(&server, &names, closed, 2);
    assert_eq!(expected, again, "one name per object");
    fs::write(root.join("signed-1.txt"), first).expect("list");
    fs::write(root.join("signed-2.txt"), second).expect("list");
    let base = server.base();
    let data = |n: u32| format!("{base}/ok/signed-{n}.txt?{}", signed(n));
    let out = cwd.join("out.jsonl");
    let out_arg = out.to_str().expect("utf-8");
    let report = cwd.join("report.json");
    let report_arg = report.to_str().expect("utf-8");

    let data_1 = data(1);
    let shard_0 = pipeline(cwd, &infer_args(&data_1, out_arg, &["--shard", "0/2"]));
    assert!(
        matches!(shard_0.status.code(), Some(0 | 1)),
        "{}",
        stderr(&shard_0)
    );
    assert_clean_run("shard 0", &shard_0);
    let run_json = text(&cwd.join("out.jsonl.parts/run.json"));
    assert_clean("run.json", &run_json);

    let data_2 = data(2);
    let shard_1 = pipeline(
        cwd,
        &infer_args(
            &data_2,
            out_arg,
            &["--shard", "1/2", "--merge", "--report", report_arg],
        ),
    );
    assert!(
        matches!(shard_1.status.code(), Some(0 | 1)),
        "the shards make one run: {}",
        stderr(&shard_1)
    );
    assert_clean_run("shard 1", &shard_1);
    // The debug log named the retried URLs, without their tokens.
    assert!(
        stderr(&shard_0).contains("retry") || stderr(&shard_1).contains("retry"),
        "retries are logged: {}",
        stderr(&shard_1)
    );

    let output = text(&out);
    assert_clean("the output", &output);
    let records: Vec<Value> = output
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let paths: Vec<&str> = records
        .iter()
        .map(|r| r["path"].as_str().expect("a path"))
        .collect();
    assert_eq!(paths, expected, "every item once, in order, by its object");
    let kinds: Vec<Option<&str>> = records
        .iter()
        .map(|r| r["error"]["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            None,
            None,
            Some("not_found"),
            Some("io"),
            Some("io"),
            Some("permission")
        ]
    );
    // An error record still says where: the URL, its secrets redacted.
    let message = records[2]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("/ok/missing.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256")
            && message.contains("X-Amz-Signature=REDACTED"),
        "{message}"
    );
    let report = text(&report);
    assert_clean("the report", &report);
    let report: Value = serde_json::from_str(&report).expect("JSON");
    let shown = report["config"]["data"].as_str().unwrap_or_default();
    assert!(
        shown.starts_with(&format!("{base}/ok/signed-2.txt?")),
        "{shown}"
    );
}

/// `bench` over a list at a presigned URL of presigned and logged-in
/// items: no secret in its notices, its table or its `--json`, which
/// shows `--data` redacted.
#[test]
fn no_credential_of_a_data_url_reaches_bench_s_output() {
    let (dir, root, names) = images(2);
    let cwd = dir.path();
    let server = fault_server::start(&root, 0).expect("the server starts");
    let base = server.base();
    let lines = format!(
        "{base}/ok/{}?{}\nhttp://user:SECRETPW@127.0.0.1:{}/ok/{}\n",
        names[0],
        signed(1),
        server.port,
        names[1]
    );
    fs::write(root.join("bench.txt"), lines).expect("list");
    let data = format!("{base}/ok/bench.txt?{}", signed(1));
    let json = cwd.join("bench.json");
    let run = pipeline(
        cwd,
        &[
            "bench",
            "--data",
            &data,
            "--input-format",
            "list",
            "--model",
            "tiny",
            "--gpus",
            "cpu",
            "--repeat",
            "1",
            "--json",
            json.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert_clean_run("bench", &run);
    let report = text(&json);
    assert_clean("bench's JSON", &report);
    assert!(
        report.contains("/ok/bench.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256")
            && report.contains("X-Amz-Signature=REDACTED"),
        "{report}"
    );
}

/// A `--data` list at a presigned URL that is missing, and one at a
/// logged-in URL that refuses: one line each, exit 2, no secret.
#[test]
fn a_data_url_that_fails_is_one_line_without_its_credentials() {
    let (dir, root, _) = images(1);
    let cwd = dir.path();
    let server = fault_server::start(&root, 0).expect("the server starts");
    let missing = format!("{}/ok/nowhere.txt?{}", server.base(), signed(1));
    let refused = format!("http://user:SECRETPW@127.0.0.1:{}/list.txt", closed_port());
    for data in [missing, refused] {
        let out = cwd.join("out.jsonl");
        let run = pipeline(cwd, &infer_args(&data, out.to_str().expect("utf-8"), &[]));
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{err}");
        let errors = err.lines().filter(|l| l.starts_with("pipeline: error:"));
        assert_eq!(errors.count(), 1, "one error line: {err}");
        assert!(err.contains("--data http://"), "{err}");
        assert_clean_run(&data, &run);
    }
}

/// WebDataset shards at presigned URLs: each sample is named by its
/// shard's object and its key, and no secret is in any output.
#[test]
fn samples_of_a_presigned_shard_are_named_by_its_object() {
    let (dir, root, all) = images(12);
    let cwd = dir.path();
    let names: Vec<String> = all
        .into_iter()
        .filter(|n| SHARD_FORMATS.contains(&n.rsplit('.').next().unwrap_or_default()))
        .collect();
    write_shards(&root, &names, &root.join("shards"), 2);
    let server = fault_server::start(&root, 0).expect("the server starts");
    let shard = format!("{}/ok/shards/shard-00000.tar", server.base());
    let data = format!("{shard}?{}", signed(1));
    let out = cwd.join("shards.jsonl");
    let report = cwd.join("shards.report.json");
    let mut args = infer_args(&data, out.to_str().expect("utf-8"), &[]);
    args[4] = "webdataset";
    args.extend(["--report", report.to_str().expect("utf-8")]);
    let run = pipeline(cwd, &args);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert_clean_run("the shard's run", &run);
    let output = text(&out);
    assert_clean("the output", &output);
    assert_clean("the report", &text(&report));
    let paths: Vec<String> = output
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON")["path"].to_string())
        .collect();
    assert_eq!(
        paths,
        [
            format!("\"{shard}/sample_0000\""),
            format!("\"{shard}/sample_0001\"")
        ]
    );
}

/// Whether ONNX Runtime is there; where it must be (CI) and is not, a
/// failure.
fn runtime_or_skip() -> bool {
    match gpu_worker::onnx::runtime::onnx_runtime() {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var_os("PIPELINE_REQUIRE_ORT").is_none(),
                "ONNX Runtime must load here: {e}"
            );
            eprintln!("skipped, no ONNX Runtime ({e})");
            false
        }
    }
}

/// `cli/tests/onnx_upstream/`: upstream models with their config files.
fn upstream() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/onnx_upstream")
}

/// `infer` over the upstream images with `--model model` into `out`.
fn model_args<'a>(images: &'a str, out: &'a str, model: &'a str) -> Vec<&'a str> {
    vec![
        "infer",
        "--data",
        images,
        "--out",
        out,
        "--model",
        model,
        "--gpus",
        "cpu",
        "--io-retries",
        "1",
    ]
}

/// A `--model` at a presigned URL and at a logged-in one: missing, refused,
/// or fetched and run (warnings, report and `run.json` included); no secret
/// anywhere.
#[test]
fn no_credential_of_a_model_url_reaches_any_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let server = fault_server::start(&upstream(), 0).expect("the server starts");
    let base = server.base();
    let images = upstream().join("images");
    let images = images.to_str().expect("utf-8");
    let out = cwd.join("out.jsonl");
    let out_arg = out.to_str().expect("utf-8");
    let failing = [
        format!("{base}/ok/nowhere/model.onnx?{}", signed(1)),
        format!(
            "http://user:SECRETPW@127.0.0.1:{}/m.onnx?sig=SECRETSAS",
            closed_port()
        ),
        format!(
            "{}/ok/hf_vit_external/model.onnx?token=SECRETTOKEN",
            base.replace("http://", "http://user:SECRETPW@")
        ),
    ];
    for model in &failing {
        let run = pipeline(cwd, &model_args(images, out_arg, model));
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{err}");
        let errors = err.lines().filter(|l| l.starts_with("pipeline: error:"));
        assert_eq!(errors.count(), 1, "one error line: {err}");
        assert!(err.contains("--model http://"), "{err}");
        assert_clean_run(model, &run);
    }
    if !runtime_or_skip() {
        return;
    }
    // Fetched without its config files (a presigned URL's siblings are out
    // of reach): the warnings about its preprocessing name the model.
    let model = format!(
        "{}/ok/hf_vit/model.onnx?{}",
        base.replace("http://", "http://user:SECRETPW@"),
        signed(1)
    );
    let report = cwd.join("report.json");
    let mut args = model_args(images, out_arg, &model);
    args.extend([
        "--report",
        report.to_str().expect("utf-8"),
        "--shard",
        "0/2",
    ]);
    let run = pipeline(cwd, &args);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert_clean_run("the model's run", &run);
    assert_clean("run.json", &text(&cwd.join("out.jsonl.parts/run.json")));
    assert_clean("the report", &text(&report));
}

/// The same model through a plain URL (with its config files: a
/// classifier) and a presigned one (without: an embedder), one after the
/// other and then side by side, from one model cache: every run succeeds,
/// and the plain run gives the local model's records each time.
#[test]
fn a_presigned_and_a_plain_url_of_one_model_both_run_from_one_cache() {
    if !runtime_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    let server = fault_server::start(&upstream(), 0).expect("the server starts");
    let plain = format!("{}/ok/hf_vit/model.onnx", server.base());
    let presigned = format!("{plain}?{}", signed(1));
    let local = upstream().join("hf_vit/model.onnx");
    let images = upstream().join("images");
    let images = images.to_str().expect("utf-8");
    let command = |out: &str, model: &str| -> Command {
        let mut command = common::pipeline(cwd);
        command
            .env("PIPELINE_MODELS_DIR", cwd.join("models"))
            .args(model_args(images, out, model))
            .arg("--quiet")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    };
    let run = |out: &str, model: &str| command(out, model).output().expect("runs");
    let expected = run("local.jsonl", local.to_str().expect("utf-8"));
    assert_eq!(expected.status.code(), Some(0), "{}", stderr(&expected));
    let expected = text(&cwd.join("local.jsonl"));
    for (i, model) in [&plain, &presigned, &plain].iter().enumerate() {
        let out = format!("serial-{i}.jsonl");
        let done = run(&out, model);
        assert_eq!(done.status.code(), Some(0), "{model}: {}", stderr(&done));
        if *model == &plain {
            assert_eq!(text(&cwd.join(&out)), expected, "the local model's records");
        }
    }
    for round in 0..2 {
        let runs: Vec<_> = [&plain, &presigned, &plain, &presigned]
            .iter()
            .enumerate()
            .map(|(i, model)| {
                let out = format!("side-{round}-{i}.jsonl");
                let child = command(&out, model).spawn().expect("starts");
                (out, *model, child)
            })
            .collect();
        for (out, model, child) in runs {
            let done = child.wait_with_output().expect("ends");
            assert_eq!(done.status.code(), Some(0), "{model}: {}", stderr(&done));
            if model == &plain {
                assert_eq!(text(&cwd.join(&out)), expected, "{out}");
            }
        }
    }
}
