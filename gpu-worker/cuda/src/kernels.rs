//! The CUDA engine's own kernels: CUDA C++ in `kernels/`, compiled by NVRTC
//! at run time to a cubin for the device's exact architecture (no CUDA
//! toolkit at build time; PTX, which a driver older than NVRTC refuses,
//! only for a GPU newer than NVRTC knows). CI compiles every one for
//! Ampere and Hopper with the
//! `nvidia-cuda-nvrtc` wheel (`tests/kernels.rs`), so a kernel that
//! does not compile fails there, not on a user's GPU.

use super::libs::{CudaLib, cuda_libraries};

/// What every source starts with: f16 conversions without CUDA's headers.
const HALF: &str = include_str!("kernels/half.cuh");

/// One source file and the kernels it defines.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// Its file name under `kernels/`.
    pub file: &'static str,
    /// The CUDA C++.
    pub source: &'static str,
    /// Its `extern "C"` kernels.
    pub entries: &'static [&'static str],
}

/// Every kernel source.
pub const SOURCES: [KernelSource; 5] = [
    KernelSource {
        file: "preprocess.cu",
        source: include_str!("kernels/preprocess.cu"),
        entries: &["normalize_nchw_f16", "normalize_nhwc_f16"],
    },
    KernelSource {
        file: "transformer.cu",
        source: include_str!("kernels/transformer.cu"),
        entries: &[
            "layer_norm_f16",
            "softmax_rows_f16",
            "activation_f16",
            "swiglu_f16",
            "gather_rows_f16",
            "split_heads_f16",
            "merge_heads_f16",
        ],
    },
    KernelSource {
        file: "attention.cu",
        source: include_str!("kernels/attention.cu"),
        entries: &["attention_dh64_f16"],
    },
    KernelSource {
        file: "vit.cu",
        source: include_str!("kernels/vit.cu"),
        entries: &["patches_f16", "tokens_f16", "pool_f16"],
    },
    KernelSource {
        file: "cnn.cu",
        source: include_str!("kernels/cnn.cu"),
        entries: &[
            "pad_nhwc_f16",
            "max_pool_3x3_s2_nhwc_f16",
            "conv_epilogue_f16",
            "patches_nhwc_f16",
            "depthwise7_nhwc_f16",
        ],
    },
];

/// A source compiled: machine code for one GPU architecture, or PTX that
/// the driver compiles on load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compiled {
    /// A cubin (`sm_XY`): loads on exactly that architecture, with no JIT
    /// and whatever the driver's version.
    Cubin(Vec<u8>),
    /// PTX (`compute_XY`): the driver compiles it, and refuses PTX from an
    /// NVRTC newer than itself.
    Ptx(String),
}

impl Compiled {
    /// Its bytes, as cached.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::Cubin(bytes) => bytes,
            Self::Ptx(text) => text.as_bytes(),
        }
    }

    /// What a cache file holds for `arch`, if it is that: an ELF file for
    /// a cubin, PTX whose `.target` is `arch`'s for PTX.
    fn read(arch: &str, bytes: Vec<u8>) -> Option<Self> {
        if arch.starts_with("sm_") {
            return bytes.starts_with(b"\x7fELF").then_some(Self::Cubin(bytes));
        }
        let text = String::from_utf8(bytes).ok()?;
        let target = format!(".target {}", arch.replace("compute_", "sm_"));
        text.contains(&target).then_some(Self::Ptx(text))
    }

    /// What `cudarc` loads a module from.
    pub fn into_image(self) -> cudarc::nvrtc::Ptx {
        match self {
            Self::Cubin(bytes) => cudarc::nvrtc::Ptx::from_binary(bytes),
            Self::Ptx(text) => cudarc::nvrtc::Ptx::from_src(text),
        }
    }
}

/// What to compile for a GPU of compute capability `capability`, given the
/// real architectures NVRTC supports (`supported`, as 80, 86, 90, …): a
/// cubin for exactly the GPU's where NVRTC has it; else PTX for the newest
/// architecture NVRTC has below the GPU's (a GPU newer than NVRTC), for
/// the driver to compile. `None` when NVRTC has nothing at or below it.
pub fn target_for(capability: (i32, i32), supported: &[i32]) -> Option<String> {
    let exact = capability.0 * 10 + capability.1;
    if supported.contains(&exact) {
        return Some(format!("sm_{exact}"));
    }
    supported
        .iter()
        .filter(|&&a| a <= exact)
        .max()
        .map(|a| format!("compute_{a}"))
}

