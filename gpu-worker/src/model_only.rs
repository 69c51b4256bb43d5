//! `pipeline bench --model-only`: the model alone on pre-made `u8`
//! batches — no files, no decoder, no processes — the ceiling that the
//! whole pipeline's throughput is compared with.

use std::time::Instant;

use pipeline_core::{SpanTimes, WorkerConfig};

use crate::worker::{SetupError, open_engine};
use engine_seam::{EngineError, PixelBatch};

/// One measured run of the model alone.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOnlyRun {
    /// Images per forward pass.
    pub batch_size: usize,
    /// Images per second over the measured passes (the warm-up pass is not
    /// counted).
    pub images_per_s: f64,
    /// Images in the measured passes.
    pub images: u64,
    /// Stage times of the measured passes.
    pub times: SpanTimes,
}

/// Why a model-only run stopped.
#[derive(Debug, thiserror::Error)]
pub enum ModelOnlyError {
    /// The device or model did not open.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// A forward pass failed.
    #[error("{worker}: {error}")]
    Pass {
        /// The worker's name.
        worker: String,
        /// What the engine said.
        error: EngineError,
    },
}

/// Opens `config`'s device and model, runs one warm-up pass (kernel
/// compilation, autotune), then `batches` passes of full batches of
/// deterministic pixels, timed.
pub fn model_only(config: &WorkerConfig, batches: usize) -> Result<ModelOnlyRun, ModelOnlyError> {
    let (engine, batch_size) = open_engine(config)?;
    let spec = &config.preprocess;
    let side = spec.crop as usize;
    let pixels = pixels(batch_size * 3 * side * side);
    let pass_error = |error| ModelOnlyError::Pass {
        worker: config.name.clone(),
        error,
    };
    let batch = PixelBatch::new(&pixels, batch_size, batch_size, side, &spec.normalize);
    let launch = |times: &mut SpanTimes| engine.launch(&batch, times).map_err(pass_error);
    engine
        .warm_up(batch_size, side, &spec.normalize)
        .map_err(pass_error)?;
    // As a worker runs them: each pass is queued before the last one's
    // results are read (see `Engine::launch`).
    let mut times = SpanTimes::default();
    let started = Instant::now();
    let mut in_flight = None;
    for _ in 0..batches.max(1) {
        let next = launch(&mut times)?;
        if let Some(previous) = in_flight.replace(next) {
            previous.finish(&mut times).map_err(pass_error)?;
        }
    }
    if let Some(last) = in_flight {
        last.finish(&mut times).map_err(pass_error)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let images = (batches.max(1) * batch_size) as u64;
    Ok(ModelOnlyRun {
        batch_size,
        images_per_s: images as f64 / seconds.max(1e-9),
        images,
        times,
    })
}

/// Photo-like byte statistics without a decoder: a fixed xorshift stream.
fn pixels(len: usize) -> Vec<u8> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        })
        .collect()
}
