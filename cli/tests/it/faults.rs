//! Nothing lost: the real `pipeline` binary through dead, hung and
//! memory-starved workers, an image that kills every worker, SIGTERM,
//! SIGINT and SIGKILL of the coordinator, a full disk, and outputs that
//! already exist. Each run's output must equal a clean run's byte for byte,
//! with every image exactly once.
//!
//! Faults are real where the machine allows it (`kill -9`, signals, a small
//! tmpfs) and injected with failpoints where it does not (no GPU to exhaust).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use fixtures::{Dataset, DatasetSpec};
use serde_json::Value;
use tempfile::TempDir;

use crate::common;

/// One test's dataset, its folder, and the flags every run of it shares.
struct Case {
    dir: TempDir,
    data: Dataset,
    common: Vec<String>,
}

impl Case {
    /// `images` fixture images (with broken files) and `model` on the CPU.
    fn new(images: usize, model: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = fixtures::generate(
            &dir.path().join("data"),
            &DatasetSpec {
                images,
                seed: 5,
                broken: true,
            },
        )
        .expect("fixtures are written");
        let mut common: Vec<String> = ["--model", model, "--gpus", "cpu", "--data"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        common.push(data.root.to_str().expect("utf-8 temp path").to_owned());
        common.extend(extra.iter().map(|s| s.to_string()));
        Self { dir, data, common }
    }

    /// As [`Case::new`], but `--data` is a list of URLs of the same files
    /// on a real HTTP server on 127.0.0.1 that answers each request after
    /// `latency_ms` (so that signals land mid-run).
    fn remote(images: usize, model: &str, latency_ms: u32, extra: &[&str]) -> Self {
        let mut case = Self::new(images, model, extra);
        let root = case.data.root.clone();
        let server = fixtures::fault_server::start(&root, 0).expect("server starts");
        let mut files: Vec<String> = walk(&root)
            .into_iter()
            .map(|p| {
                let rel = p.strip_prefix(&root).expect("under the root");
                format!("{}/latency/{latency_ms}/{}", server.base(), rel.display())
            })
            .collect();
        files.sort();
        let list = case.path("urls.txt");
        fs::write(&list, files.join("\n")).expect("url list");
        let at = case
            .common
            .iter()
            .position(|a| a == "--data")
            .expect("--data")
            + 1;
        case.common[at] = list.to_str().expect("utf-8 temp path").to_owned();
        case
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, out: &Path, extra: &[&str], failpoints: Option<&str>) -> Command {
        let mut cmd = common::pipeline(self.dir.path());
        cmd.arg("infer")
            .args(&self.common)
            .arg("--out")
            .arg(out)
            .args(extra);
        if let Some(points) = failpoints {
            cmd.env("FAILPOINTS", points);
        }
        cmd
    }

    fn run(&self, out: &Path, extra: &[&str], failpoints: Option<&str>) -> Output {
        self.command(out, extra, failpoints)
            .output()
            .expect("the pipeline binary runs")
    }

    fn start(&self, out: &Path, extra: &[&str]) -> Child {
        self.command(out, extra, None)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the pipeline binary starts")
    }

    /// The output of an undisturbed run.
    fn clean(&self) -> Vec<u8> {
        let out = self.path("clean.jsonl");
        let run = self.run(&out, &[], None);
        assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
        let bytes = fs::read(&out).expect("clean output");
        assert_every_image_once(&bytes, &self.data);
        bytes
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The `pipeline: error:` line of a failed run; there must be exactly one
/// (notices may precede it).
fn error_line(err: &str) -> &str {
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("pipeline: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    errors[0]
}

/// Every file under `dir` that the folder scan would pick up.
fn walk(dir: &Path) -> Vec<PathBuf> {
    pipeline_core::Manifest::scan(dir)
        .expect("a folder")
        .entries
        .into_iter()
        .map(|e| dir.join(e.name))
        .collect()
}

fn wait_output(child: Child) -> Output {
    child.wait_with_output().expect("the coordinator ends")
}

/// Indices 0..n in order, n = every file the scan finds, each path once.
fn assert_every_image_once(bytes: &[u8], data: &Dataset) {
    let text = std::str::from_utf8(bytes).expect("utf-8 output");
    let expected = data.good.len() + data.broken.iter().filter(|b| b.path.exists()).count();
    let mut paths = std::collections::HashSet::new();
    let mut count = 0;
    for (i, line) in text.lines().enumerate() {
        let record: Value = serde_json::from_str(line).expect("JSON line");
        assert_eq!(record["index"], i as u64, "{line}");
        assert!(paths.insert(record["path"].to_string()), "twice: {line}");
        count += 1;
    }
    assert_eq!(count, expected, "every image exactly once");
}

fn assert_same_output(got: &Path, want: &[u8], data: &Dataset) {
    let bytes = fs::read(got).expect("the output exists");
    assert_every_image_once(&bytes, data);
    assert!(bytes == want, "the output differs from a clean run's");
}

/// One JSON value per line of an output.
fn json_lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

fn report(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).expect("report written")).expect("report is JSON")
}

/// Pids whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = &stat[stat.rfind(')')? + 1..];
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim()
            .starts_with('Z')
    })
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name} {pid}");
}

