//! `pipeline`: run an image model over a whole dataset on every GPU of a
//! machine (or its CPU), without losing or duplicating an image.
//!
//! This crate is the clap front end only: flags become validated configs of
//! the library crates, and every outcome becomes an exit code in `exit.rs`.

mod args;
mod devices;
mod exit;
mod infer;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::exit::{Outcome, not_built};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Infer(args) => infer::run(&args),
        Command::Devices(args) => devices::run(args.json),
        Command::Bench(_) => not_built("bench", 7),
        Command::Merge(_) => not_built("merge", 6),
        Command::Worker => worker(),
    };
    outcome.report()
}

/// The worker process: the protocol on stdin/stdout, logs on stderr.
fn worker() -> Outcome {
    gpu_worker::failpoints::setup_from_env();
    let stdout = std::io::stdout();
    match gpu_worker::serve(std::io::stdin(), &mut stdout.lock()) {
        Ok(()) => Outcome::Success,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}