/// The real architectures the loaded NVRTC compiles for (empty without
/// NVRTC).
pub fn supported_archs() -> Vec<i32> {
    if cuda_libraries().found(CudaLib::Nvrtc).is_none() {
        return Vec::new();
    }
    nvrtc::supported_archs()
}

/// `source` compiled for `arch` (`sm_90` a cubin, `compute_90` PTX), from
/// the kernel cache when an earlier run compiled the same source for the
/// same architecture with the same NVRTC and driver (NVRTC takes about
/// 50 ms a source on the 2-core development machine, at every start
/// otherwise; the sources compile side by side):
/// `$PIPELINE_AUTOTUNE_DIR/cuda-ptx/` (else the user's cache folder).
/// A cache that cannot be read or written is a compile, never an error.
pub fn compile_cached(source: &KernelSource, arch: &str) -> Result<Compiled, String> {
    let dir = pipeline_core::autotune_dir().map(|d| d.join("cuda-ptx"));
    compile_cached_in(dir.as_deref(), source, arch)
}

/// [`compile_cached`] with the cache in `dir` (none: no cache).
pub fn compile_cached_in(
    dir: Option<&std::path::Path>,
    source: &KernelSource,
    arch: &str,
) -> Result<Compiled, String> {
    // Without NVRTC, `compile` says so (its version is not asked for).
    if cuda_libraries().found(CudaLib::Nvrtc).is_none() {
        return compile(source, arch);
    }
    let Some(dir) = dir else {
        return compile(source, arch);
    };
    let path = cache_path(dir, source, arch);
    if let Some(cached) = std::fs::read(&path)
        .ok()
        .and_then(|b| Compiled::read(arch, b))
    {
        return Ok(cached);
    }
    let compiled = compile(source, arch)?;
    // Written aside, then renamed: a reader never sees half a file.
    let aside = path.with_extension(format!("{}.part", std::process::id()));
    let stored = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&aside, compiled.bytes()))
        .and_then(|()| std::fs::rename(&aside, &path));
    if stored.is_err() {
        let _ = std::fs::remove_file(&aside);
    }
    Ok(compiled)
}

/// Where `source` compiled for `arch` is cached in `dir`: named by a hash
/// of the source, the architecture, NVRTC's version and the driver's
/// (NVRTC must be loaded).
pub fn cache_path(dir: &std::path::Path, source: &KernelSource, arch: &str) -> std::path::PathBuf {
    let mut key = pipeline_core::Fnv64::default();
    for part in [
        HALF,
        source.source,
        arch,
        &nvrtc::version(),
        &driver_version(),
    ] {
        key.write(part.as_bytes());
        key.write(&[0]);
    }
    let stem = source.file.trim_end_matches(".cu");
    let ext = if arch.starts_with("sm_") {
        "cubin"
    } else {
        "ptx"
    };
    dir.join(format!("{stem}-{arch}-{:016x}.{ext}", key.finish()))
}

/// The driver's CUDA version (e.g. `13000`), or empty without a driver.
fn driver_version() -> String {
    if cuda_libraries().found(CudaLib::Driver).is_none() {
        return String::new();
    }
    let mut version = 0;
    // SAFETY: the driver (loaded, checked above) writes one int.
    #[allow(unsafe_code)]
    let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    if status == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        version.to_string()
    } else {
        String::new()
    }
}

/// `source` compiled for `arch` (`sm_80`, `sm_90`, … a cubin; `compute_80`,
/// … PTX), or why not in one line: NVRTC missing, or the compiler's log.
pub fn compile(source: &KernelSource, arch: &str) -> Result<Compiled, String> {
    let libs = cuda_libraries();
    if libs.found(CudaLib::Nvrtc).is_none() {
        return Err(format!(
            "NVRTC is not loaded ({}); or give its folder in PIPELINE_CUDA_LIB_PATH",
            CudaLib::Nvrtc.fix()
        ));
    }
    // Row reductions stay in their written order (see transformer.cu).
    let options = [
        format!("--gpu-architecture={arch}"),
        "--fmad=true".to_owned(),
    ];
    nvrtc::compile(
        &format!("{HALF}\n{}", source.source),
        source.file,
        &options,
        arch,
    )
    .map_err(|log| {
        format!(
            "{} does not compile for {arch}: {}",
            source.file,
            log.split_whitespace().collect::<Vec<_>>().join(" ")
        )
    })
}

