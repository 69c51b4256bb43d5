//! Opening one device: burn's `flex` backend for the CPU, its wgpu runtime on
//! Vulkan for GPUs and for Mesa's software adapter (lavapipe, which burn lists
//! as `DeviceKind::Cpu` and its default selection ignores, so it is asked for
//! explicitly). Opening is lazy in burn, so `open` runs a small probe and
//! turns a failure (a panic inside the runtime) into an error naming the
//! adapter.
//!
//! GPU numbering: `gpu:N` is the N-th GPU in PCI bus order — the order of
//! `nvidia-smi` and of `CUDA_DEVICE_ORDER=PCI_BUS_ID` — over the hardware
//! Vulkan adapters and NVIDIA's GPUs as their driver lists them
//! (`nvidia-devices`), joined by PCI bus id: an NVIDIA GPU that Vulkan cannot
//! see (a CUDA container without the Vulkan loader) is still `gpu:N`, for
//! the CUDA engine, and burn's engine says it has no Vulkan driver. burn's
//! per-type index is looked up from the Vulkan adapter. A GPU in MIG mode
//! keeps its place; its MIG instances follow every whole GPU, each a
//! `gpu:N` of its own for the CUDA engine.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::tensor::{Device, DeviceKind, FloatDType, Tensor};
use pipeline_core::{DeviceSpec, Precision};

use engine_seam::DeviceError;

/// The burn device for `spec`. A GPU index is resolved through [`gpus`];
/// an index past the last GPU is an error naming the GPUs there are.
pub fn device_for(spec: &DeviceSpec) -> Result<Device, DeviceError> {
    Ok(match spec {
        DeviceSpec::Cpu => Device::flex(),
        DeviceSpec::Software => Device::vulkan(DeviceKind::Cpu),
        DeviceSpec::Gpu(index) => {
            let found = gpus();
            match found.get(*index) {
                Some(AdapterSummary {
                    burn_kind: Some(kind),
                    ..
                }) => Device::vulkan(kind.clone()),
                Some(gpu) => {
                    return Err(DeviceError {
                        spec: spec.clone(),
                        message: format!(
                            "{} has no Vulkan driver here (no Vulkan loader, or NVIDIA's \
                             driver without its graphics capability); use --engine cuda",
                            gpu.name
                        ),
                    });
                }
                None => {
                    return Err(DeviceError {
                        spec: spec.clone(),
                        message: format!(
                            "this machine has {} Vulkan GPU(s); see `pipeline devices`",
                            found.len()
                        ),
                    });
                }
            }
        }
    })
}

/// Whether models on `device` take their software forms: Mesa's lavapipe
/// (the software adapter), whose shader compiler crashes on burn's matmul,
/// `layer_norm`, 1×1-convolution and fused reduce-then-elementwise
/// kernels. The one place that decides it: the layers ask it of their
/// tensors' device (`model/layers.rs`), the engine of its own.
pub(crate) fn takes_software_forms(device: &Device) -> bool {
    // Built once: the layers ask this of every tensor they run.
    static LAVAPIPE: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    device == LAVAPIPE.get_or_init(|| Device::vulkan(DeviceKind::Cpu))
}

