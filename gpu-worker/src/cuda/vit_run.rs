//! The ViT image towers (torchvision ViT, CLIP, DINOv2) on a GPU (#28):
//! a [`VitPlan`]'s weights in f16 on the device, and its forward pass as
//! cuBLASLt GEMMs (bias in the epilogue, the residual adds as `β = 1`
//! accumulation into the stream) and the engine's kernels, op for op as
//! the plan's f32 `reference` runs it. SigLIP's attention-pooling head is
//! not here yet: its plan is refused in one line.
//!
//! **Not yet run on a GPU** (see `gpu.rs`): `tests/cuda_engine.rs` holds
//! it to the reference wherever a GPU is present.

use super::gpu::{Buf, DeviceGemm, DeviceNorm, Gpu, GpuError, Norm3, Strided};
use super::plan::VitPlan;
use crate::model::transformer::Activation;
use crate::model::vit::Pooling;

/// One block's weights on the device.
struct DeviceBlock {
    norm1: DeviceNorm,
    qkv: DeviceGemm,
    out: DeviceGemm,
    norm2: DeviceNorm,
    fc1: DeviceGemm,
    fc2: DeviceGemm,
}

/// A ViT plan's weights on one GPU.
pub struct CudaVit {
    plan_shape: Shape,
    patch: DeviceGemm,
    prefix: cudarc::driver::CudaSlice<f32>,
    patch_pos: cudarc::driver::CudaSlice<f32>,
    pre_norm: Option<DeviceNorm>,
    blocks: Vec<DeviceBlock>,
    norm: DeviceNorm,
    proj: Option<DeviceGemm>,
    head: Option<DeviceGemm>,
}

/// What the forward pass needs of the config.
#[derive(Debug, Clone, Copy)]
struct Shape {
    d: usize,
    p: usize,
    heads: usize,
    prefix: usize,
    eps: f64,
    activation: i32,
    pool: i32,
    normalize: bool,
}

impl CudaVit {
    /// `plan`'s weights on `gpu`, in f16 (LayerNorms and positions in
    /// f32, as the kernels read them).
    pub fn new(gpu: &Gpu, plan: &VitPlan) -> Result<Self, GpuError> {
        let c = &plan.config;
        let pool = match c.pooling {
            Pooling::Class => 0,
            Pooling::Mean => 1,
            Pooling::ClassAndMean => 2,
            Pooling::Map => {
                return Err(GpuError(
                    "the CUDA engine does not run SigLIP's attention-pooling head yet (#28)"
                        .to_owned(),
                ));
            }
        };
        let activation = match c.activation {
            Activation::Gelu => 0,
            Activation::GeluTanh => 1,
            Activation::QuickGelu => 2,
        };
        let blocks = plan
            .blocks
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
            .collect::<Result<Vec<_>, GpuError>>()?;
        Ok(Self {
            plan_shape: Shape {
                d: c.width,
                p: c.patch,
                heads: c.heads,
                prefix: plan.prefix.len() / c.width,
                eps: c.eps,
                activation,
                pool,
                normalize: c.normalize,
            },
            patch: gpu.gemm_weights(&plan.patch)?,
            prefix: gpu.upload_f32(&plan.prefix)?,
            patch_pos: gpu.upload_f32(&plan.patch_pos)?,
            pre_norm: plan
                .pre_norm
                .as_ref()
                .map(|n| gpu.norm_weights(n))
                .transpose()?,
            blocks,
            norm: gpu.norm_weights(&plan.norm)?,
            proj: plan
                .proj
                .as_ref()
                .map(|g| gpu.gemm_weights(g))
                .transpose()?,
            head: plan
                .head
                .as_ref()
                .map(|g| gpu.gemm_weights(g))
                .transpose()?,
        })
    }

