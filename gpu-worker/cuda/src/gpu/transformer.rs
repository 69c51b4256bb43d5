//! The transformers' kernels on a [`Gpu`]: LayerNorm, the row softmax,
//! the MLP activations, the ViT's patch rows, token sequence and pooling,
//! a text tower's pooled token, and attention's heads split apart and
//! merged back (`kernels/transformer.cu`, `kernels/vit.cu`). Each checks
//! its buffers' sizes before it launches.
#![allow(unsafe_code)]

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::{Buf, DeviceNorm, Gpu, GpuError, Norm3, check_len, driver, elementwise, int, per_row};

impl Gpu {
    /// LayerNorm of `rows` rows of `ln`'s width, `x` into `y`.
    pub fn layer_norm(
        &self,
        x: &Buf,
        y: &mut Buf,
        rows: usize,
        ln: &DeviceNorm,
        eps: f64,
    ) -> Result<(), GpuError> {
        let width = ln.weight.len();
        check_len(x, rows * width, "LayerNorm input");
        check_len(y, rows * width, "LayerNorm output");
        let (w, e) = (int(width), eps as f32);
        let mut launch = self.stream.launch_builder(self.kernel("layer_norm_f16"));
        launch
            .arg(x)
            .arg(y)
            .arg(&ln.weight)
            .arg(&ln.bias)
            .arg(&w)
            .arg(&e);
        // SAFETY: `layer_norm_f16(x, y, weight, bias, width, eps)`, one
        // block per row; sizes checked above.
        unsafe { launch.launch(per_row(rows)) }.map_err(driver("layer_norm_f16"))?;
        Ok(())
    }

    /// `softmax(row)` in place over `rows` rows of `width` (the scores come
    /// scaled from their GEMM); with `causal`, row r of each `queries`-row
    /// block sees keys `0..=r`.
    pub fn softmax_rows(
        &self,
        scores: &mut Buf,
        rows: usize,
        width: usize,
        causal: bool,
        queries: usize,
    ) -> Result<(), GpuError> {
        check_len(scores, rows * width, "softmax");
        let (w, c, q) = (int(width), i32::from(causal), int(queries));
        let mut launch = self.stream.launch_builder(self.kernel("softmax_rows_f16"));
        launch.arg(scores).arg(&w).arg(&c).arg(&q);
        // SAFETY: `softmax_rows_f16(scores, width, causal, queries)`,
        // one block per row; size checked above.
        unsafe { launch.launch(per_row(rows)) }.map_err(driver("softmax_rows_f16"))?;
        Ok(())
    }

    /// The MLP activation `kind` (0 GELU, 1 tanh GELU, 2 QuickGELU) in
    /// place over the first `n` values.
    pub fn activation(&self, x: &mut Buf, n: usize, kind: i32) -> Result<(), GpuError> {
        // A gated MLP halves its width: `swiglu`, not this.
        assert!((0..=2).contains(&kind), "activation_f16 has no kind {kind}");
        check_len(x, n, "activation");
        let count = n as i64;
        let mut launch = self.stream.launch_builder(self.kernel("activation_f16"));
        launch.arg(x).arg(&count).arg(&kind);
        // SAFETY: `activation_f16(x, n, kind)`, a grid-stride loop over `n`.
        unsafe { launch.launch(elementwise(n)) }.map_err(driver("activation_f16"))?;
        Ok(())
    }

    /// A gated MLP's `silu(gate) · up` (DINOv2 giant): `x` (`[rows,
    /// 2f]`, gate then up) into `y` (`[rows, f]`).
    pub fn swiglu(&self, x: &Buf, y: &mut Buf, rows: usize, f: usize) -> Result<(), GpuError> {
        check_len(x, rows * 2 * f, "SwiGLU input");
        check_len(y, rows * f, "SwiGLU output");
        let (r, w) = (rows as i64, int(f));
        let mut launch = self.stream.launch_builder(self.kernel("swiglu_f16"));
        launch.arg(x).arg(y).arg(&r).arg(&w);
        // SAFETY: `swiglu_f16(x, y, rows, f)`, a grid-stride loop over
        // `rows × f`; sizes checked above.
        unsafe { launch.launch(elementwise(rows * f)) }.map_err(driver("swiglu_f16"))?;
        Ok(())
    }

