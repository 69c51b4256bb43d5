//! Exit codes, decided here and nowhere else, so scripts can trust them:
//! 0 every item succeeded, 1 the output is complete but some items failed,
//! 2 the run itself failed (bad flag, path, weights, config, or not built).

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The run could not do its job; the message is one line for the user.
    Failed(String),
}

impl Outcome {
    pub(crate) const RUN_FAILED: u8 = 2;

    /// Prints what the user needs and returns the exit code.
    pub(crate) fn report(self) -> ExitCode {
        match self {
            Outcome::Failed(message) => {
                eprintln!("pipeline: error: {message}");
                ExitCode::from(Self::RUN_FAILED)
            }
        }
    }
}

/// A subcommand whose issue has not landed yet.
pub(crate) fn not_built(command: &str, issue: u32) -> Outcome {
    Outcome::Failed(format!(
        "`pipeline {command}` is not built yet (issue #{issue}); nothing was run"
    ))
}
