//! Why a GPU the machine has is not usable: NVML sees NVIDIA GPUs, Vulkan
//! sees none. The usual causes, in the order checked:
//!
//! - no Vulkan loader (`libvulkan.so.1`) in the library path;
//! - a container started without the `graphics` driver capability
//!   (`NVIDIA_DRIVER_CAPABILITIES` must include `graphics`, or be `all`,
//!   for the NVIDIA container runtime to mount the Vulkan driver);
//! - no NVIDIA ICD file (`nvidia_icd.json`) where the loader looks, or one
//!   only in a place it does not (then `VK_DRIVER_FILES` names it).
//!
//! The facts are gathered by [`Facts::of_this_machine`]; [`explain`] is
//! pure, so every cause is unit-tested.

use std::path::{Path, PathBuf};

/// What the explanation depends on.
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// NVIDIA GPUs NVML sees.
    pub(crate) nvidia: usize,
    /// Hardware GPUs Vulkan sees.
    pub(crate) vulkan_gpus: usize,
    /// Whether `libvulkan.so.1` is in the library path.
    pub(crate) vulkan_loader: bool,
    /// `NVIDIA_DRIVER_CAPABILITIES`, when set.
    pub(crate) capabilities: Option<String>,
    /// `VK_DRIVER_FILES` or `VK_ICD_FILENAMES`, when set.
    pub(crate) driver_files: Option<String>,
    /// NVIDIA ICD files where the Vulkan loader looks.
    pub(crate) icd_in_search_path: Vec<PathBuf>,
    /// NVIDIA ICD files elsewhere (the NVIDIA container runtime's folder).
    pub(crate) icd_elsewhere: Vec<PathBuf>,
}

/// Folders the Vulkan loader searches for ICD files (besides
/// `$XDG_DATA_DIRS/vulkan/icd.d`).
const ICD_DIRS: [&str; 4] = [
    "/etc/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
    "/usr/share/vulkan/icd.d",
    "/etc/xdg/vulkan/icd.d",
];

/// Where NVIDIA's ICD file lands outside the search path (the NVIDIA
/// container runtime's mount, some driver installers).
const ICD_ELSEWHERE: [&str; 2] = [
    "/usr/local/nvidia/share/vulkan/icd.d",
    "/usr/local/nvidia/icd.d",
];

/// Folders `libvulkan.so.1` is found in without `LD_LIBRARY_PATH`.
const LIB_DIRS: [&str; 5] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
];

fn nvidia_icds(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("nvidia") && n.ends_with(".json"))
        })
        .collect();
    found.sort();
    found
}

impl Facts {
    /// This machine's facts, given what the device probe found.
    pub(crate) fn of_this_machine(nvidia: usize, vulkan_gpus: usize) -> Self {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let mut search: Vec<PathBuf> = ICD_DIRS.iter().map(PathBuf::from).collect();
        if let Some(dirs) = env("XDG_DATA_DIRS") {
            search.extend(dirs.split(':').map(|d| Path::new(d).join("vulkan/icd.d")));
        }
        let mut lib_dirs: Vec<PathBuf> = LIB_DIRS.iter().map(PathBuf::from).collect();
        if let Some(dirs) = env("LD_LIBRARY_PATH") {
            lib_dirs.extend(dirs.split(':').map(PathBuf::from));
        }
        Self {
            nvidia,
            vulkan_gpus,
            vulkan_loader: lib_dirs.iter().any(|d| d.join("libvulkan.so.1").exists()),
            capabilities: env("NVIDIA_DRIVER_CAPABILITIES"),
            driver_files: env("VK_DRIVER_FILES").or_else(|| env("VK_ICD_FILENAMES")),
            icd_in_search_path: search.iter().flat_map(|d| nvidia_icds(d)).collect(),
            icd_elsewhere: ICD_ELSEWHERE
                .iter()
                .flat_map(|d| nvidia_icds(Path::new(d)))
                .collect(),
        }
    }
}