/// Part files committed so far under `OUT.parts`.
fn committed_parts(out: &Path) -> usize {
    fs::read_dir(coordinator::parts_dir(out)).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with("chunk-") && name.ends_with(".jsonl")
            })
            .count()
    })
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(20));
    }
}

/// A small xorshift, seeded from the clock and printed, so a failure can
/// be replayed with `FAULTS_SEED`.
fn random_source() -> impl FnMut(u64) -> u64 {
    let mut x: u64 = std::env::var("FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        | 1;
    eprintln!("FAULTS_SEED={x}");
    move |below| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % below.max(1)
    }
}

#[test]
fn workers_killed_at_random_points_cost_nothing_in_the_output() {
    let case = Case::new(
        44,
        "resnet18",
        &[
            "--workers-per-gpu",
            "2",
            "--chunk-size",
            "3",
            "--batch-size",
            "2",
        ],
    );
    let want = case.clean();
    let out = case.path("killed.jsonl");
    let report_path = case.path("report.json");
    let mut child = case.start(&out, &["--report", report_path.to_str().expect("utf-8")]);
    let mut random = random_source();
    let mut kills = 0;
    // Three: an image needs more deaths than that to become an error.
    while kills < 3 {
        sleep(Duration::from_millis(300 + random(900)));
        if child.try_wait().expect("wait works").is_some() {
            break;
        }
        let workers = children(child.id());
        if workers.is_empty() {
            continue;
        }
        let victim = workers[random(workers.len() as u64) as usize];
        signal(victim, "KILL");
        kills += 1;
    }
    let run = wait_output(child);
    let err = stderr(&run);
    assert!(kills >= 2, "the run ended before two kills: {err}");
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("signal 9 (SIGKILL)"), "{err}");
    assert_same_output(&out, &want, &case.data);
    let summary = &report(&report_path)["summary"];
    assert!(summary["restarts"].as_u64() >= Some(kills - 1), "{summary}");
    assert!(
        !coordinator::parts_dir(&out).exists(),
        "parts are cleaned up"
    );
}

