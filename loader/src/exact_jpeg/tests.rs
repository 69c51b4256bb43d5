//! The host build of `exact_jpeg.h` against the loader's own decode, every
//! byte, over two seeded spaces weighted toward the edges: JPEGs libjpeg
//! encodes (sizes, samplings, progressive, qualities, colour spaces), and
//! JPEGs written from crafted coefficients (magnitudes up to 15 bits,
//! 16-bit quantisation tables, restart intervals, samplings no encoder
//! offers). `PIPELINE_EXACT_JPEG_SEED=N` (and `PIPELINE_EXACT_JPEG_IMAGES=N`)
//! hunts with a fresh seed; a failure names the seed and the cases.

mod crafted;
mod packed;

use super::{
    Coefficients, ColorTransform, ComponentCoefficients, EXACT_JPEG_H, Idct, read_coefficients,
    reconstruct_rgb,
};
use crate::decode::decode_bytes;
use crafted::{CraftedComponent, NATURAL_ORDER, Scan, padded_grid};
use pipeline_core::{DecodeLimits, PreprocessSpec};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Sides weighted toward the block and MCU edges.
fn side(rng: &mut fastrand::Rng, most: u32) -> u32 {
    const EDGES: [u32; 15] = [1, 2, 3, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33];
    match rng.u32(0..10) {
        0..=4 => EDGES[rng.usize(..EDGES.len())],
        5..=7 => rng.u32(1..80.min(most) + 1),
        _ => rng.u32(1..=most),
    }
}

/// Samplings (Y, Cb, Cr) libjpeg encodes and decodes: 4:4:4, 4:2:2, 4:2:0,
/// 4:4:0, 4:1:1, and the rarer ones that reach every upsampler (box for
/// 3:1 and 4:1, fancy h2v1 or h1v2 against a 4-high or 4-wide luma, chroma
/// sampled finer than luma).
const SAMPLINGS: [[(u8, u8); 3]; 16] = [
    [(1, 1), (1, 1), (1, 1)],
    [(2, 1), (1, 1), (1, 1)],
    [(2, 2), (1, 1), (1, 1)],
    [(1, 2), (1, 1), (1, 1)],
    [(4, 1), (1, 1), (1, 1)],
    [(1, 4), (1, 1), (1, 1)],
    [(4, 2), (1, 1), (1, 1)],
    [(2, 4), (1, 1), (1, 1)],
    [(3, 1), (1, 1), (1, 1)],
    [(1, 3), (1, 1), (1, 1)],
    [(3, 2), (1, 1), (1, 1)],
    [(2, 2), (2, 1), (1, 2)],
    [(2, 1), (1, 1), (2, 1)],
    [(4, 1), (2, 1), (1, 1)],
    [(2, 2), (1, 1), (2, 2)],
    [(1, 1), (2, 2), (1, 1)],
];

/// Pixels: photo-like, noise, or saturated cells whose ringing leaves
/// 0..255 (the IDCT's and the colour conversion's clamps).
fn pixels(rng: &mut fastrand::Rng, width: u32, height: u32, channels: usize) -> Vec<u8> {
    let rgb = match rng.u8(0..3) {
        0 => crate::synthetic::synthetic_rgb(width, height, rng.u64(..)).into_raw(),
        1 => (0..width * height * 3).map(|_| rng.u8(..)).collect(),
        _ => {
            let cell = rng.u32(1..9);
            let mut rgb = Vec::with_capacity((width * height * 3) as usize);
            for y in 0..height {
                for x in 0..width {
                    let on = ((x / cell + y / cell) % 2) as u8 * 255;
                    rgb.extend_from_slice(&[on, 255 - on, ((x / cell) % 2) as u8 * 255]);
                }
            }
            rgb
        }
    };
    if channels == 3 {
        rgb
    } else {
        rgb.chunks_exact(3).map(|p| p[1]).collect()
    }
}

struct Encoded {
    what: String,
    bytes: Vec<u8>,
}

