//! NVIDIA's GPUs as their driver sees them, without Vulkan (#40): a CUDA
//! container without the Vulkan loader or the driver's graphics capability
//! (the usual server setup) has no Vulkan GPU at all, yet its GPUs run the
//! CUDA engine.
//!
//! NVML first (`libnvidia-ml`, the driver's management library, which
//! ignores `CUDA_VISIBLE_DEVICES` and creates no CUDA context); where it is
//! missing, the CUDA driver's device queries (`cuDeviceGet*`, which need no
//! context either). Either way one busy or broken GPU is left out, never the
//! search: its error costs that GPU only.
//!
//! What `CUDA_VISIBLE_DEVICES` needs is found here too: each GPU's place in
//! CUDA's own default order (fastest first, which only the CUDA driver
//! knows: its heuristic is unpublished), asked of the driver without a
//! context, and the MIG instances of a GPU in MIG mode (NVML only: the
//! driver's queries do not list them).

use std::ffi::c_int;

/// One NVIDIA GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaGpu {
    /// e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as `nvidia-smi -L` and
    /// `CUDA_VISIBLE_DEVICES` write it.
    pub uuid: String,
    /// `domain:bus:device.function`, as the tool that found it writes it.
    pub pci_bus_id: String,
    /// Total and free memory in bytes, from NVML (the driver's query of
    /// free memory needs a context).
    pub memory: Option<(u64, u64)>,
    /// e.g. `NVIDIA 580.95.05` (NVML) or `NVIDIA CUDA 13.0` (the driver).
    pub driver: String,
    /// Its compute capability, `(9, 0)` for Hopper, where the query
    /// answered.
    pub capability: Option<(i32, i32)>,
    /// Its place in CUDA's enumeration under `CUDA_DEVICE_ORDER` as this
    /// process has it (the probe child sets `FASTEST_FIRST`, CUDA's
    /// default), where the CUDA driver answered.
    pub cuda_index: Option<usize>,
    /// Its MIG instances where MIG mode is on (NVML's; none where NVML is
    /// missing), each a CUDA device of its own.
    pub mig: Vec<MigInstance>,
    /// Whether MIG mode is on (NVML's `mig_mode().current`): CUDA then
    /// runs its instances only, and none where it has none.
    pub mig_enabled: bool,
}

/// One MIG instance of a GPU: a CUDA device of its own, named by its UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigInstance {
    /// e.g. `NVIDIA A100-SXM4-40GB MIG 3g.20gb`.
    pub name: String,
    /// `MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as `nvidia-smi -L` and
    /// `CUDA_VISIBLE_DEVICES` write it.
    pub uuid: String,
    /// Its total and free memory in bytes.
    pub memory: Option<(u64, u64)>,
}

/// Every NVIDIA GPU of this machine, in the order found; empty without
/// NVIDIA's driver.
pub fn nvidia_gpus() -> Vec<NvidiaGpu> {
    nvml_gpus().unwrap_or_else(cuda_driver_gpus)
}

/// `gpus` with each one's place in the CUDA driver's enumeration filled
/// in where missing (NVML's do not have it). Starts the driver (no
/// context): for the probe child, not for every worker.
pub fn with_cuda_order(mut gpus: Vec<NvidiaGpu>) -> Vec<NvidiaGpu> {
    if gpus.iter().all(|g| g.cuda_index.is_some()) {
        return gpus;
    }
    let order = cuda_driver_order();
    for gpu in &mut gpus {
        gpu.cuda_index = order.iter().position(|uuid| same_uuid(uuid, &gpu.uuid));
    }
    gpus
}

/// Whether two UUIDs name one device: their hex digits alike, whatever
/// the prefix (`GPU-` from NVML, the driver's bytes written as `GPU-` by
/// [`uuid_string`] though a MIG instance's are `MIG-` in NVML) and case.
fn same_uuid(a: &str, b: &str) -> bool {
    let body = |u: &str| {
        let u = u.trim();
        let lower = u.to_ascii_lowercase();
        if lower.starts_with("gpu-") || lower.starts_with("mig-") {
            lower[4..].to_owned()
        } else {
            lower
        }
    };
    body(a) == body(b)
}

/// The UUIDs of the devices the CUDA driver lists, in its order; empty
/// where it is missing or fails to start.
fn cuda_driver_order() -> Vec<String> {
    if !crate::libs::driver_loads() {
        return Vec::new();
    }
    std::panic::catch_unwind(|| {
        (0..driver::count())
            .filter_map(|ordinal| Some(driver::describe(ordinal)?.uuid))
            .collect()
    })
    .unwrap_or_default()
}

/// Whether `device` is in MIG mode (off where NVML cannot say).
fn mig_enabled(device: &nvml_wrapper::Device<'_>) -> bool {
    device.mig_mode().is_ok_and(|m| m.current == 1)
}

