//! What the plans share: their GEMMs, LayerNorms and transformer blocks,
//! how canonical tensors are packed into them, and the f32 reference of
//! each op.

use std::path::Path;

use pipeline_core::ResolvedWeights;

use model_families::Architecture;
use model_families::WeightsError;
use model_families::architecture::check_as;
use model_families::checkpoint::Checkpoint;
use model_families::layout::Layout;
use model_families::tensors::Tensors;
use model_families::transformer::Activation;

/// `use_` on the canonical tensors of the checkpoint at `path` in the
/// layout the coordinator resolved, checked as the burn engine checks them.
pub(super) fn with_checked_tensors<R>(
    arch: &Architecture,
    name: &str,
    path: &Path,
    resolved: &ResolvedWeights,
    use_: impl FnOnce(Layout, &Tensors<'_>) -> Result<R, WeightsError>,
) -> Result<R, WeightsError> {
    let layout = model_families::architecture::resolved_layout(resolved, name, path)?;
    let checkpoint = Checkpoint::open(path)?;
    let tensors = check_as(arch, name, &checkpoint, layout)?;
    use_(layout, &tensors)
}

/// The checkpoint at `path` for `arch`, resolved as the coordinator
/// resolves it, for the plans' own callers (tests, benchmarks).
pub(super) fn resolve(
    arch: &Architecture,
    name: &str,
    path: &Path,
) -> Result<ResolvedWeights, WeightsError> {
    model_families::architecture::resolve(
        arch,
        name,
        path,
        &[model_families::clip_config::Tower::Image],
    )
}

/// A checkpoint given for an architecture this plan is not.
pub(super) fn not_this(path: &Path, name: &str, problem: &str) -> WeightsError {
    WeightsError::Mismatch {
        path: path.to_path_buf(),
        model: name.to_owned(),
        problem: problem.to_owned(),
    }
}

/// `y = x·w (+ bias)`, `x: [M, k]`, `w: [k, n]` row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemm {
    /// Inner size.
    pub k: usize,
    /// Output width.
    pub n: usize,
    /// `k × n`, row-major.
    pub weight: Vec<f32>,
    /// `n`, if any.
    pub bias: Option<Vec<f32>>,
}

/// A LayerNorm's weight and bias.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerNorm {
    /// Per channel scale.
    pub weight: Vec<f32>,
    /// Per channel shift.
    pub bias: Vec<f32>,
}

/// One pre-norm block.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// Before attention.
    pub norm1: LayerNorm,
    /// `D → 3D`: q, k, v side by side.
    pub qkv: Gemm,
    /// `D → D` (the layer scale folded in).
    pub out: Gemm,
    /// Before the MLP.
    pub norm2: LayerNorm,
    /// `D → F` (`D → 2F` gated), then the activation.
    pub fc1: Gemm,
    /// `F → D` (the layer scale folded in).
    pub fc2: Gemm,
}

/// How canonical tensors are read: `(shape, values)` by name.
pub(super) type Take<'a> = dyn Fn(&str) -> Result<(Vec<usize>, Vec<f32>), WeightsError> + 'a;

/// The Linear layer `name` (PyTorch's `[out, in]`) as a GEMM `[in, out]`,
/// each output column scaled by `scale` (a layer scale folded in).
pub(super) fn linear(
    take: &Take<'_>,
    name: &str,
    bias: bool,
    scale: Option<&[f32]>,
) -> Result<Gemm, WeightsError> {
    let (shape, w) = take(&format!("{name}.weight"))?;
    let (n, k) = (shape[0], shape[1]);
    let mut weight = vec![0.0; k * n];
    for o in 0..n {
        let s = scale.map_or(1.0, |s| s[o]);
        for i in 0..k {
            weight[i * n + o] = w[o * k + i] * s;
        }
    }
    let bias = if bias {
        let (_, b) = take(&format!("{name}.bias"))?;
        Some(
            b.iter()
                .enumerate()
                .map(|(o, v)| v * scale.map_or(1.0, |s| s[o]))
                .collect(),
        )
    } else {
        None
    };
    Ok(Gemm { k, n, weight, bias })
}

pub(super) fn layer_norm_of(take: &Take<'_>, name: &str) -> Result<LayerNorm, WeightsError> {
    Ok(LayerNorm {
        weight: take(&format!("{name}.weight"))?.1,
        bias: take(&format!("{name}.bias"))?.1,
    })
}

