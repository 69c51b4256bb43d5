//! One way to start the binary under test: a `Command` with a cleared,
//! explicit environment (as ripgrep's `tests/util.rs` does). A test run
//! inside an `srun` step (SLURM_*), a Kubernetes Indexed Job
//! (JOB_COMPLETION_INDEX), a shell with CUDA_VISIBLE_DEVICES or FAILPOINTS
//! set, or a user's weights cache must not change what the binary does, so
//! only what a process needs to run at all is passed through; everything
//! else a test wants, it sets. And one way to read a JSONL output back.

use std::path::Path;
use std::process::Command;

pub(crate) mod data;

/// Passed through from the test's own environment.
const KEPT: [&str; 9] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "RUST_BACKTRACE",
    "LD_LIBRARY_PATH",
    // Which Vulkan drivers exist (lavapipe) is the machine's, not the test's.
    "VK_ICD_FILENAMES",
    "VK_DRIVER_FILES",
];

/// `pipeline` run in `cwd`, with no weight cache (`cwd/no-weights`): the
/// models run on seeded weights unless a test gives `--weights` or sets
/// `PIPELINE_WEIGHTS_DIR` again. Autotune results go to `cwd/autotune`,
/// not the user's cache.
pub(crate) fn pipeline(cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pipeline"));
    cmd.env_clear()
        .current_dir(cwd)
        .env("PIPELINE_WEIGHTS_DIR", cwd.join("no-weights"))
        .env("PIPELINE_AUTOTUNE_DIR", cwd.join("autotune"));
    for name in KEPT {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd
}

/// The records of the JSONL output at `path`, one JSON value per line.
#[allow(dead_code)] // not every test binary reads outputs back
pub(crate) fn records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}
