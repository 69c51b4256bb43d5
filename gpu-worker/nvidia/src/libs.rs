//! NVIDIA's libraries, found and loaded at run time.
//!
//! The CUDA engine needs the driver (`libcuda`), cuBLAS and cuBLASLt,
//! cuDNN and NVRTC. None is linked: the tool builds with no CUDA and runs
//! on machines without it. Each is looked for, in order:
//! 1. in the folders of `PIPELINE_CUDA_LIB_PATH` (`:`-separated), the path
//!    a user gives;
//! 2. by its name, as the system's loader finds it (`LD_LIBRARY_PATH`, the
//!    `ld.so` cache: the driver's and Debian's or NVIDIA's packages);
//! 3. in the `nvidia/…/lib` folders of pip-installed wheels
//!    (`nvidia-cublas`, `nvidia-cudnn-cu13`, `nvidia-cuda-nvrtc`, … as
//!    PyTorch installs them) in the Python installations `python_env.rs`
//!    lists (the active environment, each `python3` on `PATH`'s, the
//!    user's, the system's; then what the `python3` on `PATH` reports).
//!
//! A library found is loaded from there and kept loaded, and the engine
//! calls NVRTC, cuBLASLt and cuDNN through that very handle (`bind.rs`):
//! cudarc's own load goes by bare names, `libcudnn.so` first, which the
//! system's loader may resolve to another copy than the one found (#40:
//! on the first GPU machine, a system cuDNN 9.14 beside the wheel's 9.19,
//! whose sub-libraries were already loaded, so every cuDNN call failed
//! with `SUBLIBRARY_VERSION_MISMATCH`). Only the driver goes through
//! cudarc's load: there is one driver per machine. What is missing is
//! said with its fix, in one line.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One of the libraries the CUDA engine loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaLib {
    /// The NVIDIA driver's CUDA library.
    Driver,
    /// NVRTC: CUDA C++ to PTX at run time.
    Nvrtc,
    /// cuBLASLt (GEMMs with epilogues).
    CublasLt,
    /// cuBLAS.
    Cublas,
    /// cuDNN (convolutions, fused attention).
    Cudnn,
}

/// Every library, in the order they load (cuBLAS needs cuBLASLt).
pub const ALL: [CudaLib; 5] = [
    CudaLib::Driver,
    CudaLib::Nvrtc,
    CudaLib::CublasLt,
    CudaLib::Cublas,
    CudaLib::Cudnn,
];

impl CudaLib {
    /// Its short name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Driver => "libcuda",
            Self::Nvrtc => "NVRTC",
            Self::CublasLt => "cuBLASLt",
            Self::Cublas => "cuBLAS",
            Self::Cudnn => "cuDNN",
        }
    }

    /// The file names it goes by, newest CUDA first.
    pub fn sonames(self) -> &'static [&'static str] {
        match self {
            Self::Driver => &["libcuda.so.1", "libcuda.so"],
            Self::Nvrtc => &["libnvrtc.so.13", "libnvrtc.so.12"],
            Self::CublasLt => &["libcublasLt.so.13", "libcublasLt.so.12"],
            Self::Cublas => &["libcublas.so.13", "libcublas.so.12"],
            Self::Cudnn => &["libcudnn.so.9"],
        }
    }

    /// How a user gets it.
    pub fn fix(self) -> &'static str {
        match self {
            Self::Driver => {
                "install NVIDIA's driver (Debian's nvidia-driver, which brings libcuda.so.1)"
            }
            Self::Nvrtc => {
                "pip install nvidia-cuda-nvrtc (CUDA 13) or nvidia-cuda-nvrtc-cu12, or \
                 Debian's libnvrtc12"
            }
            Self::CublasLt | Self::Cublas => {
                "pip install nvidia-cublas (CUDA 13) or nvidia-cublas-cu12, or Debian's \
                 libcublas12"
            }
            Self::Cudnn => "pip install nvidia-cudnn-cu13 (or nvidia-cudnn-cu12)",
        }
    }
}

/// Where a library was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Loaded from this file.
    File(PathBuf),
    /// Loaded by this name, wherever the system's loader found it.
    System(&'static str),
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::System(name) => write!(f, "{name} (system search path)"),
        }
    }
}

/// What the search found for every library.
#[derive(Debug)]
pub struct CudaLibraries {
    /// Each library and where it loaded from, or `None` if it did not.
    pub libs: Vec<(CudaLib, Option<Found>)>,
    /// Each library's own handle, kept loaded for the process's life.
    handles: Vec<(CudaLib, libloading::Library)>,
    /// cuDNN's sub-libraries, kept loaded for the process's life.
    _parts: Vec<libloading::Library>,
}

impl CudaLibraries {
    /// Where `lib` loaded from, if it did.
    pub fn found(&self, lib: CudaLib) -> Option<&Found> {
        self.libs
            .iter()
            .find(|(l, _)| *l == lib)
            .and_then(|(_, f)| f.as_ref())
    }

