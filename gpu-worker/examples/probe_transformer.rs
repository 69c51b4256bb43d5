//! Diagnostic: runs one transformer building block on the software Vulkan
//! adapter and on the CPU and prints the largest difference, to find which
//! kernels Mesa's lavapipe compiles. One op per process, since a crash in
//! the driver kills it:
//! `for op in layer_norm layer_norm_by_means layer_norm_by_conv gelu gelu_tanh quick_gelu softmax dense attention cat narrow patches patches_nobias_stride1 heads; do
//!   target/release/examples/probe_transformer $op; done`
use burn::tensor::activation::{gelu, gelu_approximate, sigmoid, softmax};
use burn::tensor::module::{conv2d, layer_norm};
use burn::tensor::ops::{ConvOptions, PadMode};
use burn::tensor::{Device, DeviceKind, Distribution, Tensor};

fn run(op: &str, device: &Device) -> Vec<f32> {
    let host = Device::flex();
    host.seed(7);
    let x = Tensor::<3>::random([2, 17, 32], Distribution::Uniform(-1.0, 1.0), &host).into_data();
    let x = Tensor::<3>::from_data(x, device);
    let w = Tensor::<2>::from_data(
        Tensor::<2>::random([32, 48], Distribution::Uniform(-1.0, 1.0), &host).into_data(),
        device,
    );
    let g = Tensor::<1>::from_floats([1.5; 32], device);
    let b = Tensor::<1>::from_floats([0.25; 32], device);
    let out: Tensor<3> = match op {
        "layer_norm" => layer_norm(x, g, Some(b), 1e-6),
        "layer_norm_by_conv" => {
            // Means over the last axis as 3×1 convolutions with weights 1/D.
            let mean_of = |t: Tensor<3>| {
                let input = t.reshape([34, 32]).transpose().reshape([1, 32, 34, 1]);
                let weight = Tensor::<4>::full([1, 32, 1, 1], 1.0 / 32.0, device)
                    .pad((0, 0, 1, 1), PadMode::Constant(0.0));
                conv2d(
                    input,
                    weight,
                    None,
                    ConvOptions::new([1, 1], [1, 0], [1, 1], 1),
                )
                .reshape([2, 17, 1])
            };
            let centred = x.clone() - mean_of(x);
            let var = mean_of(centred.clone() * centred.clone());
            centred / (var + 1e-6).sqrt() * g.reshape([1, 1, 32]) + b.reshape([1, 1, 32])
        }
        "layer_norm_by_means" => {
            let mean = x.clone().mean_dim(2);
            let centred = x - mean;
            let var = (centred.clone() * centred.clone()).mean_dim(2);
            centred / (var + 1e-6).sqrt() * g.reshape([1, 1, 32]) + b.reshape([1, 1, 32])
        }
        "gelu" => gelu(x),
        "gelu_tanh" => gelu_approximate(x),
        "quick_gelu" => x.clone() * sigmoid(x * 1.702),
        "softmax" => softmax(x, 2),
        "dense" => {
            let weight = w
                .transpose()
                .reshape([48, 32, 1, 1])
                .pad((0, 0, 1, 1), PadMode::Constant(0.0));
            let input = x.reshape([34, 32]).transpose().reshape([1, 32, 34, 1]);
            conv2d(
                input,
                weight,
                None,
                ConvOptions::new([1, 1], [1, 0], [1, 1], 1),
            )
            .reshape([48, 34])
            .transpose()
            .reshape([2, 17, 48])
        }
        "attention" => {
            let q = x.clone().reshape([2, 17, 1, 32]);
            let k = x.clone().reshape([2, 1, 17, 32]);
            let s = softmax((q * k).sum_dim(3).reshape([2, 17, 17]), 2);
            let v = x.swap_dims(1, 2).reshape([2, 1, 32, 17]);
            (s.reshape([2, 17, 1, 17]) * v)
                .sum_dim(3)
                .reshape([2, 17, 32])
        }
        "cat" => {
            let c = Tensor::<3>::from_floats([[[0.5; 32]]], device).expand([2, 1, 32]);
            Tensor::cat(vec![c, x], 1)
        }
        "narrow" => x.narrow(1, 1, 16),
        "patches" => {
            let img = Tensor::<4>::from_data(
                Tensor::<4>::random([2, 3, 32, 32], Distribution::Uniform(-1.0, 1.0), &host)
                    .into_data(),
                device,
            );
            let pw = Tensor::<4>::from_data(
                Tensor::<4>::random([32, 3, 8, 8], Distribution::Uniform(-0.1, 0.1), &host)
                    .into_data(),
                device,
            );
            let p = conv2d(img, pw, None, ConvOptions::new([8, 8], [0, 0], [1, 1], 1));
            p.reshape([2, 32, 16]).swap_dims(1, 2)
        }
        "patches_nobias_stride1" => {
            let img = Tensor::<4>::from_data(
                Tensor::<4>::random([2, 3, 32, 32], Distribution::Uniform(-1.0, 1.0), &host)
                    .into_data(),
                device,
            );
            let pw = Tensor::<4>::from_data(
                Tensor::<4>::random([32, 3, 3, 3], Distribution::Uniform(-0.1, 0.1), &host)
                    .into_data(),
                device,
            );
            let p = conv2d(img, pw, None, ConvOptions::new([1, 1], [1, 1], [1, 1], 1));
            p.reshape([2, 32, 1024]).narrow(2, 0, 16).swap_dims(1, 2)
        }
        "heads" => {
            let q = x.clone().reshape([2, 17, 4, 8]).swap_dims(1, 2);
            q.swap_dims(1, 2).reshape([2, 17, 32])
        }
        other => panic!("unknown op {other}"),
    };
    out.into_data().try_to_vec::<f32>().expect("f32 data")
}

fn main() {
    let op = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "layer_norm".into());
    let cpu = run(&op, &Device::flex());
    let sw = run(&op, &Device::vulkan(DeviceKind::Cpu));
    let worst = cpu
        .iter()
        .zip(&sw)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("{op}: {} values, max diff {worst:e}", cpu.len());
}