/// One Vulkan adapter as the driver describes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AdapterSummary {
    /// e.g. `NVIDIA A100-SXM4-80GB` or `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// `discrete`, `integrated`, `virtual`, `cpu` or `other`.
    pub kind: &'static str,
    /// Graphics API (always `vulkan` here).
    pub backend: String,
    /// Driver name and version.
    pub driver: String,
    /// PCI bus id, `domain:bus:device.function`, when the driver reports it.
    pub pci_bus_id: Option<String>,
    /// Total and free device memory in bytes, from NVML.
    pub memory: Option<(u64, u64)>,
    /// An NVIDIA GPU's UUID (`GPU-…`), which workers get as
    /// `CUDA_VISIBLE_DEVICES`.
    pub uuid: Option<String>,
    /// Whether Vulkan sees it (burn's GPU engine runs on it).
    pub vulkan: bool,
    /// An NVIDIA GPU's compute capability, `(9, 0)` for Hopper.
    pub capability: Option<(i32, i32)>,
    /// An NVIDIA GPU's place in CUDA's enumeration, where the CUDA driver
    /// was asked ([`gpus_with_cuda_order`]).
    pub cuda_index: Option<usize>,
    /// For a MIG instance (`kind` `mig`, listed after every whole GPU),
    /// the `gpu:N` index of the GPU it is part of.
    pub mig_of: Option<usize>,
    /// Whether an NVIDIA GPU is in MIG mode, with instances or without.
    pub mig_enabled: bool,
    /// How to ask for it: `gpu:N` or `software`.
    pub spec: Option<String>,
    /// burn's name for it (adapters of type `other` have none).
    #[serde(skip)]
    burn_kind: Option<DeviceKind>,
}

/// Every Vulkan adapter, in the driver's order.
pub fn adapters() -> Vec<AdapterSummary> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let infos: Vec<wgpu::AdapterInfo> =
        futures_lite::future::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
            .iter()
            .map(wgpu::Adapter::get_info)
            .collect();
    let mut per_type = [0usize; 5];
    infos
        .into_iter()
        .map(|info| {
            let (slot, kind) = match info.device_type {
                wgpu::DeviceType::DiscreteGpu => (0, "discrete"),
                wgpu::DeviceType::IntegratedGpu => (1, "integrated"),
                wgpu::DeviceType::VirtualGpu => (2, "virtual"),
                wgpu::DeviceType::Cpu => (3, "cpu"),
                wgpu::DeviceType::Other => (4, "other"),
            };
            let n = per_type[slot];
            per_type[slot] += 1;
            let burn_kind = match slot {
                0 => Some(DeviceKind::DiscreteGpu(n)),
                1 => Some(DeviceKind::IntegratedGpu(n)),
                2 => Some(DeviceKind::VirtualGpu(n)),
                3 => Some(DeviceKind::Cpu),
                _ => None,
            };
            let pci = pci_key(&info.device_pci_bus_id);
            AdapterSummary {
                name: info.name,
                kind,
                backend: format!("{:?}", info.backend).to_lowercase(),
                driver: format!("{} {}", info.driver, info.driver_info)
                    .trim()
                    .to_owned(),
                pci_bus_id: pci.map(|_| info.device_pci_bus_id.clone()),
                memory: None,
                uuid: None,
                vulkan: true,
                capability: None,
                cuda_index: None,
                mig_of: None,
                mig_enabled: false,
                spec: (slot == 3).then(|| "software".to_owned()),
                burn_kind,
            }
        })
        .collect()
}

/// The hardware GPUs, in PCI bus order, each with its `gpu:N` spec set:
/// the Vulkan adapters and NVIDIA's GPUs (NVML's memory and UUID joined to
/// the adapter at the same PCI bus id; an NVIDIA GPU Vulkan does not see
/// listed on its own, `backend` `cuda`).
pub fn gpus() -> Vec<AdapterSummary> {
    let vulkan = adapters()
        .into_iter()
        .filter(|a| matches!(a.kind, "discrete" | "integrated" | "virtual"))
        .collect();
    joined_gpus(vulkan, nvidia_devices::nvidia::nvidia_gpus())
}

/// [`gpus`], each NVIDIA GPU with its place in CUDA's enumeration under
/// this process's `CUDA_DEVICE_ORDER` (`cuda_index`), asked of the CUDA
/// driver: what `CUDA_VISIBLE_DEVICES`' indices mean. For the probe
/// child, which starts the driver for it.
pub fn gpus_with_cuda_order() -> Vec<AdapterSummary> {
    let vulkan = adapters()
        .into_iter()
        .filter(|a| matches!(a.kind, "discrete" | "integrated" | "virtual"))
        .collect();
    joined_gpus(
        vulkan,
        nvidia_devices::nvidia::with_cuda_order(nvidia_devices::nvidia::nvidia_gpus()),
    )
}

