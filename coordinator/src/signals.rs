//! SIGINT and SIGTERM during a run: the first one asks the run to stop
//! handing out work, finish what is in flight within the grace period and
//! exit resumable; a second one terminates at once (committed parts are
//! safe either way, each being written atomically).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::{SigId, flag, low_level};

/// The run's signal handlers, removed on drop.
pub(crate) struct StopSignals {
    received: Arc<AtomicBool>,
    which: Arc<AtomicUsize>,
    ids: Vec<SigId>,
}

impl StopSignals {
    /// Installs the handlers.
    pub(crate) fn install() -> std::io::Result<Self> {
        let received = Arc::new(AtomicBool::new(false));
        let which = Arc::new(AtomicUsize::new(0));
        let mut ids = Vec::new();
        for signal in [SIGINT, SIGTERM] {
            // Order matters: the default action runs only if an earlier
            // signal already set the flag.
            ids.push(flag::register_conditional_default(
                signal,
                Arc::clone(&received),
            )?);
            ids.push(flag::register(signal, Arc::clone(&received))?);
            ids.push(flag::register_usize(
                signal,
                Arc::clone(&which),
                signal as usize,
            )?);
        }
        Ok(Self {
            received,
            which,
            ids,
        })
    }

    /// The signal that asked the run to stop, if one did.
    pub(crate) fn received(&self) -> Option<i32> {
        if !self.received.load(Ordering::SeqCst) {
            return None;
        }
        i32::try_from(self.which.load(Ordering::SeqCst)).ok()
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            low_level::unregister(id);
        }
    }
}

/// `SIGTERM` for 15.
pub(crate) fn signal_name(signal: i32) -> String {
    match signal {
        SIGINT => "SIGINT".into(),
        SIGTERM => "SIGTERM".into(),
        other => format!("signal {other}"),
    }
}
