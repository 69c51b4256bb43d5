//! `pipeline`: run an image model over a whole dataset on every GPU of a
//! machine (or its CPU), without losing or duplicating an image.
//!
//! This file is the clap front end only: flags become validated configs of
//! the library crates, and every outcome becomes an exit code in `exit.rs`.

mod args;
mod exit;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::exit::not_built;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Infer(_) => not_built("infer", 4),
        Command::Devices(_) => not_built("devices", 4),
        Command::Bench(_) => not_built("bench", 7),
        Command::Merge(_) => not_built("merge", 6),
        Command::Worker(_) => not_built("worker", 4),
    };
    outcome.report()
}
