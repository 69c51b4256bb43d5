//! Exit codes, decided here and nowhere else, so scripts can trust them:
//! 0 every item succeeded, 1 the output is complete but some items failed,
//! 2 the run itself failed (bad flag, path, weights, config, or not built).

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Everything worked.
    Success,
    /// The output is complete, but some items are error records.
    ItemsFailed,
    /// The run could not do its job; the message is one line for the user.
    Failed(String),
}

impl Outcome {
    pub(crate) const ITEMS_FAILED: u8 = 1;
    pub(crate) const RUN_FAILED: u8 = 2;

    /// Prints what the user needs and returns the exit code.
    pub(crate) fn report(self) -> ExitCode {
        match self {
            Outcome::Success => ExitCode::SUCCESS,
            Outcome::ItemsFailed => ExitCode::from(Self::ITEMS_FAILED),
            Outcome::Failed(message) => {
                // One line, whatever the underlying error printed.
                let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
                eprintln!("pipeline: error: {line}");
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
