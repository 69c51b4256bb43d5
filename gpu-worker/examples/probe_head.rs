//! Diagnostic: which matmul-free forms of a linear layer + softmax lavapipe
//! runs (`cargo run --release -p gpu-worker --example probe_head -- N`).
use burn::tensor::activation::softmax;
use burn::tensor::{Device, DeviceKind, Distribution, Tensor};

fn main() {
    let variant: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let d = Device::vulkan(DeviceKind::Cpu);
    let (n, c, k) = (4, 128, 1000);
    let x = Tensor::<2>::random([n, c], Distribution::Uniform(-1.0, 1.0), &d);
    let w = Tensor::<2>::random([c, k], Distribution::Uniform(-1.0, 1.0), &d);
    let out = match variant {
        0 => (x.reshape([n, c, 1]) * w.reshape([1, c, k]))
            .sum_dim(1)
            .reshape([n, k]),
        1 => (x.reshape([n, 1, c]) * w.transpose().reshape([1, k, c]))
            .sum_dim(2)
            .reshape([n, k]),
        2 => softmax(
            x.clone()
                .reshape([n, c, 1])
                .repeat_dim(2, 8)
                .reshape([n, c * 8]),
            1,
        ),
        3 => {
            let l = (x.reshape([n, 1, c]) * w.transpose().reshape([1, k, c]))
                .sum_dim(2)
                .reshape([n, k]);
            softmax(l, 1)
        }
        6 => {
            let f = Tensor::<4>::random([n, c, 7, 7], Distribution::Uniform(0.0, 1.0), &d)
                .reshape([n, c, 49])
                .mean_dim(2)
                .reshape([n, c]);
            let f = Tensor::<2>::from_data(f.into_data(), &d);
            let l = (f.reshape([n, 1, c]) * w.transpose().reshape([1, k, c]))
                .sum_dim(2)
                .reshape([n, k]);
            softmax(l, 1)
        }
        4 | 5 => {
            let f = Tensor::<4>::random([n, c, 7, 7], Distribution::Uniform(0.0, 1.0), &d)
                .mean_dim(3)
                .mean_dim(2)
                .reshape([n, c]);
            let b = Tensor::<1>::random([k], Distribution::Uniform(-1.0, 1.0), &d);
            let l = (f.reshape([n, 1, c]) * w.transpose().reshape([1, k, c]))
                .sum_dim(2)
                .reshape([n, k]);
            let l = if variant == 5 {
                l + b.reshape([1, k])
            } else {
                l
            };
            softmax(l, 1)
        }
        _ => x.matmul(w),
    };
    let v = out.into_data().try_to_vec::<f32>().expect("f32");
    println!("variant {variant}: ok, {} values, first {}", v.len(), v[0]);
}