/// `vulkan`'s hardware adapters and `nvidia`'s GPUs as one list in PCI bus
/// order, one entry per PCI bus id; then each MIG instance, after every
/// whole GPU (so that a GPU's `gpu:N` stays its place in bus order, as
/// `nvidia-smi` numbers it), in its GPU's order.
fn joined_gpus(
    mut gpus: Vec<AdapterSummary>,
    nvidia: Vec<nvidia_devices::nvidia::NvidiaGpu>,
) -> Vec<AdapterSummary> {
    let mut migs = Vec::new();
    for gpu in nvidia {
        if !gpu.mig.is_empty() {
            migs.push((gpu.uuid.clone(), gpu.mig));
        }
        let key = pci_key(&gpu.pci_bus_id);
        let same = gpus
            .iter_mut()
            .find(|a| key.is_some() && a.pci_bus_id.as_deref().and_then(pci_key) == key);
        match same {
            Some(adapter) => {
                adapter.memory = gpu.memory;
                adapter.uuid = Some(gpu.uuid);
                adapter.capability = gpu.capability;
                adapter.cuda_index = gpu.cuda_index;
                adapter.mig_enabled = gpu.mig_enabled;
            }
            None => gpus.push(AdapterSummary {
                name: gpu.name,
                kind: "discrete",
                backend: "cuda".to_owned(),
                driver: gpu.driver,
                pci_bus_id: Some(gpu.pci_bus_id),
                memory: gpu.memory,
                uuid: Some(gpu.uuid),
                vulkan: false,
                capability: gpu.capability,
                cuda_index: gpu.cuda_index,
                mig_of: None,
                mig_enabled: gpu.mig_enabled,
                spec: None,
                burn_kind: None,
            }),
        }
    }
    // Stable: adapters without a bus id keep the driver's order, last.
    gpus.sort_by_key(|a| {
        a.pci_bus_id
            .as_deref()
            .and_then(pci_key)
            .unwrap_or(u64::MAX)
    });
    let whole = gpus.len();
    for parent in 0..whole {
        let Some(at) = migs
            .iter()
            .position(|(uuid, _)| gpus[parent].uuid.as_ref() == Some(uuid))
        else {
            continue;
        };
        let (_, instances) = migs.swap_remove(at);
        for mig in instances {
            let gpu = &gpus[parent];
            let instance = AdapterSummary {
                name: mig.name,
                kind: "mig",
                backend: "cuda".to_owned(),
                driver: gpu.driver.clone(),
                pci_bus_id: gpu.pci_bus_id.clone(),
                memory: mig.memory,
                uuid: Some(mig.uuid),
                vulkan: false,
                capability: gpu.capability,
                cuda_index: None,
                mig_of: Some(parent),
                mig_enabled: false,
                spec: None,
                burn_kind: None,
            };
            gpus.push(instance);
        }
    }
    for (i, gpu) in gpus.iter_mut().enumerate() {
        gpu.spec = Some(format!("gpu:{i}"));
    }
    gpus
}

/// The `gpu:N` index of the GPU at PCI bus id `id` (`0000:01:00.0`,
/// `00000000:01:00.0` or `01:00.0`).
pub fn gpu_index_by_pci(id: &str) -> Option<usize> {
    let want = pci_key(id)?;
    gpus()
        .iter()
        .position(|g| g.pci_bus_id.as_deref().and_then(pci_key) == Some(want))
}

use nvidia_devices::gpus::pci_key;
pub use nvidia_devices::gpus::same_pci_bus;

/// The NVIDIA GPUs their driver lists, by name (NVML, else the CUDA
/// driver); empty without NVIDIA's driver. Set beside the Vulkan adapters,
/// a GPU here and none there means Vulkan cannot reach the driver.
pub fn nvml_gpu_names() -> Vec<String> {
    nvidia_devices::nvidia::nvidia_gpus()
        .into_iter()
        .map(|g| g.name)
        .collect()
}

