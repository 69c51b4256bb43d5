//! Python installations, where pip puts the native libraries that engines
//! load at run time: NVIDIA's wheels for the CUDA engine
//! (`cuda/libs.rs`), ONNX Runtime's for the ONNX engine (`onnx/`). Each is
//! looked for in the active virtual environment and conda prefix, the
//! environment of each `python3` on `PATH` (a virtual environment that is
//! not activated but whose `bin` is on `PATH`, as PyTorch's images set it
//! up), the user's, and the system's; then where the `python3` on `PATH`
//! says its own packages are (through a pyenv shim, say, whose folder is
//! not its environment's).

use std::path::PathBuf;
use std::sync::OnceLock;

/// The prefixes, in the order above.
pub fn python_prefixes() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        prefixes.extend(path_prefixes(&path));
    }
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(PathBuf::from(home).join(".local"));
    }
    prefixes.push(PathBuf::from("/usr/local"));
    prefixes.push(PathBuf::from("/usr"));
    prefixes
}

/// The prefix (the folder above `bin`) of each `python3` in the folders
/// of `path`, in `PATH` order, each once. The link a virtual environment's
/// `python3` is is not followed: its prefix is the environment's.
pub fn path_prefixes(path: &std::ffi::OsStr) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for dir in std::env::split_paths(path) {
        if let Some(prefix) = dir.parent()
            && dir.join("python3").exists()
            && !prefixes.iter().any(|p| p == prefix)
        {
            prefixes.push(prefix.to_owned());
        }
    }
    prefixes
}

/// Each prefix's `lib/python3*/site-packages` and `dist-packages` that
/// exist, in prefix order, Python versions sorted.
pub fn site_packages(prefixes: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for prefix in prefixes {
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("python3"))
            })
            .collect();
        pythons.sort();
        for python in pythons {
            for packages in ["site-packages", "dist-packages"] {
                let dir = python.join(packages);
                if dir.is_dir() {
                    dirs.push(dir);
                }
            }
        }
    }
    dirs
}

/// The `site-packages` folders the `python3` on `PATH` reports (its
/// environment's and the user's), asked once per process; empty where
/// there is no `python3` or it says nothing useful.
pub fn interpreter_site_packages() -> &'static [PathBuf] {
    static DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    DIRS.get_or_init(|| {
        let script = "import site\n\
                      dirs = site.getsitepackages() if hasattr(site, 'getsitepackages') else []\n\
                      print('\\n'.join(dirs + [site.getusersitepackages()]))";
        let Ok(out) = std::process::Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
        else {
            return Vec::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p.is_dir())
            .collect()
    })
}

/// Every `site-packages` to search, in order, each once: those of
/// [`python_prefixes`], then [`interpreter_site_packages`].
pub fn all_site_packages() -> Vec<PathBuf> {
    let mut dirs = site_packages(&python_prefixes());
    for dir in interpreter_site_packages() {
        if !dirs.contains(dir) {
            dirs.push(dir.clone());
        }
    }
    dirs
}
