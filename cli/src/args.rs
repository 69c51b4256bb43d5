//! The command line, as clap derive types. Subcommands that are not built yet
//! accept any arguments so that they can say so instead of a parse error.

use clap::{Args, Parser, Subcommand};

/// Batch image inference over every GPU of a machine, or a cluster.
#[derive(Debug, Parser)]
#[command(name = "pipeline", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a model over every image under a folder and write predictions.
    Infer(Pending),
    /// List the devices `infer` can use.
    Devices(Pending),
    /// Measure throughput per stage, on real or generated images.
    Bench(Pending),
    /// Assemble the final output from the part files of all shards.
    Merge(Pending),
    /// One device's worker process (spawned by `infer`).
    #[command(hide = true)]
    Worker(Pending),
}

/// Arguments of a subcommand that is not built yet.
#[derive(Debug, Args)]
pub(crate) struct Pending {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub(crate) args: Vec<String>,
}
