//! What a model family written for burn is: one type per family (the test
//! CNN, ResNet, EfficientNet-Lite, the ViTs, ConvNeXt), each implementing
//! [`Network`] in its own file. [`crate::Model`] holds one as a trait
//! object, so nothing above the families matches over them, and a family
//! that leaves out a required method does not compile.

use std::fmt;

use burn::module::{Module, ModuleMapper, Param};
use burn::nn::Linear;
use burn::nn::conv::Conv2d;
use burn::tensor::{FloatDType, Tensor};
use pipeline_core::EmbedPooling;

use super::layers::Dense;

/// A model family's network, built and on its device.
pub(crate) trait Network: fmt::Debug + Send + Sync {
    /// Pooled penultimate features (the embedding), `[N, D]`, from a
    /// normalised NCHW batch.
    fn features(&self, x: Tensor<4>) -> Tensor<2>;

    /// The checkpoint's classifier head over the features (weight
    /// `[D, classes]`), if it has one.
    fn classifier(&self) -> Option<Dense>;

    /// Width of the L2-normalised embedding that zero-shot scoring uses,
    /// if the family has one (CLIP, SigLIP).
    fn normalised_embedding(&self) -> Option<usize> {
        None
    }

    /// Which tokens make the embedding (DINOv2's `--pooling`); families
    /// with one way ignore it (the CLI refuses the flag for them).
    fn set_pooling(&mut self, _pooling: EmbedPooling) {}

    /// Every parameter in `dtype`. Families built from a checkpoint's
    /// tensors are uploaded in their device's default float type already;
    /// the CNNs are drawn or loaded on the host in f32 and cast here.
    fn cast(&mut self, _dtype: FloatDType) {}

    /// Every convolution, for an engine that rewrites them for its device
    /// once, at construction (the burn engine on Mesa's lavapipe); the
    /// families without burn `Conv2d` modules have none to give.
    fn convolutions(&mut self) -> Vec<&mut Conv2d> {
        Vec::new()
    }
}

/// `module` with every float parameter in `dtype`: the CNN families'
/// [`Network::cast`].
pub(crate) fn cast_module<M: Module>(module: M, dtype: FloatDType) -> M {
    module.map(&mut CastFloats(dtype))
}

/// Casts every float parameter to one type.
struct CastFloats(FloatDType);

impl ModuleMapper for CastFloats {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let dtype = self.0;
        param.map(move |tensor| tensor.cast(dtype))
    }
}

/// The classifier of a burn `Linear` module, as a [`Dense`].
pub(crate) fn dense_of(linear: &Linear) -> Dense {
    Dense {
        weight: linear.weight.val(),
        bias: linear.bias.as_ref().map(Param::val),
    }
}