#[test]
fn an_image_that_kills_every_worker_becomes_one_worker_crash_record() {
    let case = Case::new(14, "tiny", &["--chunk-size", "8", "--batch-size", "4"]);
    let want = case.clean();
    let clean = json_lines(&want);
    let poison = clean
        .iter()
        .find(|r| r["index"] == 9 && r.get("top_k").is_some())
        .or_else(|| clean.iter().find(|r| r.get("top_k").is_some()))
        .expect("a good image");
    let poison_path = poison["path"].as_str().expect("path").to_owned();
    let out = case.path("poison.jsonl");
    let report_path = case.path("report.json");
    let run = case.run(
        &out,
        &["--report", report_path.to_str().expect("utf-8")],
        Some(&format!("worker-crash-on=return({poison_path})")),
    );
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(1), "{err}");
    let got = json_lines(&fs::read(&out).expect("output"));
    assert_eq!(got.len(), clean.len());
    for (g, w) in got.iter().zip(&clean) {
        if g["path"] == poison_path.as_str() {
            assert_eq!(g["error"]["kind"], "worker_crash", "{g}");
            assert_eq!(g["index"], w["index"]);
        } else {
            assert_eq!(g, w, "every other record is the clean run's");
        }
    }
    let summary = &report(&report_path)["summary"];
    assert_eq!(summary["failures_by_kind"]["worker_crash"], 1, "{summary}");
    // 8 items split 8 → 4 → 2 → 1: three splits to find the image.
    assert_eq!(summary["splits"], 3, "{summary}");
    let failures = fs::read_to_string(coordinator::failures_path(&out)).expect("failures file");
    assert!(failures.contains("worker_crash"), "{failures}");
}

#[test]
fn a_hung_worker_is_killed_and_its_work_done_again() {
    let case = Case::new(12, "tiny", &["--chunk-size", "8", "--batch-size", "4"]);
    let want = case.clean();
    let out = case.path("hang.jsonl");
    let marker = case.path("hung-once");
    let report_path = case.path("report.json");
    let run = case.run(
        &out,
        &[
            "--hang-timeout",
            "2",
            "--report",
            report_path.to_str().expect("utf-8"),
        ],
        Some(&format!("worker-hang=return({})", marker.display())),
    );
    let err = stderr(&run);
    assert!(marker.exists(), "the failpoint fired: {err}");
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("no progress for 2 s; killing it"), "{err}");
    assert_same_output(&out, &want, &case.data);
    assert_eq!(report(&report_path)["summary"]["hangs"], 1);
}

/// Workers whose setup fails (unusable weights, a missing device) are
/// not restarted, and the reason reaches the user once: not per worker, not
/// echoed by the worker's own stderr, not again as an "exited with" line.
#[test]
fn a_failed_worker_setup_is_reported_once_with_exit_2() {
    let case = Case::new(4, "tiny", &["--workers-per-gpu", "2"]);
    let out = case.path("setup.jsonl");
    let run = case.run(
        &out,
        &[],
        Some("worker-setup=return(no such thing on this device)"),
    );
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert_eq!(
        err.matches("no such thing on this device").count(),
        1,
        "{err}"
    );
    assert!(
        error_line(&err).contains("no such thing on this device"),
        "{err}"
    );
    assert!(!err.contains("exited with"), "{err}");
    assert!(!out.exists());
}

#[test]
fn memory_exhaustion_halves_the_batch_in_the_worker_and_across_a_respawn() {
    let case = Case::new(12, "tiny", &["--chunk-size", "4", "--batch-size", "8"]);
    let want = case.clean();

    // In the process: every pass over 2 images fails as an OOM would.
    let out = case.path("oom.jsonl");
    let report_path = case.path("oom.json");
    let run = case.run(
        &out,
        &["--report", report_path.to_str().expect("utf-8")],
        Some("engine-oom=return(2)"),
    );
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("out of memory at batch 8, now 4"), "{err}");
    assert_same_output(&out, &want, &case.data);
    let summary = &report(&report_path)["summary"];
    assert_eq!(summary["oom_backoffs"], 2, "8 → 4 → 2: {summary}");
    assert_eq!(summary["workers"][0]["batch_size"], 2, "{summary}");

    // Across processes: the worker exits as one whose device was lost and
    // is respawned with half its batch.
    let out = case.path("lost.jsonl");
    let report_path = case.path("lost.json");
    let marker = case.path("lost-once");
    let run = case.run(
        &out,
        &["--report", report_path.to_str().expect("utf-8")],
        Some(&format!("device-lost=return({})", marker.display())),
    );
    let err = stderr(&run);
    assert!(marker.exists(), "the failpoint fired: {err}");
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(
        err.contains("exit code 3 (device out of memory or lost)"),
        "{err}"
    );
    assert!(err.contains("restarting with batch 4 (was 8)"), "{err}");
    assert_same_output(&out, &want, &case.data);
    let summary = &report(&report_path)["summary"];
    assert_eq!(summary["oom_backoffs"], 1, "{summary}");
    assert_eq!(summary["restarts"], 1, "{summary}");
    assert_eq!(summary["workers"][0]["batch_size"], 4, "{summary}");
}

