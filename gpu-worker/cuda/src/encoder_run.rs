//! The transformer encoder on a GPU (#28), shared by the image towers
//! (`vit_run.rs`) and the text towers (`text_run.rs`): pre-norm blocks of
//! cuBLASLt GEMMs (bias in the epilogue, the residual adds as `β = 1`
//! accumulation into the stream), attention in one kernel (online softmax
//! on the tensor cores, causal for CLIP's text tower; for heads it has no
//! width for, two GEMMs batched over every (sequence, head) on the heads
//! split apart by a kernel, with a row softmax between them), and
//! the MLP's activation, op for op as `plan::ops::run_blocks`.
//!
//! Run on an H100 (see `gpu/`).

use super::gpu::{Buf, DeviceGemm, DeviceNorm, Gpu, GpuError, Strided};
use super::plan::Block;
use model_families::transformer::Activation;

/// One block's weights on the device.
pub(crate) struct DeviceBlock {
    norm1: DeviceNorm,
    qkv: DeviceGemm,
    out: DeviceGemm,
    norm2: DeviceNorm,
    fc1: DeviceGemm,
    fc2: DeviceGemm,
}

/// `blocks`' weights on `gpu`.
pub(crate) fn upload_blocks(gpu: &Gpu, blocks: &[Block]) -> Result<Vec<DeviceBlock>, GpuError> {
    blocks
        .iter()
        .map(|b| {
            Ok(DeviceBlock {
                norm1: gpu.norm_weights(&b.norm1)?,
                qkv: gpu.gemm_weights(&b.qkv)?,
                out: gpu.gemm_weights(&b.out)?,
                norm2: gpu.norm_weights(&b.norm2)?,
                fc1: gpu.gemm_weights(&b.fc1)?,
                fc2: gpu.gemm_weights(&b.fc2)?,
            })
        })
        .collect()
}

/// The activation's number in `activation_f16`; [`SWIGLU`] for the gated
/// MLP, which its own kernel runs.
pub(crate) fn activation_kind(activation: Activation) -> i32 {
    match activation {
        Activation::Gelu => 0,
        Activation::GeluTanh => 1,
        Activation::QuickGelu => 2,
        Activation::SwiGlu => SWIGLU,
    }
}

/// [`activation_kind`]'s number for DINOv2 giant's gated MLP.
pub(crate) const SWIGLU: i32 = 3;

/// What the blocks run over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Encoder {
    pub(crate) d: usize,
    pub(crate) heads: usize,
    pub(crate) eps: f64,
    pub(crate) activation: i32,
    pub(crate) causal: bool,
}

impl Encoder {
    /// `blocks` over the stream `t` (`[n·tokens, D]`), with `h`
    /// (`[n·tokens, D]`) as scratch.
    pub(crate) fn run(
        &self,
        gpu: &Gpu,
        blocks: &[DeviceBlock],
        t: &mut Buf,
        h: &mut Buf,
        n: usize,
        tokens: usize,
    ) -> Result<(), GpuError> {
        let (d, rows) = (self.d, n * tokens);
        let mlp = blocks.first().map_or(0, |b| b.fc1.n);
        let mut qkv = gpu.zeros(rows * 3 * d)?;
        // The unfused attention's buffers, for heads the kernel has no
        // width for (or when measuring it against the fused one).
        let mut unfused = if fused_attention(d / self.heads) {
            None
        } else {
            Some(Unfused {
                split: gpu.zeros(rows * 3 * d)?,
                heads_out: gpu.zeros(rows * d)?,
                scores: gpu.zeros(n * self.heads * tokens * tokens)?,
            })
        };
        let mut attended = gpu.zeros(rows * d)?;
        let mut hidden = gpu.zeros(rows * mlp)?;
        // A gated MLP's `silu(gate) · up`, half of fc1's width.
        let mut gated = match blocks.first() {
            Some(b) if self.activation == SWIGLU => Some((gpu.zeros(rows * b.fc2.k)?, b.fc2.k)),
            _ => None,
        };
        for block in blocks {
            gpu.layer_norm(t, h, rows, &block.norm1, self.eps)?;
            gpu.gemm(h, rows, &block.qkv, &mut qkv, false)?;
            self.attention(gpu, &qkv, unfused.as_mut(), &mut attended, n, tokens)?;
            gpu.gemm(&attended, rows, &block.out, t, true)?;
            gpu.layer_norm(t, h, rows, &block.norm2, self.eps)?;
            gpu.gemm(h, rows, &block.fc1, &mut hidden, false)?;
            match gated.as_mut() {
                Some((g, f)) => {
                    gpu.swiglu(&hidden, g, rows, *f)?;
                    gpu.gemm(g, rows, &block.fc2, t, true)?;
                }
                None => {
                    gpu.activation(&mut hidden, rows * mlp, self.activation)?;
                    gpu.gemm(&hidden, rows, &block.fc2, t, true)?;
                }
            }
        }
        Ok(())
    }

