//! ONNX Runtime, found and loaded at run time through the `ort` crate's
//! `load-dynamic` (nothing downloaded or linked at build time; one binary
//! for every machine), as the CUDA engine loads NVIDIA's libraries. Looked
//! for, in order:
//! 1. `ORT_DYLIB_PATH`, the file a user names (a file that does not load
//!    is the error: nothing else is tried behind a user's back);
//! 2. by name, as the system's loader finds `libonnxruntime.so`
//!    (`LD_LIBRARY_PATH`, the `ld.so` cache: a distribution's package);
//! 3. pip's `onnxruntime` (or `onnxruntime-gpu`) wheel, whose
//!    `onnxruntime/capi/` holds `libonnxruntime.so.<version>`, in the
//!    Python installations `python_env.rs` lists (the `python3` on `PATH`
//!    asked last, and only when nothing before it loads).
//!
//! A runtime older than the API version `ort` needs is refused with the
//! fix, as a missing one is: one line each.
//!
//! The coordinator searches; each worker loads the library the coordinator
//! loaded (`WorkerConfig::onnx_runtime`, [`use_library`]) without
//! searching again: the search can ask a `python3`, which through a pyenv
//! shim takes half a second.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use engine_seam::python_env;

/// The oldest ONNX Runtime the tool runs with: `ort`'s API version.
pub const MIN_MINOR: u32 = ort::MINOR_VERSION;

/// How a user gets ONNX Runtime.
pub const FIX: &str = "pip install onnxruntime (or onnxruntime-gpu for NVIDIA GPUs), or set \
                       ORT_DYLIB_PATH to its libonnxruntime.so";

/// What a library that does not load is said to do.
const NOT_LOADED: &str = "does not load";

/// ONNX Runtime, loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnnxRuntime {
    /// Where it loaded from: a file, or the name the system's loader found.
    pub library: String,
    /// e.g. `1.32.0`.
    pub version: String,
    /// Its execution providers, e.g. `CPUExecutionProvider`.
    pub providers: Vec<String>,
}

/// The process's ONNX Runtime: searched for, or the library a worker was
/// given.
static RUNTIME: OnceLock<Result<OnnxRuntime, String>> = OnceLock::new();

/// ONNX Runtime, searched for and loaded once per process (unless
/// [`use_library`] came first); or why not, in one line with the fix.
pub fn onnx_runtime() -> &'static Result<OnnxRuntime, String> {
    RUNTIME.get_or_init(|| {
        let given = std::env::var_os("ORT_DYLIB_PATH")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        if let Some(path) = given {
            return load(&path).map_err(|e| format!("ORT_DYLIB_PATH: {e}"));
        }
        let near = python_env::site_packages(&python_env::python_prefixes());
        let mut last = None;
        if let Some(runtime) = first_loading(candidates(&near), &mut last) {
            return Ok(runtime);
        }
        // The python3 on PATH is asked only when nothing nearer loads:
        // starting it is the slow part of the search (half a second through
        // a pyenv shim).
        let asked: Vec<PathBuf> = python_env::interpreter_site_packages()
            .iter()
            .filter(|dir| !near.contains(dir))
            .cloned()
            .collect();
        if let Some(runtime) = first_loading(wheel_candidates(&asked), &mut last) {
            return Ok(runtime);
        }
        Err(match last {
            Some(e) => format!("{e}; {FIX}"),
            None => format!("ONNX Runtime is not installed: {FIX}"),
        })
    })
}

/// Makes the library at `library` (a file, or a name for the system's
/// loader: [`OnnxRuntime::library`] as the coordinator found it) the
/// process's ONNX Runtime, with no search; or why it does not load, in one
/// line. Where the process's runtime was already loaded, that one stays.
pub fn use_library(library: &str) -> &'static Result<OnnxRuntime, String> {
    RUNTIME.get_or_init(|| {
        load(Path::new(library)).map_err(|e| format!("the coordinator's ONNX Runtime: {e}"))
    })
}

/// The first of `candidates` that loads; what was wrong with the others
/// worth saying in `last`.
fn first_loading(
    candidates: impl IntoIterator<Item = PathBuf>,
    last: &mut Option<String>,
) -> Option<OnnxRuntime> {
    for candidate in candidates {
        match load(&candidate) {
            Ok(runtime) => return Some(runtime),
            // Not found by name is the common case, not worth saying; one
            // found there that is too old, or not ONNX Runtime, is.
            Err(e) if !candidate.is_absolute() && e.contains(NOT_LOADED) => {}
            Err(e) => *last = Some(e),
        }
    }
    None
}

/// Where to look, in order: the system's loader by name, then
/// [`wheel_candidates`].
pub fn candidates(site_packages: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("libonnxruntime.so")];
    found.extend(wheel_candidates(site_packages));
    found
}

/// Each `site-packages`' `onnxruntime/capi/libonnxruntime.so*`, in order
/// (the highest version first within one).
pub fn wheel_candidates(site_packages: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for packages in site_packages {
        let capi = packages.join("onnxruntime/capi");
        let Ok(entries) = std::fs::read_dir(&capi) else {
            continue;
        };
        let mut libs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libonnxruntime.so"))
            })
            .collect();
        libs.sort_by_key(|p| std::cmp::Reverse(version_of(p)));
        found.extend(libs);
    }
    found
}

