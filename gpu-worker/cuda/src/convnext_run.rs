//! torchvision's ConvNeXt on a GPU (#28), channels last, op for op as
//! [`ConvNextPlan::reference`] runs it: the 4×4 stem and the 2×2
//! downsamplings as GEMMs over non-overlapping patches, LayerNorms over
//! channels, the depthwise 7×7 as the engine's kernel, the MLPs as
//! cuBLASLt GEMMs (the second accumulating into the residual stream,
//! `β = 1`, the layer scale folded into it), then the global mean, the
//! head's LayerNorm and the classifier.
//!
//! Run on an H100 (see `gpu/`): `tests/cuda_gpu.rs` holds it to the
//! reference wherever a GPU is present.

use super::gpu::{Buf, DeviceGemm, DeviceNorm, DeviceOutputs, Gpu, GpuError, Images, Tower};
use super::plan::ConvNextPlan;

/// ConvNeXt's LayerNorms' epsilon (torchvision's `LayerNorm2d`, 1e-6).
const EPS: f64 = 1e-6;

struct DeviceBlock {
    taps: Buf,
    bias: Buf,
    norm: DeviceNorm,
    fc1: DeviceGemm,
    fc2: DeviceGemm,
}

struct DeviceStage {
    down: Option<(DeviceNorm, DeviceGemm)>,
    blocks: Vec<DeviceBlock>,
}

/// A ConvNeXt plan's weights on one GPU.
pub struct CudaConvNext {
    stem: DeviceGemm,
    stem_norm: DeviceNorm,
    stages: Vec<DeviceStage>,
    head_norm: DeviceNorm,
    /// The head norm's eps (a Hugging Face checkpoint's may differ).
    head_eps: f64,
    classifier: Option<DeviceGemm>,
}

impl CudaConvNext {
    /// `plan`'s weights on `gpu`: GEMMs and taps in f16, LayerNorms f32.
    pub fn new(gpu: &Gpu, plan: &ConvNextPlan) -> Result<Self, GpuError> {
        let stages = plan
            .stages
            .iter()
            .map(|stage| {
                Ok(DeviceStage {
                    down: stage
                        .down
                        .as_ref()
                        .map(|(norm, conv)| {
                            Ok::<_, GpuError>((gpu.norm_weights(norm)?, gpu.gemm_weights(conv)?))
                        })
                        .transpose()?,
                    blocks: stage
                        .blocks
                        .iter()
                        .map(|b| {
                            Ok(DeviceBlock {
                                taps: gpu.upload(&b.dw_taps)?,
                                bias: gpu.upload(&b.dw_bias)?,
                                norm: gpu.norm_weights(&b.norm)?,
                                fc1: gpu.gemm_weights(&b.fc1)?,
                                fc2: gpu.gemm_weights(&b.fc2)?,
                            })
                        })
                        .collect::<Result<_, GpuError>>()?,
                })
            })
            .collect::<Result<_, GpuError>>()?;
        Ok(Self {
            stem: gpu.gemm_weights(&plan.stem)?,
            stem_norm: gpu.norm_weights(&plan.stem_norm)?,
            stages,
            head_norm: gpu.norm_weights(&plan.head_norm)?,
            head_eps: plan.config.head_eps,
            classifier: plan
                .classifier
                .as_ref()
                .map(|head| gpu.gemm_weights(head))
                .transpose()?,
        })
    }
}

impl Tower for CudaConvNext {
    /// The features (after the head's LayerNorm) and the logits, as
    /// [`ConvNextPlan::reference`] gives them.
    fn launch(&self, gpu: &Gpu, images: Images<'_>) -> Result<DeviceOutputs, GpuError> {
        let (real, n, side) = (images.real(), images.padded, images.side);
        let norm = images.norm;
        let pixels = gpu.upload_pixels(images.pixels)?;
        let mut h = side / 4;
        let mut cols = gpu.zeros(n * side * side * 3)?;
        gpu.patches(&pixels, &mut cols, (real, n, side, 4), norm)?;
        drop(pixels);
        let mut c = self.stem.n;
        let mut embedded = gpu.zeros(n * h * h * c)?;
        gpu.gemm(&cols, n * h * h, &self.stem, &mut embedded, false)?;
        drop(cols);
        let mut x = gpu.zeros(n * h * h * c)?;
        gpu.layer_norm(&embedded, &mut x, n * h * h, &self.stem_norm, EPS)?;
        drop(embedded);
        for stage in &self.stages {
            if let Some((norm, conv)) = &stage.down {
                let rows = n * h * h;
                let mut normed = gpu.zeros(rows * c)?;
                gpu.layer_norm(&x, &mut normed, rows, norm, EPS)?;
                let mut patches = gpu.zeros(rows * c)?;
                gpu.patches_nhwc(&normed, &mut patches, (n, h, c, 2))?;
                drop(normed);
                h /= 2;
                x = gpu.zeros(n * h * h * conv.n)?;
                gpu.gemm(&patches, n * h * h, conv, &mut x, false)?;
                c = conv.n;
            }
            let rows = n * h * h;
            let mut y = gpu.zeros(rows * c)?;
            let mut normed = gpu.zeros(rows * c)?;
            let mut hidden = gpu.zeros(rows * 4 * c)?;
            for block in &stage.blocks {
                gpu.depthwise7(&x, (&block.taps, &block.bias), &mut y, (n, h, c))?;
                gpu.layer_norm(&y, &mut normed, rows, &block.norm, EPS)?;
                gpu.gemm(&normed, rows, &block.fc1, &mut hidden, false)?;
                gpu.activation(&mut hidden, rows * block.fc1.n, 0)?;
                gpu.gemm(&hidden, rows, &block.fc2, &mut x, true)?;
            }
        }
        let mut pooled = gpu.zeros(n * c)?;
        gpu.pool(&x, &mut pooled, (n, h * h, 0, c), 1)?;
        drop(x);
        let mut features = gpu.zeros(n * c)?;
        gpu.layer_norm(&pooled, &mut features, n, &self.head_norm, self.head_eps)?;
        let logits = match &self.classifier {
            Some(head) => {
                let mut logits = gpu.zeros(n * head.n)?;
                gpu.gemm(&features, n, head, &mut logits, false)?;
                Some((logits, head.n))
            }
            None => None,
        };
        Ok(DeviceOutputs {
            features,
            rows: n,
            width: c,
            normalize: false,
            logits,
        })
    }
}
