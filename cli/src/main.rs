//! `pipeline`: run an image model over a whole dataset on every GPU of a
//! machine (or its CPU), without losing or duplicating an image.
//!
//! This crate is the clap front end only: flags become validated configs of
//! the library crates, and every outcome becomes an exit code in `exit.rs`.

mod args;
mod bench;
mod devices;
mod diagnose;
#[cfg(test)]
mod docs_commands;
mod embed_text;
mod exit;
mod infer;
mod models;
mod onnx_args;
mod plan;
mod preprocess;
mod probe;
mod progress;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::exit::Outcome;

/// Tensors are large and short-lived: an allocator that keeps freed pages
/// saves the kernel's page faults and zeroing on every op (BENCHMARKS.md,
/// "Model only, CPU backend").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Bench(_)) {
        environment_for_bench();
    }
    // Test builds only (cargo feature `failpoints`): `FAILPOINTS=…`.
    gpu_worker::failpoints::setup_from_env();
    let outcome = match cli.command {
        Command::Infer(args) => infer::run(&args),
        Command::Devices(args) => devices::run(args.json),
        Command::Models(args) => models::run(args.json),
        Command::Bench(args) => bench::run(&args),
        Command::Merge(args) => infer::merge(&args),
        Command::EmbedText(args) => embed_text::run(&args),
        Command::Preprocess(args) => preprocess::run(&args),
        Command::Worker => return worker(),
        Command::ProbeDevices(args) => probe::print(args.cuda_order),
        Command::ProbeOnnxCuda(args) => probe::try_onnx_cuda(&args.model, args.runtime.as_deref()),
    };
    outcome.report()
}

/// `bench --model-only` and `--loader-only` run models in this process,
/// not in a worker given its environment (`coordinator/src/workers.rs`).
/// So when that environment is not already ours, this process is replaced
/// by itself with it set: a usable `XDG_RUNTIME_DIR`, so Mesa's
/// "XDG_RUNTIME_DIR is invalid" lines stay away here too, and the
/// allocator's setting ([`pipeline_core::allocator_env`]), so the figures
/// are a worker's. (`exec` keeps the pid, so signals and the exit code are
/// the bench's own.)
fn environment_for_bench() {
    use std::os::unix::process::CommandExt;
    let runtime = pipeline_core::runtime_dir_for_children();
    let allocator = pipeline_core::allocator_env();
    if runtime.is_none() && allocator.is_none() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut command = std::process::Command::new(exe);
    command.args(std::env::args_os().skip(1));
    if let Some(dir) = runtime {
        command.env("XDG_RUNTIME_DIR", dir);
    }
    if let Some((name, value)) = allocator {
        command.env(name, value);
    }
    let error = command.exec();
    // Only reached when exec failed: run here, chatter and all.
    eprintln!("pipeline: warning: cannot set the bench's environment: {error}");
}

/// The worker process: the protocol on stdin/stdout, logs on stderr, and
/// its own exit codes (`pipeline_core::WORKER_EXIT_*`).
fn worker() -> ExitCode {
    if let Err(e) = gpu_worker::ignore_stop_signals() {
        eprintln!("pipeline worker: cannot ignore SIGINT/SIGTERM: {e}");
    }
    let stdout = std::io::stdout();
    match gpu_worker::serve(std::io::stdin(), &mut stdout.lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(gpu_worker::WorkerError::DeviceLost(message)) => {
            eprintln!("pipeline worker: {message}");
            ExitCode::from(pipeline_core::WORKER_EXIT_DEVICE_LOST as u8)
        }
        // Said to the coordinator already (or to stderr if it could not be).
        Err(gpu_worker::WorkerError::Failed(_)) => ExitCode::from(Outcome::RUN_FAILED),
        Err(e @ gpu_worker::WorkerError::Orphaned) => {
            eprintln!("pipeline worker: {e}; exiting");
            ExitCode::from(pipeline_core::WORKER_EXIT_ORPHANED as u8)
        }
        Err(e) => Outcome::Failed(e.to_string()).report(),
    }
}