/// The MIG instances of `device` where MIG mode is on; none where it is
/// off, has none, or NVML cannot say.
fn mig_instances(device: &nvml_wrapper::Device<'_>) -> Vec<MigInstance> {
    if !mig_enabled(device) {
        return Vec::new();
    }
    // NVML gives the most a GPU can hold; the indices without an
    // instance answer NotFound.
    let most = device.mig_device_count().unwrap_or(0);
    (0..most)
        .filter_map(|i| {
            let mig = device.mig_device_by_index(i).ok()?;
            Some(MigInstance {
                name: mig.name().unwrap_or_else(|_| format!("MIG instance {i}")),
                uuid: mig.uuid().ok()?,
                memory: mig.memory_info().ok().map(|m| (m.total, m.free)),
            })
        })
        .collect()
}

/// The GPUs NVML lists; `None` when NVML cannot start (no driver, or a
/// container without the driver's utility capability).
fn nvml_gpus() -> Option<Vec<NvidiaGpu>> {
    let nvml = nvml_wrapper::Nvml::init().ok()?;
    let driver = nvml
        .sys_driver_version()
        .map_or_else(|_| "NVIDIA".to_owned(), |v| format!("NVIDIA {v}"));
    let count = nvml.device_count().ok()?;
    Some(
        (0..count)
            .filter_map(|i| {
                let device = nvml.device_by_index(i).ok()?;
                Some(NvidiaGpu {
                    name: device.name().unwrap_or_else(|_| format!("NVIDIA GPU {i}")),
                    uuid: device.uuid().ok()?,
                    pci_bus_id: device.pci_info().ok()?.bus_id,
                    memory: device.memory_info().ok().map(|m| (m.total, m.free)),
                    driver: driver.clone(),
                    capability: device
                        .cuda_compute_capability()
                        .ok()
                        .map(|c| (c.major, c.minor)),
                    cuda_index: None,
                    mig: mig_instances(&device),
                    mig_enabled: mig_enabled(&device),
                })
            })
            .collect(),
    )
}

/// The GPUs the CUDA driver lists, read without creating a context; empty
/// when the driver is missing or fails to start.
fn cuda_driver_gpus() -> Vec<NvidiaGpu> {
    // cudarc panics on a driver library it cannot load: only called once
    // it is known to be there (and without loading cuBLAS or cuDNN, which
    // listing GPUs does not need).
    if !crate::libs::driver_loads() {
        return Vec::new();
    }
    std::panic::catch_unwind(|| {
        let version = driver::version().map_or_else(
            || "NVIDIA".to_owned(),
            |v| format!("NVIDIA CUDA {}.{}", v / 1000, (v % 1000) / 10),
        );
        (0..driver::count())
            .filter_map(|ordinal| {
                let found = driver::describe(ordinal)?;
                Some(NvidiaGpu {
                    name: found.name,
                    uuid: found.uuid,
                    pci_bus_id: found.pci_bus_id,
                    memory: None,
                    driver: version.clone(),
                    capability: found.capability,
                    cuda_index: Some(ordinal),
                    mig: Vec::new(),
                    mig_enabled: false,
                })
            })
            .collect()
    })
    .unwrap_or_default()
}

/// A CUDA device as the driver describes it, with no context made.
pub(crate) struct DriverDevice {
    pub(crate) name: String,
    pub(crate) uuid: String,
    pub(crate) pci_bus_id: String,
    pub(crate) capability: Option<(i32, i32)>,
}

/// The CUDA ordinal of the GPU with this UUID or, without one, at this PCI
/// bus id; `Err` says what the driver sees instead. Asks each device its
/// attributes only: no context is created on any GPU, and a GPU whose
/// queries fail is skipped.
pub fn cuda_ordinal(uuid: Option<&str>, pci: Option<&str>) -> Result<usize, String> {
    use crate::libs::cuda_libraries;
    if let Some(missing) = cuda_libraries().missing_line() {
        return Err(missing);
    }
    let count = driver::count();
    for ordinal in 0..count {
        let Some(found) = driver::describe(ordinal) else {
            continue;
        };
        let hit = match (uuid, pci) {
            (Some(uuid), _) => same_uuid(&found.uuid, uuid),
            (None, Some(pci)) => same_pci_bus(&found.pci_bus_id, pci),
            (None, None) => false,
        };
        if hit {
            return Ok(ordinal);
        }
    }
    // A worker given a MIG instance as `CUDA_VISIBLE_DEVICES` sees it
    // alone, as ordinal 0, whichever UUID the driver's query answers for
    // it (an older driver's is its parent's).
    if count == 1 && uuid.is_some_and(|u| u.trim().to_ascii_lowercase().starts_with("mig-")) {
        return Ok(0);
    }
    let which = match (uuid, pci) {
        (Some(uuid), _) => format!("with UUID {uuid}"),
        (None, Some(pci)) => format!("at PCI bus id {pci}"),
        (None, None) => "(this GPU has neither a UUID nor a PCI bus id)".to_owned(),
    };
    Err(format!(
        "no CUDA GPU {which} ({count} CUDA GPU(s) visible: is CUDA_VISIBLE_DEVICES hiding it?)"
    ))
}