/// A JPEG from libjpeg's encoder (mozjpeg's, at libjpeg-turbo's defaults or
/// its own), or `None` where it refuses the settings.
fn encode(rng: &mut fastrand::Rng) -> Option<Encoded> {
    use mozjpeg::{ColorSpace, Compress};
    let (width, height) = (side(rng, 300), side(rng, 300));
    let space = match rng.u8(0..20) {
        0..=2 => ColorSpace::JCS_GRAYSCALE,
        3 => ColorSpace::JCS_RGB,
        _ => ColorSpace::JCS_YCbCr,
    };
    let sampling = SAMPLINGS[rng.usize(..SAMPLINGS.len())];
    let quality = [1, 5, 25, 50, 75, 90, 95, 100, 100][rng.usize(..9)];
    let progressive = rng.u8(0..3) == 0;
    let libjpeg_defaults = rng.u8(0..4) != 0;
    let gray = space == ColorSpace::JCS_GRAYSCALE;
    let input = pixels(rng, width, height, if gray { 1 } else { 3 });
    let what = format!(
        "{width}x{height} {space:?} {sampling:?} q{quality}{}{}",
        if progressive { " progressive" } else { "" },
        if libjpeg_defaults { "" } else { " mozjpeg" },
    );
    let bytes = std::panic::catch_unwind(|| {
        let mut c = Compress::new(if gray {
            ColorSpace::JCS_GRAYSCALE
        } else {
            ColorSpace::JCS_RGB
        });
        if libjpeg_defaults {
            c.set_fastest_defaults();
        }
        c.set_size(width as usize, height as usize);
        c.set_quality(quality as f32);
        if !gray {
            c.set_color_space(space);
            for (component, (h, v)) in c.components_mut().iter_mut().zip(sampling) {
                component.h_samp_factor = h.into();
                component.v_samp_factor = v.into();
            }
        }
        if progressive {
            c.set_progressive_mode();
        }
        let mut started = c.start_compress(Vec::new()).ok()?;
        started.write_scanlines(&input).ok()?;
        started.finish().ok()
    })
    .ok()
    .flatten()?;
    Some(Encoded { what, bytes })
}

/// Coefficients of one block: zero, sparse, at the limits, dense, or DC
/// alone (the SIMD IDCT's whole-block shortcut).
fn block(rng: &mut fastrand::Rng) -> [i16; 64] {
    let mut b = [0i16; 64];
    let kind = rng.u8(0..7);
    let small = |rng: &mut fastrand::Rng| rng.i16(-60..=60);
    let any = |rng: &mut fastrand::Rng| rng.i16(-32767..=32767);
    let edge = |rng: &mut fastrand::Rng| {
        [1023i16, -1023, 2047, -2047, 32767, -32767, 8191, -8192][rng.usize(..8)]
    };
    match kind {
        0 => {}
        1 => (0..rng.usize(1..6)).for_each(|_| b[rng.usize(..64)] = small(rng)),
        2 => (0..rng.usize(1..6)).for_each(|_| b[rng.usize(..64)] = edge(rng)),
        3 => b.iter_mut().for_each(|c| *c = any(rng)),
        4 => (0..rng.usize(1..12)).for_each(|_| b[rng.usize(..64)] = any(rng)),
        _ => {
            b[0] = rng.i16(-16383..=16383);
            if kind == 6 {
                b[rng.usize(..8)] = any(rng);
            }
        }
    }
    b[0] = b[0].clamp(-16383, 16383);
    b
}

fn quant_table(rng: &mut fastrand::Rng) -> [u16; 64] {
    let mut q = [1u16; 64];
    match rng.u8(0..4) {
        0 => {}
        1 => q.iter_mut().for_each(|v| *v = rng.u16(1..=255)),
        2 => q.iter_mut().for_each(|v| *v = rng.u16(1..=4000)),
        _ => q.iter_mut().for_each(|v| *v = rng.u16(1..=u16::MAX)),
    }
    q
}

struct CraftedCase {
    what: String,
    bytes: Vec<u8>,
    /// The coefficients written, as `read_coefficients` must return them
    /// (zero where a progressive script never sent them).
    coefficients: Coefficients,
    /// Whether a progressive script leaves one of the first nine AC
    /// coefficients of a component unsent: libjpeg then smooths blocks
    /// (`do_block_smoothing`, `jdcoefct.c` `smoothing_ok`).
    smooths: bool,
}

