//! The model type's own behaviour: lavapipe's forms (the matmul-free head,
//! 1×1 convolutions as 3×1) compute what the plain ones do, and an image's
//! logits do not depend on its batch.

use super::*;

#[test]
fn the_matmul_free_head_computes_the_linear_layer() {
    let _rng = crate::model::host_rng();
    let device = Device::flex();
    let model = Model::random(ModelKind::Tiny, 3, &device);
    let features = Tensor::<2>::random(
        [5, 128],
        burn::tensor::Distribution::Uniform(-1.0, 1.0),
        &device,
    );
    let want = model.head(features.clone()).into_data();
    let got = model.head_without_matmul(features).into_data();
    let (want, got) = (
        want.try_to_vec::<f32>().expect("f32 logits"),
        got.try_to_vec::<f32>().expect("f32 logits"),
    );
    assert_eq!(want.len(), 5 * NUM_CLASSES);
    let worst = want
        .iter()
        .zip(&got)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-5, "largest difference {worst}");
}

#[test]
fn pointwise_convolutions_rewritten_as_3x1_compute_the_same() {
    let _rng = crate::model::host_rng();
    let device = Device::flex();
    let input = Tensor::<4>::random(
        [2, 3, 64, 64],
        burn::tensor::Distribution::Uniform(-1.0, 1.0),
        &device,
    );
    for kind in [ModelKind::Resnet18, ModelKind::EfficientnetLite0] {
        let plain = Model::random(kind, 5, &device);
        let mut wide = Model::random(kind, 5, &device).with_pointwise_as_3x1(true);
        let kernels: Vec<[usize; 2]> = wide
            .network
            .convolutions()
            .iter()
            .map(|c| c.kernel_size)
            .collect();
        assert!(kernels.contains(&[3, 1]), "{kind}: some 1×1 became 3×1");
        assert!(!kernels.contains(&[1, 1]), "{kind}: no 1×1 is left");
        let want = plain.features(input.clone()).into_data();
        let got = wide.features(input.clone()).into_data();
        let (want, got) = (
            want.try_to_vec::<f32>().expect("f32"),
            got.try_to_vec::<f32>().expect("f32"),
        );
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let worst = want
            .iter()
            .zip(&got)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(worst <= 1e-4 * scale.max(1.0), "{kind}: {worst} of {scale}");
    }
}

/// On the CPU an image's logits are the same bits alone as in a batch
/// of any size: no GEMM's path may depend on the rows beside it (the
/// `gemm` crate sums in other groups for small shapes, and one row is a
/// matrix-vector product). 32×32 images make the ResNets' last stage one
/// pixel per image; ResNet-50's and Lite0's heads sum over more than
/// one block of 512 features.
#[test]
fn an_images_logits_do_not_depend_on_its_batch_on_the_cpu() {
    let _rng = crate::model::host_rng();
    let device = Device::flex();
    let batch = Tensor::<4>::random(
        [3, 3, 32, 32],
        burn::tensor::Distribution::Uniform(-1.0, 1.0),
        &device,
    );
    for kind in [
        ModelKind::Tiny,
        ModelKind::Resnet18,
        ModelKind::Resnet50,
        ModelKind::EfficientnetLite0,
    ] {
        let model = Model::random(kind, 9, &device);
        let logits = |x: Tensor<4>| {
            model
                .head(model.features(x))
                .into_data()
                .try_to_vec::<f32>()
                .expect("f32")
        };
        let together = logits(batch.clone());
        for i in 0..3 {
            let alone = logits(batch.clone().narrow(0, i, 1));
            let row = &together[i * NUM_CLASSES..(i + 1) * NUM_CLASSES];
            assert!(
                alone == row,
                "{kind}: image {i} alone differs from its batch"
            );
        }
    }
}
