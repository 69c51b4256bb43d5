//! `pipeline` on a real single-node Slurm cluster, started by
//! `scripts/slurm/start.sh` and stopped by pid afterwards: the example
//! scripts users copy (`examples/slurm/array.sbatch`, `srun.sbatch`) as an
//! `sbatch --array=0-2` job and an `srun -n 2` job, a `scancel` of one
//! array task mid-run and its re-submission, and fake GPUs (gres on
//! `/dev/null` symlinks) whose `CUDA_VISIBLE_DEVICES` the tool must honour.
//! Every merged output must equal a single-machine run's bytes.
//!
//! One test function: the cluster is one shared resource, started once.
//! Needs root (daemons, packages); `scripts/test.sh` runs as root in CI.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread::sleep;
use std::time::{Duration, Instant};

use fixtures::DatasetSpec;
use serde_json::Value;

const PIPELINE: &str = env!("CARGO_BIN_EXE_pipeline");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// The running cluster; stopped by pid when dropped, even after a failed
/// assertion.
struct Cluster {
    run: PathBuf,
    conf: String,
}

impl Cluster {
    fn start(run: &Path) -> Self {
        let out = Command::new("bash")
            .arg(repo().join("scripts/slurm/start.sh"))
            .arg(run)
            .output()
            .expect("bash runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the cluster did not start: {}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = stdout
            .lines()
            .find_map(|l| l.strip_prefix("SLURM_CONF="))
            .expect("start.sh prints SLURM_CONF")
            .to_owned();
        Self {
            run: run.to_owned(),
            conf,
        }
    }

    /// A Slurm client command, or the pipeline binary, with the cluster's
    /// config and the test's environment (sbatch exports it to jobs).
    fn command(&self, program: &str, cwd: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(cwd)
            .env("SLURM_CONF", &self.conf)
            .env("PIPELINE", PIPELINE)
            .env("PIPELINE_WEIGHTS_DIR", cwd.join("no-weights"))
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("FAILPOINTS");
        cmd
    }

    fn run(&self, program: &str, cwd: &Path, args: &[&str]) -> Output {
        self.command(program, cwd)
            .args(args)
            .output()
            .expect("the command runs")
    }

    /// Waits until job `id` has left the queue; cancels it and fails after
    /// five minutes (a job that cannot be scheduled pends forever).
    fn wait_gone(&self, id: &str, cwd: &Path) {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let out = self.run("squeue", cwd, &["-h", "-j", id, "-o", "%i %T %r"]);
            let queue = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if queue.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                self.run("scancel", cwd, &[id]);
                panic!("job {id} did not end in 5 minutes: {queue}");
            }
            sleep(Duration::from_millis(200));
        }
    }

    /// `sbatch ARGS` (one CPU per task, so several tasks fit the node),
    /// then waits for the job to leave the queue; returns the job id.
    fn batch(&self, cwd: &Path, args: &[&str]) -> String {
        let submitted = self.run(
            "sbatch",
            cwd,
            &[&["--parsable", "--time=5", "--cpus-per-task=1"], args].concat(),
        );
        assert!(submitted.status.success(), "{}", text(&submitted));
        let id = String::from_utf8_lossy(&submitted.stdout)
            .trim()
            .split(';')
            .next()
            .unwrap_or_default()
            .to_owned();
        self.wait_gone(&id, cwd);
        id
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo().join("scripts/slurm/stop.sh"))
            .arg(&self.run)
            .status();
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Everything the job logs named `PREFIX*` in `dir` say.
fn logs(dir: &Path, prefix: &str) -> String {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("work dir")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| fs::read_to_string(p).unwrap_or_default())
        .collect()
}

/// Committed parts of `out` whose chunk id is `shard` modulo `count`.
fn parts_of_shard(out: &Path, shard: u64, count: u64) -> usize {
    fs::read_dir(coordinator::parts_dir(out)).map_or(0, |entries| {
        entries
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_prefix("chunk-")?
                    .strip_suffix(".jsonl")?
                    .parse::<u64>()
                    .ok()
            })
            .filter(|id| id % count == shard)
            .count()
    })
}

