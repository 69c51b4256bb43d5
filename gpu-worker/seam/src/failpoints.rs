//! Fault injection for tests (cargo feature `failpoints`; compiled out
//! otherwise). No machine here has a GPU, so device memory exhaustion is
//! injected where a real one would surface:
//!
//! - `FAILPOINTS=engine-oom=return(N)`: every forward pass of more than `N`
//!   images fails as an out-of-memory error from the runtime would;
//! - `FAILPOINTS=engine-oom=panic(out of memory)`: every forward pass panics
//!   as wgpu's error handler does;
//! - `FAILPOINTS=engine-oom-overlap=return(FILE)`: every pass launched while
//!   another is in flight fails as an out-of-memory error would (two
//!   passes that do not fit side by side), and creates `FILE` the first
//!   time, so a test knows it fired;
//! - `FAILPOINTS=worker-crash=return(FILE)`: the first worker to finish a
//!   chunk while `FILE` does not exist creates it and aborts (SIGABRT)
//!   before reporting the chunk — one dead worker, as a driver crash or
//!   `kill -9` would leave, and never a second;
//! - `FAILPOINTS=worker-crash-on=return(TEXT)`: every worker that is sent
//!   an item whose path contains `TEXT` aborts: an image that kills any
//!   worker, as a driver bug triggered by one file would;
//! - `FAILPOINTS=worker-hang=return(FILE)`: the first worker to finish a
//!   chunk while `FILE` does not exist creates it and then sleeps forever
//!   instead of reporting the chunk;
//! - `FAILPOINTS=device-lost=return(FILE)`: the first worker to start a
//!   batch while `FILE` does not exist creates it and exits as a worker
//!   whose device ran out of memory or was lost;
//! - `FAILPOINTS=worker-setup=return(TEXT)`: every worker's setup fails
//!   with `TEXT`, as unusable weights or a missing device would.

/// Reads `FAILPOINTS` from the environment; call once at process start.
pub fn setup_from_env() {
    #[cfg(feature = "failpoints")]
    std::mem::forget(fail::FailScenario::setup());
}

/// Fails a forward pass of `batch` images when the `engine-oom` point says so.
pub fn inject_oom(batch: usize) -> Result<(), String> {
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

/// Fails a pass launched while `in_flight` others are when the
/// `engine-oom-overlap` point is set.
pub fn inject_overlap_oom(in_flight: usize) -> Result<(), String> {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("engine-oom-overlap", |marker: Option<String>| {
        if in_flight == 0 {
            return Ok(());
        }
        first_to_create(marker);
        Err(format!(
            "out of memory (injected: a pass launched while {in_flight} in flight)"
        ))
    });
    let _ = in_flight;
    Ok(())
}

/// Fails the worker's setup when the `worker-setup` point says so.
pub fn setup_fails() -> Result<(), String> {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("worker-setup", |text: Option<String>| {
        Err(text.unwrap_or_else(|| "setup failed (injected)".to_owned()))
    });
    Ok(())
}

/// Creates `marker`; true for the one process that created it.
#[cfg(feature = "failpoints")]
fn first_to_create(marker: Option<String>) -> bool {
    marker.is_some_and(|m| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(m)
            .is_ok()
    })
}

/// Aborts the process once per marker file, as a driver crash would.
pub fn crash_once() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("worker-crash", |marker: Option<String>| {
        if first_to_create(marker) {
            eprintln!("failpoint worker-crash: aborting");
            std::process::abort();
        }
    });
}

/// Aborts when a received item's path contains the point's text.
pub fn crash_on(items: &[pipeline_core::WorkItemSpec]) {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("worker-crash-on", |text: Option<String>| {
        let text = text.unwrap_or_default();
        let hit = !text.is_empty()
            && items
                .iter()
                .any(|item| item.location.to_string().contains(&text));
        if hit {
            eprintln!("failpoint worker-crash-on: aborting");
            std::process::abort();
        }
    });
    let _ = items;
}

/// Hangs forever, once per marker file, as a wedged driver would.
pub fn hang_once() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("worker-hang", |marker: Option<String>| {
        if first_to_create(marker) {
            eprintln!("failpoint worker-hang: hanging");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
    });
}

/// Fails once per marker file as a lost device would.
pub fn device_lost_once() -> Result<(), String> {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("device-lost", |marker: Option<String>| {
        if first_to_create(marker) {
            return Err("device lost (injected)".to_owned());
        }
        Ok(())
    });
    Ok(())
}
