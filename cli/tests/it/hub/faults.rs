//! The hub path under faults (`scripts/hub_server.py`'s fault modes):
//! - a header that would name a path (an ETag or X-Repo-Commit of `../`
//!   or an absolute path, or another commit's hash) is refused before
//!   anything is written: one line, exit 2, and no file outside the cache;
//! - a weak ETag (`W/"…"`) names the blob by its digest, as Python does;
//!   an ETag that is no checksum (a mirror's MD5) still has its size
//!   checked;
//! - a hub that would compress is asked for the file's own bytes;
//! - a wrong body is never kept: the run stops in one line, exit 2, and a
//!   second run against the same hub stops again rather than trust what
//!   the first left; once the hub is right, a run completes;
//! - a hub that stops listening mid-run ends the run in one line, exit 2,
//!   and the next run completes from what the cache kept.

use std::collections::BTreeSet;

use super::*;

/// Every path under `dir`, symlinks not followed.
fn tree(dir: &Path) -> BTreeSet<PathBuf> {
    let mut paths = BTreeSet::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(folder) = todo.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(path.clone());
            }
            paths.insert(path);
        }
    }
    paths
}

/// The files under `cache`'s `blobs/` folders.
fn blobs(cache: &Path) -> Vec<String> {
    tree(cache)
        .into_iter()
        .filter(|p| {
            p.parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "blobs")
        })
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect()
}

/// `infer --model MODEL` against `hub` with the cache `cache`, quiet.
fn run(dir: &Path, data: &Path, hub: &Hub, cache: &Path, (model, out): (&str, &str)) -> Output {
    let endpoint = hub.endpoint();
    let cache = cache.display().to_string();
    infer(
        dir,
        data,
        model,
        out,
        &[
            ("HF_ENDPOINT", &endpoint),
            ("HF_HUB_CACHE", &cache),
            ("HF_HUB_DOWNLOAD_TIMEOUT", "5"),
        ],
    )
}

/// `run` stopped in one line, exit 2, saying `says`.
fn one_line(run: &Output, says: &str, what: &str) {
    let text = stderr(run);
    assert_eq!(run.status.code(), Some(2), "{what}: {text}");
    assert_eq!(text.trim().lines().count(), 1, "{what}: one line: {text}");
    assert!(text.contains(says), "{what}: {text}");
}

#[test]
fn headers_that_would_name_a_path_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let outside = dir.path().join("outside");
    let model = "tiny-org/vit-2labels";
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let cases = [
        // From `blobs/`, three folders up is the test's folder.
        (
            "--etag",
            "\"../../../escaped-etag\"".to_owned(),
            "(ETag), not a hex digest",
        ),
        (
            "--etag",
            format!("{}/etag", outside.display()),
            "(ETag), not a hex digest",
        ),
        (
            "--etag",
            "W/\"../../../escaped-weak\"".to_owned(),
            "not a hex digest",
        ),
        (
            "--commit",
            "../../../escaped-commit".to_owned(),
            "(X-Repo-Commit), not a commit hash",
        ),
        (
            "--commit",
            format!("{}/commit", outside.display()),
            "not a commit hash",
        ),
        ("--commit", commit.to_owned(), "asked for"),
    ];
    for (i, (flag, value, says)) in cases.iter().enumerate() {
        let hub = Hub::start(
            &root,
            &dir.path().join(format!("log{i}")),
            &[*flag, value.as_str()],
        );
        let cache = dir.path().join(format!("cache{i}"));
        let before = tree(dir.path());
        let out = format!("o{i}.jsonl");
        let done = run(dir.path(), &data, &hub, &cache, (model, &out));
        one_line(&done, says, &format!("{flag} {value}"));
        assert!(
            stderr(&done).contains(&format!("--model {model}: config.json: the hub ")),
            "{}",
            stderr(&done)
        );
        // Nothing outside the cache; no blob and no snapshot inside it.
        let new: Vec<PathBuf> = tree(dir.path())
            .difference(&before)
            .filter(|p| {
                !p.starts_with(&cache) && !p.starts_with(dir.path().join(format!("log{i}")))
            })
            .cloned()
            .collect();
        assert!(
            new.is_empty(),
            "{flag} {value}: written outside the cache: {new:?}"
        );
        assert!(!outside.exists(), "{flag} {value}");
        assert!(
            blobs(&cache).is_empty(),
            "{flag} {value}: {:?}",
            blobs(&cache)
        );
        assert!(
            !cache
                .join("models--tiny-org--vit-2labels/snapshots")
                .exists(),
            "{flag} {value}: a snapshot"
        );
    }
}

