//! The unsafe half of [`super`]: libjpeg-turbo's coefficient reader through
//! `mozjpeg-sys` (the library the loader's decoder links), and the two
//! whole-image functions of the host shim `host.c`.
//!
//! libjpeg reports a fatal error by calling `error_exit`, which must not
//! return; as the `mozjpeg` crate does, ours unwinds (the library is built
//! for it, its functions are `extern "C-unwind"`) and [`read_coefficients`]
//! catches it and destroys the decompressor.
#![allow(unsafe_code)]

use super::{Coefficients, ColorTransform, ComponentCoefficients, Idct, PackedComponent};
use mozjpeg_sys as sys;
use pipeline_core::{ItemError, ItemErrorKind};
use std::ffi::{c_int, c_ulong};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

unsafe extern "C" {
    fn ej_host_idct_component(
        blocks: *const i16,
        width_in_blocks: u32,
        height_in_blocks: u32,
        quantval: *const u16,
        simd: c_int,
        samples: *mut u8,
    );
    fn ej_host_unpack_component(
        masks: *const u64,
        offsets: *const u32,
        values: *const i16,
        blocks: u32,
        out: *mut i16,
    );
    fn ej_host_to_rgb(
        num_components: c_int,
        samples: *const *const u8,
        strides: *const u32,
        h_samp: *const c_int,
        v_samp: *const c_int,
        color: c_int,
        width: u32,
        height: u32,
        rgb: *mut u8,
    ) -> c_int;
}

/// A libjpeg error, carried by the unwind from `error_exit` to the
/// `catch_unwind` in [`read_coefficients`].
struct LibjpegError(String);

extern "C-unwind" fn unwind_error_exit(cinfo: &mut sys::jpeg_common_struct) {
    let mut buffer = [0u8; 80]; // JMSG_LENGTH_MAX
    // SAFETY: `err` is the error manager `read_coefficients` installed, alive
    // for the whole decompression. `format_message` writes at most
    // JMSG_LENGTH_MAX bytes, NUL-terminated, into the buffer it is given;
    // mozjpeg-sys declares its buffer `&[u8; 80]`, so it is called through
    // the same C signature with a pointer to a mutable buffer, as the
    // `mozjpeg` crate does.
    let message = unsafe {
        let err = &*cinfo.err;
        match err.format_message {
            Some(format) => {
                let format = std::mem::transmute::<
                    unsafe extern "C-unwind" fn(&mut sys::jpeg_common_struct, &[u8; 80]),
                    unsafe extern "C-unwind" fn(&mut sys::jpeg_common_struct, *mut [u8; 80]),
                >(format);
                format(cinfo, &mut buffer);
                let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
                String::from_utf8_lossy(&buffer[..end]).into_owned()
            }
            None => format!("libjpeg error {}", err.msg_code),
        }
    };
    // Not `panic!`: the panic hook would print a libjpeg error of every bad
    // file as if it were a crash.
    resume_unwind(Box::new(LibjpegError(message)));
}

extern "C-unwind" fn silence_message(_cinfo: &mut sys::jpeg_common_struct, _level: c_int) {
    // Warnings (corrupt data libjpeg decodes through) are ignored, as the
    // loader's decoder and Pillow ignore them.
}

/// The decompressor and its error manager, destroyed however reading ends.
struct Decompressor {
    // Boxed: libjpeg keeps pointers to both, so neither may move.
    cinfo: Box<sys::jpeg_decompress_struct>,
    _err: Box<sys::jpeg_error_mgr>,
}

impl Decompressor {
    fn new() -> Self {
        // SAFETY: both structs are plain C data for which all-zero is the
        // state libjpeg expects before `jpeg_std_error` and
        // `jpeg_create_decompress` (null pointers, `None` callbacks, enum
        // fields at their 0 variants). `jpeg_std_error` fills the error
        // manager; `jpeg_create_decompress` initialises `cinfo` and cannot
        // fail but by `error_exit`, installed before it.
        unsafe {
            let mut err: Box<sys::jpeg_error_mgr> = Box::new(std::mem::zeroed());
            sys::jpeg_std_error(&mut err);
            err.error_exit = Some(unwind_error_exit);
            err.emit_message = Some(silence_message);
            let mut cinfo: Box<sys::jpeg_decompress_struct> = Box::new(std::mem::zeroed());
            cinfo.common.err = &mut *err;
            sys::jpeg_create_decompress(&mut *cinfo);
            Self { cinfo, _err: err }
        }
    }
}

