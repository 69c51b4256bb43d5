//! The ViT image towers (torchvision ViT, CLIP, DINOv2) on a GPU (#28):
//! a [`VitPlan`]'s weights in f16 on the device, and its forward pass as
//! cuBLASLt GEMMs (bias in the epilogue, the residual adds as `β = 1`
//! accumulation into the stream) and the engine's kernels, op for op as
//! the plan's f32 `reference` runs it, SigLIP's attention-pooling head
//! included (its one query attending over each image's tokens through
//! the same batched GEMMs, the query's batch stride 0).
//!
//! Run on an H100 (see `gpu/`): `tests/cuda_gpu.rs` holds it to the
//! reference wherever a GPU is present.

use super::encoder_run::{DeviceBlock, Encoder, activation_kind, upload_blocks};
use super::gpu::{
    Buf, DeviceGemm, DeviceNorm, DeviceOutputs, Gpu, GpuError, Images, Strided, Tower,
};
use super::plan::{MapHead, VitPlan};
use model_families::vit::Pooling;

/// A ViT plan's weights on one GPU.
pub struct CudaVit {
    plan_shape: Shape,
    patch: DeviceGemm,
    prefix: cudarc::driver::CudaSlice<f32>,
    patch_pos: cudarc::driver::CudaSlice<f32>,
    pre_norm: Option<DeviceNorm>,
    blocks: Vec<DeviceBlock>,
    norm: Option<DeviceNorm>,
    proj: Option<DeviceGemm>,
    head: Option<DeviceGemm>,
    map: Option<DeviceMap>,
}

/// SigLIP's pooling head on the device.
struct DeviceMap {
    query: Buf,
    kv: DeviceGemm,
    out: DeviceGemm,
    norm: DeviceNorm,
    fc1: DeviceGemm,
    fc2: DeviceGemm,
}

impl DeviceMap {
    fn new(gpu: &Gpu, head: &MapHead) -> Result<Self, GpuError> {
        Ok(Self {
            query: gpu.upload(&head.query)?,
            kv: gpu.gemm_weights(&head.kv)?,
            out: gpu.gemm_weights(&head.out)?,
            norm: gpu.norm_weights(&head.norm)?,
            fc1: gpu.gemm_weights(&head.fc1)?,
            fc2: gpu.gemm_weights(&head.fc2)?,
        })
    }

    /// The pooled `[n, D]` of the normed tokens `t` (`[n·tokens, D]`):
    /// the query attends over each image's tokens, then
    /// `h + mlp(norm(h))`.
    fn pool(
        &self,
        gpu: &Gpu,
        t: &Buf,
        n: usize,
        tokens: usize,
        s: &Shape,
    ) -> Result<Buf, GpuError> {
        let (d, heads) = (s.d, s.encoder.heads);
        let dh = d / heads;
        let mut kv = gpu.zeros(n * tokens * 2 * d)?;
        gpu.gemm(t, n * tokens, &self.kv, &mut kv, false)?;
        let mut scores = gpu.zeros(n * heads * tokens)?;
        // Scaled in the GEMM (f32), not in the softmax: see the encoder's
        // attention.
        let scale = 1.0 / (dh as f32).sqrt();
        for h in 0..heads {
            let q = Strided {
                offset: h * dh,
                ld: d,
                stride: 0,
            };
            let k = Strided {
                offset: h * dh,
                ld: 2 * d,
                stride: tokens * 2 * d,
            };
            let at = Strided {
                offset: h * tokens,
                ld: tokens,
                stride: heads * tokens,
            };
            gpu.batched_gemm(
                (1, tokens, dh),
                scale,
                (&self.query, q),
                (&kv, k),
                true,
                (&mut scores, at),
                n,
            )?;
        }
        gpu.softmax_rows(&mut scores, n * heads, tokens, false, 1)?;
        let mut attended = gpu.zeros(n * d)?;
        for h in 0..heads {
            let p = Strided {
                offset: h * tokens,
                ld: tokens,
                stride: heads * tokens,
            };
            let v = Strided {
                offset: d + h * dh,
                ld: 2 * d,
                stride: tokens * 2 * d,
            };
            let o = Strided {
                offset: h * dh,
                ld: d,
                stride: d,
            };
            gpu.batched_gemm(
                (1, dh, tokens),
                1.0,
                (&scores, p),
                (&kv, v),
                false,
                (&mut attended, o),
                n,
            )?;
        }
        let mut pooled = gpu.zeros(n * d)?;
        gpu.gemm(&attended, n, &self.out, &mut pooled, false)?;
        let mut normed = gpu.zeros(n * d)?;
        gpu.layer_norm(&pooled, &mut normed, n, &self.norm, s.eps)?;
        let mut hidden = gpu.zeros(n * self.fc1.n)?;
        gpu.gemm(&normed, n, &self.fc1, &mut hidden, false)?;
        gpu.activation(&mut hidden, n * self.fc1.n, s.encoder.activation)?;
        gpu.gemm(&hidden, n, &self.fc2, &mut pooled, true)?;
        Ok(pooled)
    }
}

/// What the forward pass needs of the config.
#[derive(Debug, Clone, Copy)]
struct Shape {
    d: usize,
    p: usize,
    prefix: usize,
    eps: f64,
    pool: i32,
    normalize: bool,
    encoder: Encoder,
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
            Pooling::Map => 3,
        };
        let blocks = upload_blocks(gpu, &plan.blocks)?;
        Ok(Self {
            plan_shape: Shape {
                d: c.width,
                p: c.patch,
                prefix: plan.prefix.len() / c.width,
                eps: c.eps,
                pool,
                normalize: c.normalize,
                encoder: Encoder {
                    d: c.width,
                    heads: c.heads,
                    eps: c.eps,
                    activation: activation_kind(c.activation),
                    causal: false,
                },
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
            norm: plan
                .norm
                .as_ref()
                .map(|n| gpu.norm_weights(n))
                .transpose()?,
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
            map: plan
                .map
                .as_ref()
                .map(|m| DeviceMap::new(gpu, m))
                .transpose()?,
        })
    }
}

impl Tower for CudaVit {
    /// The features, and the logits where the model has a head, as
    /// [`VitPlan::reference`] gives them.
    fn launch(&self, gpu: &Gpu, images: Images<'_>) -> Result<DeviceOutputs, GpuError> {
        let s = self.plan_shape;
        let (d, p) = (s.d, s.p);
        let (real, n, side, norm) = (images.real(), images.padded, images.side, images.norm);
        let grid = side / p;
        let patches = grid * grid;
        let tokens = s.prefix + patches;
        let rows = n * tokens;
        let pixels = gpu.upload_pixels(images.pixels)?;
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
        s.encoder
            .run(gpu, &self.blocks, &mut t, &mut h, n, tokens)?;
        // The pooling reads the normed tokens, or (no final norm) the
        // encoder's output.
        let tokens_out = match &self.norm {
            Some(norm) => {
                gpu.layer_norm(&t, &mut h, rows, norm, s.eps)?;
                &h
            }
            None => &t,
        };
        let width = if s.pool == 2 { 2 * d } else { d };
        let pooled = match &self.map {
            Some(map) => map.pool(gpu, tokens_out, n, tokens, &s)?,
            None => {
                let mut pooled = gpu.zeros(n * width)?;
                gpu.pool(tokens_out, &mut pooled, (n, tokens, s.prefix, d), s.pool)?;
                pooled
            }
        };
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
                Some((out, head.n))
            }
            None => None,
        };
        Ok(DeviceOutputs {
            features,
            rows: n,
            width: dim,
            normalize: s.normalize,
            logits,
        })
    }
}
