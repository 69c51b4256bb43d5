//! Turning a caught panic into a message: the loader and the workers catch
//! panics at item and batch boundaries and report them as errors.

use std::any::Any;

/// The text a `panic!` carried, or "unknown panic".
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}
