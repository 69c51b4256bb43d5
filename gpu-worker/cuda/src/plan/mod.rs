//! Every family as the CUDA engine will run it: a plan of GEMMs,
//! LayerNorms, attentions and convolutions over
//! weights packed once, at load time, from the same canonical tensors the
//! burn engine reads, through the same layout detection (one way of
//! loading weights): the ViT image towers ([`VitPlan`]), the CLIP and
//! SigLIP text towers ([`TextPlan`]), ConvNeXt ([`ConvNextPlan`]), and
//! the ResNets and EfficientNet-Lite0 ([`CnnPlan`]), which the burn engine
//! loads as burn modules: their plan is made from that same module,
//! loaded and folded on the host by the burn engine's loader, handed over as
//! a [`LowerCnn`].
//! Packing:
//! - the patch convolution (kernel = stride = patch) as a GEMM, its
//!   weight `[3·p·p, D]` in the order an image's patch is read (channel,
//!   row, column);
//! - every Linear weight `[in, out]` (row-major `K × N`), q/k/v fused;
//! - DINOv2's layer scales folded into the GEMM before them (`W·diag(γ)`,
//!   `b·γ`);
//! - the class token's position added to it, the patch grid's positions
//!   resampled to the input grid;
//! - the activation named per MLP, for a GEMM epilogue or a kernel.
//!
//! ConvNeXt's packing is on [`ConvNextPlan`]. One file per family
//! (`vit.rs`, `text.rs`, `convnext.rs`, `cnn.rs`) over the shared ops (`ops.rs`). `reference` runs a plan on
//! the CPU in plain f32, op by op as the GPU will (`gpu-worker/tests/it/families.rs` and
//! `tests/text.rs` check it against PyTorch's outputs for every layout):
//! what a GPU session compares its kernels with.

mod cnn;
mod convnext;
mod ops;
mod text;
mod vit;

pub use cnn::{CnnPlan, CnnStep, ConvLayer, LowerCnn, cnn_plan, cnn_plan_seeded};
pub use convnext::{
    ConvNextBlock, ConvNextPlan, ConvNextStage, convnext_plan, convnext_plan_resolved,
    convnext_plan_seeded,
};
pub use model_families::lowered::ConvActivation;
pub use ops::{Block, Gemm, LayerNorm};
pub(crate) use ops::{gemm, l2_normalize_rows, softmax};
pub use text::{TextPlan, text_plan, text_plan_seeded};
pub use vit::{MapHead, VitPlan, vit_plan, vit_plan_resolved, vit_plan_seeded};
