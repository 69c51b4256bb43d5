//! Exit codes, decided here and nowhere else, so scripts can trust them:
//! 0 every item succeeded, 1 the output is complete but some items failed,
//! 2 the run itself failed (bad flag, path, weights, config, full disk, no
//! worker could run), 128 + N a signal N stopped it (130 SIGINT, 143 SIGTERM) and
//! the same command resumes it.

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
    /// A signal stopped the run, which can resume; the message says so.
    Interrupted {
        /// The signal number.
        signal: i32,
        /// One line for the user.
        message: String,
    },
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
                eprintln!("pipeline: error: {}", one_line(&message));
                ExitCode::from(Self::RUN_FAILED)
            }
            Outcome::Interrupted { signal, message } => {
                eprintln!("pipeline: {}", one_line(&message));
                ExitCode::from(u8::try_from(128 + signal).unwrap_or(Self::RUN_FAILED))
            }
        }
    }
}

/// Writes `text` to stdout. A reader that went away (`pipeline models |
/// head`) is not an error: the listing did its job.
pub(crate) fn print(text: &str) -> Outcome {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Outcome::Success,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Outcome::Success,
        Err(e) => Outcome::Failed(format!("cannot write to stdout: {e}")),
    }
}

/// One line, whatever the underlying error printed, and without a
/// credential: every error line passes here, so a URL that a message
/// quotes whole (a presigned model's, a listed item's) or a token from the
/// environment is redacted even where its maker forgot.
fn one_line(message: &str) -> String {
    let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    pipeline_core::redact_text(&line).into_owned()
}
