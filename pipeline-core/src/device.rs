//! Which device a worker runs on, as the command line and the protocol spell it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One compute device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceSpec {
    /// The CPU through burn's `flex` backend.
    Cpu,
    /// The software Vulkan adapter (Mesa lavapipe): the GPU code path on a CPU.
    Software,
    /// A hardware Vulkan GPU by its index among the machine's GPUs.
    Gpu(usize),
}

impl DeviceSpec {
    /// Whether the device computes on the host's own cores (the CPU, and
    /// lavapipe's threads): then its model and the decoders share them.
    pub fn computes_on_host_cores(&self) -> bool {
        matches!(self, Self::Cpu | Self::Software)
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => f.write_str("cpu"),
            Self::Software => f.write_str("software"),
            Self::Gpu(i) => write!(f, "gpu:{i}"),
        }
    }
}

/// A device name that means nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown device `{0}`; expected cpu, software, or a GPU index such as 0 or gpu:0")]
pub struct UnknownDevice(pub String);

impl FromStr for DeviceSpec {
    type Err = UnknownDevice;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "cpu" | "flex" => Ok(Self::Cpu),
            "software" | "lavapipe" | "vulkan-cpu" => Ok(Self::Software),
            _ => t
                .strip_prefix("gpu:")
                .unwrap_or(&t)
                .parse()
                .map(Self::Gpu)
                .map_err(|_| UnknownDevice(s.to_owned())),
        }
    }
}

/// The user's cache folder for pipeline: `$XDG_CACHE_HOME/pipeline`, else
/// `~/.cache/pipeline`; `None` without either variable.
pub fn cache_dir() -> Option<std::path::PathBuf> {
    let env = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    let cache = env("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| env("HOME").map(|h| std::path::Path::new(&h).join(".cache")))?;
    Some(cache.join("pipeline"))
}

/// Where autotune results persist between runs (next to the weights):
/// `$PIPELINE_AUTOTUNE_DIR`, else [`cache_dir`]`/autotune`.
pub fn autotune_dir() -> Option<std::path::PathBuf> {
    match std::env::var_os("PIPELINE_AUTOTUNE_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => Some(dir.into()),
        None => cache_dir().map(|c| c.join("autotune")),
    }
}

/// The allocator setting (mimalloc's, read from the environment when a
/// process starts) for processes that run models: keep freed pages instead
/// of returning them to the kernel after 10 ms. Tensors are freed and
/// allocated again every few milliseconds, and each page handed back came
/// back faulted and zeroed (ResNet-50 at batch 8 on the CPU: 11.1–11.6 img/s
/// with the default, 13.3–14.3 without purging; BENCHMARKS.md). `None` when
/// the user set it.
pub fn allocator_env() -> Option<(&'static str, &'static str)> {
    const NAME: &str = "MIMALLOC_PURGE_DELAY";
    std::env::var_os(NAME).is_none().then_some((NAME, "-1"))
}

/// `XDG_RUNTIME_DIR` for a child process that may load a Vulkan driver,
/// when ours is unset or not absolute: a private folder under the temp
/// folder. Mesa's Wayland support prints "XDG_RUNTIME_DIR is invalid or
/// not set" on every Vulkan start without one (batch jobs, containers);
/// with one it finds no compositor there and says nothing. `None` when
/// ours is fine.
pub fn runtime_dir_for_children() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let ours = std::env::var_os("XDG_RUNTIME_DIR");
    if ours
        .as_ref()
        .is_some_and(|d| std::path::Path::new(d).is_absolute())
    {
        return None;
    }
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    let dir = std::env::temp_dir().join(format!("pipeline-runtime-{uid}"));
    // Already there (an earlier run), or made now; either way absolute,
    // which is all the check wants.
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    Some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_specs_parse_and_print() {
        for (text, spec) in [
            ("cpu", DeviceSpec::Cpu),
            ("software", DeviceSpec::Software),
            ("2", DeviceSpec::Gpu(2)),
            ("gpu:1", DeviceSpec::Gpu(1)),
        ] {
            assert_eq!(text.parse::<DeviceSpec>(), Ok(spec.clone()));
            assert_eq!(spec.to_string().parse::<DeviceSpec>(), Ok(spec));
        }
        assert!("tpu".parse::<DeviceSpec>().is_err());
    }
}