    /// The patch GEMM's input from `rows` u8 NCHW images (`padded` rows
    /// written, the rest the normalised zero pixel).
    pub fn patches(
        &self,
        pixels: &CudaSlice<u8>,
        out: &mut Buf,
        (rows, padded, side, p): (usize, usize, usize, usize),
        norm: Norm3,
    ) -> Result<(), GpuError> {
        check_len(pixels, rows * 3 * side * side, "patches input");
        let total = padded * (side / p) * (side / p) * 3 * p * p;
        check_len(out, total, "patches output");
        let (r, pd, s, pp) = (int(rows), int(padded), int(side), int(p));
        let mut launch = self.stream.launch_builder(self.kernel("patches_f16"));
        launch
            .arg(pixels)
            .arg(out)
            .arg(&r)
            .arg(&pd)
            .arg(&s)
            .arg(&pp)
            .arg(&norm);
        // SAFETY: `patches_f16(src, dst, rows, padded, side, p, norm)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(total)) }.map_err(driver("patches_f16"))?;
        Ok(())
    }

    /// The token sequence from the patch embeddings, the prefix rows and
    /// the patch positions.
    #[allow(clippy::too_many_arguments)]
    pub fn tokens(
        &self,
        embedded: &Buf,
        tokens: &mut Buf,
        prefix: &CudaSlice<f32>,
        patch_pos: &CudaSlice<f32>,
        (n, prefix_rows, patches, d): (usize, usize, usize, usize),
    ) -> Result<(), GpuError> {
        check_len(embedded, n * patches * d, "tokens input");
        check_len(tokens, n * (prefix_rows + patches) * d, "tokens output");
        check_len(prefix, prefix_rows * d, "prefix");
        check_len(patch_pos, patches * d, "positions");
        let (ni, pr, pa, di) = (int(n), int(prefix_rows), int(patches), int(d));
        let mut launch = self.stream.launch_builder(self.kernel("tokens_f16"));
        launch
            .arg(embedded)
            .arg(tokens)
            .arg(prefix)
            .arg(patch_pos)
            .arg(&ni)
            .arg(&pr)
            .arg(&pa)
            .arg(&di);
        // SAFETY: `tokens_f16(embedded, tokens, prefix, patch_pos, n,
        // prefix_rows, patches, d)`; sizes checked above.
        unsafe { launch.launch(elementwise(n * (prefix_rows + patches) * d)) }
            .map_err(driver("tokens_f16"))?;
        Ok(())
    }

    /// Pooling of normed tokens: mode 0 class, 1 mean, 2 both.
    pub fn pool(
        &self,
        t: &Buf,
        out: &mut Buf,
        (n, tokens, prefix_rows, d): (usize, usize, usize, usize),
        mode: i32,
    ) -> Result<(), GpuError> {
        let width = if mode == 2 { 2 * d } else { d };
        check_len(t, n * tokens * d, "pool input");
        check_len(out, n * width, "pool output");
        let (ni, ti, pr, di) = (int(n), int(tokens), int(prefix_rows), int(d));
        let mut launch = self.stream.launch_builder(self.kernel("pool_f16"));
        launch
            .arg(t)
            .arg(out)
            .arg(&ni)
            .arg(&ti)
            .arg(&pr)
            .arg(&di)
            .arg(&mode);
        // SAFETY: `pool_f16(t, out, n, tokens, prefix_rows, d, mode)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(n * width)) }.map_err(driver("pool_f16"))?;
        Ok(())
    }

    /// Rows `index[i]` of `src` (`width` wide) into rows `i` of `dst`.
    pub fn gather_rows(
        &self,
        src: &Buf,
        dst: &mut Buf,
        index: &[usize],
        width: usize,
    ) -> Result<(), GpuError> {
        let rows = index.len();
        let last = index.iter().copied().max().unwrap_or(0);
        check_len(src, (last + 1) * width, "gather input");
        check_len(dst, rows * width, "gather output");
        let index: Vec<i32> = index.iter().map(|&i| int(i)).collect();
        let index = self
            .stream
            .clone_htod(&index)
            .map_err(driver("uploading row indices"))?;
        let (r, w) = (int(rows), int(width));
        let mut launch = self.stream.launch_builder(self.kernel("gather_rows_f16"));
        launch.arg(src).arg(dst).arg(&index).arg(&r).arg(&w);
        // SAFETY: `gather_rows_f16(src, dst, index, rows, width)`; every
        // index was checked to lie inside `src`, `dst` holds `rows` rows.
        unsafe { launch.launch(elementwise(rows * width)) }.map_err(driver("gather_rows_f16"))?;
        Ok(())
    }

