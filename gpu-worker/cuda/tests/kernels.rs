//! The CUDA engine's house on a machine without a GPU (#28): its kernels
//! compile with NVIDIA's real NVRTC for Ampere and Hopper, and NVIDIA's
//! libraries are looked for where users have them, a missing one named
//! with its fix. `scripts/test.sh` installs NVRTC (the `nvidia-cuda-nvrtc`
//! wheel) and sets `PIPELINE_REQUIRE_NVRTC`, so in CI the compile test
//! cannot pass without compiling.

use std::path::PathBuf;

use engine_cuda::kernels::{
    Compiled, KernelSource, SOURCES, cache_path, compile, compile_cached_in, supported_archs,
    target_for,
};
use engine_cuda::libs::{
    ALL, CudaLib, Found, cuda_libraries, cudnn_part_files, load, mapped_file, pip_lib_dirs,
    sonames_for,
};
use engine_seam::python_env::path_prefixes;

/// Whether NVRTC loaded; where it must (CI) and did not, a failure.
fn nvrtc_or_skip(test: &str) -> bool {
    let libs = cuda_libraries();
    if libs.found(CudaLib::Nvrtc).is_some() {
        return true;
    }
    assert!(
        std::env::var_os("PIPELINE_REQUIRE_NVRTC").is_none(),
        "{test}: NVRTC must load here and did not: {}",
        libs.missing_line().unwrap_or_default()
    );
    eprintln!("{test}: skipped, no NVRTC (scripts/test.sh installs it)");
    false
}

#[test]
fn every_kernel_compiles_with_nvrtc_for_ampere_and_hopper() {
    if !nvrtc_or_skip("every_kernel_compiles_with_nvrtc_for_ampere_and_hopper") {
        return;
    }
    for source in &SOURCES {
        // Cubins, as a GPU of exactly that architecture gets them: ELF
        // files naming every kernel.
        for arch in ["sm_80", "sm_90"] {
            let Compiled::Cubin(cubin) = compile(source, arch).unwrap_or_else(|e| panic!("{e}"))
            else {
                panic!("{} for {arch}: not a cubin", source.file);
            };
            assert!(
                cubin.starts_with(b"\x7fELF"),
                "{} for {arch}: not ELF",
                source.file
            );
            for entry in source.entries {
                assert!(
                    cubin.windows(entry.len()).any(|w| w == entry.as_bytes()),
                    "{} for {arch}: no kernel {entry}",
                    source.file
                );
            }
        }
        // PTX, for a GPU newer than NVRTC.
        let Compiled::Ptx(ptx) = compile(source, "compute_90").unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("{} for compute_90: not PTX", source.file);
        };
        assert!(
            ptx.contains(".target sm_90"),
            "{}: no .target sm_90",
            source.file
        );
        for entry in source.entries {
            assert!(
                ptx.contains(&format!(".entry {entry}(")),
                "{} for compute_90: no kernel {entry}",
                source.file
            );
        }
    }
}

/// What a GPU gets: a cubin for exactly its architecture where NVRTC has
/// it, PTX for NVRTC's newest below it where the GPU is newer than NVRTC
/// (the driver compiles that), nothing below NVRTC's oldest; and the
/// NVRTC loaded here has Ampere and Hopper.
#[test]
fn each_gpu_gets_a_cubin_for_its_own_architecture() {
    let nvrtc = [75, 80, 86, 87, 89, 90];
    assert_eq!(target_for((9, 0), &nvrtc).as_deref(), Some("sm_90"));
    assert_eq!(target_for((8, 6), &nvrtc).as_deref(), Some("sm_86"));
    assert_eq!(target_for((10, 0), &nvrtc).as_deref(), Some("compute_90"));
    assert_eq!(target_for((8, 8), &nvrtc).as_deref(), Some("compute_87"));
    assert_eq!(target_for((7, 0), &nvrtc), None);
    if nvrtc_or_skip("each_gpu_gets_a_cubin_for_its_own_architecture") {
        let here = supported_archs();
        assert!(here.contains(&80) && here.contains(&90), "{here:?}");
    }
}

