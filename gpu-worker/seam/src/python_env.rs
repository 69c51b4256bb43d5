//! Python installations, where pip puts the native libraries that engines
//! load at run time: NVIDIA's wheels for the CUDA engine
//! (`nvidia-devices`' `libs.rs`), ONNX Runtime's for the ONNX engine
//! (`engine-onnx`). Each is
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
        let Some(stdout) = run_briefly("python3", &["-c", script]) else {
            return Vec::new();
        };
        String::from_utf8_lossy(&stdout)
            .lines()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p.is_dir())
            .collect()
    })
}

/// What `program args` prints, if it exits successfully within
/// [`ASK_TIMEOUT`] (a Python that starts slowly, on a network home or
/// with heavy `.pth` files, is killed and not asked again).
fn run_briefly(program: &str, args: &[&str]) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let started = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return None,
            Ok(None) if started.elapsed() > ASK_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
    let mut out = Vec::new();
    child.stdout.take()?.read_to_end(&mut out).ok()?;
    Some(out)
}

/// How long `python3` may take to say where its packages are.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    /// A program that answers is read; one that fails, is missing, or
    /// outlasts the timeout gives nothing (and is not waited for).
    #[test]
    fn asking_a_program_is_bounded_in_time() {
        assert_eq!(
            run_briefly("sh", &["-c", "echo here"]),
            Some(b"here\n".to_vec())
        );
        assert_eq!(run_briefly("sh", &["-c", "exit 3"]), None);
        assert_eq!(run_briefly("no-such-program-here", &[]), None);
        let started = std::time::Instant::now();
        assert_eq!(run_briefly("sleep", &["30"]), None);
        assert!(started.elapsed() < ASK_TIMEOUT + std::time::Duration::from_secs(5));
    }
}
