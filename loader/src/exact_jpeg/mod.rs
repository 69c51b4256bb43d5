//! The JPEG decode after entropy decoding, written once in C for two
//! compilers: the groundwork of `--decode gpu`, where loader threads read
//! each JPEG's quantised DCT coefficients and GPU kernels do the rest.
//!
//! [`EXACT_JPEG_H`] (`exact_jpeg.h`) ports libjpeg-turbo's arithmetic as
//! pure functions over plain arrays, one block, sample or pixel at a time:
//! dequantisation and the accurate integer IDCT (`jpeg_idct_islow`, and the
//! 16-bit form libjpeg-turbo's x86 SIMD computes it in), the fancy
//! upsampling `jinit_upsampler` chooses for each sampling ratio (h2v1, h1v2,
//! h2v2 with their edge rows, the box for the rest), and `ycc_rgb_convert`.
//! NVRTC compiles it for the kernels; `build.rs` compiles it for the host
//! (`host.c`), and the tests hold that build to the loader's own decode,
//! every byte, over a seeded space of sizes, samplings, progressive and
//! restart-interval files, colour spaces and coefficients up to the
//! format's limits (CONVENTIONS.md rule 14). A GPU run checks the device
//! build again.
//!
//! [`read_coefficients`] is the loader threads' half: libjpeg-turbo's
//! `jpeg_read_coefficients`. [`reconstruct_rgb`] is the kernels' work on
//! the host, the reference the device output is compared with. [`resize`]
//! does the same for Pillow's resize that follows. [`PackedComponent`] is
//! what goes up to the GPU: each block's nonzero coefficients only, which
//! `ej_unpack_block` expands on the device.

mod ffi;
pub mod resize;
#[cfg(test)]
mod tests;

use crate::RgbImage;
use pipeline_core::{ItemError, ItemErrorKind};

/// The C source of the arithmetic, for NVRTC: self-contained (no headers),
/// its functions `__host__ __device__` under CUDA.
pub const EXACT_JPEG_H: &str = include_str!("exact_jpeg.h");

/// How a JPEG's components become RGB: libjpeg's `jpeg_color_space`, read
/// from the file's markers. The values are `exact_jpeg.h`'s `EJ_COLOR_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorTransform {
    /// Y, Cb, Cr through `ycc_rgb_convert`.
    YCbCr = 0,
    /// One component, replicated (`gray_rgb_convert`, as Pillow's `L` →
    /// `RGB`).
    Grayscale = 1,
    /// R, G, B stored as such (Adobe transform 0): `null_convert`.
    Rgb = 2,
}

/// One component's quantised DCT coefficients, as `jpeg_read_coefficients`
/// leaves them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentCoefficients {
    /// Horizontal sampling factor (1..=4).
    pub h_samp: u8,
    /// Vertical sampling factor (1..=4).
    pub v_samp: u8,
    /// Blocks in a row: the component's samples, rounded up to 8.
    pub width_in_blocks: u32,
    /// Rows of blocks.
    pub height_in_blocks: u32,
    /// The component's quantisation table, in natural (row-major) order.
    pub quantval: [u16; 64],
    /// `width_in_blocks × height_in_blocks` blocks, row-major, each in
    /// natural order.
    pub blocks: Vec<[i16; 64]>,
}

/// A JPEG after entropy decoding: everything the kernels need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coefficients {
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
    /// How the components become RGB.
    pub color: ColorTransform,
    /// One component for grayscale, three otherwise.
    pub components: Vec<ComponentCoefficients>,
}

/// One component's coefficients as the loader threads upload them: each
/// block's nonzero coefficients only. Bit `k` of a block's mask says
/// coefficient `k` (natural order) is not zero; its values sit in `values`
/// from the block's offset on, in increasing `k`. A block costs 12 bytes
/// and 2 a nonzero coefficient, against 128 dense; the kernels unpack one
/// block a thread (`ej_unpack_block` in [`EXACT_JPEG_H`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedComponent {
    /// A block's nonzero coefficients, as bits.
    pub masks: Vec<u64>,
    /// Where each block's values start in `values`.
    pub offsets: Vec<u32>,
    /// Every block's nonzero coefficients, block after block.
    pub values: Vec<i16>,
}

impl PackedComponent {
    /// `component`'s blocks, packed; `None` where its nonzero coefficients
    /// outnumber a `u32` offset (past any image the decode limits admit).
    pub fn pack(component: &ComponentCoefficients) -> Option<Self> {
        let mut packed = Self::with_capacity(component.blocks.len());
        component
            .blocks
            .iter()
            .try_for_each(|block| packed.push(block))?;
        Some(packed)
    }

    /// Room for `blocks` blocks.
    fn with_capacity(blocks: usize) -> Self {
        Self {
            masks: Vec::with_capacity(blocks),
            offsets: Vec::with_capacity(blocks),
            // About a quarter of a photo's coefficients are not zero.
            values: Vec::with_capacity(blocks * 16),
        }
    }

