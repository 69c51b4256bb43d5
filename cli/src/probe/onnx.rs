//! ONNX Runtime's CUDA provider tried in a short-lived child (`pipeline
//! probe-onnx-cuda`): once started, it keeps a CUDA context and a memory
//! pool on its GPU for the life of its process, which for the coordinator
//! is the whole run, beside that GPU's worker.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::child::{Ended, deadline, run_until, seconds};
use crate::exit::Outcome;

/// How long the ONNX CUDA provider's trial may take: the driver, CUDA's
/// and cuDNN's libraries loaded, and a session of the model built.
const ONNX_TRIAL_DEADLINE: Duration = Duration::from_secs(120);

/// Whether ONNX Runtime's CUDA provider starts with the model at `model`
/// on the GPU `uuid` (the first the run takes; else CUDA's first),
/// tried in a short-lived child (`pipeline probe-onnx-cuda`) that loads
/// `runtime`, the library this process found. The provider is listed by
/// every `onnxruntime-gpu`, and starts only with the CUDA and cuDNN of its
/// build; started in this process, it would keep its context and memory
/// on that GPU until the run ends. `Err` says why not, in one line.
pub(crate) fn onnx_cuda_starts(
    model: &Path,
    runtime: Option<&str>,
    uuid: Option<&str>,
) -> Result<(), String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the pipeline executable: {e}"))?;
    let mut command = Command::new(exe);
    command
        .arg("probe-onnx-cuda")
        .arg(model)
        .stdin(Stdio::null());
    if let Some(runtime) = runtime {
        command.arg("--runtime").arg(runtime);
    }
    if let Some(uuid) = uuid {
        command
            .env("CUDA_VISIBLE_DEVICES", uuid)
            .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    }
    if let Some(dir) = pipeline_core::runtime_dir_for_children() {
        command.env("XDG_RUNTIME_DIR", dir);
    }
    onnx_trial(command, deadline(ONNX_TRIAL_DEADLINE))
}

/// The trial `command` run to its end, or for `deadline` at most: `Err`
/// says why the provider does not start, in one line.
pub(super) fn onnx_trial(mut command: Command, deadline: Duration) -> Result<(), String> {
    let output = match run_until(&mut command, deadline) {
        Ok(output) => output,
        Err(Ended::NotStarted(e)) => {
            return Err(format!(
                "cannot start the trial of ONNX Runtime's CUDA provider: {e}"
            ));
        }
        Err(Ended::TimedOut) => {
            return Err(format!(
                "the trial of ONNX Runtime's CUDA provider did not answer within {} and was \
                 stopped (is the CUDA driver hung? nvidia-smi says)",
                seconds(deadline)
            ));
        }
    };
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().map(str::trim).rev().find(|l| !l.is_empty());
    Err(match last {
        Some(line) => line
            .strip_prefix("pipeline: error: ")
            .unwrap_or(line)
            .to_owned(),
        None => format!(
            "the trial of ONNX Runtime's CUDA provider ended ({})",
            coordinator::describe_exit(&output.status)
        ),
    })
}

/// The child's side of [`onnx_cuda_starts`]: a session of the model on
/// the CUDA provider, started and dropped; or why it does not start.
pub(crate) fn try_onnx_cuda(model: &Path, runtime: Option<&str>) -> Outcome {
    if let Some(library) = runtime
        && let Err(e) = gpu_worker::onnx::runtime::use_library(library)
    {
        return Outcome::Failed(e.clone());
    }
    match gpu_worker::onnx::graph::session_on(model, 1, true) {
        Ok(_) => Outcome::Success,
        Err(why) => Outcome::Failed(why),
    }
}
