//! How many images an engine's first pass takes: from the device's free
//! memory and the model ([`start_batch`]). The worker's backoff halves it
//! from there when the device runs out of memory.

use pipeline_core::ModelKind;

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