    /// Packs one more block; `None` where its values would start past a
    /// `u32` offset.
    fn push(&mut self, block: &[i16; 64]) -> Option<()> {
        self.offsets.push(u32::try_from(self.values.len()).ok()?);
        // Without a branch a coefficient (the compiler vectorises it), then
        // one step a nonzero value.
        let mask = block.iter().enumerate().fold(0u64, |mask, (k, &value)| {
            mask | (u64::from(value != 0) << k)
        });
        let mut bits = mask;
        while bits != 0 {
            self.values.push(block[bits.trailing_zeros() as usize]);
            bits &= bits - 1;
        }
        self.masks.push(mask);
        Some(())
    }

    /// The bytes this takes on the bus: masks, offsets and values.
    pub fn bytes(&self) -> usize {
        self.masks.len() * 8 + self.offsets.len() * 4 + self.values.len() * 2
    }

    /// The blocks again, unpacked by the host build of the kernels'
    /// `ej_unpack_block`: the reference the device's unpacking is held to.
    pub fn unpack(&self) -> Vec<[i16; 64]> {
        ffi::unpack_component(self)
    }
}

/// A JPEG after entropy decoding, packed for the bus as libjpeg gives its
/// rows ([`read_packed`]): what the loader threads upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedCoefficients {
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
    /// How the components become RGB.
    pub color: ColorTransform,
    /// One component for grayscale, three otherwise.
    pub components: Vec<PackedPlane>,
}

/// One component of [`PackedCoefficients`]: [`ComponentCoefficients`]
/// with its blocks packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedPlane {
    /// Horizontal sampling factor (1..=4).
    pub h_samp: u8,
    /// Vertical sampling factor (1..=4).
    pub v_samp: u8,
    /// Blocks in a row.
    pub width_in_blocks: u32,
    /// Rows of blocks.
    pub height_in_blocks: u32,
    /// The component's quantisation table, natural order.
    pub quantval: [u16; 64],
    /// Its blocks' nonzero coefficients.
    pub packed: PackedComponent,
}

impl PackedCoefficients {
    /// The bytes its blocks take on the bus.
    pub fn bytes(&self) -> usize {
        self.components.iter().map(|c| c.packed.bytes()).sum()
    }
}

/// [`read_coefficients`], packing each row of blocks as libjpeg gives it:
/// no whole-image copy of the dense blocks. The same coefficients,
/// byte for byte, as [`PackedComponent::pack`] of the dense read.
pub fn read_packed(bytes: &[u8]) -> Result<PackedCoefficients, ItemError> {
    let read = ffi::read_into::<PackedComponent>(bytes)?;
    Ok(PackedCoefficients {
        width: read.width,
        height: read.height,
        color: read.color,
        components: read
            .components
            .into_iter()
            .map(|(header, packed)| PackedPlane {
                h_samp: header.h_samp,
                v_samp: header.v_samp,
                width_in_blocks: header.width_in_blocks,
                height_in_blocks: header.height_in_blocks,
                quantval: header.quantval,
                packed,
            })
            .collect(),
    })
}

/// Which IDCT arithmetic [`reconstruct_rgb`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idct {
    /// libjpeg-turbo's x86 SIMD (`jsimd_idct_islow_avx2`, and SSE2's, which
    /// gives the same bytes): 16-bit lanes. What the loader decodes with
    /// where SIMD was built ([`crate::jpeg_decoder`]), and so what the
    /// kernels compute.
    Simd,
    /// `jidctint.c`'s `jpeg_idct_islow`, libjpeg-turbo's C. The two differ
    /// only on coefficients no encoder makes from 8-bit samples.
    Scalar,
}

impl Idct {
    /// The arithmetic of the loader's own JPEG decoder in this build.
    pub fn of_the_loader() -> Self {
        if crate::jpeg_decoder().simd {
            Self::Simd
        } else {
            Self::Scalar
        }
    }
}

/// Entropy-decodes a JPEG to its quantised coefficients with libjpeg-turbo
/// (baseline, progressive, restart intervals, any sampling). CMYK and YCCK
/// files, and any other colour space, are `unsupported` (the exact loader
/// decodes them on the CPU); a file libjpeg refuses is a `decode` error.
pub fn read_coefficients(bytes: &[u8]) -> Result<Coefficients, ItemError> {
    ffi::read_coefficients(bytes)
}

/// What the kernels compute, on the host: every block's IDCT, then each
/// pixel upsampled and converted, through the host build of
/// [`EXACT_JPEG_H`]. With [`Idct::of_the_loader`] this is the loader's own
/// decode of the file, byte for byte. A sampling ratio libjpeg refuses
/// (3 against 2, say) is `unsupported`.
pub fn reconstruct_rgb(coefficients: &Coefficients, idct: Idct) -> Result<RgbImage, ItemError> {
    let Coefficients {
        width,
        height,
        color,
        components,
    } = coefficients;
    let expected = if *color == ColorTransform::Grayscale {
        1
    } else {
        3
    };
    if components.len() != expected {
        return Err(ItemError::new(
            ItemErrorKind::Unsupported,
            format!("{} components for {color:?}", components.len()),
        ));
    }
    let planes: Vec<Vec<u8>> = components
        .iter()
        .map(|component| ffi::idct_component(component, idct))
        .collect::<Result<_, _>>()?;
    let pixels = ffi::to_rgb(components, &planes, *color, *width, *height)?;
    Ok(RgbImage {
        width: *width,
        height: *height,
        pixels,
    })
}