    /// The head widths [`Gpu::attention`] has a kernel for: 64, every
    /// built-in transformer's (the one width run on a GPU so far).
    pub fn fused_attention_for(dh: usize) -> bool {
        dh == 64
    }

    /// Multi-head attention in one kernel (`kernels/attention.cu`):
    /// `softmax(q·kᵀ · scale) · v` for every (sequence, head), read from
    /// `qkv` (`[n·tokens, 3·heads·dh]`, q | k | v) and written in token
    /// rows into `out` (`[n·tokens, heads·dh]`); with `causal`, query `i`
    /// sees keys `0..=i`. Only for a `dh` [`Gpu::fused_attention_for`]
    /// takes.
    pub fn attention(
        &self,
        qkv: &Buf,
        out: &mut Buf,
        (n, tokens, heads, dh): (usize, usize, usize, usize),
        scale: f32,
        causal: bool,
    ) -> Result<(), GpuError> {
        if !Self::fused_attention_for(dh) {
            return Err(GpuError(format!("no attention kernel for heads of {dh}")));
        }
        let name = "attention_dh64_f16";
        check_len(qkv, 3 * n * tokens * heads * dh, "attention input");
        check_len(out, n * tokens * heads * dh, "attention output");
        let (t, h, c) = (int(tokens), int(heads), i32::from(causal));
        let config = LaunchConfig {
            grid_dim: (
                u32::try_from(tokens.div_ceil(64)).expect("query tiles fit a grid"),
                u32::try_from(heads).expect("heads fit a grid"),
                u32::try_from(n).expect("sequences fit a grid"),
            ),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(self.kernel(name));
        launch.arg(qkv).arg(out).arg(&t).arg(&h).arg(&scale).arg(&c);
        // SAFETY: `attention_dh64_f16(qkv, out, tokens, heads, scale,
        // causal)`, grid (⌈tokens/64⌉, heads, n) of 4 warps (the kernel's
        // ATTENTION_WARPS) with static shared memory; sizes checked above.
        unsafe { launch.launch(config) }.map_err(driver(name))?;
        Ok(())
    }

    /// `qkv` (`[n·tokens, 3·heads·dh]`) into `split`
    /// (`[3][n][heads][tokens][dh]`): every (sequence, head) contiguous,
    /// for attention's GEMMs batched over all of them at once.
    pub fn split_heads(
        &self,
        qkv: &Buf,
        split: &mut Buf,
        (n, tokens, heads, dh): (usize, usize, usize, usize),
    ) -> Result<(), GpuError> {
        let total = 3 * n * tokens * heads * dh;
        check_len(qkv, total, "split_heads input");
        check_len(split, total, "split_heads output");
        let (ni, t, h, j) = (int(n), int(tokens), int(heads), int(dh));
        let mut launch = self.stream.launch_builder(self.kernel("split_heads_f16"));
        launch.arg(qkv).arg(split).arg(&ni).arg(&t).arg(&h).arg(&j);
        // SAFETY: `split_heads_f16(qkv, split, n, tokens, heads, dh)`, as
        // many values out as in; sizes checked above.
        unsafe { launch.launch(elementwise(total)) }.map_err(driver("split_heads_f16"))?;
        Ok(())
    }

    /// The inverse for the attended values: `heads_out`
    /// (`[n][heads][tokens][dh]`) into `out` (`[n·tokens, heads·dh]`).
    pub fn merge_heads(
        &self,
        heads_out: &Buf,
        out: &mut Buf,
        (n, tokens, heads, dh): (usize, usize, usize, usize),
    ) -> Result<(), GpuError> {
        let total = n * tokens * heads * dh;
        check_len(heads_out, total, "merge_heads input");
        check_len(out, total, "merge_heads output");
        let (ni, t, h, j) = (int(n), int(tokens), int(heads), int(dh));
        let mut launch = self.stream.launch_builder(self.kernel("merge_heads_f16"));
        launch
            .arg(heads_out)
            .arg(out)
            .arg(&ni)
            .arg(&t)
            .arg(&h)
            .arg(&j);
        // SAFETY: `merge_heads_f16(heads_out, out, n, tokens, heads, dh)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(total)) }.map_err(driver("merge_heads_f16"))?;
        Ok(())
    }
}
