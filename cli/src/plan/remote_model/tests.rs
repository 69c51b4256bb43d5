//! The model cache against an HTTP server on 127.0.0.1
//! (`fixtures::fault_server`) serving `cli/tests/onnx_upstream/`.

use super::*;

use fixtures::fault_server::{self, FaultServer};

fn upstream() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/onnx_upstream")
}

fn server() -> FaultServer {
    fault_server::start(&upstream(), 0).expect("the server starts")
}

fn spec() -> RemoteSpec {
    RemoteSpec {
        retries: 3,
        ..RemoteSpec::default()
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A body fed in pieces of every size around the buffer's, some larger
/// than it, restarted once mid-way as a broken body is: the file holds
/// exactly what arrived after the restart, its hash is that of those
/// bytes, and the buffer never grew past its size.
#[test]
fn a_download_streams_through_its_bounded_buffer_and_hashes_what_arrived() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut download = Download::new(dir.path()).expect("a temporary file");
    let body: Vec<u8> = (0..40 * DOWNLOAD_BUFFER as u64 + 12_345)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let sizes = [
        1,
        DOWNLOAD_BUFFER - 1,
        DOWNLOAD_BUFFER,
        DOWNLOAD_BUFFER + 1,
        3 * DOWNLOAD_BUFFER + 7,
        517,
    ];
    // A first attempt that breaks after 5 buffers' worth…
    for chunk in body[..5 * DOWNLOAD_BUFFER].chunks(DOWNLOAD_BUFFER / 3) {
        download.append(chunk).expect("written");
    }
    download.restart().expect("restarted");
    // …then the whole body.
    let mut at = 0;
    for size in sizes.iter().cycle() {
        if at == body.len() {
            break;
        }
        let end = (at + size).min(body.len());
        download.append(&body[at..end]).expect("written");
        assert_eq!(
            download.file.capacity(),
            DOWNLOAD_BUFFER,
            "a bounded buffer"
        );
        assert!(download.file.buffer().len() <= DOWNLOAD_BUFFER);
        at = end;
    }
    let done = download.finish().expect("flushed");
    assert_eq!(done.digest, xxhash_rust::xxh3::xxh3_64(&body));
    assert!(read(done.path()) == body, "the file is the body");
    let kept = dir.path().join("kept");
    done.persist(&kept).expect("renamed");
    assert!(read(&kept) == body);
    // Nothing else is left in the folder: no temporary file.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("a folder")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(left, ["kept"]);
}

/// A model with external data larger than the download buffer, each file's
/// body cut half-way once: every file arrives byte for byte, the broken
/// bodies resumed where they broke, with the config files beside them.
#[test]
fn external_data_streams_into_the_cache_through_a_body_that_breaks() {
    let server = server();
    let models = tempfile::tempdir().expect("tempdir");
    let url = format!("{}/reset/1/hf_vit_external/model.onnx", server.base());
    let path = fetch_into(models.path(), &url, spec()).expect("fetched");
    let source = upstream().join("hf_vit_external");
    let data = read(&source.join("model.onnx_data"));
    assert!(data.len() > DOWNLOAD_BUFFER, "larger than the buffer");
    let dir = path.parent().expect("a folder");
    for file in [
        "model.onnx",
        "model.onnx_data",
        "config.json",
        "preprocessor_config.json",
    ] {
        assert!(
            read(&dir.join(file)) == read(&source.join(file)),
            "{file}: the same bytes"
        );
    }
    let requests = server.requests_for("/reset/1/hf_vit_external/model.onnx_data");
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(
        requests[1].range_start.is_some_and(|s| s > 0),
        "resumed where it broke: {requests:?}"
    );
    // No temporary file is left beside the content folders.
    let object = dir.parent().expect("the object's folder");
    let strays: Vec<_> = std::fs::read_dir(object)
        .expect("a folder")
        .map(|e| e.expect("an entry").path())
        .filter(|p| !p.is_dir())
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
}

/// A presigned URL fetches no config files. Where a plain URL of the same
/// object fetched them, its folder keeps them however the presigned one is
/// fetched after or beside it: a run never deletes what another reads.
#[test]
fn a_presigned_and_a_plain_url_of_one_object_keep_each_others_files() {
    let server = server();
    let models = tempfile::tempdir().expect("tempdir");
    let plain = format!("{}/ok/hf_vit/model.onnx", server.base());
    let presigned = format!("{plain}?X-Amz-Signature=SECRETSIG&X-Amz-Date=20261128T000000Z");
    let logged_in = plain.replace("http://", "http://user:SECRETPW@");
    let configs = |path: &Path| -> Vec<bool> {
        let dir = path.parent().expect("a folder");
        CONFIG_FILES.iter().map(|c| dir.join(c).is_file()).collect()
    };
    let first = fetch_into(models.path(), &plain, spec()).expect("plain");
    let signed = fetch_into(models.path(), &presigned, spec()).expect("presigned");
    assert_eq!(
        configs(&first),
        [true, true],
        "the plain URL's configs stay"
    );
    assert_eq!(configs(&signed), [false, false], "a presigned URL has none");
    assert_ne!(first, signed);
    assert_eq!(
        first.parent().and_then(Path::parent),
        signed.parent().and_then(Path::parent),
        "one folder per object"
    );
    let again = fetch_into(models.path(), &logged_in, spec()).expect("logged in");
    assert_eq!(again, first, "the same object and content: the same file");
    // Side by side, again and again: every fetch succeeds and finds its
    // files whole.
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..6)
            .map(|i| {
                let (models, plain, presigned) = (models.path(), &plain, &presigned);
                scope.spawn(move || {
                    let url = if i % 2 == 0 { plain } else { presigned };
                    fetch_into(models, url, spec())
                })
            })
            .collect();
        for run in runs {
            let path = run.join().expect("no panic").expect("fetched");
            assert!(read(&path) == read(&upstream().join("hf_vit/model.onnx")));
        }
    });
    assert_eq!(configs(&first), [true, true]);
    let names: Vec<String> = walk(models.path())
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    for secret in ["SECRETSIG", "SECRETPW"] {
        assert!(names.iter().all(|n| !n.contains(secret)), "{names:?}");
    }
}

