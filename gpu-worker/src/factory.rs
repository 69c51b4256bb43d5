//! The engine factory: the one place that names an engine type. The
//! worker, `--model-only` and everything else ask it for an [`Engine`] by
//! the configured [`EngineKind`]; a new engine, in its own folder behind
//! the seam, adds its arm here and nowhere else (`cli/tests/it/house.rs`
//! checks).

use pipeline_core::{EngineKind, Task, WorkerConfig};

use engine_seam::{Engine, OpenError};

/// The configured engine on the configured device, with its model.
pub(crate) fn open(config: &WorkerConfig) -> Result<Box<dyn Engine>, OpenError> {
    if config.task == Task::Raw && config.engine != EngineKind::Onnx {
        return Err(OpenError::Model(
            "--task raw reads an ONNX model's outputs; the built-in models embed or classify"
                .to_owned(),
        ));
    }
    Ok(match config.engine {
        EngineKind::Burn => Box::new(engine_burn::BurnEngine::open(config)?),
        EngineKind::Cuda => Box::new(engine_cuda::engine::CudaEngine::open(
            config,
            cuda_wiring(),
        )?),
        EngineKind::Onnx => Box::new(engine_onnx::engine::OnnxEngine::for_worker(config)?),
    })
}

/// What the CUDA engine takes from the worker: the machine's GPU list
/// (Vulkan's and NVIDIA's, joined) to find `gpu:N`, and the burn engine's
/// CNN loader, so a ResNet or EfficientNet-Lite0 checkpoint loads one way
/// for both engines.
pub fn cuda_wiring() -> engine_cuda::Wiring {
    engine_cuda::Wiring {
        gpu_address: |index| {
            engine_burn::gpus()
                .into_iter()
                .nth(index)
                .map(|gpu| engine_cuda::GpuAddress {
                    uuid: gpu.uuid,
                    pci_bus_id: gpu.pci_bus_id,
                })
        },
        lower_cnn: engine_burn::lowered_cnn,
    }
}

/// The CUDA engine's plan of a ResNet or EfficientNet-Lite0 checkpoint,
/// lowered by the burn engine's loader.
pub fn cnn_plan(
    arch: &model_families::Architecture,
    name: &str,
    path: &std::path::Path,
) -> Result<engine_cuda::plan::CnnPlan, model_families::WeightsError> {
    engine_cuda::plan::cnn_plan(engine_burn::lowered_cnn, arch, name, path)
}

/// The CUDA engine's plan of the seeded CNN weights the burn engine draws
/// from `seed`.
pub fn cnn_plan_seeded(
    arch: &model_families::Architecture,
    name: &str,
    seed: u64,
) -> Result<engine_cuda::plan::CnnPlan, model_families::WeightsError> {
    engine_cuda::plan::cnn_plan_seeded(engine_burn::lowered_cnn, arch, name, seed)
}
