//! Backoff on device memory exhaustion, the seeds' rule: on an out-of-memory
//! error, free cached memory, halve the batch, and run the same images again;
//! keep halving until it fits. At batch size 1 the item fails with kind `oom`
//! instead of looping. Every change of batch size is reported.

use loader::Batch;
use pipeline_core::{ItemError, ItemErrorKind, ItemIndex, Prediction, SpanTimes};

use engine_seam::{Engine, EngineError, PixelBatch};

/// The batch size went down because the device ran out of memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSizeChange {
    /// Size that did not fit.
    pub from: usize,
    /// Size tried next.
    pub to: usize,
    /// What the device said.
    pub reason: String,
}

/// One item's outcome on the device.
pub type ItemResult = (ItemIndex, Result<Prediction, ItemError>);

/// The current batch size of one device, shrinking on memory exhaustion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomBackoff {
    batch_size: usize,
    shrinks: u32,
}

pub use engine_seam::batch::{MAX_START_BATCH, start_batch};

impl OomBackoff {
    /// Starts at `batch_size` (at least 1).
    pub fn new(batch_size: usize) -> Self {
        Self {
            batch_size: batch_size.max(1),
            shrinks: 0,
        }
    }

    /// The size the next forward pass uses.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// How many times the batch was halved.
    pub fn shrinks(&self) -> u32 {
        self.shrinks
    }

    /// Runs every loaded image of `batch`, in sub-batches of the current
    /// size (each padded to that size), and returns one result per row in
    /// row order. The loader's failures are not included. Each pass's stage
    /// times are added to `times`.
    pub fn run(
        &mut self,
        engine: &dyn Engine,
        batch: &Batch,
        times: &mut SpanTimes,
        on_change: &mut dyn FnMut(&BatchSizeChange),
    ) -> Result<Vec<ItemResult>, EngineError> {
        let rows = batch.indices.len();
        let image_len = batch.image_len();
        let side = batch.side as usize;
        let mut results = Vec::with_capacity(rows);
        let mut start = 0;
        while start < rows {
            let size = self.batch_size;
            let end = (start + size).min(rows);
            let pixels = &batch.pixels[start * image_len..end * image_len];
            let pass = PixelBatch::new(pixels, end - start, size, side, &batch.normalize);
            match engine.infer_timed(&pass, times) {
                Ok(predictions) => {
                    results.extend(
                        batch.indices[start..end]
                            .iter()
                            .copied()
                            .zip(predictions.into_iter().map(Ok)),
                    );
                    start = end;
                }
                Err(EngineError::OutOfMemory { message, .. }) => {
                    engine.release_cached_memory();
                    if size == 1 {
                        let error = ItemError::new(
                            ItemErrorKind::Oom,
                            format!("device out of memory at batch size 1: {message}"),
                        );
                        results.push((batch.indices[start], Err(error)));
                        start += 1;
                    } else {
                        let change = BatchSizeChange {
                            from: size,
                            to: size / 2,
                            reason: message,
                        };
                        self.batch_size = change.to;
                        self.shrinks += 1;
                        on_change(&change);
                    }
                }
                Err(other) => return Err(other),
            }
        }
        Ok(results)
    }
}
