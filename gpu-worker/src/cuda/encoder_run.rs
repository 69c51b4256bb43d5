//! The transformer encoder on a GPU (#28), shared by the image towers
//! (`vit_run.rs`) and the text towers (`text_run.rs`): pre-norm blocks of
//! cuBLASLt GEMMs (bias in the epilogue, the residual adds as `β = 1`
//! accumulation into the stream), attention as two GEMMs batched over
//! every (sequence, head) on the heads split apart by a kernel, with a row
//! softmax between them (causal for CLIP's text tower), and
//! the MLP's activation, op for op as `plan::ops::run_blocks`.
//!
//! Run on an H100 (see `gpu/`).

use super::gpu::{Buf, DeviceGemm, DeviceNorm, Gpu, GpuError, Strided};
use super::plan::Block;
use crate::model::transformer::Activation;

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

/// The activation's number in `activation_f16`.
pub(crate) fn activation_kind(activation: Activation) -> i32 {
    match activation {
        Activation::Gelu => 0,
        Activation::GeluTanh => 1,
        Activation::QuickGelu => 2,
    }
}

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
        let mut split = gpu.zeros(rows * 3 * d)?;
        let mut heads_out = gpu.zeros(rows * d)?;
        let mut scores = gpu.zeros(n * self.heads * tokens * tokens)?;
        let mut attended = gpu.zeros(rows * d)?;
        let mut hidden = gpu.zeros(rows * mlp)?;
        for block in blocks {
            gpu.layer_norm(t, h, rows, &block.norm1, self.eps)?;
            gpu.gemm(h, rows, &block.qkv, &mut qkv, false)?;
            self.attention(
                gpu,
                &qkv,
                (&mut split, &mut heads_out),
                &mut scores,
                &mut attended,
                n,
                tokens,
            )?;
            gpu.gemm(&attended, rows, &block.out, t, true)?;
            gpu.layer_norm(t, h, rows, &block.norm2, self.eps)?;
            gpu.gemm(h, rows, &block.fc1, &mut hidden, false)?;
            gpu.activation(&mut hidden, rows * mlp, self.activation)?;
            gpu.gemm(&hidden, rows, &block.fc2, t, true)?;
        }
        Ok(())
    }

    /// Multi-head attention over `qkv` (`[n·tokens, 3D]`) into `out`
    /// (`[n·tokens, D]`): the heads split apart (`split`, as `qkv`), one
    /// GEMM batched over every (sequence, head) for the scores, a row
    /// softmax over all of them, one batched GEMM for the weighted values
    /// (into `heads_out`, `[n·tokens, D]`), merged back into token rows.
    /// Two cuBLASLt calls a layer, whatever the number of heads.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        gpu: &Gpu,
        qkv: &Buf,
        (split, heads_out): (&mut Buf, &mut Buf),
        scores: &mut Buf,
        out: &mut Buf,
        n: usize,
        tokens: usize,
    ) -> Result<(), GpuError> {
        let (d, heads) = (self.d, self.heads);
        let dh = d / heads;
        let shape = (n, tokens, heads, dh);
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
        // `1/sqrt(dh)` in the GEMM's alpha, applied in f32 before the f16
        // store: unscaled, |q·k| above 65504 would be inf and its whole
        // softmax row NaN (CLIP-L, DINOv2-L, So400m can get there).
        let scale = 1.0 / (dh as f32).sqrt();
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