/// The JPEG and resize arithmetic the loader's tests hold to its decode
/// and resize on the host (`loader::exact_jpeg`) compiles for the GPU from
/// the same source: one thread per block for both IDCTs, one per pixel for
/// upsampling, colour conversion and a resize pass, as the `--decode gpu`
/// kernels will call it.
#[test]
fn the_exact_jpeg_and_resize_arithmetic_compiles_with_nvrtc() {
    if !nvrtc_or_skip("the_exact_jpeg_and_resize_arithmetic_compiles_with_nvrtc") {
        return;
    }
    let kernels = r#"
extern "C" __global__ void exact_jpeg_idct(const ej_i16 *coef, const ej_u16 *quantval,
                                           ej_u8 *samples, ej_u32 blocks_wide,
                                           ej_u32 blocks, int simd) {
  ej_u32 b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  ej_i16 multipliers[64];
  for (int i = 0; i < 64; i++) multipliers[i] = ej_islow_multiplier(quantval[i]);
  ej_u32 stride = blocks_wide * 8;
  ej_u8 *out = samples + (b / blocks_wide) * 8 * stride + (b % blocks_wide) * 8;
  if (simd) ej_idct_islow_simd(coef + b * 64, multipliers, out, stride);
  else ej_idct_islow(coef + b * 64, multipliers, out, stride);
}
extern "C" __global__ void exact_jpeg_rgb(const ej_component *components, int color,
                                          ej_u32 width, ej_u32 height, ej_u8 *rgb) {
  ej_u32 x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x >= width || y >= height) return;
  ej_output_pixel(components, color, x, y, rgb + ((ej_u64)y * width + x) * 3);
}
extern "C" __global__ void exact_resample_pass(const ej_u8 *src, ej_u64 pixel_stride,
                                               ej_u64 tap_stride, const ej_u32 *bounds,
                                               const ej_i32 *weights, ej_u32 ksize,
                                               ej_u32 outputs, ej_u8 *dst) {
  ej_u32 i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= outputs) return;
  ej_resample_rgb(src + bounds[2 * i] * pixel_stride, tap_stride, weights + (ej_u64)i * ksize,
                  bounds[2 * i + 1], dst + (ej_u64)i * 3);
}
"#;
    let source = KernelSource {
        file: "exact_jpeg.cu",
        source: format!(
            "{}{}{kernels}",
            loader::exact_jpeg::EXACT_JPEG_H,
            loader::exact_jpeg::resize::EXACT_RESAMPLE_H
        )
        .leak(),
        entries: &["exact_jpeg_idct", "exact_jpeg_rgb", "exact_resample_pass"],
    };
    for arch in ["sm_80", "sm_90", "compute_90"] {
        let compiled = compile(&source, arch).unwrap_or_else(|e| panic!("{e}"));
        for entry in source.entries {
            assert!(
                compiled
                    .bytes()
                    .windows(entry.len())
                    .any(|w| w == entry.as_bytes()),
                "{arch}: no kernel {entry}"
            );
        }
    }
}

#[test]
fn a_kernel_that_does_not_compile_is_a_one_line_error_naming_it() {
    if !nvrtc_or_skip("a_kernel_that_does_not_compile_is_a_one_line_error_naming_it") {
        return;
    }
    let broken = KernelSource {
        file: "broken.cu",
        source: "extern \"C\" __global__ void k(float* x) { x[0] = not_declared_here; }\n",
        entries: &["k"],
    };
    let error = compile(&broken, "compute_90").expect_err("it does not compile");
    assert!(
        error.starts_with("broken.cu does not compile for compute_90"),
        "{error}"
    );
    assert!(error.contains("not_declared_here"), "{error}");
    assert!(!error.contains('\n'), "{error}");
}

