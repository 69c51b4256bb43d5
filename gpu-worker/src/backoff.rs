//! Backoff on device memory exhaustion, the seeds' rule: on an out-of-memory
//! error, free cached memory, halve the batch, and run the same images again;
//! keep halving until it fits. At batch size 1 the item fails with kind `oom`
//! instead of looping. Every change of batch size is reported.

use loader::Batch;
use pipeline_core::{ItemError, ItemErrorKind, ItemIndex, ModelKind, Prediction, SpanTimes};

use crate::engine::{Engine, EngineError, PixelBatch};

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

/// Largest starting batch [`start_batch`] picks.
pub const MAX_START_BATCH: usize = 256;

/// The starting batch for a device with `free_bytes` of free memory (from
/// NVML), by the registry's memory model of `model`: the largest power of
/// two that fits in 70% of it (the rest is headroom for weights, the
/// allocator's caches and other processes), between 1 and
/// [`MAX_START_BATCH`].
pub fn start_batch(free_bytes: u64, model: ModelKind) -> usize {
    let memory = model.spec().memory;
    let usable = (free_bytes / 10 * 7).saturating_sub(memory.weight_bytes());
    let fits = usable / memory.bytes_per_image();
    let fits = usize::try_from(fits)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_START_BATCH);
    1 << fits.ilog2()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_batch_follows_free_memory() {
        const GIB: u64 = 1 << 30;
        assert_eq!(start_batch(80 * GIB, ModelKind::Resnet50), MAX_START_BATCH);
        // 70% of 8 GiB is 5.6 GiB: 47 ResNet-50 images, so 32.
        assert_eq!(start_batch(8 * GIB, ModelKind::Resnet50), 32);
        assert_eq!(start_batch(8 * GIB, ModelKind::Resnet18), 128);
        assert_eq!(start_batch(100 << 20, ModelKind::Resnet50), 1);
        assert_eq!(start_batch(0, ModelKind::Tiny), 1);
    }

    #[test]
    fn big_transformers_start_smaller_than_resnet50() {
        const GIB: u64 = 1 << 30;
        // 5.6 GiB less 1.2 GB of weights, at 280 MiB an image: 16.
        assert_eq!(start_batch(8 * GIB, ModelKind::ClipVitL14), 16);
        assert!(
            start_batch(8 * GIB, ModelKind::ClipVitL14) < start_batch(8 * GIB, ModelKind::Resnet50)
        );
        assert_eq!(start_batch(GIB, ModelKind::Dinov2Vitl14), 1);
    }
}
