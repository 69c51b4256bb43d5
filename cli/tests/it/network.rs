//! Remote reads through a network that misbehaves (#26), against real
//! servers on 127.0.0.1 that the tests start: `fixtures::fault_server`
//! serving files with injected faults, and moto's S3 server, alone and
//! behind the fault server as a proxy. Each fault at a rate the retries
//! mend must give the bytes of a clean run; each fault that outlasts them
//! must give its item the right error kind, exit 1, and no hang.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fixtures::fault_server::{self, Fault, FaultServer};
use serde_json::Value;

use crate::common;

use common::data::*;

/// Time any one faulty run may take: far above what its retries and
/// timeouts add up to, far below a hang.
const NO_HANG: Duration = Duration::from_secs(90);

/// `infer` over a list of URLs; the output's text and the report.
fn run_list(
    cwd: &Path,
    name: &str,
    lines: &[String],
    extra: &[&str],
) -> (Option<i32>, String, Value) {
    let list = cwd.join(format!("{name}.txt"));
    fs::write(&list, lines.join("\n")).expect("list");
    let report = cwd.join(format!("{name}.report.json"));
    let mut args = vec!["--report", report.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    let started = Instant::now();
    let (out, _) = infer(cwd, list.to_str().expect("utf-8"), name, &args);
    assert!(started.elapsed() < NO_HANG, "{name}: nothing may hang");
    let text = fs::read_to_string(cwd.join(format!("{name}.jsonl"))).unwrap_or_default();
    let report = fs::read_to_string(&report)
        .ok()
        .and_then(|r| serde_json::from_str(&r).ok())
        .unwrap_or(Value::Null);
    let code = out.status.code();
    if code != Some(0) && code != Some(1) {
        panic!("{name}: exit {code:?}: {}", stderr(&out));
    }
    (code, text, report)
}

fn kind_count(report: &Value, kind: &str) -> u64 {
    report["summary"]["remote_retry_kinds"][kind]
        .as_u64()
        .unwrap_or_else(|| panic!("remote_retry_kinds.{kind} in {report}"))
}

#[test]
fn every_fault_the_retries_can_mend_gives_the_bytes_of_a_clean_run() {
    let faults = [
        "flaky/2",
        "throttle/2",
        "retry-after/1",
        "refuse/2",
        "reset/2",
        "cut/2",
        "chunked-cut/2",
        "stall/2",
        "trickle/2",
        "short/2",
        "redirect",
    ];
    let (dir, root, names) = images(faults.len() + 1);
    let cwd = dir.path();
    let server = fault_server::start(&root, 0).expect("server starts");
    let base = server.base();
    let clean: Vec<String> = names.iter().map(|n| format!("{base}/ok/{n}")).collect();
    let faulty: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| match faults.get(i) {
            Some(fault) => format!("{base}/{fault}/{n}"),
            None => format!("{base}/ok/{n}"),
        })
        .collect();
    let flags = ["--io-timeout", "1", "--io-retries", "3"];
    let (code, clean_text, _) = run_list(cwd, "clean", &clean, &flags);
    assert_eq!(code, Some(0), "{clean_text}");
    let (code, text, report) = run_list(cwd, "faulty", &faulty, &flags);
    assert_eq!(code, Some(0), "every fault is mended: {text}");
    // The same bytes but for each line's own URL.
    let mut expected = clean_text.clone();
    for (ok, url) in clean.iter().zip(&faulty) {
        expected = expected.replace(&format!("\"{ok}\""), &format!("\"{url}\""));
    }
    assert_eq!(text, expected, "the output of a clean run, byte for byte");

    for kind in ["connect", "timeout", "server", "throttled", "body"] {
        assert!(kind_count(&report, kind) > 0, "{kind}: {report}");
    }
    let total = report["summary"]["remote_retries"]
        .as_u64()
        .expect("remote_retries");
    // Two retries for each of nine faults, one for retry-after, none for
    // the redirect.
    let least = 2 * 9 + 1;
    assert!(total >= least, "retries {total}");

    let target = |fault: &str| {
        let i = faults.iter().position(|f| *f == fault).expect("a fault");
        format!("/{fault}/{}", names[i])
    };
    // A body that broke with an ETag is resumed where it broke…
    let reset = server.requests_for(&target("reset/2"));
    assert_eq!(reset.len(), 3, "{reset:?}");
    assert_eq!(reset[0].range_start, None);
    assert!(reset[1].range_start.is_some_and(|s| s > 0), "{reset:?}");
    assert!(reset[2].range_start > reset[1].range_start, "{reset:?}");
    // …and so is one slower than the timeout, a little further each time.
    let trickle = server.requests_for(&target("trickle/2"));
    assert!(trickle[1].range_start.is_some_and(|s| s > 0), "{trickle:?}");
    // Without an ETag it is read again from the start.
    let cut = server.requests_for(&target("cut/2"));
    assert!(cut.iter().all(|r| r.range_start.is_none()), "{cut:?}");
    // Retry-After: 1 is waited for (the backoff alone is 0.05–0.1 s).
    let after = server.requests_for(&target("retry-after/1"));
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(
        after[1].at - after[0].at >= Duration::from_millis(950),
        "waited {:?}",
        after[1].at - after[0].at
    );
}

