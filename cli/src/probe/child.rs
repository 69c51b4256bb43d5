//! A probe's child process, run under a deadline: started with stdin
//! closed, its stdout and stderr read on threads of their own (a full pipe
//! would stall it), killed when it runs past its deadline
//! (`PIPELINE_PROBE_TIMEOUT_S` overrides the default).

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `default`, or `PIPELINE_PROBE_TIMEOUT_S` seconds where that is set to
/// a positive number (a machine whose driver starts slower still).
pub(super) fn deadline(default: Duration) -> Duration {
    std::env::var("PIPELINE_PROBE_TIMEOUT_S")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(default, Duration::from_secs_f64)
}

/// `deadline` as a user reads it: `60 s`, `0.2 s`.
pub(super) fn seconds(deadline: Duration) -> String {
    format!("{} s", deadline.as_secs_f64())
}

/// Why a child gave no output.
pub(super) enum Ended {
    /// It could not be started.
    NotStarted(std::io::Error),
    /// It ran past its deadline, and was killed.
    TimedOut,
}

/// How often a child is asked whether it has ended.
const POLL: Duration = Duration::from_millis(20);

/// Runs `command` (stdin closed, stdout and stderr piped, each read on a
/// thread of its own) until it ends, or kills it at `deadline`.
pub(super) fn run_until(command: &mut Command, deadline: Duration) -> Result<Output, Ended> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Ended::NotStarted)?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                // A read error leaves what was read: the child's status
                // says how it ended.
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let until = Instant::now() + deadline;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < until => std::thread::sleep(POLL),
            // Past the deadline, or it cannot be waited on: stopped. Its
            // readers are left to end with its pipes (a process it started
            // may hold them open).
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Ended::TimedOut);
            }
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}
