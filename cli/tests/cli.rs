//! The `pipeline` binary as users and scripts meet it: its help, its
//! one-line errors, and exit codes.

use std::process::{Command, Output};

fn pipeline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pipeline"))
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
fn a_subcommand_not_built_says_so_in_one_line_and_exits_2() {
    let out = pipeline(&["bench", "--synthetic", "100"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("not built yet") && stderr.contains("#7"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "bench printed to stdout");
}

#[test]
fn an_unknown_subcommand_is_a_usage_error_with_exit_2() {
    let out = pipeline(&["infre"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("infre"));
}