#[test]
fn faults_that_outlast_the_retries_give_the_right_kinds_without_a_hang() {
    // (route, the kind its item ends as)
    let faults = [
        ("ok", None),
        ("flaky/always", Some("io")),
        ("throttle/always", Some("io")),
        ("refuse/always", Some("io")),
        ("reset/always", Some("io")),
        ("cut/always", Some("io")),
        ("stall/always", Some("io")),
        ("short/always", Some("io")),
        // No length declared, or one shorter than the body: the transport
        // cannot tell, the decoder must.
        ("unsized-cut/always", Some("decode")),
        ("lying/always", Some("decode")),
        ("redirect-file", Some("io")),
        ("missing", Some("not_found")),
        ("denied", Some("permission")),
        ("ok", None),
    ];
    let (dir, root, all) = images(40);
    // JPEG and PNG, whose truncation the decoder must catch (WebP's is
    // `loader/tests/it/truncation.rs`'s).
    let names: Vec<&String> = all
        .iter()
        .filter(|n| n.ends_with(".jpg") || n.ends_with(".png"))
        .collect();
    assert!(names.len() >= faults.len(), "{names:?}");
    let cwd = dir.path();
    let server = fault_server::start(&root, 0).expect("server starts");
    let base = server.base();
    let lines: Vec<String> = faults
        .iter()
        .zip(&names)
        .map(|((route, _), n)| format!("{base}/{route}/{n}"))
        .collect();
    let (code, text, report) = run_list(
        cwd,
        "exhausted",
        &lines,
        &["--io-timeout", "1", "--io-retries", "2"],
    );
    assert_eq!(code, Some(1), "{text}");
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(paths(&records), lines, "every item once, in order");
    for ((route, kind), record) in faults.iter().zip(&records) {
        let got = record["error"]["kind"].as_str();
        assert_eq!(got, *kind, "{route}: {record}");
    }
    let message = records[1]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&lines[1]),
        "the message names the URL: {message}"
    );
    // Exactly the budget: 1 + 2 requests for each item retried.
    for (route, _) in &faults[1..8] {
        let i = faults
            .iter()
            .position(|(r, _)| r == route)
            .expect("a route");
        let target = format!("/{route}/{}", names[i]);
        assert_eq!(server.requests_for(&target).len(), 3, "{route}");
    }
    assert!(kind_count(&report, "body") > 0, "{report}");
}

#[test]
fn credentials_that_expire_mid_run_deny_exactly_the_items_after() {
    let (dir, root, names) = images(8);
    let cwd = dir.path();
    let server = fault_server::start(&root, 0).expect("server starts");
    let lines: Vec<String> = names
        .iter()
        .map(|n| format!("{}/expire/5/{n}", server.base()))
        .collect();
    // One request at a time, so "after" is the input order.
    let (code, text, _) = run_list(
        cwd,
        "expire",
        &lines,
        &["--io-concurrency", "1", "--io-retries", "2"],
    );
    assert_eq!(code, Some(1), "{text}");
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let kinds: Vec<Option<&str>> = records
        .iter()
        .map(|r| r["error"]["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [[None; 5].as_slice(), &[Some("permission"); 3]].concat(),
        "a 403 is final, and only where it happened"
    );
    // A 403 is not retried.
    assert_eq!(server.requests().len(), names.len());
}

/// moto behind the fault server: every object's first request, and every
/// listing page, fails in one of the ways a network fails.
fn faulty_proxy(moto: &S3Server) -> FaultServer {
    let upstream = format!("127.0.0.1:{}", moto.port)
        .parse()
        .expect("an address");
    // Shards whose first ranged read (after the whole read that lists
    // their members) was already broken.
    let broken = std::sync::Mutex::new(std::collections::HashSet::new());
    let plan: fault_server::Plan = Arc::new(move |r: &fault_server::Request<'_>| {
        let first = r.seen == 0;
        if r.target.contains("list-type") {
            return first.then_some(Fault::Cut { etag: true });
        }
        if r.ranged && r.target.contains(".tar") {
            let mut broken = broken.lock().unwrap_or_else(|p| p.into_inner());
            return broken
                .insert(r.target.to_owned())
                .then_some(Fault::Cut { etag: true });
        }
        if !first {
            return None;
        }
        // Spread the faults over the objects by their names.
        let pick = r.target.bytes().map(u32::from).sum::<u32>() % 4;
        Some(match pick {
            0 => Fault::Status(503, None),
            1 => Fault::Refuse,
            2 => Fault::Cut { etag: true },
            _ => Fault::Status(500, None),
        })
    });
    fault_server::proxy(upstream, 0, plan).expect("proxy starts")
}