#[test]
fn shards_on_a_real_slurm_cluster_merge_to_the_single_machine_output() {
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let cluster = Cluster::start(&work.join("slurm"));
    let data = fixtures::generate(
        &work.join("data"),
        &DatasetSpec {
            images: 40,
            seed: 9,
            broken: true,
        },
    )
    .expect("fixtures");
    let data_arg = data.root.to_str().expect("utf-8 path");
    let array = repo().join("examples/slurm/array.sbatch");
    let srun = repo().join("examples/slurm/srun.sbatch");
    let (array, srun) = (
        array.to_str().expect("utf-8"),
        srun.to_str().expect("utf-8"),
    );
    let tiny = ["--model", "tiny", "--gpus", "cpu", "--chunk-size", "3"];

    // The single-machine reference.
    let single = cluster.run(
        PIPELINE,
        work,
        &[
            &["infer", "--data", data_arg, "--out", "single.jsonl", "-q"],
            &tiny[..],
        ]
        .concat(),
    );
    assert_eq!(single.status.code(), Some(1), "{}", text(&single));
    let want = fs::read(work.join("single.jsonl")).expect("reference output");

    // sbatch --array=0-2: one shard per task, the last one merges.
    cluster.batch(
        work,
        &[
            &[
                "--array=0-2",
                "--output=array-%A_%a.log",
                array,
                "--data",
                data_arg,
                "--out",
                "array.jsonl",
            ],
            &tiny[..],
        ]
        .concat(),
    );
    let array_logs = logs(work, "array-");
    assert!(work.join("array.jsonl").exists(), "{array_logs}");
    assert!(
        fs::read(work.join("array.jsonl")).expect("merged") == want,
        "{array_logs}"
    );
    for shard in ["shard 0/3", "shard 1/3", "shard 2/3"] {
        assert!(array_logs.contains(shard), "{shard} ran: {array_logs}");
    }
    assert!(!coordinator::parts_dir(&work.join("array.jsonl")).exists());

    // sbatch -n 2 with srun inside, then `pipeline merge` in the script.
    cluster.batch(
        work,
        &[
            &[
                "--ntasks=2",
                "--output=srun-%j.log",
                srun,
                "--data",
                data_arg,
                "--out",
                "srun.jsonl",
            ],
            &tiny[..],
        ]
        .concat(),
    );
    let srun_logs = logs(work, "srun-");
    assert!(work.join("srun.jsonl").exists(), "{srun_logs}");
    assert!(
        fs::read(work.join("srun.jsonl")).expect("merged") == want,
        "{srun_logs}"
    );
    assert!(
        srun_logs.contains("SLURM_PROCID=1 of 2 tasks"),
        "{srun_logs}"
    );

    // scancel one array task mid-run, re-submit it, merge.
    let slow = ["--model", "resnet18", "--gpus", "cpu", "--chunk-size", "2"];
    let reference = cluster.run(
        PIPELINE,
        work,
        &[
            &["infer", "--data", data_arg, "--out", "slow.jsonl", "-q"],
            &slow[..],
        ]
        .concat(),
    );
    assert_eq!(reference.status.code(), Some(1), "{}", text(&reference));
    let want_slow = fs::read(work.join("slow.jsonl")).expect("reference output");
    let out = work.join("cancel.jsonl");
    let submitted = cluster.run(
        "sbatch",
        work,
        &[
            &[
                "--parsable",
                "--time=5",
                "--cpus-per-task=1",
                "--array=0-2",
                "--output=cancel-%A_%a.log",
                array,
                "--data",
                data_arg,
                "--out",
                "cancel.jsonl",
                // Below the cluster's KillWait (5 s), as docs/clusters.md says.
                "--grace",
                "3",
            ],
            &slow[..],
        ]
        .concat(),
    );
    assert!(submitted.status.success(), "{}", text(&submitted));
    let job = String::from_utf8_lossy(&submitted.stdout).trim().to_owned();
    let deadline = Instant::now() + Duration::from_secs(240);
    while parts_of_shard(&out, 1, 3) == 0 {
        assert!(Instant::now() < deadline, "shard 1 committed nothing");
        sleep(Duration::from_millis(50));
    }
    let cancel = cluster.run("scancel", work, &[&format!("{job}_1")]);
    assert!(cancel.status.success(), "{}", text(&cancel));
    cluster.wait_gone(&job, work);
    let log = fs::read_to_string(work.join(format!("cancel-{job}_1.log"))).unwrap_or_default();
    assert!(log.contains("stopped by SIGTERM"), "{log}");
    assert!(!out.exists(), "nothing merged while shard 1 is missing");
    let kept = parts_of_shard(&out, 1, 3);
    assert!(kept > 0, "the cancelled shard's parts are kept");
    cluster.batch(
        work,
        &[
            &[
                "--array=1",
                "--output=resubmit-%A_%a.log",
                array,
                "--data",
                data_arg,
                "--out",
                "cancel.jsonl",
                "--shard",
                "1/3",
            ],
            &slow[..],
        ]
        .concat(),
    );
    let log = logs(work, "resubmit-");
    assert!(out.exists(), "{log}");
    assert!(log.contains("resuming:"), "{log}");
    assert!(fs::read(&out).expect("merged") == want_slow, "{log}");

    // Fake GPUs: each srun task gets its own CUDA_VISIBLE_DEVICES, which
    // `--gpus all` honours (and reports); with no Vulkan GPU behind those
    // indices here, each says so and runs on the CPU.
    let report = work.join("gpu-report");
    let script = format!(
        "exec \"$PIPELINE\" infer --data '{data_arg}' --out gpu.jsonl --model tiny \
         --chunk-size 3 --report '{}'-$SLURM_PROCID.json",
        report.display()
    );
    let gpus = cluster.run(
        "srun",
        work,
        &[
            "--time=5",
            "-n",
            "2",
            "--gpus-per-task=1",
            "bash",
            "-c",
            &script,
        ],
    );
    let said = text(&gpus);
    for task in 0..2 {
        let path = format!("{}-{task}.json", report.display());
        let json: Value =
            serde_json::from_slice(&fs::read(&path).expect("report written")).expect("JSON");
        let source = json["config"]["scheduler_gpus"]
            .as_str()
            .unwrap_or_default();
        assert!(source.starts_with("CUDA_VISIBLE_DEVICES="), "{json}");
        assert_eq!(
            json["config"]["devices"],
            serde_json::json!(["cpu"]),
            "{json}"
        );
        assert_eq!(json["config"]["shard"], format!("{task}/2"), "{json}");
    }
    let given: Vec<String> = (0..2)
        .map(|task| {
            let path = format!("{}-{task}.json", report.display());
            let json: Value =
                serde_json::from_slice(&fs::read(path).expect("report")).expect("JSON");
            json["config"]["scheduler_gpus"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_ne!(given[0], given[1], "each task has its own GPU: {given:?}");
    assert!(
        said.contains("names no Vulkan GPU of this machine"),
        "{said}"
    );
    let merged = cluster.run(PIPELINE, work, &["merge", "--out", "gpu.jsonl"]);
    assert_eq!(merged.status.code(), Some(1), "{}", text(&merged));
    assert!(fs::read(work.join("gpu.jsonl")).expect("merged") == want);
}
