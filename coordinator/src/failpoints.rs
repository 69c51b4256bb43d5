//! Fault injection for tests (cargo feature `failpoints`; compiled out
//! otherwise), where a small real filesystem is not at hand:
//!
//! - `FAILPOINTS=part-write=2*off->return`: the first two part files are
//!   written, every later one fails with ENOSPC, as a full disk would;
//! - `FAILPOINTS=after-scan=return(FILE)`: `FILE` is deleted right after
//!   the scan listed it, as a user cleaning up during a run would.

use std::io;

/// Fails a part write when the `part-write` point says so.
pub(crate) fn part_write() -> io::Result<()> {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("part-write", |_| Err(io::Error::from_raw_os_error(28)));
    Ok(())
}

/// Deletes the file the `after-scan` point names.
pub(crate) fn after_scan() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("after-scan", |file: Option<String>| {
        if let Some(file) = file {
            let _ = std::fs::remove_file(file);
        }
    });
}
