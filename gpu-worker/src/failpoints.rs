//! Fault injection for tests (cargo feature `failpoints`; compiled out
//! otherwise). No machine here has a GPU, so device memory exhaustion is
//! injected where a real one would surface:
//!
//! - `FAILPOINTS=engine-oom=return(N)`: every forward pass of more than `N`
//!   images fails as an out-of-memory error from the runtime would;
//! - `FAILPOINTS=engine-oom=panic(out of memory)`: every forward pass panics
//!   as wgpu's error handler does;
//! - `FAILPOINTS=worker-crash=return(FILE)`: the first worker to finish a
//!   chunk while `FILE` does not exist creates it and aborts (SIGABRT)
//!   before reporting the chunk — one dead worker, as a driver crash or
//!   `kill -9` would leave, and never a second.

/// Reads `FAILPOINTS` from the environment; call once at process start.
pub fn setup_from_env() {
    #[cfg(feature = "failpoints")]
    std::mem::forget(fail::FailScenario::setup());
}

/// Fails a forward pass of `batch` images when the `engine-oom` point says so.
pub(crate) fn inject_oom(batch: usize) -> Result<(), String> {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("engine-oom", |limit: Option<String>| {
        let limit = limit.and_then(|l| l.parse::<usize>().ok()).unwrap_or(0);
        if batch > limit {
            Err(format!("out of memory (injected: batch {batch} > {limit})"))
        } else {
            Ok(())
        }
    });
    let _ = batch;
    Ok(())
}

/// Aborts the process once per marker file, as a driver crash would.
pub(crate) fn crash_once() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("worker-crash", |marker: Option<String>| {
        let created = marker.is_some_and(|m| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(m)
                .is_ok()
        });
        if created {
            eprintln!("failpoint worker-crash: aborting");
            std::process::abort();
        }
    });
}
