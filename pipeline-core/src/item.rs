//! Items (one input image each) and the ways a single item can fail.
//!
//! A failed item is a record in the output, never a crash: every kind here is
//! something a user can act on, and its `as_str` is what the output carries.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Stable position of an item in the dataset manifest (sorted relative path).
pub type ItemIndex = u64;

/// Why one item produced no prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemErrorKind {
    /// The file vanished (e.g. deleted between scan and load).
    NotFound,
    /// The file exists but may not be read.
    Permission,
    /// A known format whose bytes are corrupt, truncated or empty.
    Decode,
    /// Not an image format the tool reads (or not a regular file).
    Unsupported,
    /// Over the decompression-bomb limits (pixels or allocation).
    TooLarge,
    /// Other I/O failure while reading the file.
    Io,
    /// The device ran out of memory even at batch size 1.
    Oom,
    /// The item kept killing the worker that processed it.
    WorkerCrash,
}

impl ItemErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ItemErrorKind; 8] = [
        Self::NotFound,
        Self::Permission,
        Self::Decode,
        Self::Unsupported,
        Self::TooLarge,
        Self::Io,
        Self::Oom,
        Self::WorkerCrash,
    ];

    /// The name written in output records (`"decode"`, `"too_large"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "not_found",
            Self::Permission => "permission",
            Self::Decode => "decode",
            Self::Unsupported => "unsupported",
            Self::TooLarge => "too_large",
            Self::Io => "io",
            Self::Oom => "oom",
            Self::WorkerCrash => "worker_crash",
        }
    }
}

impl fmt::Display for ItemErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One item's failure: a kind for scripts and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ItemError {
    /// What went wrong, as a stable machine-readable kind.
    pub kind: ItemErrorKind,
    /// What went wrong, in words.
    pub message: String,
}

impl ItemError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ItemErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_as_their_names() {
        for kind in ItemErrorKind::ALL {
            let json = serde_json::to_string(&kind).expect("a unit enum serializes");
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            let back: ItemErrorKind = serde_json::from_str(&json).expect("round trip");
            assert_eq!(back, kind);
        }
    }
}