/// `GPU-` and the 16 bytes as `8-4-4-4-12` hex digits, as NVML and
/// `CUDA_VISIBLE_DEVICES` write a UUID.
pub(crate) fn uuid_string(bytes: &[u8; 16]) -> String {
    let hex = |range: std::ops::Range<usize>| {
        bytes[range]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

/// The CUDA driver's device queries, the one `unsafe` here.
#[allow(unsafe_code)]
mod driver {
    use super::{DriverDevice, c_int, uuid_string};
    use cudarc::driver::result::{self, device};
    use cudarc::driver::sys::CUdevice_attribute as A;

    /// How many devices the driver shows this process (0 when it fails to
    /// start).
    pub(super) fn count() -> usize {
        if result::init().is_err() {
            return 0;
        }
        device::get_count().map_or(0, |n| usize::try_from(n).unwrap_or(0))
    }

    /// The driver's CUDA version, e.g. 13000.
    pub(super) fn version() -> Option<i32> {
        let mut version: c_int = 0;
        // SAFETY: writes one int; the driver is loaded (checked by callers).
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) }
            .result()
            .ok()?;
        Some(version)
    }

    /// Device `ordinal`'s name, UUID and PCI bus id; `None` when any query
    /// fails (a broken or lost GPU).
    pub(super) fn describe(ordinal: usize) -> Option<DriverDevice> {
        let dev = device::get(c_int::try_from(ordinal).ok()?).ok()?;
        // SAFETY: `dev` was returned by `cuDeviceGet`; attribute queries
        // read plain values and need no context.
        let (domain, bus, slot) = unsafe {
            (
                device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID).ok()?,
                device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID).ok()?,
                device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID).ok()?,
            )
        };
        // SAFETY: as above.
        let capability = unsafe {
            device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                .ok()
                .zip(
                    device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                        .ok(),
                )
        };
        let raw = device::get_uuid(dev).ok()?;
        let bytes: [u8; 16] = raw.bytes.map(|b| b as u8);
        Some(DriverDevice {
            name: device::get_name(dev).ok()?,
            uuid: uuid_string(&bytes),
            pci_bus_id: format!("{domain:04x}:{bus:02x}:{slot:02x}.0"),
            capability,
        })
    }
}

/// Whether two PCI bus ids name the same device, however each tool writes
/// it (`0000:01:00.0` from Vulkan and lspci, `00000000:01:00.0` from NVML).
pub fn same_pci_bus(a: &str, b: &str) -> bool {
    pci_key(a).is_some_and(|k| pci_key(b) == Some(k))
}

/// `0000:01:00.0` (Vulkan) and `00000000:01:00.0` (NVML) as one number.
pub fn pci_key(id: &str) -> Option<u64> {
    let (rest, function) = id.trim().rsplit_once('.')?;
    let mut parts = rest.split(':').rev();
    let device = u64::from_str_radix(parts.next()?, 16).ok()?;
    let bus = u64::from_str_radix(parts.next()?, 16).ok()?;
    let domain = match parts.next() {
        Some(d) => u64::from_str_radix(d, 16).ok()?,
        None => 0,
    };
    let function = u64::from_str_radix(function, 16).ok()?;
    Some((domain << 24) | (bus << 16) | (device << 8) | function)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UUID reads as `nvidia-smi -L` prints it (and as
    /// `CUDA_VISIBLE_DEVICES` takes it): the bytes in order, grouped
    /// 8-4-4-4-12.
    #[test]
    fn uuids_are_written_as_nvidia_smi_writes_them() {
        let bytes: [u8; 16] = std::array::from_fn(|i| (i as u8) * 17);
        assert_eq!(
            uuid_string(&bytes),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }

    /// A UUID names its device whatever its prefix (the driver's bytes are
    /// written `GPU-`, NVML writes a MIG instance's `MIG-`) and case; any
    /// other digit names another.
    #[test]
    fn a_uuid_names_its_device_whatever_its_prefix_and_case() {
        let gpu = "GPU-00112233-4455-6677-8899-aabbccddeeff";
        for same in [
            gpu,
            "gpu-00112233-4455-6677-8899-AABBCCDDEEFF",
            "MIG-00112233-4455-6677-8899-aabbccddeeff",
            " GPU-00112233-4455-6677-8899-aabbccddeeff ",
        ] {
            assert!(same_uuid(gpu, same), "{same}");
        }
        for other in [
            "GPU-00112233-4455-6677-8899-aabbccddeef0",
            "GPU-00112233-4455-6677-8899-aabbccddee",
            "",
        ] {
            assert!(!same_uuid(gpu, other), "{other}");
        }
    }

    /// With no NVIDIA driver (this machine), nothing is found and nothing
    /// panics, through either path.
    #[test]
    fn a_machine_without_nvidia_gpus_lists_none() {
        if nvml_wrapper::Nvml::init().is_ok() {
            return; // a machine with NVIDIA's driver: nothing to say here
        }
        assert_eq!(nvidia_gpus(), Vec::new());
        assert!(cuda_ordinal(Some("GPU-0"), None).is_err());
    }
}
