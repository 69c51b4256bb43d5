//! Opening one device: burn's `flex` backend for the CPU, its wgpu runtime on
//! Vulkan for GPUs and for Mesa's software adapter (lavapipe, which burn lists
//! as `DeviceKind::Cpu` and its default selection ignores, so it is asked for
//! explicitly). Opening is lazy in burn, so `open` runs a small probe and
//! turns a failure (a panic inside the runtime) into an error naming the
//! adapter.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::tensor::{Device, DeviceKind, Tensor};
use pipeline_core::DeviceSpec;

/// A device that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot open device {spec}: {message}")]
pub struct DeviceError {
    /// The device asked for.
    pub spec: DeviceSpec,
    /// Why it failed.
    pub message: String,
}

/// The burn device for `spec`, without touching the hardware.
pub fn device_for(spec: &DeviceSpec) -> Device {
    match spec {
        DeviceSpec::Cpu => Device::flex(),
        DeviceSpec::Software => Device::vulkan(DeviceKind::Cpu),
        DeviceSpec::Gpu(index) => Device::vulkan(DeviceKind::DiscreteGpu(*index)),
    }
}

/// Opens `spec` and checks that it computes: `[1, 2, 3] * 2` read back.
pub fn open(spec: &DeviceSpec) -> Result<Device, DeviceError> {
    let device = device_for(spec);
    let probe = catch_unwind(AssertUnwindSafe(|| {
        let x = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &device) * 2.0;
        x.try_into_data()
            .map_err(|e| e.to_string())
            .and_then(|d| d.try_to_vec::<f32>().map_err(|e| format!("{e:?}")))
    }));
    let error = |message: String| DeviceError {
        spec: spec.clone(),
        message,
    };
    match probe {
        Ok(Ok(values)) if values == [2.0, 4.0, 6.0] => Ok(device),
        Ok(Ok(values)) => Err(error(format!(
            "probe computed {values:?} instead of [2, 4, 6]"
        ))),
        Ok(Err(message)) => Err(error(message)),
        Err(payload) => Err(error(pipeline_core::panic_message(payload.as_ref()))),
    }
}
