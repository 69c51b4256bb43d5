//! The CNN families written as burn modules (torchvision's ResNets,
//! EfficientNet-Lite0) lowered to plain host data for another engine: the
//! same module, loaded through the same `burn::store` path with the same
//! checks and BatchNorms folded the same way, then walked into a list of
//! convolutions over earlier values ([`CnnGraph`]). So the CUDA engine
//! (#28) reads these checkpoints exactly as the burn engine does: no second
//! way of loading weights.

use burn::nn::conv::Conv2d;
use burn::nn::{Linear, PaddingConfig2d};
use burn::tensor::{FloatDType, Tensor};

use super::efficientnet_lite::EfficientNetLite;
use super::resnet::ResNet;

pub(crate) use model_families::lowered::{CnnGraph, CnnOp, ConvActivation, HostConv};

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.cast(FloatDType::F32)
        .into_data()
        .try_to_vec::<f32>()
        .expect("parameters read back as f32")
}

/// `conv` (its BatchNorm already folded: bias present or zero) on the host.
fn host_conv(conv: &Conv2d) -> HostConv {
    let [cout, cin_group, kernel, kw] = conv.weight.dims();
    debug_assert_eq!(kernel, kw, "square kernels only");
    let padding = match conv.padding {
        PaddingConfig2d::Explicit(top, left, bottom, right) => [top, left, bottom, right],
        PaddingConfig2d::Valid => [0; 4],
        ref other => unreachable!("the CNN families pad explicitly, not {other:?}"),
    };
    HostConv {
        cout,
        cin: cin_group * conv.groups,
        kernel,
        stride: conv.stride[0],
        padding,
        groups: conv.groups,
        weight: values(conv.weight.val()),
        bias: conv
            .bias
            .as_ref()
            .map_or_else(|| vec![0.0; cout], |b| values(b.val())),
    }
}

/// Appends ops and names the values they make.
struct Builder {
    ops: Vec<CnnOp>,
}

impl Builder {
    fn conv(
        &mut self,
        input: usize,
        conv: &Conv2d,
        residual: Option<usize>,
        activation: ConvActivation,
    ) -> usize {
        self.ops.push(CnnOp::Conv {
            input,
            conv: host_conv(conv),
            residual,
            activation,
        });
        self.ops.len()
    }

    fn finish(self, classifier: Option<&Linear>) -> CnnGraph {
        let features = match self.ops.last() {
            Some(CnnOp::Conv { conv, .. }) => conv.cout,
            _ => unreachable!("a CNN ends in a convolution"),
        };
        CnnGraph {
            ops: self.ops,
            features,
            classifier: classifier.map(|linear| {
                (
                    values(linear.weight.val()),
                    linear
                        .bias
                        .as_ref()
                        .map(|b| values(b.val()))
                        .expect("the classifiers have a bias"),
                )
            }),
        }
    }
}

/// A folded ResNet's graph, or `None` while a BatchNorm is unfolded.
pub(crate) fn resnet_graph(net: &ResNet) -> Option<CnnGraph> {
    let (stem, blocks) = net.parts()?;
    let mut b = Builder { ops: Vec::new() };
    let stem = b.conv(0, stem, None, ConvActivation::Relu);
    b.ops.push(CnnOp::MaxPool3x3S2 { input: stem });
    let mut x = b.ops.len();
    for block in blocks {
        let identity = match block.downsample {
            Some(d) => b.conv(x, d, None, ConvActivation::Identity),
            None => x,
        };
        let h = b.conv(x, block.conv1, None, ConvActivation::Relu);
        x = match block.conv3 {
            Some(conv3) => {
                let h = b.conv(h, block.conv2, None, ConvActivation::Relu);
                b.conv(h, conv3, Some(identity), ConvActivation::Relu)
            }
            None => b.conv(h, block.conv2, Some(identity), ConvActivation::Relu),
        };
    }
    Some(b.finish(net.classifier()))
}

/// A folded EfficientNet-Lite0's graph, or `None` while a BatchNorm is
/// unfolded.
pub(crate) fn lite_graph(net: &EfficientNetLite) -> Option<CnnGraph> {
    let parts = net.parts()?;
    let mut b = Builder { ops: Vec::new() };
    let mut x = b.conv(0, parts.stem, None, ConvActivation::Relu6);
    for block in parts.blocks {
        let expanded = match block.expand {
            Some(conv) => b.conv(x, conv, None, ConvActivation::Relu6),
            None => x,
        };
        let h = b.conv(expanded, block.depthwise, None, ConvActivation::Relu6);
        let skip = block.skip.then_some(x);
        x = b.conv(h, block.project, skip, ConvActivation::Identity);
    }
    b.conv(x, parts.head, None, ConvActivation::Relu6);
    Some(b.finish(Some(parts.classifier)))
}
