//! Shards on one machine (the Slurm cluster test is `slurm.rs`): shards
//! chosen by flag or by the scheduler's environment write parts into one
//! folder; `pipeline merge` (or the last shard with `--merge`) assembles a
//! file byte-identical to a single run's, and refuses while chunks are
//! missing, naming them.

use std::fs;
use std::path::Path;
use std::process::Output;

use fixtures::DatasetSpec;

use crate::common;

fn pipeline(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = common::pipeline(cwd);
    cmd.args(args);
    cmd.envs(env.iter().copied());
    cmd.output().expect("the pipeline binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn infer_args<'a>(data: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "infer",
        "--data",
        data,
        "--out",
        out,
        "--model",
        "tiny",
        "--gpus",
        "cpu",
        "--chunk-size",
        "3",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn shards_from_flags_and_from_the_environment_merge_to_the_single_output() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cwd = dir.path();
    let data = fixtures::generate(
        &cwd.join("data"),
        &DatasetSpec {
            images: 20,
            seed: 3,
            broken: true,
        },
    )
    .expect("fixtures");
    let data = data.root.to_str().expect("utf-8 path");
    let single = pipeline(cwd, &infer_args(data, "single.csv", &["-q"]), &[]);
    assert_eq!(single.status.code(), Some(1), "{}", stderr(&single));
    let want = fs::read(cwd.join("single.csv")).expect("single output");

    // --shard: shards 0 and 2, then merge refuses, naming shard 1's chunks.
    for shard in ["0/3", "2/3"] {
        let run = pipeline(cwd, &infer_args(data, "flag.csv", &["--shard", shard]), &[]);
        assert!(
            run.status.code().is_some_and(|c| c <= 1),
            "{}",
            stderr(&run)
        );
        assert!(
            stderr(&run).contains("pipeline merge --out"),
            "{}",
            stderr(&run)
        );
        assert!(
            !cwd.join("flag.csv").exists(),
            "a shard alone does not merge"
        );
    }
    let early = pipeline(cwd, &["merge", "--out", "flag.csv"], &[]);
    let err = stderr(&early);
    assert_eq!(early.status.code(), Some(2), "{err}");
    assert!(err.contains("missing: 1, 4, 7"), "{err}");
    let run = pipeline(cwd, &infer_args(data, "flag.csv", &["--shard", "1/3"]), &[]);
    assert!(
        run.status.code().is_some_and(|c| c <= 1),
        "{}",
        stderr(&run)
    );
    let merged = pipeline(cwd, &["merge", "--out", "flag.csv"], &[]);
    assert_eq!(merged.status.code(), Some(1), "{}", stderr(&merged));
    assert!(fs::read(cwd.join("flag.csv")).expect("merged") == want);
    let again = pipeline(cwd, &["merge", "--out", "flag.csv"], &[]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(stderr(&again).contains("already merged"));

    // A Slurm array (ids 10, 12, 14) with --merge: the last shard merges.
    for id in ["10", "14", "12"] {
        let env = [
            ("SLURM_ARRAY_TASK_ID", id),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
        ];
        let run = pipeline(cwd, &infer_args(data, "array.csv", &["--merge"]), &env);
        let err = stderr(&run);
        assert!(run.status.code().is_some_and(|c| c <= 1), "{err}");
        assert!(
            err.contains(&format!("SLURM_ARRAY_TASK_ID={id} of 3 tasks")),
            "{err}"
        );
    }
    assert!(fs::read(cwd.join("array.csv")).expect("merged by the last") == want);

    // A Kubernetes Indexed Job: JOB_COMPLETION_INDEX with --num-shards.
    for index in ["1", "0"] {
        let env = [("JOB_COMPLETION_INDEX", index)];
        let extra = ["--num-shards", "2", "--merge", "-q"];
        let run = pipeline(cwd, &infer_args(data, "k8s.csv", &extra), &env);
        assert!(
            run.status.code().is_some_and(|c| c <= 1),
            "{}",
            stderr(&run)
        );
    }
    assert!(fs::read(cwd.join("k8s.csv")).expect("merged") == want);
    let missing = pipeline(
        cwd,
        &infer_args(data, "k.csv", &[]),
        &[("JOB_COMPLETION_INDEX", "0")],
    );
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("--num-shards"));
}

#[test]
fn overwrite_is_refused_with_shards_and_merge_needs_parts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cwd = dir.path();
    fs::create_dir(cwd.join("data")).expect("data folder");
    let run = pipeline(
        cwd,
        &infer_args("data", "p.jsonl", &["--shard", "0/2", "--overwrite"]),
        &[],
    );
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert!(stderr(&run).contains("--overwrite with shards"));
    let merge = pipeline(cwd, &["merge", "--out", "nothing.jsonl"], &[]);
    let err = stderr(&merge);
    assert_eq!(merge.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no shard has committed anything"), "{err}");
}
