//! The `pipeline` binary as users and scripts meet it: its help, its
//! one-line errors, and exit codes.

use std::process::Output;

use crate::common;

fn pipeline(args: &[&str]) -> Output {
    common::pipeline(&std::env::temp_dir())
        .args(args)
        .output()
        .expect("the pipeline binary runs")
}

#[test]
fn help_lists_the_designed_subcommands_and_hides_worker() {
    let out = pipeline(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for command in ["infer", "devices", "bench", "merge"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(command)),
            "--help lacks {command}:\n{help}"
        );
    }
    assert!(
        !help.contains("worker"),
        "the internal worker subcommand is listed:\n{help}"
    );
}

#[test]
fn bad_bench_flags_say_so_in_one_line_and_exit_2() {
    let missing = std::env::temp_dir().join("pipeline-no-such-folder-for-bench");
    let missing = missing.to_str().expect("utf-8 temp dir");
    for (args, needle) in [
        (
            &["--synthetic", "10", "--sweep", "colour=1"][..],
            "--sweep colour=1",
        ),
        (
            &["--synthetic", "10", "--sweep", "batch=0"][..],
            "--sweep batch=0",
        ),
        (&["--synthetic", "10", "--size", "12"][..], "--size 12"),
        (&["--data", missing][..], "--data"),
        (&["--synthetic", "10", "--model", "resnet9"][..], "--model"),
        (
            &["--synthetic", "10", "--json", "/no/such/dir/b.json"][..],
            "--json",
        ),
    ] {
        let mut all = vec!["bench"];
        all.extend_from_slice(args);
        let out = pipeline(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("pipeline: error: ") && stderr.contains(needle),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    }
}

#[test]
fn an_unknown_subcommand_is_a_usage_error_with_exit_2() {
    let out = pipeline(&["infre"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("infre"));
}

/// `pipeline devices` reports ONNX Runtime (#41): its version and
/// providers where it loads (CI installs the wheel and requires it), and
/// a library named by `ORT_DYLIB_PATH` that is not ONNX Runtime as one
/// line naming the variable. A `--model FILE.onnx` that is missing or
/// could never be fed is one line, exit 2, saying why.
#[test]
fn devices_report_onnx_runtime_and_unfeedable_onnx_models_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listing = |extra: &[(&str, &std::path::Path)]| {
        let mut cmd = common::pipeline(dir.path());
        cmd.args(["devices", "--json"]);
        for (name, value) in extra {
            cmd.env(name, value);
        }
        let out = cmd.output().expect("pipeline runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        json["onnx_runtime"].clone()
    };
    let ort = listing(&[]);
    if std::env::var_os("PIPELINE_REQUIRE_ORT").is_some() {
        assert!(
            ort["version"].as_str().is_some_and(|v| v.starts_with("1.")),
            "{ort}"
        );
        let providers = ort["providers"].as_array().expect("providers");
        assert!(
            providers.iter().any(|p| p == "CPUExecutionProvider"),
            "{ort}"
        );
    } else if ort["error"].is_string() {
        eprintln!("no ONNX Runtime here: {}", ort["error"]);
    }
    let bogus = dir.path().join("libonnxruntime.so");
    std::fs::write(&bogus, "not a library").expect("write");
    let named = listing(&[("ORT_DYLIB_PATH", &bogus)]);
    let error = named["error"].as_str().unwrap_or_else(|| panic!("{named}"));
    assert!(error.starts_with("ORT_DYLIB_PATH: "), "{error}");
    assert!(!error.contains('\n'), "{error}");
    assert!(named["version"].is_null(), "{named}");

    // An ONNX model: a missing file, and one the tool could never feed,
    // each one line, exit 2 (`tests/onnx.rs` runs the ones it can).
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../gpu-worker/onnx/tests/models");
    let mut cases = vec![(dir.path().join("mine.onnx"), "no such file")];
    if std::env::var_os("PIPELINE_REQUIRE_ORT").is_some() {
        cases.push((fixtures.join("text_input.onnx"), "input_ids [?, 77] Int64"));
    }
    for (model, says) in cases {
        let out = common::pipeline(dir.path())
            .args(["infer", "--data", ".", "--model"])
            .arg(&model)
            .output()
            .expect("pipeline runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(says) && stderr.lines().count() == 1,
            "{says}: {stderr}"
        );
    }
}

/// A `CUDA_VISIBLE_DEVICES` UUID that names no GPU of this machine stops
/// `infer --gpus all` before anything runs: one line naming the variable,
/// exit 2, never a run on the CPU.
#[test]
fn a_cuda_visible_devices_uuid_naming_no_gpu_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("photos");
    std::fs::create_dir(&data).expect("a data folder");
    for value in [
        "GPU-0a1b2c3d-0000-0000-0000-000000000000",
        "MIG-0a1b2c3d-0000-0000-0000-000000000000",
        "0,GPU-0a1b2c3d",
    ] {
        let out = common::pipeline(dir.path())
            .env("CUDA_VISIBLE_DEVICES", value)
            .args(["infer", "--model", "tiny", "--out", "out.jsonl", "--data"])
            .arg(&data)
            .output()
            .expect("the pipeline binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{value}: {stderr}");
        assert!(
            stderr.starts_with(&format!("pipeline: error: CUDA_VISIBLE_DEVICES={value}: ")),
            "{value}: {stderr}"
        );
        assert!(!dir.path().join("out.jsonl").exists(), "{value}: ran");
    }
}

/// The values users set to mean "no GPU" (Slurm's `NoDevFiles` on CPU
/// jobs, `none`, `void`, HTCondor's `10000`, `-1`, and Dockerfiles' `all`,
/// which CUDA reads as no GPU too) run on the CPU, exit 0, saying so in one
/// line that names the variable, `all` with how to get every GPU.
#[test]
fn a_cuda_visible_devices_meaning_no_gpu_runs_on_the_cpu_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("photos");
    std::fs::create_dir(&data).expect("a data folder");
    for (n, value) in ["NoDevFiles", "none", "void", "10000", "-1", "all"]
        .into_iter()
        .enumerate()
    {
        let written = format!("out{n}.jsonl");
        let out = common::pipeline(dir.path())
            .env("CUDA_VISIBLE_DEVICES", value)
            .args(["infer", "--model", "tiny", "--out", &written, "--data"])
            .arg(&data)
            .output()
            .expect("the pipeline binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{value}: {stderr}");
        let notice: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("CUDA_VISIBLE_DEVICES"))
            .collect();
        assert_eq!(notice.len(), 1, "{value}: {stderr}");
        assert!(
            notice[0].starts_with(&format!("pipeline: CUDA_VISIBLE_DEVICES={value} names no "))
                && notice[0].ends_with("; running on the CPU (burn flex)"),
            "{value}: {stderr}"
        );
        if value == "all" {
            assert!(notice[0].contains("unset it to use every GPU"), "{stderr}");
        }
        assert!(dir.path().join(&written).exists(), "{value}: did not run");
    }
}