impl Drop for Decompressor {
    fn drop(&mut self) {
        // SAFETY: `cinfo` was created by `jpeg_create_decompress` and is
        // destroyed once; destroying frees whatever a read left allocated,
        // including after an error unwound out of libjpeg.
        unsafe { sys::jpeg_destroy_decompress(&mut self.cinfo) }
    }
}

/// Where [`read`] puts each component's blocks, a row of blocks at a time,
/// straight from libjpeg's arrays: whole (`Vec`), or packed for the bus.
pub(super) trait BlockSink: Sized {
    /// An empty sink for `blocks` blocks.
    fn for_blocks(blocks: usize) -> Self;
    /// Takes one row of blocks; `None` where the sink cannot hold it.
    fn take_row(&mut self, row: &[[i16; 64]]) -> Option<()>;
}

impl BlockSink for Vec<[i16; 64]> {
    fn for_blocks(blocks: usize) -> Self {
        Vec::with_capacity(blocks)
    }

    fn take_row(&mut self, row: &[[i16; 64]]) -> Option<()> {
        self.extend_from_slice(row);
        Some(())
    }
}

impl BlockSink for PackedComponent {
    fn for_blocks(blocks: usize) -> Self {
        PackedComponent::with_capacity(blocks)
    }

    fn take_row(&mut self, row: &[[i16; 64]]) -> Option<()> {
        row.iter().try_for_each(|block| self.push(block))
    }
}

/// A JPEG's components after [`read`]: each one's header, and its blocks in
/// the sink's form.
pub(super) struct Read<B> {
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) color: ColorTransform,
    pub(super) components: Vec<(ComponentHeader, B)>,
}

/// What a component is, apart from its blocks.
pub(super) struct ComponentHeader {
    pub(super) h_samp: u8,
    pub(super) v_samp: u8,
    pub(super) width_in_blocks: u32,
    pub(super) height_in_blocks: u32,
    pub(super) quantval: [u16; 64],
}

pub(super) fn read_coefficients(bytes: &[u8]) -> Result<Coefficients, ItemError> {
    let read = read_into::<Vec<[i16; 64]>>(bytes)?;
    Ok(Coefficients {
        width: read.width,
        height: read.height,
        color: read.color,
        components: read
            .components
            .into_iter()
            .map(|(header, blocks)| ComponentCoefficients {
                h_samp: header.h_samp,
                v_samp: header.v_samp,
                width_in_blocks: header.width_in_blocks,
                height_in_blocks: header.height_in_blocks,
                quantval: header.quantval,
                blocks,
            })
            .collect(),
    })
}

/// The JPEG's components with their blocks in `B`'s form.
pub(super) fn read_into<B: BlockSink>(bytes: &[u8]) -> Result<Read<B>, ItemError> {
    let mut decompressor = Decompressor::new();
    let cinfo = &mut *decompressor.cinfo;
    let read = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `bytes` outlives the decompressor's use of it (both end in
        // this function); the calls follow libjpeg's order (source, header,
        // coefficients, finish), each `comp_info` entry and virtual array
        // exists for `num_components` components once
        // `jpeg_read_coefficients` returns, and `access_virt_barray` gives
        // a row of `width_in_blocks` blocks for each row below
        // `height_in_blocks`.
        unsafe { read(cinfo, bytes) }
    }));
    match read {
        Ok(result) => result,
        Err(payload) => {
            let message = match payload.downcast::<LibjpegError>() {
                Ok(error) => error.0,
                Err(other) => pipeline_core::panic_message(other.as_ref()),
            };
            Err(ItemError::new(ItemErrorKind::Decode, message))
        }
    }
}