/// Two passes that do not fit side by side: the worker finishes the one in
/// flight, runs the batch again on its own, and goes on one pass at a time
/// at the same batch size. Nothing is lost, nothing is halved.
#[test]
fn a_pass_that_does_not_fit_beside_another_runs_alone_at_the_same_batch_size() {
    // ResNet-18 is slow enough on the CPU that the next batch is decoded
    // while a pass runs, so a second pass is launched beside the first.
    let case = Case::new(12, "resnet18", &["--chunk-size", "4", "--batch-size", "4"]);
    let want = case.clean();
    let out = case.path("overlap.jsonl");
    let report_path = case.path("overlap.json");
    let marker = case.path("fired");
    let run = case.run(
        &out,
        &["--report", report_path.to_str().expect("utf-8")],
        Some(&format!("engine-oom-overlap=return({})", marker.display())),
    );
    let err = stderr(&run);
    assert!(
        marker.exists(),
        "a second pass was launched beside the first: {err}"
    );
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert_same_output(&out, &want, &case.data);
    let summary = &report(&report_path)["summary"];
    assert_eq!(summary["oom_backoffs"], 0, "{summary}");
    assert_eq!(summary["restarts"], 0, "{summary}");
    let worker = &summary["workers"][0];
    assert_eq!(worker["batch_size"], 4, "{summary}");
    // The time to its first batch is reported, and includes its start-up.
    let first = worker["first_batch_s"].as_f64().expect("a first batch");
    let startup = worker["startup_s"].as_f64().expect("a start-up");
    assert!(first > startup && startup > 0.0, "{worker}");
}

/// SIGINT, then SIGTERM, then an undisturbed re-run: exit 130, exit 143,
/// then the full output, equal to a clean run's.
#[test]
fn sigint_and_sigterm_commit_what_is_in_flight_and_the_rerun_finishes() {
    let case = Case::new(40, "resnet18", &["--chunk-size", "3", "--batch-size", "3"]);
    let want = case.clean();
    let out = case.path("stopped.jsonl");
    let mut committed = 0;
    for (name, code) in [("INT", 130), ("TERM", 143)] {
        let mut child = case.start(&out, &[]);
        wait_until("a new part", Duration::from_secs(120), || {
            let exited = child.try_wait().expect("wait works").is_some();
            assert!(!exited, "the run ended before SIG{name}");
            committed_parts(&out) > committed
        });
        let at_signal = committed_parts(&out);
        signal(child.id(), name);
        let run = wait_output(child);
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(code), "SIG{name}: {err}");
        assert!(err.contains(&format!("stopped by SIG{name}")), "{err}");
        assert!(err.contains("run the same command again"), "{err}");
        assert!(!out.exists(), "no final file after SIG{name}");
        committed = committed_parts(&out);
        assert!(committed >= at_signal, "committed parts are kept");
    }
    let run = case.run(&out, &[], None);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("resuming:"), "{err}");
    assert_same_output(&out, &want, &case.data);
    assert!(!coordinator::parts_dir(&out).exists());
}