/// NVRTC's calls, the one `unsafe` here, through the NVRTC `libs.rs`
/// found (`bind.rs`: cudarc's own load by `libnvrtc.so` may take another
/// copy, e.g. a toolkit's, whose `libnvrtc-builtins` differs).
#[allow(unsafe_code)]
mod nvrtc {
    use std::ffi::{CString, c_char, c_int};

    use cudarc::nvrtc::sys::{nvrtcProgram, nvrtcResult};

    use super::Compiled;
    use crate::bind::c_functions;
    use crate::libs::CudaLib;

    c_functions! {
        /// The NVRTC functions the engine calls.
        struct Nvrtc from CudaLib::Nvrtc;
        fn nvrtcVersion(major: *mut c_int, minor: *mut c_int) -> nvrtcResult;
        fn nvrtcGetNumSupportedArchs(count: *mut c_int) -> nvrtcResult;
        fn nvrtcGetSupportedArchs(archs: *mut c_int) -> nvrtcResult;
        fn nvrtcCreateProgram(
            prog: *mut nvrtcProgram,
            src: *const c_char,
            name: *const c_char,
            headers: c_int,
            header_sources: *const *const c_char,
            include_names: *const *const c_char,
        ) -> nvrtcResult;
        fn nvrtcCompileProgram(
            prog: nvrtcProgram,
            options: c_int,
            option_strings: *const *const c_char,
        ) -> nvrtcResult;
        fn nvrtcGetProgramLogSize(prog: nvrtcProgram, size: *mut usize) -> nvrtcResult;
        fn nvrtcGetProgramLog(prog: nvrtcProgram, log: *mut c_char) -> nvrtcResult;
        fn nvrtcGetPTXSize(prog: nvrtcProgram, size: *mut usize) -> nvrtcResult;
        fn nvrtcGetPTX(prog: nvrtcProgram, ptx: *mut c_char) -> nvrtcResult;
        fn nvrtcGetCUBINSize(prog: nvrtcProgram, size: *mut usize) -> nvrtcResult;
        fn nvrtcGetCUBIN(prog: nvrtcProgram, cubin: *mut c_char) -> nvrtcResult;
        fn nvrtcDestroyProgram(prog: *mut nvrtcProgram) -> nvrtcResult;
    }

    fn ok(status: nvrtcResult) -> Result<(), String> {
        status.result().map_err(|e| format!("{:?}", e.0))
    }