unsafe fn read<B: BlockSink>(
    cinfo: &mut sys::jpeg_decompress_struct,
    bytes: &[u8],
) -> Result<Read<B>, ItemError> {
    let len = c_ulong::try_from(bytes.len())
        .map_err(|_| ItemError::new(ItemErrorKind::TooLarge, "file too large for libjpeg"))?;
    // SAFETY: see `read_coefficients`.
    unsafe {
        sys::jpeg_mem_src(cinfo, bytes.as_ptr(), len);
        sys::jpeg_read_header(cinfo, 1);
        let color = match cinfo.jpeg_color_space {
            sys::J_COLOR_SPACE::JCS_YCbCr => ColorTransform::YCbCr,
            sys::J_COLOR_SPACE::JCS_GRAYSCALE => ColorTransform::Grayscale,
            sys::J_COLOR_SPACE::JCS_RGB => ColorTransform::Rgb,
            other => {
                return Err(ItemError::new(
                    ItemErrorKind::Unsupported,
                    format!("{other:?} JPEGs are decoded on the CPU"),
                ));
            }
        };
        let arrays = sys::jpeg_read_coefficients(cinfo);
        let count = usize::try_from(cinfo.num_components).unwrap_or(0);
        let comp_info = std::slice::from_raw_parts(cinfo.comp_info, count);
        if block_smoothing_applies(cinfo, comp_info) {
            return Err(ItemError::new(
                ItemErrorKind::Unsupported,
                "a progressive JPEG whose scans leave low AC coefficients inexact: \
                 libjpeg smooths its blocks, so the CPU decodes it",
            ));
        }
        let access = (*cinfo.common.mem)
            .access_virt_barray
            .expect("libjpeg's memory manager always has access_virt_barray");
        let mut components = Vec::with_capacity(count);
        for (index, info) in comp_info.iter().enumerate() {
            let Some(table) = info.quant_table.as_ref() else {
                return Err(ItemError::new(
                    ItemErrorKind::Decode,
                    format!("component {index} has no quantisation table"),
                ));
            };
            let (width, height) = (info.width_in_blocks, info.height_in_blocks);
            let mut blocks = B::for_blocks(width as usize * height as usize);
            for row in 0..height {
                let rows = access(&mut cinfo.common, *arrays.add(index), row, 1, 0);
                blocks
                    .take_row(std::slice::from_raw_parts(*rows, width as usize))
                    .ok_or_else(|| {
                        ItemError::new(
                            ItemErrorKind::TooLarge,
                            "more nonzero coefficients than a packed offset counts",
                        )
                    })?;
            }
            let header = ComponentHeader {
                h_samp: u8::try_from(info.h_samp_factor).unwrap_or(0),
                v_samp: u8::try_from(info.v_samp_factor).unwrap_or(0),
                width_in_blocks: width,
                height_in_blocks: height,
                quantval: table.quantval,
            };
            components.push((header, blocks));
        }
        sys::jpeg_finish_decompress(cinfo);
        Ok(Read {
            width: cinfo.image_width,
            height: cinfo.image_height,
            color,
            components,
        })
    }
}

/// Whether libjpeg's output pass would smooth blocks (`jdcoefct.c`
/// `smoothing_ok`, with `do_block_smoothing` on, its default and Pillow's):
/// a progressive file after whose last scan some component's first nine
/// AC coefficients (zigzag 1..=9) are not known to full precision, its DC
/// partly known and its quantisers at those positions nonzero. Smoothing
/// estimates those coefficients from the neighbouring blocks' DC, which
/// the plain IDCT of the coefficients does not.
///
/// # Safety
///
/// After `jpeg_read_coefficients`: `coef_bits`, where not null, holds 64
/// precisions for each of `comp_info`'s components.
unsafe fn block_smoothing_applies(
    cinfo: &sys::jpeg_decompress_struct,
    comp_info: &[sys::jpeg_component_info],
) -> bool {
    // Q00, Q01, Q10, Q20, Q11, Q02, Q03, Q12, Q21, Q30 (natural order).
    const SMOOTHED_QUANTISERS: [usize; 10] = [0, 1, 8, 16, 9, 2, 3, 10, 17, 24];
    if cinfo.coef_bits.is_null() || cinfo.do_block_smoothing == 0 {
        return false; // a sequential file, or smoothing off
    }
    let coef_bits = cinfo.coef_bits.cast::<[c_int; 64]>();
    let mut useful = false;
    for (index, info) in comp_info.iter().enumerate() {
        // SAFETY: see the function's contract.
        let (table, bits) = unsafe { (info.quant_table.as_ref(), &*coef_bits.add(index)) };
        let Some(table) = table else {
            return false;
        };
        if SMOOTHED_QUANTISERS.iter().any(|&q| table.quantval[q] == 0) || bits[0] < 0 {
            return false;
        }
        useful |= bits[1..10].iter().any(|&b| b != 0);
    }
    useful
}