/// What a failing fetch says names the URL without its credentials.
/// A model's file that arrives steadily but slower than `--io-timeout`
/// is fetched whole: the limit is on a silence, not on the whole body.
#[test]
fn a_file_slower_than_the_timeout_but_never_silent_arrives() {
    let server = server();
    let models = tempfile::tempdir().expect("tempdir");
    let url = format!("{}/drip/2000/hf_vit/model.onnx", server.base());
    let spec = RemoteSpec {
        timeout_s: 0.5,
        retries: 0,
        ..RemoteSpec::default()
    };
    let started = std::time::Instant::now();
    let path = fetch_into(models.path(), &url, spec).expect("fetched");
    assert!(
        started.elapsed() > spec.timeout() * 3,
        "the body came slower than the limit"
    );
    assert!(read(&path) == read(&upstream().join("hf_vit/model.onnx")));
}

#[test]
fn a_failing_fetch_shows_no_credential() {
    let server = server();
    let models = tempfile::tempdir().expect("tempdir");
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        listener.local_addr().expect("an address").port()
    };
    let base = server.base();
    let cases = [
        format!("{base}/ok/nowhere/model.onnx?X-Amz-Signature=SECRET1&X-Amz-Credential=SECRET2"),
        format!(
            "{}/ok/nowhere/model.onnx",
            base.replace("http://", "http://user:SECRET3@")
        ),
        format!("http://user:SECRET4@127.0.0.1:{closed}/m.onnx?sig=SECRET5"),
        format!(
            "{}/ok/hf_vit_external/model.onnx?token=SECRET6",
            base.replace("http://", "http://u:SECRET7@")
        ),
    ];
    let spec = RemoteSpec {
        retries: 1,
        ..RemoteSpec::default()
    };
    for url in cases {
        let error = fetch_into(models.path(), &url, spec).expect_err("it fails");
        assert!(!error.contains("SECRET"), "{error}");
        assert!(error.starts_with("--model http://"), "{error}");
    }
}

/// Every file under `dir`, at any depth.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            files.extend(walk(&path));
        }
        files.push(path);
    }
    files
}