    /// NVRTC's version, `major.minor`, or empty when it does not say.
    pub(super) fn version() -> String {
        let Ok(api) = Nvrtc::get() else {
            return String::new();
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: NVRTC writes two ints through the pointers it is given.
        let status = unsafe { (api.nvrtcVersion)(&mut major, &mut minor) };
        if status == nvrtcResult::NVRTC_SUCCESS {
            format!("{major}.{minor}")
        } else {
            String::new()
        }
    }

    /// The real architectures NVRTC compiles for.
    pub(super) fn supported_archs() -> Vec<i32> {
        let Ok(api) = Nvrtc::get() else {
            return Vec::new();
        };
        let mut count: c_int = 0;
        // SAFETY: NVRTC writes the count, then that many ints into a
        // buffer of that size.
        unsafe {
            if (api.nvrtcGetNumSupportedArchs)(&mut count) != nvrtcResult::NVRTC_SUCCESS {
                return Vec::new();
            }
            let mut archs = vec![0 as c_int; usize::try_from(count).unwrap_or(0)];
            if (api.nvrtcGetSupportedArchs)(archs.as_mut_ptr()) != nvrtcResult::NVRTC_SUCCESS {
                return Vec::new();
            }
            archs
        }
    }

    /// A NUL-terminated output of `size` bytes NVRTC writes with `get`,
    /// as text.
    ///
    /// # Safety
    /// `get` must write at most `size` bytes for `prog`.
    unsafe fn text(
        prog: nvrtcProgram,
        size: unsafe extern "C" fn(nvrtcProgram, *mut usize) -> nvrtcResult,
        get: unsafe extern "C" fn(nvrtcProgram, *mut c_char) -> nvrtcResult,
    ) -> Result<String, String> {
        let mut n = 0usize;
        // SAFETY: the caller's contract; NVRTC writes one size, then at
        // most that many bytes.
        let bytes = unsafe {
            ok(size(prog, &mut n))?;
            let mut bytes = vec![0u8; n.max(1)];
            ok(get(prog, bytes.as_mut_ptr().cast()))?;
            bytes
        };
        Ok(String::from_utf8_lossy(&bytes)
            .trim_end_matches('\0')
            .to_owned())
    }

    /// `source` compiled with `options`: a cubin for an `sm_` `arch`,
    /// PTX for a `compute_` one; or the compiler's log.
    pub(super) fn compile(
        source: &str,
        name: &str,
        options: &[String],
        arch: &str,
    ) -> Result<Compiled, String> {
        let api = Nvrtc::get()?;
        let source = CString::new(source).map_err(|_| "a NUL in the source".to_owned())?;
        let name = CString::new(name).map_err(|_| "a NUL in the name".to_owned())?;
        let options: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()).map_err(|_| "a NUL in an option".to_owned()))
            .collect::<Result<_, _>>()?;
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let mut prog: nvrtcProgram = std::ptr::null_mut();
        // SAFETY: NUL-terminated source and name, no headers; NVRTC writes
        // one program.
        ok(unsafe {
            (api.nvrtcCreateProgram)(
                &mut prog,
                source.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        })?;
        // SAFETY: `prog` was created above and is destroyed once, below;
        // each output is read into a buffer of the size NVRTC gives; the
        // options outlive the call.
        let compiled = unsafe {
            let count = c_int::try_from(option_ptrs.len()).expect("a few options");
            match ok((api.nvrtcCompileProgram)(prog, count, option_ptrs.as_ptr())) {
                Err(e) => {
                    Err(text(prog, api.nvrtcGetProgramLogSize, api.nvrtcGetProgramLog).unwrap_or(e))
                }
                Ok(()) if arch.starts_with("sm_") => cubin(api, prog),
                Ok(()) => text(prog, api.nvrtcGetPTXSize, api.nvrtcGetPTX).map(Compiled::Ptx),
            }
        };
        // SAFETY: created above, destroyed once.
        let _ = unsafe { (api.nvrtcDestroyProgram)(&mut prog) };
        compiled
    }

    /// The cubin of a compiled program.
    ///
    /// # Safety
    /// `prog` must be a program NVRTC compiled for a real architecture.
    unsafe fn cubin(api: &Nvrtc, prog: nvrtcProgram) -> Result<Compiled, String> {
        let mut size = 0usize;
        // SAFETY: the caller's contract; NVRTC writes `size` bytes.
        unsafe {
            ok((api.nvrtcGetCUBINSize)(prog, &mut size))?;
            let mut bytes = vec![0u8; size];
            ok((api.nvrtcGetCUBIN)(prog, bytes.as_mut_ptr().cast()))?;
            Ok(Compiled::Cubin(bytes))
        }
    }

    #[cfg(test)]
    mod tests {
        use crate::libs::{CudaLib, Found, cuda_libraries, mapped_file};

        /// #40: the engine's NVRTC calls run from the file the search
        /// found, not from whatever copy cudarc's load by bare name would
        /// take (`tests/kernels.rs` holds `function` itself to it).
        #[test]
        fn the_nvrtc_table_runs_from_the_file_found() {
            let Some(Found::File(found)) = cuda_libraries().found(CudaLib::Nvrtc) else {
                assert!(
                    std::env::var_os("PIPELINE_REQUIRE_NVRTC").is_none(),
                    "NVRTC must load from a file here"
                );
                return;
            };
            let api = super::Nvrtc::get().expect("NVRTC's table");
            let canonical = |p: &std::path::Path| std::fs::canonicalize(p).expect("a real path");
            for addr in [api.nvrtcVersion as usize, api.nvrtcCompileProgram as usize] {
                assert_eq!(
                    mapped_file(addr).map(|p| canonical(&p)),
                    Some(canonical(found))
                );
            }
        }
    }
}