#[test]
fn a_remote_run_survives_a_killed_worker_and_sigterm_and_resumes_to_the_same_bytes() {
    let case = Case::remote(45, "tiny", 100, &["--chunk-size", "3", "--batch-size", "3"]);
    let want = case.clean();
    let out = case.path("remote.jsonl");
    let mut child = case.start(&out, &[]);
    let running = |child: &mut Child| child.try_wait().expect("wait works").is_none();
    wait_until("a first part", Duration::from_secs(120), || {
        assert!(running(&mut child), "the run ended before the faults");
        committed_parts(&out) > 0
    });
    let workers = children(child.id());
    assert_eq!(workers.len(), 1, "one worker");
    // Workers keep freed pages (`pipeline_core::allocator_env`).
    let environ = fs::read(format!("/proc/{}/environ", workers[0])).expect("worker environ");
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|v| v == b"MIMALLOC_PURGE_DELAY=-1"),
        "the worker's allocator keeps freed pages"
    );
    signal(workers[0], "KILL");
    let after_kill = committed_parts(&out);
    wait_until(
        "a part from the restarted worker",
        Duration::from_secs(120),
        || {
            assert!(running(&mut child), "the run ended before SIGTERM");
            committed_parts(&out) > after_kill
        },
    );
    signal(child.id(), "TERM");
    let run = wait_output(child);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(143), "{err}");
    assert!(
        err.contains("signal 9 (SIGKILL)"),
        "the dead worker is reported: {err}"
    );
    assert!(!out.exists(), "no final file after SIGTERM");
    let run = case.run(&out, &[], None);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("resuming:"), "{err}");
    assert_same_output(&out, &want, &case.data);
}

#[test]
fn after_sigkill_of_the_coordinator_its_workers_exit_and_the_rerun_finishes() {
    let case = Case::new(
        40,
        "resnet18",
        &[
            "--chunk-size",
            "3",
            "--batch-size",
            "3",
            "--workers-per-gpu",
            "2",
        ],
    );
    let want = case.clean();
    let out = case.path("killed.jsonl");
    let child = case.start(&out, &[]);
    wait_until("a part", Duration::from_secs(120), || {
        committed_parts(&out) > 0
    });
    let workers = children(child.id());
    assert!(!workers.is_empty(), "the coordinator has workers");
    signal(child.id(), "KILL");
    let run = wait_output(child);
    assert_eq!(run.status.code(), None, "killed by a signal");
    wait_until("orphaned workers to exit", Duration::from_secs(20), || {
        !workers.iter().any(|&pid| alive(pid))
    });
    assert!(!out.exists());
    let run = case.run(&out, &[], None);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("resuming:"), "{err}");
    assert_same_output(&out, &want, &case.data);
}

#[test]
fn a_changed_config_is_refused_and_overwrite_starts_afresh() {
    let case = Case::new(10, "tiny", &["--chunk-size", "2"]);
    let want = case.clean();
    let out = case.path("p.jsonl");
    // An interrupted run's parts: the first two written, then ENOSPC.
    let run = case.run(&out, &[], Some("part-write=2*off->return"));
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(committed_parts(&out), 2);

    let run = case.run(&out, &["--top-k", "3"], None);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    let line = error_line(&err);
    assert!(
        line.contains("another --task or --top-k")
            && line.contains("\"top_k\":5")
            && line.contains("\"top_k\":3")
            && line.contains("--overwrite")
            && !line.contains("preprocessing"),
        "{err}"
    );
    assert_eq!(committed_parts(&out), 2, "a refused run touches nothing");

    let run = case.run(&out, &["--overwrite"], None);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_same_output(&out, &want, &case.data);

    // A finished output is refused, accepted with --resume, replaced with
    // --overwrite.
    let run = case.run(&out, &[], None);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains("already exists"), "{err}");
    let run = case.run(&out, &["--resume"], None);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert!(stderr(&run).contains("already complete"));
    let run = case.run(&out, &["--overwrite"], None);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_same_output(&out, &want, &case.data);
}

