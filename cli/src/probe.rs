//! Device enumeration in a short-lived child process (the hidden
//! `pipeline probe-devices`), so that the coordinator never initialises
//! Vulkan or NVML itself: a driver that crashes while enumerating costs
//! that child, never the run, and the driver's stderr chatter stays there.

use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::exit::Outcome;

/// One Vulkan adapter as the child saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Adapter {
    /// e.g. `NVIDIA H100 80GB HBM3` or `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub(crate) name: String,
    /// `discrete`, `integrated`, `virtual`, `cpu` or `other`.
    pub(crate) kind: String,
    /// Graphics API.
    pub(crate) backend: String,
    /// Driver name and version.
    pub(crate) driver: String,
    /// PCI bus id, when the driver reports it.
    pub(crate) pci_bus_id: Option<String>,
    /// Total and free memory in bytes, from NVML.
    pub(crate) memory: Option<(u64, u64)>,
    /// How `--gpus` selects it: `gpu:N` or `software`.
    pub(crate) spec: Option<String>,
    /// An NVIDIA GPU's UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) uuid: Option<String>,
    /// Whether Vulkan sees it (burn's GPU engine runs on it); an NVIDIA GPU
    /// without it runs the CUDA engine only.
    #[serde(default = "yes")]
    pub(crate) vulkan: bool,
    /// An NVIDIA GPU's compute capability, `(9, 0)` for Hopper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) capability: Option<(i32, i32)>,
}

fn yes() -> bool {
    true
}

/// What the child found: the GPUs in `--gpus` index order (PCI bus order),
/// then every other adapter (lavapipe, …).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Probe {
    pub(crate) gpus: Vec<Adapter>,
    pub(crate) others: Vec<Adapter>,
    /// NVIDIA GPUs as NVML names them (none without the NVIDIA driver).
    #[serde(default)]
    pub(crate) nvidia: Vec<String>,
}

impl Probe {
    /// Whether Mesa's lavapipe (`--gpus software`) is there.
    pub(crate) fn has_software(&self) -> bool {
        self.others.iter().any(|a| a.kind == "cpu")
    }

    /// How many GPUs Vulkan sees.
    pub(crate) fn vulkan_gpus(&self) -> usize {
        self.gpus.iter().filter(|g| g.vulkan).count()
    }

    /// The NVIDIA GPUs' UUIDs by `--gpus` index.
    pub(crate) fn cuda_uuids(&self) -> std::collections::BTreeMap<usize, String> {
        self.gpus
            .iter()
            .enumerate()
            .filter_map(|(i, g)| Some((i, g.uuid.clone()?)))
            .collect()
    }

    /// The `--gpus` index of the GPU at PCI bus id `id`.
    pub(crate) fn gpu_by_pci(&self, id: &str) -> Option<usize> {
        self.gpus.iter().position(|g| {
            g.pci_bus_id
                .as_deref()
                .is_some_and(|p| gpu_worker::same_pci_bus(p, id))
        })
    }
}

fn adapter(a: gpu_worker::AdapterSummary) -> Adapter {
    Adapter {
        name: a.name,
        kind: a.kind.to_owned(),
        backend: a.backend,
        driver: a.driver,
        pci_bus_id: a.pci_bus_id,
        memory: a.memory,
        spec: a.spec,
        uuid: a.uuid,
        vulkan: a.vulkan,
        capability: a.capability,
    }
}

/// The child's side: enumerate in this process and print JSON.
pub(crate) fn print() -> Outcome {
    let probe = Probe {
        gpus: gpu_worker::gpus().into_iter().map(adapter).collect(),
        others: gpu_worker::adapters()
            .into_iter()
            .filter(|a| !matches!(a.kind, "discrete" | "integrated" | "virtual"))
            .map(adapter)
            .collect(),
        nvidia: gpu_worker::nvml_gpu_names(),
    };
    match serde_json::to_string(&probe) {
        Ok(json) => crate::exit::print(&(json + "\n")),
        Err(e) => Outcome::Failed(format!("cannot encode the devices: {e}")),
    }
}

/// The parent's side: runs `pipeline probe-devices` (once per process: the
/// machine's GPUs do not change during a command) and reads its answer.
/// A child that crashed or said nothing useful is an error naming how it
/// ended, as one line (`{:#}` of the error and its causes).
pub(crate) fn probe() -> Result<Probe, String> {
    static PROBE: std::sync::OnceLock<Result<Probe, String>> = std::sync::OnceLock::new();
    PROBE
        .get_or_init(|| run_probe().map_err(|e| format!("{e:#}")))
        .clone()
}

fn run_probe() -> anyhow::Result<Probe> {
    let exe = std::env::current_exe().context("cannot find the pipeline executable")?;
    let mut command = Command::new(exe);
    // Every GPU of the machine, whatever this process may use: `--gpus`
    // and the scheduler's variables choose among them afterwards, by PCI
    // bus order (the CUDA driver, where NVML is missing, would otherwise
    // list only what CUDA_VISIBLE_DEVICES lets it see).
    command
        .arg("probe-devices")
        .stdin(Stdio::null())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    if let Some(dir) = pipeline_core::runtime_dir_for_children() {
        command.env("XDG_RUNTIME_DIR", dir);
    }
    let output = command
        .output()
        .context("cannot start device enumeration")?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        bail!(
            "device enumeration failed ({}){}",
            coordinator::describe_exit(&output.status),
            last.map(|l| format!(": {l}")).unwrap_or_default()
        );
    }
    serde_json::from_slice(&output.stdout).context("device enumeration said something unreadable")
}