/// The IDCT of every block of `component`: its samples, rows
/// `width_in_blocks * 8` apart.
pub(super) fn idct_component(
    component: &ComponentCoefficients,
    idct: Idct,
) -> Result<Vec<u8>, ItemError> {
    let blocks = component.width_in_blocks as usize * component.height_in_blocks as usize;
    if component.blocks.len() != blocks {
        return Err(ItemError::new(
            ItemErrorKind::Decode,
            format!("{} blocks, expected {blocks}", component.blocks.len()),
        ));
    }
    let mut samples = vec![0u8; blocks * 64];
    // SAFETY: `blocks` holds width_in_blocks × height_in_blocks blocks of 64
    // coefficients and `quantval` 64 entries, as the shim reads them; it
    // writes width_in_blocks * 8 × height_in_blocks * 8 samples, the length
    // of `samples`.
    unsafe {
        ej_host_idct_component(
            component.blocks.as_ptr().cast(),
            component.width_in_blocks,
            component.height_in_blocks,
            component.quantval.as_ptr(),
            c_int::from(idct == Idct::Simd),
            samples.as_mut_ptr(),
        );
    }
    Ok(samples)
}

/// Upsamples and converts the components' samples (`planes`, from
/// [`idct_component`]) to `width × height` RGB.
pub(super) fn to_rgb(
    components: &[ComponentCoefficients],
    planes: &[Vec<u8>],
    color: ColorTransform,
    width: u32,
    height: u32,
) -> Result<Vec<u8>, ItemError> {
    let unsupported = |why: String| Err(ItemError::new(ItemErrorKind::Unsupported, why));
    let max_h = components.iter().map(|c| c.h_samp).max().unwrap_or(1);
    let max_v = components.iter().map(|c| c.v_samp).max().unwrap_or(1);
    for c in components {
        // The shim reads each plane up to the component's downsampled size,
        // which must lie within its blocks.
        let (w, h) = (
            (u64::from(width) * u64::from(c.h_samp)).div_ceil(u64::from(max_h)),
            (u64::from(height) * u64::from(c.v_samp)).div_ceil(u64::from(max_v)),
        );
        if c.h_samp == 0
            || c.v_samp == 0
            || w > u64::from(c.width_in_blocks) * 8
            || h > u64::from(c.height_in_blocks) * 8
        {
            return unsupported(format!(
                "a {}x{} component of {} x {} blocks in a {width}x{height} image",
                c.h_samp, c.v_samp, c.width_in_blocks, c.height_in_blocks
            ));
        }
    }
    let samples: Vec<*const u8> = planes.iter().map(|p| p.as_ptr()).collect();
    let strides: Vec<u32> = components.iter().map(|c| c.width_in_blocks * 8).collect();
    let h_samp: Vec<c_int> = components.iter().map(|c| c_int::from(c.h_samp)).collect();
    let v_samp: Vec<c_int> = components.iter().map(|c| c_int::from(c.v_samp)).collect();
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    // SAFETY: one pointer, stride and factor per component, each plane
    // `stride × height_in_blocks * 8` bytes and read only within the
    // downsampled size checked above; `rgb` is width × height × 3 bytes.
    let status = unsafe {
        ej_host_to_rgb(
            c_int::try_from(components.len()).unwrap_or(0),
            samples.as_ptr(),
            strides.as_ptr(),
            h_samp.as_ptr(),
            v_samp.as_ptr(),
            color as c_int,
            width,
            height,
            rgb.as_mut_ptr(),
        )
    };
    if status != 0 {
        let factors: Vec<String> = components
            .iter()
            .map(|c| format!("{}x{}", c.h_samp, c.v_samp))
            .collect();
        return unsupported(format!(
            "sampling factors {} (libjpeg refuses them too)",
            factors.join(",")
        ));
    }
    Ok(rgb)
}

/// The blocks of `packed`, unpacked by the host build of
/// `ej_unpack_block`, the function the kernels unpack with.
pub(super) fn unpack_component(packed: &PackedComponent) -> Vec<[i16; 64]> {
    let blocks = packed.masks.len();
    assert_eq!(packed.offsets.len(), blocks, "one offset a block");
    let needed = packed
        .masks
        .iter()
        .zip(&packed.offsets)
        .map(|(mask, &offset)| offset as usize + mask.count_ones() as usize)
        .max()
        .unwrap_or(0);
    assert!(
        needed <= packed.values.len(),
        "every block's values are there"
    );
    let mut out = vec![[0i16; 64]; blocks];
    // SAFETY: `masks` and `offsets` hold `blocks` entries each, and every
    // block reads `mask.count_ones()` values from its offset, within
    // `values` (checked above); `out` is `blocks` × 64 coefficients.
    unsafe {
        ej_host_unpack_component(
            packed.masks.as_ptr(),
            packed.offsets.as_ptr(),
            packed.values.as_ptr(),
            u32::try_from(blocks).expect("a component's blocks fit u32"),
            out.as_mut_ptr().cast(),
        );
    }
    out
}
