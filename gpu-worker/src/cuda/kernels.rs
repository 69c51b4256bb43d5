//! The CUDA engine's own kernels: CUDA C++ in `kernels/`, compiled to PTX
//! by NVRTC at run time for the device's architecture (no CUDA toolkit at
//! build time). CI compiles every one for Ampere and Hopper with the
//! `nvidia-cuda-nvrtc` wheel (`tests/cuda_kernels.rs`), so a kernel that
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
pub const SOURCES: [KernelSource; 4] = [
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
            "gather_rows_f16",
            "split_heads_f16",
            "merge_heads_f16",
        ],
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

/// `source` as PTX for `arch`, from the PTX cache when an earlier run
/// compiled the same source for the same architecture (NVRTC takes about
/// 50 ms a source on the 2-core development machine, at every start
/// otherwise; the five sources compile side by side):
/// `$PIPELINE_AUTOTUNE_DIR/cuda-ptx/` (else the user's cache folder),
/// named by a hash of the source, the architecture and NVRTC's version.
/// A cache that cannot be read or written is a compile, never an error.
pub fn compile_cached(source: &KernelSource, arch: &'static str) -> Result<String, String> {
    let dir = pipeline_core::autotune_dir().map(|d| d.join("cuda-ptx"));
    compile_cached_in(dir.as_deref(), source, arch)
}

/// [`compile_cached`] with the cache in `dir` (none: no cache).
pub fn compile_cached_in(
    dir: Option<&std::path::Path>,
    source: &KernelSource,
    arch: &'static str,
) -> Result<String, String> {
    // Without NVRTC, `compile` says so (its version is not asked for).
    if cuda_libraries().found(CudaLib::Nvrtc).is_none() {
        return compile(source, arch);
    }
    let Some(dir) = dir else {
        return compile(source, arch);
    };
    let path = cache_path(dir, source, arch);
    if let Ok(ptx) = std::fs::read_to_string(&path)
        && ptx.contains(&format!(".target {}", arch.replace("compute_", "sm_")))
    {
        return Ok(ptx);
    }
    let ptx = compile(source, arch)?;
    // Written aside, then renamed: a reader never sees half a file.
    let aside = path.with_extension(format!("{}.part", std::process::id()));
    let stored = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&aside, &ptx))
        .and_then(|()| std::fs::rename(&aside, &path));
    if stored.is_err() {
        let _ = std::fs::remove_file(&aside);
    }
    Ok(ptx)
}

/// Where `source`'s PTX for `arch` is cached in `dir` (NVRTC must be
/// loaded: its version is part of the name).
pub fn cache_path(dir: &std::path::Path, source: &KernelSource, arch: &str) -> std::path::PathBuf {
    let mut key = pipeline_core::Fnv64::default();
    for part in [HALF, source.source, arch, &nvrtc_version()] {
        key.write(part.as_bytes());
        key.write(&[0]);
    }
    let stem = source.file.trim_end_matches(".cu");
    dir.join(format!("{stem}-{arch}-{:016x}.ptx", key.finish()))
}

/// NVRTC's version, `major.minor`, or empty when it does not say.
fn nvrtc_version() -> String {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC writes two ints through the pointers it is given.
    #[allow(unsafe_code)]
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if status == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        format!("{major}.{minor}")
    } else {
        String::new()
    }
}

/// `source` as PTX for `arch` (`compute_80`, `compute_90`, …), or why not
/// in one line: NVRTC missing, or the compiler's log.
pub fn compile(source: &KernelSource, arch: &'static str) -> Result<String, String> {
    let libs = cuda_libraries();
    if libs.found(CudaLib::Nvrtc).is_none() {
        return Err(format!(
            "NVRTC is not loaded ({}); or give its folder in PIPELINE_CUDA_LIB_PATH",
            CudaLib::Nvrtc.fix()
        ));
    }
    let options = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        name: Some(source.file.to_owned()),
        // Row reductions stay in their written order (see transformer.cu).
        fmad: Some(true),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(format!("{HALF}\n{}", source.source), options)
        .map(|ptx| ptx.to_src())
        .map_err(|e| {
            let text = match &e {
                cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                    log.to_string_lossy().into_owned()
                }
                other => format!("{other:?}"),
            };
            format!(
                "{} does not compile for {arch}: {}",
                source.file,
                text.split_whitespace().collect::<Vec<_>>().join(" ")
            )
        })
}