/// Opens `spec` and checks that it computes: `[1, 2, 3] * 2` read back.
pub fn open(spec: &DeviceSpec) -> Result<Device, DeviceError> {
    open_with(spec, Precision::F32).map(|(device, _)| device)
}

/// The float type `precision` means on `device` (`spec`): `auto` is f16 on
/// a GPU whose driver computes in it, else f32; f16 and bf16 must be
/// supported by the device.
pub fn resolve_precision(
    spec: &DeviceSpec,
    device: &Device,
    precision: Precision,
) -> Result<FloatDType, DeviceError> {
    let supported = |dtype: FloatDType| device.supports_dtype(dtype);
    let wanted = match precision {
        Precision::F32 => return Ok(FloatDType::F32),
        Precision::Auto => {
            let gpu = matches!(spec, DeviceSpec::Gpu(_));
            return Ok(if gpu && supported(FloatDType::F16) {
                FloatDType::F16
            } else {
                FloatDType::F32
            });
        }
        Precision::F16 => FloatDType::F16,
        Precision::Bf16 => FloatDType::BF16,
    };
    if *spec == DeviceSpec::Software {
        // lavapipe says it computes in f16, then segfaults compiling the
        // model's f16 kernels.
        return Err(DeviceError {
            spec: spec.clone(),
            message: format!(
                "Mesa's lavapipe crashes compiling {precision} kernels; use --precision f32 (or auto)"
            ),
        });
    }
    if supported(wanted) {
        Ok(wanted)
    } else {
        Err(DeviceError {
            spec: spec.clone(),
            message: format!(
                "this device does not compute in {precision}; use --precision f32 (or auto)"
            ),
        })
    }
}

/// Keeps cubecl's autotune results between runs, in
/// [`pipeline_core::autotune_dir`] (`~/.cache/pipeline/autotune`, next to
/// the weights) rather than under a build's `target/`: a second run, or a
/// respawned worker, skips the tuning that otherwise takes its first batch
/// tens of seconds on a GPU. Once per process, before any device opens;
/// the rest of the settings still come from a `cubecl.toml` and `CUBECL_*`
/// variables (`CUBECL_AUTOTUNE_CACHE=false` turns persistence off).
fn persist_autotune() {
    use cubecl_runtime::config::cache::CacheConfig;
    use cubecl_runtime::config::{CubeClRuntimeConfig, RuntimeConfig};
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Some(dir) = pipeline_core::autotune_dir() else {
            return;
        };
        if std::fs::create_dir_all(&dir).is_err() {
            return; // cubecl's own default then
        }
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        config.environment.path = CacheConfig::Directory(dir);
        // False when something read the settings first: they stand.
        let _ = CubeClRuntimeConfig::try_set(config);
    });
}

/// [`open`] with every float tensor of this process on it in the type
/// `precision` resolves to ([`resolve_precision`]), which it returns. The
/// device's default float type is set before anything is created on it.
pub fn open_with(
    spec: &DeviceSpec,
    precision: Precision,
) -> Result<(Device, FloatDType), DeviceError> {
    persist_autotune();
    // A read-back starts when it is asked for (the copy is queued behind
    // the work already submitted), not on the first touch of its bytes:
    // the engine asks for batch n's results before it queues batch n+1
    // (`Engine::launch`). burn reads this one process-wide setting only there.
    burn_std::set_runtime_kind(burn_std::RuntimeKind::Async);
    let mut device = device_for(spec)?;
    let dtype = resolve_precision(spec, &device, precision)?;
    // A process that opens the device again (a `bench` sweep) finds it
    // already set to this type; only a different type is an error.
    if device.settings().float_dtype != dtype {
        device.configure(dtype).map_err(|e| DeviceError {
            spec: spec.clone(),
            message: format!("cannot compute in {precision}: {e:?}"),
        })?;
    }
    let probe = catch_unwind(AssertUnwindSafe(|| {
        let x = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &device) * 2.0;
        x.cast(FloatDType::F32)
            .try_into_data()
            .map_err(|e| e.to_string())
            .and_then(|d| d.try_to_vec::<f32>().map_err(|e| format!("{e:?}")))
    }));
    let error = |message: String| DeviceError {
        spec: spec.clone(),
        message,
    };
    match probe {
        Ok(Ok(values)) if values == [2.0, 4.0, 6.0] => Ok((device, dtype)),
        Ok(Ok(values)) => Err(error(format!(
            "probe computed {values:?} instead of [2, 4, 6]"
        ))),
        Ok(Err(message)) => Err(error(message)),
        Err(payload) => Err(error(pipeline_core::panic_message(payload.as_ref()))),
    }
}