    /// The features of `images` (`u8` NCHW, `side × side`) padded with
    /// zero images to `padded` (a fixed batch shape: an image's result
    /// does not depend on how many came with it), and the logits where the
    /// model has a head, as [`VitPlan::reference`] gives them: f16 on the
    /// device, f32 on the host, `padded` rows.
    pub fn forward(
        &self,
        gpu: &Gpu,
        images: &[u8],
        padded: usize,
        side: usize,
        norm: Norm3,
    ) -> Result<(Vec<f32>, Option<Vec<f32>>), GpuError> {
        let s = self.plan_shape;
        let (d, p) = (s.d, s.p);
        let real = images.len() / (3 * side * side);
        assert!(padded >= real, "padding cannot drop rows");
        let n = padded;
        let grid = side / p;
        let patches = grid * grid;
        let tokens = s.prefix + patches;
        let rows = n * tokens;
        let pixels = gpu.upload_u8(images)?;
        let mut cols = gpu.zeros(n * patches * 3 * p * p)?;
        gpu.patches(&pixels, &mut cols, (real, n, side, p), norm)?;
        let mut embedded = gpu.zeros(n * patches * d)?;
        gpu.gemm(&cols, n * patches, &self.patch, &mut embedded, false)?;
        drop(cols);
        let mut t = gpu.zeros(rows * d)?;
        gpu.tokens(
            &embedded,
            &mut t,
            &self.prefix,
            &self.patch_pos,
            (n, s.prefix, patches, d),
        )?;
        drop(embedded);
        let mut h = gpu.zeros(rows * d)?;
        if let Some(pre) = &self.pre_norm {
            gpu.layer_norm(&t, &mut h, rows, pre, s.eps)?;
            std::mem::swap(&mut t, &mut h);
        }
        let mlp = self.blocks.first().map_or(0, |b| b.fc1.n);
        let mut qkv = gpu.zeros(rows * 3 * d)?;
        let mut scores = gpu.zeros(n * s.heads * tokens * tokens)?;
        let mut attended = gpu.zeros(rows * d)?;
        let mut hidden = gpu.zeros(rows * mlp)?;
        for block in &self.blocks {
            gpu.layer_norm(&t, &mut h, rows, &block.norm1, s.eps)?;
            gpu.gemm(&h, rows, &block.qkv, &mut qkv, false)?;
            self.attention(gpu, &qkv, &mut scores, &mut attended, n, tokens)?;
            gpu.gemm(&attended, rows, &block.out, &mut t, true)?;
            gpu.layer_norm(&t, &mut h, rows, &block.norm2, s.eps)?;
            gpu.gemm(&h, rows, &block.fc1, &mut hidden, false)?;
            gpu.activation(&mut hidden, rows * mlp, s.activation)?;
            gpu.gemm(&hidden, rows, &block.fc2, &mut t, true)?;
        }
        drop((qkv, scores, attended, hidden));
        gpu.layer_norm(&t, &mut h, rows, &self.norm, s.eps)?;
        let width = if s.pool == 2 { 2 * d } else { d };
        let mut pooled = gpu.zeros(n * width)?;
        gpu.pool(&h, &mut pooled, (n, tokens, s.prefix, d), s.pool)?;
        let (features, dim) = match &self.proj {
            Some(proj) => {
                let mut out = gpu.zeros(n * proj.n)?;
                gpu.gemm(&pooled, n, proj, &mut out, false)?;
                (out, proj.n)
            }
            None => (pooled, width),
        };
        let logits = match &self.head {
            Some(head) => {
                let mut out = gpu.zeros(n * head.n)?;
                gpu.gemm(&features, n, head, &mut out, false)?;
                Some(gpu.download(&out, n * head.n)?)
            }
            None => None,
        };
        let mut features = gpu.download(&features, n * dim)?;
        if s.normalize {
            for row in features.chunks_exact_mut(dim) {
                let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                row.iter_mut().for_each(|v| *v /= norm);
            }
        }
        Ok((features, logits))
    }

    /// Multi-head attention over `qkv` (`[n·tokens, 3D]`) into `out`
    /// (`[n·tokens, D]`): per head, one batched GEMM over the images for
    /// the scores, a row softmax over all of them, one batched GEMM for
    /// the weighted values.
    fn attention(
        &self,
        gpu: &Gpu,
        qkv: &Buf,
        scores: &mut Buf,
        out: &mut Buf,
        n: usize,
        tokens: usize,
    ) -> Result<(), GpuError> {
        let s = self.plan_shape;
        let (d, heads) = (s.d, s.heads);
        let dh = d / heads;
        let image = tokens * 3 * d;
        let square = tokens * tokens;
        for h in 0..heads {
            let q = Strided {
                offset: h * dh,
                ld: 3 * d,
                stride: image,
            };
            let k = Strided {
                offset: d + h * dh,
                ..q
            };
            let at = Strided {
                offset: h * square,
                ld: tokens,
                stride: heads * square,
            };
            gpu.batched_gemm(
                (tokens, tokens, dh),
                1.0,
                (qkv, q),
                (qkv, k),
                true,
                (scores, at),
                n,
            )?;
        }
        gpu.softmax_rows(
            scores,
            n * heads * tokens,
            tokens,
            1.0 / (dh as f32).sqrt(),
            false,
            tokens,
        )?;
        for h in 0..heads {
            let p = Strided {
                offset: h * square,
                ld: tokens,
                stride: heads * square,
            };
            let v = Strided {
                offset: 2 * d + h * dh,
                ld: 3 * d,
                stride: image,
            };
            let o = Strided {
                offset: h * dh,
                ld: d,
                stride: tokens * d,
            };
            gpu.batched_gemm(
                (tokens, dh, tokens),
                1.0,
                (&*scores, p),
                (qkv, v),
                false,
                (out, o),
                n,
            )?;
        }
        Ok(())
    }
}
