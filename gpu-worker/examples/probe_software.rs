//! Diagnostic: compares individual ops on the software Vulkan adapter with
//! the CPU backend, to find which kernels lavapipe runs correctly
//! (`cargo run --release -p gpu-worker --example probe_software`).
use burn::tensor::{DType, Device, DeviceKind, Int, Tensor, TensorData};

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn main() {
    let cpu = Device::flex();
    let sw = Device::vulkan(DeviceKind::Cpu);
    let n = 2 * 3 * 8 * 8;
    let bytes: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
    let upload = |d: &Device| {
        Tensor::<4, Int>::from_data(TensorData::new(bytes.clone(), [2, 3, 8, 8]), (d, DType::U8))
            .float()
    };
    let a = upload(&cpu)
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32 data");
    let b = upload(&sw)
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32 data");
    println!(
        "u8 upload: max diff {} ; cpu[0..6]={:?} sw[0..6]={:?}",
        max_diff(&a, &b),
        &a[..6],
        &b[..6]
    );
    let f: Vec<f32> = bytes.iter().map(|&v| v as f32).collect();
    let xf = |d: &Device| Tensor::<4>::from_data(TensorData::new(f.clone(), [2, 3, 8, 8]), d);
    let a = xf(&cpu).into_data().try_to_vec::<f32>().expect("f32 data");
    let b = xf(&sw).into_data().try_to_vec::<f32>().expect("f32 data");
    println!("f32 upload: max diff {}", max_diff(&a, &b));
    let w: Vec<f32> = (0..4 * 3 * 9)
        .map(|i| ((i * 13 % 17) as f32 - 8.0) / 10.0)
        .collect();
    let conv = |d: &Device| {
        let wt = Tensor::<4>::from_data(TensorData::new(w.clone(), [4, 3, 3, 3]), d);
        burn::tensor::module::conv2d(
            xf(d),
            wt,
            None,
            burn::tensor::ops::ConvOptions::new([2, 2], [1, 1], [1, 1], 1),
        )
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32 data")
    };
    let (a, b) = (conv(&cpu), conv(&sw));
    println!(
        "conv3x3 s2: max diff {} (max |v| {})",
        max_diff(&a, &b),
        a.iter().fold(0.0f32, |m, v| m.max(v.abs()))
    );
    let mean = |d: &Device| {
        xf(d)
            .reshape([2, 3, 64])
            .mean_dim(2)
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32 data")
    };
    println!("mean_dim: max diff {}", max_diff(&mean(&cpu), &mean(&sw)));
    let moved = |d: &Device| {
        xf(&cpu)
            .to_device(d)
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32 data")
    };
    println!(
        "flex->software to_device: max diff {}",
        max_diff(&moved(&cpu), &moved(&sw))
    );
}
