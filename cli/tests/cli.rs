//! The `pipeline` binary as users and scripts meet it: its help, its
//! one-line errors, and exit codes.

use std::process::Output;

mod common;

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