/// A progressive scan script: the DC of every component in one scan, then
/// each component's AC bands in scans of their own, some complete, some
/// not (a band never sent, or sent only up to the ninth coefficient, which
/// libjpeg does not smooth).
fn scan_script(rng: &mut fastrand::Rng, components: usize) -> Vec<Scan> {
    let mut scans = vec![Scan {
        components: (0..components).collect(),
        start: 0,
        end: 0,
    }];
    for ci in 0..components {
        let bands: &[(usize, usize)] = match rng.u8(0..12) {
            0 => &[],
            1 => &[(1, 5)],
            2 | 3 => &[(1, 9)],
            4 | 5 => &[(1, 5), (6, 63)],
            6 | 7 => &[(6, 63), (1, 5)],
            _ => &[(1, 63)],
        };
        for &(start, end) in bands {
            scans.push(Scan {
                components: vec![ci],
                start,
                end,
            });
        }
    }
    scans
}

/// A JPEG written from random coefficients and tables.
fn craft(rng: &mut fastrand::Rng, samplings: &[[(u8, u8); 3]]) -> CraftedCase {
    let (width, height) = (side(rng, 120), side(rng, 120));
    let (color, samp, ids): (_, Vec<(u8, u8)>, Vec<u8>) = match rng.u8(0..10) {
        0 | 1 => {
            let s = [(1, 1), (2, 2), (1, 2)][rng.usize(..3)];
            (ColorTransform::Grayscale, vec![s], vec![1])
        }
        2 => (
            ColorTransform::Rgb,
            samplings[rng.usize(..samplings.len())].to_vec(),
            b"RGB".to_vec(),
        ),
        _ => (
            ColorTransform::YCbCr,
            samplings[rng.usize(..samplings.len())].to_vec(),
            vec![1, 2, 3],
        ),
    };
    let restart = if rng.bool() { 0 } else { rng.u16(1..8) };
    let scans = (rng.u8(0..3) == 0).then(|| scan_script(rng, samp.len()));
    // Per component, the zigzag positions its scans send.
    let sent: Vec<[bool; 64]> = (0..samp.len())
        .map(|ci| {
            let mut sent = [scans.is_none(); 64];
            for scan in scans.iter().flatten() {
                if scan.components.contains(&ci) {
                    sent[scan.start..=scan.end]
                        .iter_mut()
                        .for_each(|s| *s = true);
                }
            }
            sent
        })
        .collect();
    let smooths = sent.iter().any(|sent| sent[1..10].contains(&false));
    let grid = padded_grid(width, height, &samp);
    let max_h = samp.iter().map(|s| s.0).max().unwrap_or(1);
    let max_v = samp.iter().map(|s| s.1).max().unwrap_or(1);
    let mut written = Vec::new();
    let mut expected = Vec::new();
    for (((&(h, v), &id), &(wide, high)), sent) in samp.iter().zip(&ids).zip(&grid).zip(&sent) {
        let mut blocks: Vec<[i16; 64]> = (0..wide * high).map(|_| block(rng)).collect();
        // What a script never sends, the decoder holds as zero.
        for (k, _) in sent.iter().enumerate().filter(|(_, sent)| !**sent) {
            blocks.iter_mut().for_each(|b| b[NATURAL_ORDER[k]] = 0);
        }
        let quantval = quant_table(rng);
        // libjpeg keeps the blocks that cover the component's samples.
        let (own_h, own_v) = if samp.len() == 1 {
            (max_h, max_v)
        } else {
            (h, v)
        };
        let width_in_blocks =
            (u64::from(width) * u64::from(own_h)).div_ceil(u64::from(max_h) * 8) as u32;
        let height_in_blocks =
            (u64::from(height) * u64::from(own_v)).div_ceil(u64::from(max_v) * 8) as u32;
        expected.push(ComponentCoefficients {
            h_samp: h,
            v_samp: v,
            width_in_blocks,
            height_in_blocks,
            quantval,
            blocks: (0..height_in_blocks as usize)
                .flat_map(|row| blocks[row * wide..][..width_in_blocks as usize].to_vec())
                .collect(),
        });
        written.push(CraftedComponent {
            id,
            h_samp: h,
            v_samp: v,
            quantval,
            blocks_wide: wide,
            blocks,
        });
    }
    CraftedCase {
        what: format!(
            "crafted {width}x{height} {color:?} {samp:?} restart {restart} scans {scans:?}"
        ),
        bytes: crafted::write(width, height, &written, restart, scans.as_deref()),
        coefficients: Coefficients {
            width,
            height,
            color,
            components: expected,
        },
        smooths,
    }
}