    /// `lib`'s function `name`, from the very file this search loaded.
    ///
    /// # Safety
    /// `F` must be the function's C type as the library declares it, and
    /// `self` must outlive every call through it ([`cuda_libraries`]'s
    /// does: it lives in a static).
    #[allow(unsafe_code)]
    pub unsafe fn function<F: Copy>(&self, lib: CudaLib, name: &str) -> Result<F, String> {
        let (_, handle) = self
            .handles
            .iter()
            .find(|(l, _)| *l == lib)
            .ok_or_else(|| match self.missing_line() {
                Some(line) => line,
                None => format!("{} is not loaded", lib.name()),
            })?;
        // SAFETY: the caller gives the function's C type and keeps `self`
        // (so the handle) alive while it calls it.
        let symbol = unsafe { handle.get::<F>(name.as_bytes()) }.map_err(|e| {
            let from = self.found(lib).map(ToString::to_string).unwrap_or_default();
            format!("{} at {from} lacks {name}: {e}", lib.name())
        })?;
        Ok(*symbol)
    }

    /// The libraries that did not load.
    pub fn missing(&self) -> Vec<CudaLib> {
        self.libs
            .iter()
            .filter(|(_, f)| f.is_none())
            .map(|(l, _)| *l)
            .collect()
    }

    /// Why the CUDA engine cannot start, in one line: each missing
    /// library with its fix; `None` when all loaded.
    pub fn missing_line(&self) -> Option<String> {
        let missing = self.missing();
        if missing.is_empty() {
            return None;
        }
        let each: Vec<String> = missing
            .iter()
            .map(|l| format!("{}: {}", l.name(), l.fix()))
            .collect();
        Some(format!(
            "the CUDA engine needs {}; or give their folder in PIPELINE_CUDA_LIB_PATH",
            each.join("; ")
        ))
    }
}

/// Whether NVIDIA's driver library loads by its name (where the driver
/// installs it), kept loaded; without searching for, or loading, the other
/// libraries: enough for the driver's device queries.
pub fn driver_loads() -> bool {
    static DRIVER: OnceLock<Option<libloading::Library>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            CudaLib::Driver
                .sonames()
                .iter()
                .find_map(|name| dl::open(*name))
        })
        .is_some()
}

/// The libraries, searched for and loaded once per process.
pub fn cuda_libraries() -> &'static CudaLibraries {
    static LIBS: OnceLock<CudaLibraries> = OnceLock::new();
    LIBS.get_or_init(|| {
        let given = std::env::var_os("PIPELINE_CUDA_LIB_PATH")
            .map(|v| std::env::split_paths(&v).collect::<Vec<_>>())
            .unwrap_or_default();
        let mut pip = pip_lib_dirs(&engine_seam::python_env::python_prefixes());
        for dir in nvidia_wheel_dirs(engine_seam::python_env::interpreter_site_packages()) {
            if !pip.contains(&dir) {
                pip.push(dir);
            }
        }
        load(&given, &pip)
    })
}

/// Searches `given` folders, then the system's loader, then `pip` folders,
/// for every library, loading what it finds.
pub fn load(given: &[PathBuf], pip: &[PathBuf]) -> CudaLibraries {
    let mut libs = Vec::new();
    let mut handles: Vec<(CudaLib, libloading::Library)> = Vec::new();
    let mut parts = Vec::new();
    let mut driver_version = None;
    for lib in ALL {
        let mut found = None;
        'search: for soname in sonames_for(lib, driver_version) {
            for dir in given {
                if let Some(handle) = open_file(&dir.join(soname)) {
                    handles.push((lib, handle));
                    found = Some(Found::File(dir.join(soname)));
                    break 'search;
                }
            }
            if let Some(handle) = dl::open(soname) {
                handles.push((lib, handle));
                found = Some(Found::System(soname));
                break 'search;
            }
            for dir in pip {
                if let Some(handle) = open_file(&dir.join(soname)) {
                    handles.push((lib, handle));
                    found = Some(Found::File(dir.join(soname)));
                    break 'search;
                }
            }
        }
        if lib == CudaLib::Driver && found.is_some() {
            driver_version = handles.last().and_then(|(_, h)| dl::driver_version(h));
        }
        if lib == CudaLib::Cudnn
            && let Some(Found::File(path)) = &found
            && let Some(dir) = path.parent()
        {
            parts.extend(cudnn_parts(dir));
        }
        libs.push((lib, found));
    }
    CudaLibraries {
        libs,
        handles,
        _parts: parts,
    }
}