#[cfg(test)]
mod tests {
    use super::{AdapterSummary, DeviceKind, joined_gpus, pci_key};
    use nvidia_devices::nvidia::NvidiaGpu;

    fn vulkan(name: &str, pci: &str, n: usize) -> AdapterSummary {
        AdapterSummary {
            name: name.to_owned(),
            kind: "discrete",
            backend: "vulkan".to_owned(),
            driver: "driver".to_owned(),
            pci_bus_id: Some(pci.to_owned()),
            memory: None,
            uuid: None,
            vulkan: true,
            capability: None,
            cuda_index: None,
            mig_of: None,
            mig_enabled: false,
            spec: None,
            burn_kind: Some(DeviceKind::DiscreteGpu(n)),
        }
    }

    fn nvidia(pci: &str, uuid: &str) -> NvidiaGpu {
        NvidiaGpu {
            name: format!("H100 at {pci}"),
            uuid: uuid.to_owned(),
            pci_bus_id: pci.to_owned(),
            memory: Some((80, 79)),
            driver: "NVIDIA 580".to_owned(),
            capability: Some((9, 0)),
            cuda_index: None,
            mig: Vec::new(),
            mig_enabled: false,
        }
    }

    /// One entry per PCI bus id in bus order: an NVIDIA GPU that Vulkan
    /// also sees keeps Vulkan's adapter and gains NVML's UUID and memory;
    /// one Vulkan does not see (no loader) is listed for CUDA alone; a GPU
    /// of another vendor keeps its place.
    #[test]
    fn vulkan_adapters_and_nvidia_gpus_join_by_pci_bus_id() {
        let joined = joined_gpus(
            vec![
                vulkan("NVIDIA H100", "0000:41:00.0", 0),
                vulkan("AMD", "0000:01:00.0", 1),
            ],
            vec![
                nvidia("00000000:81:00.0", "GPU-b"),
                nvidia("00000000:41:00.0", "GPU-a"),
            ],
        );
        let row = |a: &AdapterSummary| {
            (
                a.spec.clone().unwrap_or_default(),
                a.backend.clone(),
                a.uuid.clone(),
                a.vulkan,
                a.memory,
            )
        };
        let rows: Vec<_> = joined.iter().map(row).collect();
        assert_eq!(
            rows,
            vec![
                ("gpu:0".into(), "vulkan".into(), None, true, None),
                (
                    "gpu:1".into(),
                    "vulkan".into(),
                    Some("GPU-a".into()),
                    true,
                    Some((80, 79))
                ),
                (
                    "gpu:2".into(),
                    "cuda".into(),
                    Some("GPU-b".into()),
                    false,
                    Some((80, 79))
                ),
            ]
        );
        assert_eq!(joined[1].burn_kind, Some(DeviceKind::DiscreteGpu(0)));
        assert_eq!(joined[2].burn_kind, None);
        // Without Vulkan at all, the NVIDIA GPUs alone, in bus order.
        let alone = joined_gpus(
            Vec::new(),
            vec![
                nvidia("0000:c1:00.0", "GPU-c"),
                nvidia("0000:01:00.0", "GPU-d"),
            ],
        );
        let uuids: Vec<_> = alone.iter().map(|a| a.uuid.clone()).collect();
        assert_eq!(uuids, [Some("GPU-d".into()), Some("GPU-c".into())]);
    }