fn loader_decode(bytes: &[u8]) -> Result<crate::RgbImage, pipeline_core::ItemError> {
    decode_bytes(bytes, &PreprocessSpec::default(), &DecodeLimits::default())
}

/// libjpeg-turbo called as the loader calls it (`decode_jpeg_turbo` at
/// full scale: fancy upsampling, the accurate integer IDCT, RGB out).
fn libjpeg_decode(bytes: &[u8]) -> Option<crate::RgbImage> {
    std::panic::catch_unwind(|| {
        let mut decoder = mozjpeg::Decompress::builder().from_mem(bytes).ok()?;
        decoder.do_fancy_upsampling(true);
        decoder.dct_method(mozjpeg::DctMethod::IntegerSlow);
        let mut started = decoder.rgb().ok()?;
        let (width, height) = (started.width(), started.height());
        let pixels = started.read_scanlines::<u8>().ok()?;
        started.finish().ok()?;
        Some(crate::RgbImage {
            width: u32::try_from(width).ok()?,
            height: u32::try_from(height).ok()?,
            pixels,
        })
    })
    .ok()
    .flatten()
}

/// The loader's decode. A sampling factor of 3 the loader refuses before
/// libjpeg sees the file (the `image` crate's header probe, zune-jpeg,
/// takes only powers of two; Pillow decodes such files): there the
/// reference is libjpeg as the loader calls it.
fn reference(bytes: &[u8]) -> Result<crate::RgbImage, String> {
    match loader_decode(bytes) {
        Ok(image) => Ok(image),
        Err(e) if e.message.contains("sample is not a power of two") => {
            libjpeg_decode(bytes).ok_or_else(|| format!("libjpeg refuses it too: {e}"))
        }
        Err(e) => Err(format!("the loader refuses it: {e}")),
    }
}

/// Compares one file: `None` where every byte is the loader's, else why.
fn compare(bytes: &[u8], idct: Idct) -> Option<String> {
    let theirs = match reference(bytes) {
        Ok(image) => image,
        Err(e) => return Some(e),
    };
    let ours = match read_coefficients(bytes).and_then(|c| reconstruct_rgb(&c, idct)) {
        Ok(image) => image,
        Err(e) => return Some(format!("exact_jpeg refuses it: {e}")),
    };
    if (ours.width, ours.height) != (theirs.width, theirs.height) {
        return Some(format!(
            "{}x{} against the loader's {}x{}",
            ours.width, ours.height, theirs.width, theirs.height
        ));
    }
    let differ: Vec<usize> = (0..ours.pixels.len())
        .filter(|&i| ours.pixels[i] != theirs.pixels[i])
        .collect();
    let &first = differ.first()?;
    let (pixel, channel) = (first / 3, first % 3);
    Some(format!(
        "{} bytes differ, the first at ({}, {}) channel {channel}: {} against the loader's {}",
        differ.len(),
        pixel % ours.width as usize,
        pixel / ours.width as usize,
        ours.pixels[first],
        theirs.pixels[first],
    ))
}