/// The encoder's blocks `blocks.{i}`, layer scales folded in.
pub(super) fn blocks_of(
    take: &Take<'_>,
    depth: usize,
    layer_scale: bool,
) -> Result<Vec<Block>, WeightsError> {
    let mut blocks = Vec::with_capacity(depth);
    for i in 0..depth {
        let b = format!("blocks.{i}");
        let ls = |name: &str| {
            layer_scale
                .then(|| take(&format!("{b}.{name}")).map(|(_, v)| v))
                .transpose()
        };
        let (ls1, ls2) = (ls("ls1")?, ls("ls2")?);
        blocks.push(Block {
            norm1: layer_norm_of(take, &format!("{b}.norm1"))?,
            qkv: linear(take, &format!("{b}.qkv"), true, None)?,
            out: linear(take, &format!("{b}.out"), true, ls1.as_deref())?,
            norm2: layer_norm_of(take, &format!("{b}.norm2"))?,
            fc1: linear(take, &format!("{b}.fc1"), true, None)?,
            fc2: linear(take, &format!("{b}.fc2"), true, ls2.as_deref())?,
        });
    }
    Ok(blocks)
}

/// A convolution `[co, ci, k, k]` (`shape`, `w`) over non-overlapping
/// k×k patches as a GEMM `[ci·k·k, co]`, its rows over each patch's
/// `(channel, row, column)`, or, `channels_last`, `(row, column, channel)`.
pub(super) fn patch_gemm(
    shape: &[usize],
    w: &[f32],
    bias: Option<Vec<f32>>,
    channels_last: bool,
) -> Gemm {
    let (co, ci, kk) = (shape[0], shape[1], shape[2]);
    let k = ci * kk * kk;
    let mut weight = vec![0.0; k * co];
    for o in 0..co {
        for c in 0..ci {
            for ky in 0..kk {
                for kx in 0..kk {
                    let row = if channels_last {
                        (ky * kk + kx) * ci + c
                    } else {
                        (c * kk + ky) * kk + kx
                    };
                    weight[row * co + o] = w[((o * ci + c) * kk + ky) * kk + kx];
                }
            }
        }
    }
    Gemm {
        k,
        n: co,
        weight,
        bias,
    }
}

/// `images` (`u8` NCHW, `side × side`) normalised as `(x − mean) / std`
/// on 0..255, read as non-overlapping p×p patches in row-major patch
/// order, each `(channel, row, column)`: `[n·(side/p)², 3·p·p]`, the
/// input of a [`patch_gemm`].
pub(super) fn nchw_patches(
    images: &[u8],
    side: usize,
    p: usize,
    mean: [f32; 3],
    std: [f32; 3],
) -> Vec<f32> {
    let n = images.len() / (3 * side * side);
    let grid = side / p;
    let mut cols = vec![0.0f32; n * grid * grid * 3 * p * p];
    for img in 0..n {
        for gy in 0..grid {
            for gx in 0..grid {
                let row = ((img * grid + gy) * grid + gx) * 3 * p * p;
                for ch in 0..3 {
                    for ky in 0..p {
                        for kx in 0..p {
                            let (y, x) = (gy * p + ky, gx * p + kx);
                            let v = images[((img * 3 + ch) * side + y) * side + x];
                            cols[row + (ch * p + ky) * p + kx] =
                                (f32::from(v) - mean[ch]) / std[ch];
                        }
                    }
                }
            }
        }
    }
    cols
}

/// What the blocks run over.
pub(super) struct Shape {
    pub(super) n: usize,
    pub(super) tokens: usize,
    pub(super) d: usize,
    pub(super) heads: usize,
    pub(super) eps: f64,
    pub(super) activation: Activation,
    pub(super) causal: bool,
}

/// `t = t + out(attn(norm1(t))); t = t + fc2(act(fc1(norm2(t))))` per block.
pub(super) fn run_blocks(t: &mut [f32], blocks: &[Block], s: &Shape) {
    for block in blocks {
        let h = layer_norm(t, &block.norm1, s.eps);
        let qkv = gemm(&h, &block.qkv);
        let o = attention(&qkv, s);
        add(t, &gemm(&o, &block.out));
        let h = layer_norm(t, &block.norm2, s.eps);
        let h = activated(gemm(&h, &block.fc1), block.fc1.n, s.activation);
        add(t, &gemm(&h, &block.fc2));
    }
}

/// `x·w + b` for `x: [rows, k]`, rows in parallel (each row's sums in
/// one fixed order).
pub(crate) fn gemm(x: &[f32], g: &Gemm) -> Vec<f32> {
    use rayon::prelude::*;
    let mut y = vec![0.0f32; x.len() / g.k * g.n];
    y.par_chunks_mut(g.n).enumerate().for_each(|(r, out)| {
        if let Some(b) = &g.bias {
            out.copy_from_slice(b);
        }
        for (i, xv) in x[r * g.k..(r + 1) * g.k].iter().enumerate() {
            let w = &g.weight[i * g.n..(i + 1) * g.n];
            for (o, wv) in out.iter_mut().zip(w) {
                *o += xv * wv;
            }
        }
    });
    y
}

