//! torchvision's ResNets and EfficientNet-Lite0 on a GPU (#28): a
//! [`CnnPlan`]'s convolutions on cuDNN, NHWC f16 (`cudnn.rs`), step by
//! step as the plan's f32 `reference` runs them: the normalised input,
//! each convolution with its bias, residual and activation, the stem's max
//! pool, Lite0's asymmetric padding applied first, the global mean and the
//! classifier GEMM. A value's buffer is freed after its last reader. A
//! 1×1 convolution of stride 1 with no padding and no group (most of
//! ResNet-50's, Lite0's projections) is a GEMM over the NHWC rows on
//! cuBLASLt instead, bias, residual and ReLU in its epilogue: cuDNN's
//! legacy call builds a cuBLASLt plan for such a layer on every call (two
//! cuBLASLt handles and a heuristic query each, seen on the H100), which
//! left the GPU waiting on the host.
//!
//! Run on an H100 (see `cudnn/`): `tests/cuda_gpu.rs` holds it to the
//! reference wherever a GPU is present.

use super::cudnn::{Convolutions, DeviceConv};
use super::gpu::{Buf, DeviceGemm, DeviceOutputs, Gpu, GpuError, Images, Tower};
use super::plan::{CnnPlan, CnnStep, ConvActivation, ConvLayer};

enum Step {
    Conv {
        input: usize,
        conv: Box<DeviceConv>,
        residual: Option<usize>,
    },
    /// A 1×1 convolution of stride 1 as a GEMM: `k` = cin, `n` = cout.
    Pointwise {
        input: usize,
        gemm: DeviceGemm,
        residual: Option<usize>,
        relu: bool,
    },
    MaxPool {
        input: usize,
    },
}

/// A CNN plan's weights on one GPU.
pub struct CudaCnn {
    steps: Vec<Step>,
    last_use: Vec<usize>,
    features: usize,
    classifier: Option<DeviceGemm>,
    convs: Convolutions,
}

/// A value on the device: NHWC data, its side and channels.
struct Value {
    data: Buf,
    side: usize,
    channels: usize,
}

impl CudaCnn {
    /// `plan`'s filters and biases on `gpu` in f16, cuDNN's descriptors
    /// set.
    pub fn new(gpu: &Gpu, plan: &CnnPlan) -> Result<Self, GpuError> {
        let steps = plan
            .steps
            .iter()
            .map(|step| {
                Ok(match step {
                    CnnStep::Conv {
                        input,
                        layer,
                        residual,
                        activation,
                    } if pointwise(layer, *activation) => Step::Pointwise {
                        input: *input,
                        gemm: gpu.gemm_weights(&layer.as_gemm())?,
                        residual: *residual,
                        relu: *activation == ConvActivation::Relu,
                    },
                    CnnStep::Conv {
                        input,
                        layer,
                        residual,
                        activation,
                    } => Step::Conv {
                        input: *input,
                        conv: Box::new(DeviceConv::new(gpu, layer, *activation)?),
                        residual: *residual,
                    },
                    CnnStep::MaxPool3x3S2 { input } => Step::MaxPool { input: *input },
                })
            })
            .collect::<Result<_, GpuError>>()?;
        Ok(Self {
            steps,
            last_use: plan.last_use.clone(),
            features: plan.features,
            classifier: plan
                .classifier
                .as_ref()
                .map(|head| gpu.gemm_weights(head))
                .transpose()?,
            convs: Convolutions::new(gpu)?,
        })
    }
}

