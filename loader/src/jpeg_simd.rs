//! Whether the JPEG decoder runs libjpeg-turbo's SIMD code. The build asks
//! for it (`mozjpeg`'s `nasm_simd`), but libjpeg's build script falls back
//! to plain C, with a warning cargo hides, when `nasm` is missing: the
//! decoded pixels are the same (libjpeg-turbo's SIMD islow IDCT and fancy
//! upsampling equal its C code), and the exact loader 1.3× slower or more
//! on 500×375 photos (BENCHMARKS.md). So the build is asked, not assumed:
//! `pipeline devices` and the bench report say what it is, and a test
//! fails where SIMD did not build.

use serde::Serialize;

/// The JPEG decoder, as `pipeline devices` and reports name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct JpegDecoder {
    /// The library.
    pub library: &'static str,
    /// Whether its SIMD code was built and this CPU runs it.
    pub simd: bool,
}

impl std::fmt::Display for JpegDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.simd {
            write!(f, "{} with SIMD", self.library)
        } else {
            write!(
                f,
                "{} without SIMD (built without nasm, or a CPU without SSE2): the same pixels, \
                 slower; install nasm and rebuild (cargo clean -p mozjpeg-sys)",
                self.library
            )
        }
    }
}

/// The decoder this binary links.
pub fn jpeg_decoder() -> JpegDecoder {
    JpegDecoder {
        library: "libjpeg-turbo (mozjpeg)",
        simd: idct_is_simd(),
    }
}

// libjpeg-turbo's own probe, in the static library `mozjpeg-sys` links:
// `jsimd.c` (SIMD built) asks the CPU and answers 1 where it runs the SIMD
// islow IDCT, `jsimd_none.c` (built without) answers 0.
#[allow(unsafe_code)]
mod ffi {
    unsafe extern "C" {
        fn jsimd_can_idct_islow() -> std::ffi::c_int;
    }

    pub(super) fn can_idct_islow() -> bool {
        // SAFETY: a C function without arguments that reads (and, once,
        // initialises under its own guard) libjpeg-turbo's CPU-feature flags.
        unsafe { jsimd_can_idct_islow() != 0 }
    }
}

fn idct_is_simd() -> bool {
    ffi::can_idct_islow()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails the build where `nasm` was missing: a silent fallback costs
    /// every JPEG its decoder's SIMD.
    #[test]
    fn libjpeg_turbo_was_built_with_simd() {
        let decoder = jpeg_decoder();
        assert!(
            decoder.simd,
            "{decoder}; install nasm (scripts/test.sh does) and rebuild mozjpeg-sys"
        );
    }
}