fn report(failures: &[String], seed: u64) {
    assert!(
        failures.is_empty(),
        "{} files differ from the loader's decode (seed {seed}):\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}

/// Every JPEG libjpeg encodes: both IDCTs give the loader's bytes.
#[test]
fn the_kernels_arithmetic_decodes_encoded_jpegs_to_the_loaders_bytes() {
    let seed = env_number("PIPELINE_EXACT_JPEG_SEED", 14);
    let count = env_number("PIPELINE_EXACT_JPEG_IMAGES", 1500);
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut compared, mut failures) = (0, Vec::new());
    while compared < count {
        let Some(encoded) = encode(&mut rng) else {
            continue;
        };
        compared += 1;
        for idct in [Idct::Simd, Idct::Scalar] {
            if let Some(why) = compare(&encoded.bytes, idct) {
                failures.push(format!("{} ({idct:?}): {why}", encoded.what));
            }
        }
    }
    report(&failures, seed);
    assert_eq!(compared, count);
}

/// Coefficients up to the format's limits, sequential and progressive:
/// the loader's IDCT (the SIMD one where it runs) gives the loader's bytes,
/// and the reader returns exactly the coefficients written. A progressive
/// file libjpeg would smooth is refused (the CPU decodes it), and such
/// smoothing does change some files' pixels. The scalar IDCT differs from
/// the SIMD one on such blocks: the space reaches the 16-bit lanes' edges.
#[test]
fn the_kernels_arithmetic_decodes_crafted_coefficients_to_the_loaders_bytes() {
    let seed = env_number("PIPELINE_EXACT_JPEG_SEED", 14);
    let count = env_number("PIPELINE_EXACT_JPEG_IMAGES", 1500);
    let mut rng = fastrand::Rng::with_seed(seed);
    let idct = Idct::of_the_loader();
    let other = if idct == Idct::Simd {
        Idct::Scalar
    } else {
        Idct::Simd
    };
    let mut failures = Vec::new();
    let (mut compared, mut other_idct_differs, mut smoothed, mut smoothing_shows) = (0, 0, 0, 0);
    for _ in 0..count {
        let case = craft(&mut rng, &SAMPLINGS);
        match read_coefficients(&case.bytes) {
            Ok(read) if !case.smooths && read == case.coefficients => {}
            Err(e) if case.smooths && e.kind == pipeline_core::ItemErrorKind::Unsupported => {
                smoothed += 1;
                let plain = reconstruct_rgb(&case.coefficients, idct).map(|image| image.pixels);
                smoothing_shows += usize::from(
                    reference(&case.bytes).map(|image| image.pixels).ok() != plain.ok(),
                );
                continue;
            }
            Ok(_) if case.smooths => {
                failures.push(format!("{}: read, though libjpeg smooths it", case.what));
            }
            Ok(_) => failures.push(format!("{}: other coefficients read back", case.what)),
            Err(e) => failures.push(format!("{}: {e}", case.what)),
        }
        compared += 1;
        if let Some(why) = compare(&case.bytes, idct) {
            failures.push(format!("{} ({idct:?}): {why}", case.what));
        }
        other_idct_differs += usize::from(compare(&case.bytes, other).is_some());
    }
    report(&failures, seed);
    assert!(
        other_idct_differs > compared / 4,
        "only {other_idct_differs} of {compared} crafted files tell the two IDCTs apart"
    );
    assert!(
        smoothed > 0 && smoothing_shows > 0 && compared > count as usize / 2,
        "{compared} compared, {smoothed} smoothed, {smoothing_shows} visibly"
    );
}

/// Block by block, a million random blocks with coefficients and
/// quantisers anywhere in 16 bits: `ej_idct_islow_simd` is libjpeg-turbo's
/// x86 SIMD IDCT itself (its SSE2 and, where the CPU has it, its AVX2
/// code, called directly), and differs from the C IDCT on most such blocks.
#[cfg(target_arch = "x86_64")]
#[test]
#[allow(unsafe_code)]
fn the_simd_idct_is_libjpeg_turbos_on_random_blocks() {
    unsafe extern "C" {
        // jsimd_idct_islow_{sse2,avx2}(void *dct_table, JCOEFPTR coef_block,
        // JSAMPARRAY output_buf, JDIMENSION output_col)
        fn jsimd_idct_islow_sse2(table: *const i16, coef: *const i16, rows: *mut *mut u8, col: u32);
        fn jsimd_idct_islow_avx2(table: *const i16, coef: *const i16, rows: *mut *mut u8, col: u32);
    }
    type IdctKernel = unsafe extern "C" fn(*const i16, *const i16, *mut *mut u8, u32);
    // The SIMD code reads the table as ISLOW_MULT_TYPE, `short`, and the
    // block with aligned loads, as libjpeg allocates them.
    #[repr(align(32))]
    struct Aligned([i16; 64]);
    let mut kernels: Vec<(&str, IdctKernel)> = vec![("sse2", jsimd_idct_islow_sse2 as IdctKernel)];
    if std::arch::is_x86_feature_detected!("avx2") {
        kernels.push(("avx2", jsimd_idct_islow_avx2 as IdctKernel));
    }
    let mut rng = fastrand::Rng::with_seed(env_number("PIPELINE_EXACT_JPEG_SEED", 14));
    let (mut failures, mut scalar_differs) = (Vec::new(), 0);
    let blocks = 1_000_000;
    for _ in 0..blocks {
        let quantval = quant_table(&mut rng);
        let coef = match rng.u8(0..4) {
            0 => block(&mut rng),
            1 => std::array::from_fn(|_| rng.i16(..)),
            2 => std::array::from_fn(|_| if rng.u8(0..8) == 0 { rng.i16(..) } else { 0 }),
            _ => {
                let mut b = [0i16; 64];
                b[0] = rng.i16(..);
                b
            }
        };
        let one = |idct| {
            let component = ComponentCoefficients {
                h_samp: 1,
                v_samp: 1,
                width_in_blocks: 1,
                height_in_blocks: 1,
                quantval,
                blocks: vec![coef],
            };
            super::ffi::idct_component(&component, idct).expect("one block")
        };
        let ours = one(Idct::Simd);
        scalar_differs += usize::from(one(Idct::Scalar) != ours);
        let table = Aligned(quantval.map(|q| q as i16));
        let coef = Aligned(coef);
        let mut theirs = [[0u8; 8]; 8];
        for &(name, kernel) in &kernels {
            let mut rows: Vec<*mut u8> = theirs.iter_mut().map(|r| r.as_mut_ptr()).collect();
            // SAFETY: the table and block are 64 aligned 16-bit values, the
            // rows eight writable 8-byte rows, the column 0; the AVX2 one
            // is called only where the CPU has AVX2.
            unsafe { kernel(table.0.as_ptr(), coef.0.as_ptr(), rows.as_mut_ptr(), 0) };
            if theirs.as_flattened() != ours.as_slice() && failures.len() < 10 {
                failures.push(format!("{name}: {:?} with {quantval:?}", coef.0));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(scalar_differs > blocks / 4, "{scalar_differs}");
}

/// A sampling libjpeg cannot upsample (3 against 2) is refused by both.
#[test]
fn a_fractional_sampling_is_refused_as_libjpeg_refuses_it() {
    let mut rng = fastrand::Rng::with_seed(3);
    let fractional = [[(3, 1), (2, 1), (1, 1)]];
    for _ in 0..5 {
        let case = craft(&mut rng, &fractional);
        if case.coefficients.color == ColorTransform::Grayscale || case.smooths {
            continue;
        }
        assert!(loader_decode(&case.bytes).is_err(), "{}", case.what);
        let read = read_coefficients(&case.bytes).expect("the coefficients are readable");
        let refused = reconstruct_rgb(&read, Idct::Simd).expect_err("3:2 is refused");
        assert_eq!(
            refused.kind,
            pipeline_core::ItemErrorKind::Unsupported,
            "{refused}"
        );
    }
}

/// A CMYK JPEG is left to the CPU, and a file cut in its header is a
/// decode error (one cut in its scan reads as libjpeg reads it, the rest
/// gray; the loader refuses such a file before decoding).
#[test]
fn cmyk_is_unsupported_and_a_cut_header_is_a_decode_error() {
    let mut c = mozjpeg::Compress::new(mozjpeg::ColorSpace::JCS_CMYK);
    c.set_size(9, 9);
    let mut started = c.start_compress(Vec::new()).expect("starts");
    started.write_scanlines(&[7u8; 9 * 9 * 4]).expect("writes");
    let cmyk = started.finish().expect("finishes");
    let error = read_coefficients(&cmyk).expect_err("CMYK is not ours");
    assert_eq!(error.kind, pipeline_core::ItemErrorKind::Unsupported);

    let mut rng = fastrand::Rng::with_seed(5);
    let case = craft(&mut rng, &SAMPLINGS);
    let error = read_coefficients(&case.bytes[..40]).expect_err("a cut header");
    assert_eq!(error.kind, pipeline_core::ItemErrorKind::Decode, "{error}");
}

/// The source NVRTC compiles includes no header, and its only compiler
/// difference is the qualifier macro.
#[test]
fn the_source_is_self_contained_for_nvrtc() {
    assert!(!EXACT_JPEG_H.contains("#include"));
    let cuda_lines: Vec<&str> = EXACT_JPEG_H
        .lines()
        .filter(|l| l.contains("__CUDACC"))
        .collect();
    assert_eq!(
        cuda_lines,
        ["#if defined(__CUDACC__) || defined(__CUDACC_RTC__)"]
    );
}
