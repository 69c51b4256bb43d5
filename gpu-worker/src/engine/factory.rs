//! The engine factory: the one place that names an engine type. The
//! worker, `--model-only` and everything else ask it for an [`Engine`] by
//! the configured [`EngineKind`]; a new engine, in its own folder behind
//! the seam, adds its arm here and nowhere else (`cli/tests/it/house.rs`
//! checks).

use pipeline_core::{EngineKind, Task, WorkerConfig};

use super::{Engine, OpenError};

/// The configured engine on the configured device, with its model.
pub(crate) fn open(config: &WorkerConfig) -> Result<Box<dyn Engine>, OpenError> {
    if config.task == Task::Raw && config.engine != EngineKind::Onnx {
        return Err(OpenError::Model(
            "--task raw reads an ONNX model's outputs; the built-in models embed or classify"
                .to_owned(),
        ));
    }
    Ok(match config.engine {
        EngineKind::Burn => Box::new(crate::burn_engine::BurnEngine::open(config)?),
        EngineKind::Cuda => Box::new(crate::cuda::engine::CudaEngine::open(config)?),
        EngineKind::Onnx => Box::new(crate::onnx::engine::OnnxEngine::for_worker(config)?),
    })
}
