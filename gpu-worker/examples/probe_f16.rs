//! Which devices compute in f16 here:
//! `cargo run --release --example probe_f16 -- cpu|software|0`.
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{FloatDType, Tensor};
use pipeline_core::DeviceSpec;

fn main() {
    let spec: DeviceSpec = std::env::args()
        .nth(1)
        .unwrap_or("cpu".into())
        .parse()
        .expect("spec");
    let mut device = gpu_worker::device_for(&spec).expect("device");
    println!("supports f16: {}", device.supports_dtype(FloatDType::F16));
    println!("supports bf16: {}", device.supports_dtype(FloatDType::BF16));
    device.configure(FloatDType::F16).expect("configure");
    let x = Tensor::<4>::ones([1, 2, 4, 4], &device);
    let w = Tensor::<4>::ones([3, 2, 3, 1], &device) * 0.5;
    println!("dtype {:?}", x.dtype());
    let y = conv2d(x, w, None, ConvOptions::new([1, 1], [1, 0], [1, 1], 1));
    let y32 = y.cast(FloatDType::F32);
    println!(
        "{:?} {:?}",
        y32.dtype(),
        y32.into_data().try_to_vec::<f32>()
    );
}