#[test]
fn a_weak_etag_names_the_blob_by_its_digest_and_one_no_checksum_is_held_to_its_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let model = "tiny-org/vit-2labels";
    let is_digest =
        |n: &str, len: usize| n.len() == len && n.bytes().all(|b| b.is_ascii_hexdigit());

    // W/"…": the blobs are the digests, as Python names them.
    let hub = Hub::start(&root, &dir.path().join("weak.log"), &["--etag", "weak"]);
    let cache = dir.path().join("weak-cache");
    let done = run(dir.path(), &data, &hub, &cache, (model, "weak.jsonl"));
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    matches_transformers(
        &records(dir.path(), "weak.jsonl", "weak"),
        "tiny-org--vit-2labels",
    );
    let names = blobs(&cache);
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(
        names.iter().all(|n| is_digest(n, 40) || is_digest(n, 64)),
        "{names:?}"
    );
    drop(hub);

    // A small file's ETag an MD5: no checksum the tool computes, so its
    // size is what holds it. A body one byte short is refused, and kept
    // nowhere.
    let cache = dir.path().join("md5-cache");
    let hub = Hub::start(
        &root,
        &dir.path().join("short.log"),
        &["--etag", "md5", "--short", "config.json"],
    );
    let done = run(dir.path(), &data, &hub, &cache, (model, "short.jsonl"));
    one_line(&done, "config.json: the hub sent", "short");
    assert!(
        stderr(&done).contains("bytes of a file it said has"),
        "{}",
        stderr(&done)
    );
    assert!(blobs(&cache).is_empty(), "{:?}", blobs(&cache));
    // Again: nothing of it was kept to trust.
    let done = run(dir.path(), &data, &hub, &cache, (model, "short.jsonl"));
    one_line(&done, "config.json: the hub sent", "short again");
    drop(hub);
    // A hub that sends it whole: the run completes, the blob named by
    // the MD5.
    let hub = Hub::start(&root, &dir.path().join("md5.log"), &["--etag", "md5"]);
    let done = run(dir.path(), &data, &hub, &cache, (model, "md5.jsonl"));
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    matches_transformers(
        &records(dir.path(), "md5.jsonl", "md5"),
        "tiny-org--vit-2labels",
    );
    let names = blobs(&cache);
    assert_eq!(
        names.iter().filter(|n| is_digest(n, 32)).count(),
        2,
        "config.json's and preprocessor_config.json's MD5: {names:?}"
    );
}

#[test]
fn a_hub_that_would_compress_is_asked_for_the_file_s_own_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let model = "tiny-org/vit-2labels";
    // Sizes and checksums are of the file's bytes: a compressed answer
    // would hold neither.
    let hub = Hub::start(&root, &dir.path().join("log"), &["--gzip"]);
    let cache = dir.path().join("cache");
    let done = run(dir.path(), &data, &hub, &cache, (model, "o.jsonl"));
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    matches_transformers(
        &records(dir.path(), "o.jsonl", "gzip"),
        "tiny-org--vit-2labels",
    );
}

#[test]
fn a_wrong_body_is_never_kept_for_a_later_run_to_trust() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let model = "tiny-org/vit-2labels";
    // A small file (git's SHA-1) and an LFS file (SHA-256).
    for file in ["config.json", "model.safetensors"] {
        let cache = dir.path().join(format!("cache-{file}"));
        let hub = Hub::start(
            &root,
            &dir.path().join(format!("{file}.log")),
            &["--corrupt", file],
        );
        for attempt in ["first", "second"] {
            let done = run(dir.path(), &data, &hub, &cache, (model, "o.jsonl"));
            one_line(
                &done,
                &format!("{file}: the download does not match the hub's checksum"),
                &format!("{file} {attempt}"),
            );
            assert!(!dir.path().join("o.jsonl").exists());
            // No blob of it, and no `.part` to resume from: only the
            // files fetched before it (config.json and
            // preprocessor_config.json, before the weights).
            let kept = blobs(&cache);
            let before = if file == "config.json" { 0 } else { 2 };
            assert_eq!(kept.len(), before, "{file} {attempt}: {kept:?}");
            assert!(kept.iter().all(|n| n.len() == 40), "{file}: {kept:?}");
        }
        drop(hub);
        let hub = Hub::start(&root, &dir.path().join(format!("{file}-good.log")), &[]);
        let out = format!("good-{file}.jsonl");
        let done = run(dir.path(), &data, &hub, &cache, (model, &out));
        assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
        matches_transformers(&records(dir.path(), &out, file), "tiny-org--vit-2labels");
    }
}

#[test]
fn a_hub_that_stops_listening_mid_run_ends_it_in_one_line_and_the_next_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, data) = layout(dir.path());
    let model = "tiny-org/vit-2labels";
    let cache = dir.path().join("cache");
    // The API's list, then config.json's headers and body; then nothing.
    let hub = Hub::start(&root, &dir.path().join("log"), &["--refuse-after", "3"]);
    let done = run(dir.path(), &data, &hub, &cache, (model, "o.jsonl"));
    one_line(
        &done,
        "cannot fetch preprocessor_config.json from the hub",
        "refused",
    );
    assert_eq!(hub.requests().len(), 3, "{:?}", hub.requests());
    drop(hub);
    // The cache kept config.json, whole; the next run fetches the rest.
    let hub = Hub::start(&root, &dir.path().join("log2"), &[]);
    let done = run(dir.path(), &data, &hub, &cache, (model, "o.jsonl"));
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    matches_transformers(
        &records(dir.path(), "o.jsonl", "after"),
        "tiny-org--vit-2labels",
    );
    assert!(
        !hub.requests().iter().any(|r| r.contains("/config.json ")),
        "config.json came from the cache: {:?}",
        hub.requests()
    );
}