/// The kernel cache: a first start compiles and stores each source's
/// cubin, a later one reads it back instead of compiling; a cached file
/// that is not what the architecture needs is compiled again and replaced;
/// PTX and cubins, and each architecture, have their own files.
#[test]
fn compiled_kernels_are_cached_and_read_back() {
    if !nvrtc_or_skip("compiled_kernels_are_cached_and_read_back") {
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let source = &SOURCES[0];
    let fresh = compile_cached_in(Some(dir.path()), source, "sm_90").expect("compiles");
    assert_eq!(fresh, compile(source, "sm_90").expect("compiles"));
    let path = cache_path(dir.path(), source, "sm_90");
    assert!(path.to_string_lossy().ends_with(".cubin"), "{path:?}");
    assert_eq!(std::fs::read(&path).expect("cached"), fresh.bytes());
    // Another architecture, or PTX, another file.
    assert_ne!(path, cache_path(dir.path(), source, "sm_80"));
    assert_ne!(path, cache_path(dir.path(), source, "compute_90"));
    // A later start reads the file.
    let mut marked = fresh.bytes().to_vec();
    marked.extend_from_slice(b"read from the cache");
    std::fs::write(&path, &marked).expect("write");
    let again = compile_cached_in(Some(dir.path()), source, "sm_90").expect("cached");
    assert_eq!(again, Compiled::Cubin(marked));
    // A file that is not a cubin is compiled over.
    std::fs::write(&path, "garbage").expect("write");
    let repaired = compile_cached_in(Some(dir.path()), source, "sm_90").expect("compiles");
    assert_eq!(repaired, fresh);
    assert_eq!(std::fs::read(&path).expect("cached"), fresh.bytes());
    // PTX is cached too, and PTX for another architecture is compiled over.
    let ptx = compile_cached_in(Some(dir.path()), source, "compute_90").expect("compiles");
    let ptx_path = cache_path(dir.path(), source, "compute_90");
    assert_eq!(std::fs::read(&ptx_path).expect("cached"), ptx.bytes());
    let Compiled::Ptx(text) = &ptx else {
        panic!("compute_90 gave a cubin");
    };
    std::fs::write(&ptx_path, text.replace(".target sm_90", ".target sm_80")).expect("write");
    let repaired = compile_cached_in(Some(dir.path()), source, "compute_90").expect("compiles");
    assert_eq!(repaired, ptx);
}

/// NVIDIA's wheels as pip lays them out in a virtual environment: CUDA
/// 13's `nvidia/cu13/lib`, cuDNN's `nvidia/cudnn/lib`, CUDA 12's
/// `nvidia/cublas/lib`; a package without `lib` and a stray file are not
/// searched.
#[test]
fn nvidia_wheels_are_searched_where_pip_puts_them() {
    let prefix = tempfile::tempdir().expect("a temp dir");
    let site = prefix.path().join("lib/python3.12/site-packages/nvidia");
    for dir in [
        "cu13/lib",
        "cudnn/lib",
        "cublas/lib",
        "cu13/include",
        "no_lib",
    ] {
        std::fs::create_dir_all(site.join(dir)).expect("mkdir");
    }
    std::fs::write(site.join("__init__.py"), "").expect("write");
    let dirs = pip_lib_dirs(&[prefix.path().to_path_buf()]);
    let want: Vec<PathBuf> = vec![
        prefix.path().join("lib"),
        site.join("cu13/lib"),
        site.join("cublas/lib"),
        site.join("cudnn/lib"),
    ];
    assert_eq!(dirs, want);
}

/// The environment of a `python3` on `PATH` is searched though it is not
/// activated (PyTorch's images put `/opt/torch/.venv/bin` on `PATH`): each
/// `bin` folder holding a `python3` gives the folder above it, once, in
/// `PATH` order; folders without one give nothing.
#[test]
fn the_environment_of_each_python3_on_path_is_searched() {
    let root = tempfile::tempdir().expect("a temp dir");
    let venv = root.path().join("opt/torch/.venv");
    let system = root.path().join("usr");
    let empty = root.path().join("empty/bin");
    for dir in [venv.join("bin"), system.join("bin"), empty.clone()] {
        std::fs::create_dir_all(&dir).expect("mkdir");
    }
    std::fs::write(venv.join("bin/python3"), "").expect("write");
    std::fs::write(system.join("bin/python3"), "").expect("write");
    let path = std::env::join_paths([
        empty,
        venv.join("bin"),
        system.join("bin"),
        venv.join("bin"),
    ])
    .expect("a PATH");
    assert_eq!(path_prefixes(&path), vec![venv, system]);
}

/// CUDA 13's libraries first, except under a CUDA 12 driver, which cannot
/// run them: there CUDA 12's NVRTC and cuBLAS come first; cuDNN 9 and the
/// driver go by one name either way.
#[test]
fn a_cuda_12_driver_takes_cuda_12s_libraries_first() {
    for lib in [CudaLib::Nvrtc, CudaLib::CublasLt, CudaLib::Cublas] {
        let newest = sonames_for(lib, Some(13000));
        assert!(newest[0].ends_with(".13"), "{newest:?}");
        assert_eq!(sonames_for(lib, None), newest);
        let older = sonames_for(lib, Some(12080));
        assert!(
            older[0].ends_with(".12") && older[1].ends_with(".13"),
            "{older:?}"
        );
    }
    assert_eq!(sonames_for(CudaLib::Cudnn, Some(12080)), ["libcudnn.so.9"]);
    assert_eq!(
        sonames_for(CudaLib::Driver, Some(12080)),
        CudaLib::Driver.sonames()
    );
}

/// cuDNN's sub-libraries beside its `libcudnn.so.9` are loaded from there,
/// each after those it needs (graph, ops, cnn, adv); what is not one of them
/// (cuDNN 8's, the unversioned link, another library) is not.
#[test]
fn cudnns_sub_libraries_are_taken_from_its_own_folder_in_dependency_order() {
    let dir = tempfile::tempdir().expect("a temp dir");
    for name in [
        "libcudnn.so.9",
        "libcudnn_adv.so.9",
        "libcudnn_cnn.so.9",
        "libcudnn_ops.so.9",
        "libcudnn_graph.so.9",
        "libcudnn_engines_precompiled.so.9",
        "libcudnn_cnn.so.8",
        "libcudnn_adv.so",
        "libcublas.so.13",
    ] {
        std::fs::write(dir.path().join(name), "").expect("write");
    }
    let names: Vec<String> = cudnn_part_files(dir.path())
        .iter()
        .map(|p| {
            p.file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        names,
        [
            "libcudnn_graph.so.9",
            "libcudnn_ops.so.9",
            "libcudnn_cnn.so.9",
            "libcudnn_adv.so.9",
            "libcudnn_engines_precompiled.so.9"
        ]
    );
}

/// The libraries in a folder given by `PIPELINE_CUDA_LIB_PATH` load from
/// there; each one missing is named with its fix, on one line.
#[test]
fn libraries_load_from_a_given_folder_and_the_missing_are_named_with_their_fix() {
    let libs = cuda_libraries();
    if let Some(Found::File(path)) = libs.found(CudaLib::Nvrtc) {
        // Loaded again from its folder alone, it is found there first.
        let folder = path.parent().expect("a folder").to_path_buf();
        let again = load(std::slice::from_ref(&folder), &[]);
        assert!(
            matches!(again.found(CudaLib::Nvrtc), Some(Found::File(p)) if p.starts_with(&folder)),
            "{:?}",
            again.found(CudaLib::Nvrtc)
        );
    } else {
        nvrtc_or_skip(
            "libraries_load_from_a_given_folder_and_the_missing_are_named_with_their_fix",
        );
    }
    let empty = tempfile::tempdir().expect("a temp dir");
    let bare = load(&[empty.path().to_path_buf()], &[]);
    assert_eq!(bare.libs.len(), ALL.len());
    match bare.missing_line() {
        None => assert!(bare.missing().is_empty()),
        Some(line) => {
            assert!(!line.contains('\n'), "{line}");
            for lib in bare.missing() {
                assert!(
                    line.contains(lib.name()) && line.contains(lib.fix()),
                    "{line}"
                );
            }
            assert!(line.contains("PIPELINE_CUDA_LIB_PATH"), "{line}");
        }
    }
}

/// #40: the engine's calls go to the very file the search found, even
/// where another copy of the library, by the same name, is loaded or on
/// the system's search path (cudarc's own load by bare names took a
/// system cuDNN over the wheel's that was found, on the first GPU
/// machine). Here: NVRTC's wheel is loaded (by `cuda_libraries`), and a
/// byte copy of it in another folder is found; its functions come from
/// the copy.
#[test]
#[allow(unsafe_code)]
fn calls_go_to_the_very_file_found_not_another_copy_by_its_name() {
    let test = "calls_go_to_the_very_file_found_not_another_copy_by_its_name";
    if !nvrtc_or_skip(test) {
        return;
    }
    let Some(Found::File(wheel)) = cuda_libraries().found(CudaLib::Nvrtc) else {
        eprintln!("{test}: skipped, NVRTC came from the system's search path");
        return;
    };
    let copy_dir = tempfile::tempdir().expect("a temp dir");
    let copy = copy_dir
        .path()
        .join(wheel.file_name().expect("a file name"));
    std::fs::copy(wheel, &copy).expect("a copy of NVRTC");
    let copied = load(&[copy_dir.path().to_path_buf()], &[]);
    assert_eq!(
        copied.found(CudaLib::Nvrtc),
        Some(&Found::File(copy.clone()))
    );
    type Version = unsafe extern "C" fn(*mut std::ffi::c_int, *mut std::ffi::c_int) -> i32;
    let bound = |libs: &engine_cuda::libs::CudaLibraries| {
        // SAFETY: nvrtcVersion(int*, int*) -> nvrtcResult (an int).
        unsafe { libs.function::<Version>(CudaLib::Nvrtc, "nvrtcVersion") }.expect("nvrtcVersion")
    };
    let (from_copy, from_wheel) = (bound(&copied), bound(cuda_libraries()));
    let canonical = |p: &std::path::Path| std::fs::canonicalize(p).expect("a real path");
    assert_eq!(
        mapped_file(from_copy as usize).map(|p| canonical(&p)),
        Some(canonical(&copy)),
        "bound from another file than the one found"
    );
    assert_eq!(
        mapped_file(from_wheel as usize).map(|p| canonical(&p)),
        Some(canonical(wheel))
    );
    // And it runs: NVRTC says its version.
    let (mut major, mut minor) = (0, 0);
    // SAFETY: as typed above; the copy stays loaded while `copied` lives.
    assert_eq!(unsafe { from_copy(&mut major, &mut minor) }, 0);
    assert!(major >= 12, "NVRTC {major}.{minor}");
}