/// Why the NVIDIA GPUs are not usable, and the fix, in one line; `None`
/// when there is nothing to explain (no NVIDIA GPU, or Vulkan sees GPUs).
pub(crate) fn explain(facts: &Facts) -> Option<String> {
    if facts.nvidia == 0 || facts.vulkan_gpus > 0 {
        return None;
    }
    let seen = format!(
        "NVML sees {} NVIDIA GPU(s) but Vulkan sees none",
        facts.nvidia
    );
    let graphics = facts.capabilities.as_deref().is_none_or(|c| {
        c.split(',')
            .map(str::trim)
            .any(|c| c == "graphics" || c == "all")
    });
    let why = if !facts.vulkan_loader {
        "the Vulkan loader (libvulkan.so.1) is not installed: install `libvulkan1` \
         (Debian/Ubuntu) or `vulkan-loader`"
            .to_owned()
    } else if !graphics {
        format!(
            "this container was started without the graphics driver capability \
             (NVIDIA_DRIVER_CAPABILITIES={}), so NVIDIA's Vulkan driver is not mounted: \
             start it with NVIDIA_DRIVER_CAPABILITIES=all (or add `graphics`)",
            facts.capabilities.as_deref().unwrap_or_default()
        )
    } else if let Some(files) = &facts.driver_files {
        format!(
            "VK_DRIVER_FILES/VK_ICD_FILENAMES ({files}) names no working NVIDIA driver: \
             point it at nvidia_icd.json, or unset it"
        )
    } else if facts.icd_in_search_path.is_empty() {
        match facts.icd_elsewhere.first() {
            Some(file) => format!(
                "NVIDIA's Vulkan driver file is at {}, where the Vulkan loader does not \
                 look: set VK_DRIVER_FILES={}",
                file.display(),
                file.display()
            ),
            None => "no NVIDIA Vulkan driver file (nvidia_icd.json) is installed: install \
                     the driver's Vulkan part (e.g. `libnvidia-gl-<version>`), or in a \
                     container start it with NVIDIA_DRIVER_CAPABILITIES=all"
                .to_owned(),
        }
    } else {
        format!(
            "NVIDIA's Vulkan driver ({}) did not start: its version may not match the \
             kernel driver's (`nvidia-smi`), or the device files are not visible",
            facts.icd_in_search_path[0].display()
        )
    };
    Some(format!("{seen}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            nvidia: 2,
            vulkan_gpus: 0,
            vulkan_loader: true,
            capabilities: None,
            driver_files: None,
            icd_in_search_path: vec![PathBuf::from("/usr/share/vulkan/icd.d/nvidia_icd.json")],
            icd_elsewhere: Vec::new(),
        }
    }

    #[test]
    fn nothing_to_explain_without_nvidia_gpus_or_with_vulkan_ones() {
        assert_eq!(explain(&Facts::default()), None);
        let seen = Facts {
            vulkan_gpus: 2,
            ..facts()
        };
        assert_eq!(explain(&seen), None);
    }

    #[test]
    fn each_cause_names_its_fix() {
        let line = |f: Facts| explain(&f).expect("explained");
        let no_loader = line(Facts {
            vulkan_loader: false,
            ..facts()
        });
        assert!(no_loader.starts_with("NVML sees 2 NVIDIA GPU(s) but Vulkan sees none: "));
        assert!(no_loader.contains("libvulkan1"), "{no_loader}");
        let compute_only = line(Facts {
            capabilities: Some("compute,utility".into()),
            icd_in_search_path: Vec::new(),
            ..facts()
        });
        assert!(
            compute_only.contains("NVIDIA_DRIVER_CAPABILITIES=compute,utility")
                && compute_only.contains("=all"),
            "{compute_only}"
        );
        // `all` and `graphics` are enough: the next cause is looked at.
        for caps in ["all", "compute, graphics"] {
            let with = line(Facts {
                capabilities: Some(caps.into()),
                icd_in_search_path: Vec::new(),
                ..facts()
            });
            assert!(!with.contains("capability"), "{caps}: {with}");
            assert!(with.contains("no NVIDIA Vulkan driver file"), "{with}");
        }
        let elsewhere = line(Facts {
            icd_in_search_path: Vec::new(),
            icd_elsewhere: vec![PathBuf::from(
                "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json",
            )],
            ..facts()
        });
        assert!(
            elsewhere
                .contains("VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json"),
            "{elsewhere}"
        );
        let pointed = line(Facts {
            driver_files: Some("/nonexistent.json".into()),
            ..facts()
        });
        assert!(pointed.contains("/nonexistent.json"), "{pointed}");
        let broken = line(facts());
        assert!(broken.contains("did not start"), "{broken}");
        for text in [no_loader, compute_only, elsewhere, pointed, broken] {
            assert!(!text.contains('\n'), "{text}");
        }
    }
}