pub(super) fn layer_norm(x: &[f32], ln: &LayerNorm, eps: f64) -> Vec<f32> {
    let d = ln.weight.len();
    let mut y = vec![0.0f32; x.len()];
    for (row, out) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
        let mean = row.iter().sum::<f32>() / d as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let rstd = 1.0 / (var + eps as f32).sqrt();
        for (j, (o, v)) in out.iter_mut().zip(row).enumerate() {
            *o = (v - mean) * rstd * ln.weight[j] + ln.bias[j];
        }
    }
    y
}

pub(super) fn add(t: &mut [f32], h: &[f32]) {
    t.iter_mut().zip(h).for_each(|(a, b)| *a += b);
}

/// An MLP's hidden values from its first layer's `h` (`[rows, width]`):
/// the activation in place, or a gated MLP's `silu(gate) · up` of each
/// row's two halves (`[rows, width / 2]`).
pub(super) fn activated(mut h: Vec<f32>, width: usize, act: Activation) -> Vec<f32> {
    if act != Activation::SwiGlu {
        activate(&mut h, act);
        return h;
    }
    let f = width / 2;
    h.chunks_exact(width)
        .flat_map(|row| {
            let (gate, up) = row.split_at(f);
            gate.iter().zip(up).map(|(g, u)| g / (1.0 + (-g).exp()) * u)
        })
        .collect()
}

/// An element-wise activation in place (a gated MLP's is [`activated`]).
pub(super) fn activate(x: &mut [f32], act: Activation) {
    assert_ne!(
        act,
        Activation::SwiGlu,
        "a gated MLP halves its width: activated()"
    );
    for v in x {
        *v = match act {
            Activation::Gelu => 0.5 * *v * (1.0 + libm::erff(*v * std::f32::consts::FRAC_1_SQRT_2)),
            Activation::GeluTanh => {
                let u = 0.797_884_6 * (*v + 0.044_715 * *v * *v * *v);
                0.5 * *v * (1.0 + u.tanh())
            }
            Activation::QuickGelu => *v / (1.0 + (-1.702 * *v).exp()),
            Activation::SwiGlu => unreachable!("asserted above"),
        };
    }
}

/// Multi-head attention over `qkv` (`[n·tokens, 3D]`, q, k and v side by
/// side, head `h` at columns `h·D/H..`); where causal, token `i` sees
/// tokens `0..=i`.
pub(super) fn attention(qkv: &[f32], s: &Shape) -> Vec<f32> {
    let (n, tokens, d, heads) = (s.n, s.tokens, s.d, s.heads);
    let dh = d / heads;
    let scale = 1.0 / (dh as f32).sqrt();
    let mut out = vec![0.0f32; n * tokens * d];
    let mut scores = vec![0.0f32; tokens];
    for img in 0..n {
        let row = |tok: usize| &qkv[(img * tokens + tok) * 3 * d..(img * tokens + tok + 1) * 3 * d];
        for h in 0..heads {
            for i in 0..tokens {
                let q = &row(i)[h * dh..(h + 1) * dh];
                let seen = if s.causal { i + 1 } else { tokens };
                for (j, score) in scores.iter_mut().enumerate() {
                    let k = &row(j)[d + h * dh..d + (h + 1) * dh];
                    *score = if j < seen {
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale
                    } else {
                        f32::NEG_INFINITY
                    };
                }
                softmax(&mut scores);
                let o = &mut out
                    [(img * tokens + i) * d + h * dh..(img * tokens + i) * d + (h + 1) * dh];
                for (j, p) in scores.iter().enumerate() {
                    let v = &row(j)[2 * d + h * dh..2 * d + (h + 1) * dh];
                    o.iter_mut().zip(v).for_each(|(a, b)| *a += p * b);
                }
            }
        }
    }
    out
}

/// Each `dim`-wide row divided by its L2 norm (at least 1e-12), as
/// PyTorch's `F.normalize`.
pub(crate) fn l2_normalize_rows(values: &mut [f32], dim: usize) {
    for row in values.chunks_exact_mut(dim) {
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
        row.iter_mut().for_each(|v| *v /= norm);
    }
}

pub(crate) fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    x.iter_mut().for_each(|v| *v /= sum);
}
