//! What a span cost inside a worker: each stage's time, and the remote
//! requests it had to send again. Travels in `FromWorker::SpanDone`.

use serde::{Deserialize, Serialize};

/// Where a span's time went inside the worker, stage by stage.
///
/// The loader's stages are thread-seconds summed over its decoder threads;
/// the device's stages are seconds of the device thread, and each is closed
/// by a device sync, so they do not overlap.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpanTimes {
    /// Seconds the device thread waited for the loader.
    pub wait_loader_s: f64,
    /// Seconds in forward passes, including upload and read-back.
    pub infer_s: f64,
    /// Loader thread-seconds reading files.
    pub read_s: f64,
    /// Loader thread-seconds decoding and preprocessing.
    pub decode_s: f64,
    /// Device seconds copying `u8` pixels up and normalising them.
    pub upload_s: f64,
    /// Device seconds running the model.
    pub compute_s: f64,
    /// Device seconds reading results back to the host.
    pub readback_s: f64,
    /// Each forward pass's seconds, upload to read-back (batch latency).
    pub batch_s: Vec<f64>,
    /// Remote requests sent again, by why (counts, not times: they travel
    /// with the span's stage figures).
    pub remote_retries: RemoteRetries,
}

/// Remote requests sent again, by what went wrong with the one before.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoteRetries {
    /// No answer: the connection was refused or reset before the headers.
    pub connect: u64,
    /// `--io-timeout` passed before the headers or the body's end.
    pub timeout: u64,
    /// A 5xx (but 503) or a 408.
    pub server: u64,
    /// A 429, or a 503 (S3's SlowDown).
    pub throttled: u64,
    /// The body broke after the headers: a reset, fewer bytes than
    /// declared, a broken chunked or compressed transfer. Resumed with a
    /// ranged request where the server allows it.
    pub body: u64,
}

impl RemoteRetries {
    /// Every retry, whatever its kind.
    pub fn total(&self) -> u64 {
        self.connect + self.timeout + self.server + self.throttled + self.body
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &RemoteRetries) {
        self.connect += other.connect;
        self.timeout += other.timeout;
        self.server += other.server;
        self.throttled += other.throttled;
        self.body += other.body;
    }

    /// These counts less `earlier`'s (what happened since `earlier`).
    pub fn since(&self, earlier: &RemoteRetries) -> RemoteRetries {
        RemoteRetries {
            connect: self.connect.saturating_sub(earlier.connect),
            timeout: self.timeout.saturating_sub(earlier.timeout),
            server: self.server.saturating_sub(earlier.server),
            throttled: self.throttled.saturating_sub(earlier.throttled),
            body: self.body.saturating_sub(earlier.body),
        }
    }
}

impl SpanTimes {
    /// Adds `other`'s times to these.
    pub fn add(&mut self, other: &SpanTimes) {
        self.wait_loader_s += other.wait_loader_s;
        self.infer_s += other.infer_s;
        self.read_s += other.read_s;
        self.decode_s += other.decode_s;
        self.upload_s += other.upload_s;
        self.compute_s += other.compute_s;
        self.readback_s += other.readback_s;
        self.batch_s.extend_from_slice(&other.batch_s);
        self.remote_retries.add(&other.remote_retries);
    }

    /// Device seconds: upload, compute and read-back.
    pub fn device_s(&self) -> f64 {
        self.upload_s + self.compute_s + self.readback_s
    }
}