    /// Multi-head attention over `qkv` (`[n·tokens, 3D]`) into `out`
    /// (`[n·tokens, D]`): one fused kernel ([`Gpu::attention`]) where
    /// `unfused` is `None`; else the heads split apart (`split`, as
    /// `qkv`), one GEMM batched over every (sequence, head) for the
    /// scores, a row softmax over all of them, one batched GEMM for the
    /// weighted values (into `heads_out`, `[n·tokens, D]`), merged back
    /// into token rows: two cuBLASLt calls a layer, whatever the number
    /// of heads.
    fn attention(
        &self,
        gpu: &Gpu,
        qkv: &Buf,
        unfused: Option<&mut Unfused>,
        out: &mut Buf,
        n: usize,
        tokens: usize,
    ) -> Result<(), GpuError> {
        let (d, heads) = (self.d, self.heads);
        let dh = d / heads;
        let shape = (n, tokens, heads, dh);
        // `1/sqrt(dh)` applied in f32 before any f16 store: unscaled,
        // |q·k| above 65504 would be inf and its whole softmax row NaN
        // (CLIP-L, DINOv2-L, So400m can get there).
        let scale = 1.0 / (dh as f32).sqrt();
        let Some(Unfused {
            split,
            heads_out,
            scores,
        }) = unfused
        else {
            return gpu.attention(qkv, out, shape, scale, self.causal);
        };
        gpu.split_heads(qkv, split, shape)?;
        let part = n * tokens * d;
        let head = tokens * dh;
        let square = tokens * tokens;
        let of = |offset: usize| Strided {
            offset,
            ld: dh,
            stride: head,
        };
        let all = Strided {
            offset: 0,
            ld: tokens,
            stride: square,
        };
        gpu.batched_gemm(
            (tokens, tokens, dh),
            scale,
            (&*split, of(0)),
            (&*split, of(part)),
            true,
            (scores, all),
            n * heads,
        )?;
        gpu.softmax_rows(scores, n * heads * tokens, tokens, self.causal, tokens)?;
        gpu.batched_gemm(
            (tokens, dh, tokens),
            1.0,
            (&*scores, all),
            (&*split, of(2 * part)),
            false,
            (heads_out, of(0)),
            n * heads,
        )?;
        gpu.merge_heads(heads_out, out, shape)
    }
}

/// The unfused attention's buffers: the heads split apart, their attended
/// values, and every (sequence, head)'s scores.
struct Unfused {
    split: Buf,
    heads_out: Buf,
    scores: Buf,
}

/// Whether attention over heads of `dh` runs as one kernel: wherever
/// [`Gpu::fused_attention_for`] has it, unless
/// `PIPELINE_CUDA_ATTENTION=unfused` asks for the split, two batched
/// GEMMs and a row softmax (to measure one against the other, or to step
/// around a fault in the kernel).
fn fused_attention(dh: usize) -> bool {
    static UNFUSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let unfused = *UNFUSED.get_or_init(|| {
        std::env::var("PIPELINE_CUDA_ATTENTION").is_ok_and(|v| v.eq_ignore_ascii_case("unfused"))
    });
    !unfused && Gpu::fused_attention_for(dh)
}