impl Tower for CudaCnn {
    /// The pooled features and the logits, as [`CnnPlan::reference`]
    /// gives them.
    fn launch(&self, gpu: &Gpu, images: Images<'_>) -> Result<DeviceOutputs, GpuError> {
        let (real, n, side) = (images.real(), images.padded, images.side);
        let norm = images.norm;
        let pixels = gpu.upload_pixels(images.pixels)?;
        let mut input = gpu.zeros(n * side * side * 3)?;
        gpu.normalize_nhwc(&pixels, &mut input, (real, n, side), norm)?;
        drop(pixels);
        let mut values: Vec<Option<Value>> = Vec::with_capacity(self.steps.len() + 1);
        values.push(Some(Value {
            data: input,
            side,
            channels: 3,
        }));
        for (i, step) in self.steps.iter().enumerate() {
            let out = match step {
                Step::Conv {
                    input,
                    conv,
                    residual,
                } => {
                    let x = get(&values, *input);
                    let padded_input = match conv.explicit {
                        Some(padding) => {
                            let s = x.side + padding[0] + padding[2];
                            let mut p = gpu.zeros(n * s * s * x.channels)?;
                            gpu.pad_nhwc(&x.data, &mut p, (n, x.side, x.channels), padding)?;
                            Some((p, s))
                        }
                        None => None,
                    };
                    let (src, s) = match &padded_input {
                        Some((p, s)) => (p, *s),
                        None => (&x.data, x.side),
                    };
                    let out_side = conv.out_side(s);
                    let mut y = gpu.zeros(n * out_side * out_side * conv.cout)?;
                    let residual = residual.map(|r| &get(&values, r).data);
                    self.convs.run(gpu, conv, src, n, s, &mut y, residual)?;
                    Value {
                        data: y,
                        side: out_side,
                        channels: conv.cout,
                    }
                }
                Step::Pointwise {
                    input,
                    gemm,
                    residual,
                    relu,
                } => {
                    let x = get(&values, *input);
                    let rows = n * x.side * x.side;
                    let mut y = gpu.zeros(rows * gemm.n)?;
                    let residual = residual.map(|r| &get(&values, r).data);
                    gpu.pointwise_conv(&x.data, rows, gemm, &mut y, residual, *relu)?;
                    Value {
                        data: y,
                        side: x.side,
                        channels: gemm.n,
                    }
                }
                Step::MaxPool { input } => {
                    let x = get(&values, *input);
                    let out_side = (x.side - 1) / 2 + 1;
                    let mut y = gpu.zeros(n * out_side * out_side * x.channels)?;
                    gpu.max_pool_3x3_s2(&x.data, &mut y, (n, x.side, x.channels))?;
                    Value {
                        data: y,
                        side: out_side,
                        channels: x.channels,
                    }
                }
            };
            values.push(Some(out));
            for (v, last) in self.last_use.iter().enumerate().take(i + 1) {
                if *last == i {
                    values[v] = None;
                }
            }
        }
        let last = values
            .pop()
            .flatten()
            .expect("the last value is kept for the pooling");
        let c = self.features;
        assert_eq!(last.channels, c, "the plan's pooled width");
        let mut pooled = gpu.zeros(n * c)?;
        gpu.pool(&last.data, &mut pooled, (n, last.side * last.side, 0, c), 1)?;
        drop(last);
        let logits = match &self.classifier {
            Some(head) => {
                let mut logits = gpu.zeros(n * head.n)?;
                gpu.gemm(&pooled, n, head, &mut logits, false)?;
                Some((logits, head.n))
            }
            None => None,
        };
        Ok(DeviceOutputs {
            features: pooled,
            rows: n,
            width: c,
            normalize: false,
            logits,
        })
    }
}

/// Whether `layer` with `activation` runs as a GEMM ([`Gpu::pointwise_conv`]):
/// a 1×1 kernel, stride 1, no padding, one group, and an activation
/// cuBLASLt's epilogue has (ReLU6 stays on cuDNN).
fn pointwise(layer: &ConvLayer, activation: ConvActivation) -> bool {
    layer.kernel == 1
        && layer.stride == 1
        && layer.padding == [0; 4]
        && layer.groups == 1
        && matches!(activation, ConvActivation::Identity | ConvActivation::Relu)
}

/// Value `v`, which a later step reads: never freed before its last use.
fn get(values: &[Option<Value>], v: usize) -> &Value {
    values[v]
        .as_ref()
        .expect("a value is read before its last use")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(kernel: usize, stride: usize, padding: [usize; 4], groups: usize) -> ConvLayer {
        let (cin, cout) = (4, 8);
        ConvLayer {
            cout,
            cin,
            kernel,
            stride,
            padding,
            groups,
            filter: vec![0.5; cout * kernel * kernel * cin / groups],
            bias: vec![0.0; cout],
        }
    }

    /// Only what one GEMM with cuBLASLt's epilogue computes leaves cuDNN:
    /// a 1×1 kernel at stride 1, unpadded, ungrouped, with ReLU or nothing.
    #[test]
    fn only_plain_1x1_convolutions_run_as_gemms() {
        let plain = layer(1, 1, [0; 4], 1);
        assert!(pointwise(&plain, ConvActivation::Relu));
        assert!(pointwise(&plain, ConvActivation::Identity));
        assert!(!pointwise(&plain, ConvActivation::Relu6));
        assert!(!pointwise(&layer(3, 1, [1; 4], 1), ConvActivation::Relu));
        assert!(!pointwise(&layer(1, 2, [0; 4], 1), ConvActivation::Relu));
        assert!(!pointwise(
            &layer(1, 1, [0, 0, 1, 1], 1),
            ConvActivation::Relu
        ));
        assert!(!pointwise(&layer(1, 1, [0; 4], 4), ConvActivation::Relu));
    }
}