#[test]
fn object_storage_through_a_faulty_network_reads_like_local_files() {
    let (dir, folder, names, reference) = shard_images(12);
    let cwd = dir.path();
    let expected = without_path(&reference);
    let moto = S3Server::start(&cwd.join("s3"));
    let mut files: Vec<(String, PathBuf)> = names
        .iter()
        .map(|n| (format!("data/{n}"), folder.join(n)))
        .collect();
    let keys: Vec<String> = names
        .iter()
        .map(|n| format!("s3://imgs/data/{n}"))
        .collect();
    write_parquet(&cwd.join("keys.parquet"), vec![("url", strings(keys))]);
    files.push(("manifests/keys.parquet".into(), cwd.join("keys.parquet")));
    let shards = write_shards(&folder, &names, &cwd.join("shards"), 6);
    for shard in &shards {
        let name = shard.file_name().expect("a name").to_string_lossy();
        files.push((format!("shards/{name}"), shard.clone()));
    }
    moto.put("imgs", &files, &[]);
    let proxy = faulty_proxy(&moto);
    let endpoint = proxy.base();
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ];
    let pattern = format!(
        "s3://imgs/shards/shard-{{00000..{:05}}}.tar",
        shards.len() - 1
    );
    for (name, data) in [
        ("prefix", "s3://imgs/data/".to_owned()),
        ("manifest", "s3://imgs/manifests/keys.parquet".to_owned()),
        ("shards", pattern),
    ] {
        let report = cwd.join(format!("{name}.report.json"));
        let flags = [
            "--io-retries",
            "3",
            "--report",
            report.to_str().expect("utf-8"),
        ];
        let started = Instant::now();
        let (out, records) = infer_with_env(cwd, &data, name, &flags, &env);
        assert!(started.elapsed() < NO_HANG, "{name}: nothing may hang");
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        assert_eq!(without_path(&records), expected, "{name}");
        let report: Value =
            serde_json::from_str(&fs::read_to_string(&report).expect("report")).expect("JSON");
        assert!(
            report["summary"]["remote_retries"].as_u64() > Some(0),
            "{name}: {report}"
        );
    }
    // The listing page failed once and was asked for again.
    let listings = proxy
        .requests()
        .into_iter()
        .filter(|r| r.target.contains("list-type"))
        .count();
    assert_eq!(listings, 2, "one failed listing page, one retry");
    // Each shard's first ranged stream broke in the middle and went on
    // from there: a later request starts inside its range, past its start.
    for shard in &shards {
        let name = shard.file_name().expect("a name").to_string_lossy();
        let ranged: Vec<_> = proxy
            .requests()
            .into_iter()
            .filter(|r| r.target.ends_with(&*name) && r.range_start.is_some())
            .collect();
        let (Some(start), Some(end)) = (ranged[0].range_start, ranged[0].range_end) else {
            panic!("{name}: a bounded first range: {ranged:?}");
        };
        assert!(
            ranged[1..]
                .iter()
                .any(|r| r.range_start.is_some_and(|s| s > start && s <= end)),
            "{name}: resumed inside {start}..={end}: {ranged:?}"
        );
    }
}

#[test]
fn a_web_servers_faults_end_as_retried_successes_or_the_right_kinds() {
    let (dir, root, names) = images(8);
    let cwd = dir.path();
    let server = fault_server::start(&root, 0).expect("server starts");
    let base = server.base();
    let n = |i: usize| names[i].as_str();
    let lines = [
        format!("{base}/ok/{}", n(0)),
        format!("{base}/flaky/3/{}", n(1)),
        format!("{base}/throttle/2/{}", n(2)),
        format!("{base}/reset/1/{}", n(3)),
        format!("{base}/short/always/{}", n(4)),
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