/// `lib`'s names in the order to try them under a driver of CUDA version
/// `driver` (e.g. 12080): CUDA 13's first, except under a CUDA 12 driver,
/// which cannot run CUDA 13's libraries (nor cubins from its NVRTC), where
/// CUDA 12's come first.
pub fn sonames_for(lib: CudaLib, driver: Option<i32>) -> Vec<&'static str> {
    let mut names = lib.sonames().to_vec();
    if driver.is_some_and(|v| v < 13000) {
        names.sort_by_key(|n| n.ends_with(".13"));
    }
    names
}

/// cuDNN 9's sub-libraries (`libcudnn_graph`, `_ops`, `_cnn`, `_adv`, each
/// after what it needs, then every other `libcudnn_*.so.9`) beside the `libcudnn.so.9` loaded from `dir`: cuDNN
/// opens them by name when it first needs them, and the system's loader
/// would take whatever copy its search finds first (another wheel's, an
/// older system package's); loaded from here now, its later opens find
/// these by their soname. One that does not load is left to cuDNN.
fn cudnn_parts(dir: &Path) -> Vec<libloading::Library> {
    cudnn_part_files(dir)
        .iter()
        .filter_map(|p| open_file(p))
        .collect()
}

/// The files [`cudnn_parts`] loads from `dir`, in the order it loads them.
pub fn cudnn_part_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut parts: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libcudnn_") && n.ends_with(".so.9"))
        })
        .collect();
    // Each after what it needs: graph, ops, cnn, adv, then the engines
    // and heuristics.
    let rank = |p: &PathBuf| {
        ["graph", "ops", "cnn", "adv"]
            .iter()
            .position(|part| p.ends_with(format!("libcudnn_{part}.so.9")))
            .unwrap_or(4)
    };
    parts.sort_by_key(|p| (rank(p), p.clone()));
    parts
}

fn open_file(path: &Path) -> Option<libloading::Library> {
    if !path.is_file() {
        return None;
    }
    dl::open(path)
}

/// The `unsafe` here: loading a shared library runs its initialisers, and
/// the driver's version is asked of the loaded driver.
#[allow(unsafe_code)]
mod dl {
    /// The CUDA version of the driver `lib` is (`cuDriverGetVersion`,
    /// which needs no `cuInit`), e.g. 12080.
    pub(super) fn driver_version(lib: &libloading::Library) -> Option<i32> {
        let mut version: std::ffi::c_int = 0;
        // SAFETY: the driver's `cuDriverGetVersion(int*)` writes one int
        // and returns 0 on success.
        unsafe {
            let get: libloading::Symbol<
                '_,
                unsafe extern "C" fn(*mut std::ffi::c_int) -> std::ffi::c_int,
            > = lib.get(b"cuDriverGetVersion").ok()?;
            (get(&mut version) == 0).then_some(version)
        }
    }

    /// `dlopen` of a name (the system's search) or a path.
    pub(super) fn open(name: impl libloading::AsFilename) -> Option<libloading::Library> {
        // SAFETY: the libraries loaded are NVIDIA's, whose initialisers are
        // made to run on `dlopen` in any process (PyTorch loads them so);
        // nothing of theirs is called here.
        unsafe { libloading::Library::new(name) }.ok()
    }
}

/// The file whose mapping holds address `addr` in this process, from
/// `/proc/self/maps` (Linux): which copy of a library a function pointer
/// runs from.
pub fn mapped_file(addr: usize) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        // start-end perms offset dev inode path (the path may hold spaces)
        let mut fields = line.splitn(6, ' ');
        let (start, end) = fields.next()?.split_once('-')?;
        let (start, end) = (
            usize::from_str_radix(start, 16).ok()?,
            usize::from_str_radix(end, 16).ok()?,
        );
        let path = fields.nth(4)?.trim_start();
        (start <= addr && addr < end && path.starts_with('/')).then(|| PathBuf::from(path))
    })
}

/// The `lib` folders of NVIDIA's wheels under `prefixes`:
/// `lib/python3*/{site,dist}-packages/nvidia/*/lib` and, for CUDA 13's
/// wheels, `nvidia/cu13/lib`; and a conda prefix's own `lib`.
pub fn pip_lib_dirs(prefixes: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for prefix in prefixes {
        dirs.push(prefix.join("lib"));
        let packages = engine_seam::python_env::site_packages(std::slice::from_ref(prefix));
        dirs.extend(nvidia_wheel_dirs(&packages));
    }
    dirs
}

/// The `nvidia/*/lib` folders of NVIDIA's wheels in each of
/// `site_packages`, sorted within one.
fn nvidia_wheel_dirs(site_packages: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for packages in site_packages {
        let Ok(wheels) = std::fs::read_dir(packages.join("nvidia")) else {
            continue;
        };
        let mut wheels: Vec<PathBuf> = wheels
            .filter_map(Result::ok)
            .map(|e| e.path().join("lib"))
            .filter(|lib| lib.is_dir())
            .collect();
        wheels.sort();
        dirs.extend(wheels);
    }
    dirs
}
