//! Diagnostic: tiny's engine on lavapipe, one step at a time
//! (`cargo run --release -p gpu-worker --example probe_engine -- STEP`).
use burn::tensor::{Device, DeviceKind, Distribution, Tensor};
use gpu_worker::{BurnEngine, Engine, Model, PixelBatch};
use pipeline_core::{DeviceSpec, ModelKind, Normalize, Task};

fn main() {
    let step: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let d = Device::vulkan(DeviceKind::Cpu);
    let model = Model::random(ModelKind::Tiny, 0, &d);
    match step {
        0 => {
            let f = Tensor::<2>::random([4, 128], Distribution::Uniform(-1.0, 1.0), &d);
            let v = model
                .head_without_matmul(f)
                .into_data()
                .try_to_vec::<f32>()
                .expect("f32");
            println!("head on random features: ok {}", v[0]);
        }
        2 => {
            let f = Tensor::<2>::random([4, 128], Distribution::Uniform(-1.0, 1.0), &d);
            let l = model.head_without_matmul(f);
            let v = burn::tensor::activation::softmax(l, 1)
                .into_data()
                .try_to_vec::<f32>()
                .expect("f32");
            println!("head+softmax on random features: ok {}", v[0]);
        }
        3 => {
            let f = Tensor::<2>::random([4, 128], Distribution::Uniform(-1.0, 1.0), &d);
            let l = model.head_without_matmul(f);
            let l = Tensor::<2>::from_data(l.into_data(), &d);
            let v = burn::tensor::activation::softmax(l, 1)
                .into_data()
                .try_to_vec::<f32>()
                .expect("f32");
            println!("head, host, softmax: ok {}", v[0]);
        }
        4 | 5 => {
            let kind = if step == 4 {
                ModelKind::Resnet18
            } else {
                ModelKind::EfficientnetLite0
            };
            let model = Model::random(kind, 0, &d);
            let engine = BurnEngine::for_device(
                &DeviceSpec::Software,
                d,
                model,
                Task::Classify { top_k: 5 },
            );
            let pixels = vec![100u8; 2 * 3 * 224 * 224];
            let p = engine.infer(&PixelBatch::new(&pixels, 2, 2, 224, &Normalize::imagenet()));
            println!("{kind:?} engine: {:?}", p.map(|p| p.len()));
        }
        _ => {
            let engine = BurnEngine::for_device(
                &DeviceSpec::Software,
                d,
                model,
                Task::Classify { top_k: 5 },
            );
            let pixels = vec![100u8; 4 * 3 * 224 * 224];
            let p = engine.infer(&PixelBatch::new(&pixels, 4, 4, 224, &Normalize::imagenet()));
            println!("engine: {:?}", p.map(|p| p.len()));
        }
    }
}