/// `libonnxruntime.so.1.32.0` → `[1, 32, 0]` (empty without a version).
fn version_of(path: &Path) -> Vec<u32> {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("libonnxruntime.so"))
        .map(|v| v.split('.').filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// ONNX Runtime from `path` (a file, or a bare name for the system's
/// loader), its version and execution providers; or why not, in one line.
fn load(path: &Path) -> Result<OnnxRuntime, String> {
    let shown = path.display();
    let (version, library) = dl::version(path).map_err(|e| format!("{shown}: {e}"))?;
    let minor = version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok());
    if minor.is_none_or(|m| m < MIN_MINOR) {
        // Unloaded again (dropped): only the runtime that is used stays.
        drop(library);
        return Err(format!(
            "ONNX Runtime {version} at {shown} is older than 1.{MIN_MINOR}, which the tool \
             needs: pip install -U onnxruntime"
        ));
    }
    // Kept loaded for the process's life: `ort` opens the same file next.
    std::mem::forget(library);
    // Loads the library for `ort` (its environment is made with the first
    // session, by the engine).
    let environment = ort::init_from(path).map_err(|e| format!("{shown}: {e}"))?;
    drop(environment);
    Ok(OnnxRuntime {
        library: shown.to_string(),
        version,
        providers: dl::providers(),
    })
}

/// The library's own calls, the one `unsafe` here.
#[allow(unsafe_code)]
mod dl {
    use std::ffi::{CStr, c_char, c_int};
    use std::path::Path;

    use ort::sys::OrtApiBase;

    /// The version string of the ONNX Runtime at `path`, read through its
    /// `OrtGetApiBase` (the one symbol every version has).
    pub(super) fn version(path: &Path) -> Result<(String, libloading::Library), String> {
        // SAFETY: loading runs the library's initialisers; ONNX Runtime's
        // are made to run on `dlopen` in any process (Python loads it so).
        let lib = unsafe { libloading::Library::new(path.as_os_str()) }
            .map_err(|e| format!("{} ({e})", super::NOT_LOADED))?;
        // SAFETY: `OrtGetApiBase` takes nothing and returns a pointer to a
        // static struct; `GetVersionString` returns a static C string.
        unsafe {
            let get: libloading::Symbol<'_, unsafe extern "C" fn() -> *const OrtApiBase> = lib
                .get(b"OrtGetApiBase")
                .map_err(|_| "is not ONNX Runtime (no OrtGetApiBase)".to_owned())?;
            let base = get();
            if base.is_null() {
                return Err("gave no API".to_owned());
            }
            let version = ((*base).GetVersionString)();
            let version = CStr::from_ptr(version).to_string_lossy().into_owned();
            Ok((version, lib))
        }
    }

    /// The execution providers the loaded runtime has (empty if it does
    /// not say).
    pub(super) fn providers() -> Vec<String> {
        let api = ort::api();
        let mut list: *mut *mut c_char = std::ptr::null_mut();
        let mut count: c_int = 0;
        // SAFETY: ONNX Runtime fills `list` with `count` C strings, read
        // here and released with its own call; a status is released too.
        unsafe {
            let status = (api.GetAvailableProviders)(&mut list, &mut count);
            if !status.0.is_null() {
                (api.ReleaseStatus)(status.0);
                return Vec::new();
            }
            if list.is_null() {
                return Vec::new();
            }
            let names = (0..usize::try_from(count).unwrap_or(0))
                .map(|i| CStr::from_ptr(*list.add(i)).to_string_lossy().into_owned())
                .collect();
            let status = (api.ReleaseAvailableProviders)(list, count);
            if !status.0.is_null() {
                (api.ReleaseStatus)(status.0);
            }
            names
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pip's wheel is found in `onnxruntime/capi/` of each `site-packages`,
    /// the system's loader first; within one folder the highest version
    /// first; other files there are not candidates.
    #[test]
    fn pips_onnxruntime_wheel_is_a_candidate_after_the_system_loader() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (venv, user) = (dir.path().join("venv"), dir.path().join("user"));
        for (packages, files) in [
            (
                &venv,
                &[
                    "libonnxruntime.so.1.9.0",
                    "libonnxruntime.so.1.32.0",
                    "libonnxruntime_providers_shared.so",
                    "onnxruntime_pybind11_state.so",
                ][..],
            ),
            (&user, &["libonnxruntime.so.1.20.1"][..]),
        ] {
            let capi = packages.join("onnxruntime/capi");
            std::fs::create_dir_all(&capi).expect("mkdir");
            for f in files {
                std::fs::write(capi.join(f), "").expect("write");
            }
        }
        let found = candidates(&[venv.clone(), dir.path().join("none"), user.clone()]);
        assert_eq!(
            found,
            vec![
                PathBuf::from("libonnxruntime.so"),
                venv.join("onnxruntime/capi/libonnxruntime.so.1.32.0"),
                venv.join("onnxruntime/capi/libonnxruntime.so.1.9.0"),
                user.join("onnxruntime/capi/libonnxruntime.so.1.20.1"),
            ]
        );
    }

    /// A file that is not ONNX Runtime is one line naming it.
    #[test]
    fn a_file_that_is_not_onnx_runtime_is_one_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bogus = dir.path().join("libonnxruntime.so.1.32.0");
        std::fs::write(&bogus, "not a library").expect("write");
        let e = load(&bogus).expect_err("not a library");
        assert!(e.starts_with(&bogus.display().to_string()), "{e}");
        assert!(e.contains("does not load"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