    /// A GPU in MIG mode keeps its place in bus order, and each of its
    /// instances is a `gpu:N` of its own after every whole GPU, in its
    /// GPU's order: a CUDA device named by its `MIG-` UUID, with no
    /// Vulkan, pointing back at its GPU. CUDA's order comes along.
    #[test]
    fn mig_instances_follow_every_whole_gpu() {
        use nvidia_devices::nvidia::MigInstance;
        let mig = |uuid: &str| MigInstance {
            name: format!("A100 MIG {uuid}"),
            uuid: uuid.to_owned(),
            memory: Some((20, 19)),
        };
        let mut split_late = nvidia("0000:81:00.0", "GPU-late");
        split_late.mig = vec![mig("MIG-l1"), mig("MIG-l2")];
        split_late.cuda_index = Some(0);
        let mut split_early = nvidia("0000:01:00.0", "GPU-early");
        split_early.mig = vec![mig("MIG-e1")];
        split_early.cuda_index = Some(2);
        let joined = joined_gpus(
            vec![vulkan("Intel", "0000:00:02.0", 0)],
            vec![split_late, nvidia("0000:41:00.0", "GPU-whole"), split_early],
        );
        let rows: Vec<_> = joined
            .iter()
            .map(|a| {
                (
                    a.spec.clone().unwrap_or_default(),
                    a.kind,
                    a.uuid.clone().unwrap_or_default(),
                    a.mig_of,
                    a.vulkan,
                    a.cuda_index,
                )
            })
            .collect();
        let row = |spec: &str,
                   kind: &'static str,
                   uuid: &str,
                   mig_of: Option<usize>,
                   vulkan: bool,
                   cuda: Option<usize>| {
            (spec.to_owned(), kind, uuid.to_owned(), mig_of, vulkan, cuda)
        };
        assert_eq!(
            rows,
            vec![
                row("gpu:0", "discrete", "", None, true, None),
                row("gpu:1", "discrete", "GPU-early", None, false, Some(2)),
                row("gpu:2", "discrete", "GPU-whole", None, false, None),
                row("gpu:3", "discrete", "GPU-late", None, false, Some(0)),
                row("gpu:4", "mig", "MIG-e1", Some(1), false, None),
                row("gpu:5", "mig", "MIG-l1", Some(3), false, None),
                row("gpu:6", "mig", "MIG-l2", Some(3), false, None),
            ]
        );
        assert_eq!(joined[5].pci_bus_id.as_deref(), Some("0000:81:00.0"));
        assert_eq!(joined[5].memory, Some((20, 19)));
        assert_eq!(joined[5].burn_kind, None);
        // MIG mode comes along, instances or none (CUDA then runs none of
        // the GPU), whether Vulkan sees the GPU or not.
        let mut empty = nvidia("0000:41:00.0", "GPU-empty");
        empty.mig_enabled = true;
        for vulkan_too in [vec![vulkan("A100", "0000:41:00.0", 0)], Vec::new()] {
            let joined = joined_gpus(vulkan_too, vec![empty.clone()]);
            assert_eq!(joined.len(), 1, "{joined:?}");
            assert!(joined[0].mig_enabled, "{joined:?}");
        }
        assert!(joined.iter().all(|g| !g.mig_enabled));
    }

    #[test]
    fn vulkan_and_nvml_bus_ids_meet() {
        assert_eq!(pci_key("0000:01:00.0"), pci_key("00000000:01:00.0"));
        assert!(pci_key("0000:01:00.0") < pci_key("0000:41:00.0"));
        assert!(pci_key("0000:ff:00.0") < pci_key("0001:00:00.0"));
        assert_eq!(pci_key(""), None);
        assert_eq!(pci_key("garbage"), None);
    }
}