#[test]
fn a_file_deleted_between_scan_and_load_is_a_not_found_record() {
    let case = Case::new(10, "tiny", &["--chunk-size", "4"]);
    let want = case.clean();
    let clean = json_lines(&want);
    let victim = clean
        .iter()
        .find(|r| r.get("top_k").is_some())
        .expect("a good image");
    let victim_path = victim["path"].as_str().expect("path");
    let file = case.data.root.join(victim_path);
    let out = case.path("deleted.jsonl");
    let run = case.run(
        &out,
        &[],
        Some(&format!("after-scan=return({})", file.display())),
    );
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert!(!file.exists(), "the failpoint deleted it");
    let got = json_lines(&fs::read(&out).expect("output"));
    assert_eq!(got.len(), clean.len(), "the deleted file keeps its record");
    for (g, w) in got.iter().zip(&clean) {
        if g["path"] == victim_path {
            assert_eq!(g["error"]["kind"], "not_found", "{g}");
        } else {
            assert_eq!(g, w);
        }
    }
}

/// Mounts a tmpfs of `size` at `dir`; false where the machine forbids it.
fn mount_tmpfs(dir: &Path, options: &str) -> bool {
    fs::create_dir_all(dir).expect("mount point");
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", options, "tmpfs"])
        .arg(dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn unmount(dir: &Path) {
    let _ = Command::new("umount").arg(dir).status();
}

/// A full disk: a 24 KiB tmpfs where the machine allows mounting one (else
/// injected ENOSPC), then more room and a re-run that resumes.
#[test]
fn a_full_disk_is_a_clear_error_that_keeps_committed_parts() {
    let case = Case::new(
        20,
        "tiny",
        &["--chunk-size", "2", "--task", "embed", "--batch-size", "2"],
    );
    let clean_out = case.path("clean-embed.jsonl");
    let run = case.run(&clean_out, &[], None);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let want = fs::read(&clean_out).expect("clean output");

    let small = case.path("small");
    let mounted = mount_tmpfs(&small, "size=24k");
    let out = small.join("p.jsonl");
    let failpoints = (!mounted).then_some("part-write=3*off->return");
    if !mounted {
        eprintln!("cannot mount a tmpfs here: injecting ENOSPC instead");
    }
    let run = case.run(&out, &[], failpoints);
    let err = stderr(&run);
    let full = committed_parts(&out);
    let parts: Vec<PathBuf> = fs::read_dir(coordinator::parts_dir(&out))
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    if mounted {
        // Grow the disk before asserting, so a failure does not leak it.
        let grown = Command::new("mount")
            .args(["-o", "remount,size=4m"])
            .arg(&small)
            .status()
            .is_ok_and(|s| s.success());
        if !grown {
            unmount(&small);
            panic!("cannot grow the tmpfs");
        }
    }
    let outcome = std::panic::catch_unwind(|| {
        assert_eq!(run.status.code(), Some(2), "{err}");
        assert!(
            error_line(&err).contains("No space left on device"),
            "{err}"
        );
        assert!(full > 0 && full < 10, "{full} parts fit: {parts:?}");
        assert!(!out.exists(), "no final file");
        for part in parts
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        {
            let text = fs::read_to_string(part).expect("a committed part reads");
            assert!(text.ends_with('\n'), "{} is whole", part.display());
        }
        let run = case.run(&out, &[], None);
        assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
        assert!(stderr(&run).contains("resuming:"));
        assert_same_output(&out, &want, &case.data);
    });
    if mounted {
        unmount(&small);
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn an_unwritable_output_folder_is_a_one_line_error() {
    let case = Case::new(4, "tiny", &[]);
    let readonly = case.path("ro");
    let out = if mount_tmpfs(&readonly, "ro,size=64k") {
        readonly.join("p.jsonl")
    } else {
        // Not root: a folder without write permission does the same.
        fs::create_dir_all(&readonly).expect("folder");
        let mut perms = fs::metadata(&readonly).expect("meta").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
        fs::set_permissions(&readonly, perms).expect("chmod");
        readonly.join("p.jsonl")
    };
    let run = case.run(&out, &[], None);
    unmount(&readonly);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    let line = error_line(&err);
    assert!(
        line.contains("Read-only file system") || line.contains("ermission denied"),
        "{err}"
    );
}
