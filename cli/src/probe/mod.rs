//! Device enumeration in a short-lived child process (the hidden
//! `pipeline probe-devices`), so that the coordinator never initialises
//! Vulkan or NVML itself: a driver that crashes while enumerating costs
//! that child, never the run, and the driver's stderr chatter stays there.
//! ONNX Runtime's CUDA provider is tried the same way (`pipeline
//! probe-onnx-cuda`): once started, it keeps a CUDA context and a memory
//! pool on its GPU for the life of its process, which for the coordinator
//! is the whole run, beside that GPU's worker.
//!
//! Each child has a deadline ([`DEVICE_PROBE_DEADLINE`],
//! `onnx::ONNX_TRIAL_DEADLINE`, or `PIPELINE_PROBE_TIMEOUT_S` seconds): a
//! driver that hangs costs that child, killed, and one line, never the
//! command. Its stdout and stderr are read on threads of their own (a
//! full pipe would stall it).

mod child;
mod onnx;

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use self::child::{Ended, deadline, run_until, seconds};
pub(crate) use self::onnx::{onnx_cuda_starts, try_onnx_cuda};
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
    /// An NVIDIA GPU's place in CUDA's default (fastest-first) order,
    /// where the CUDA driver said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cuda_index: Option<usize>,
    /// For a MIG instance (`kind` `mig`), the `--gpus` index of its GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mig_of: Option<usize>,
    /// Whether an NVIDIA GPU is in MIG mode, with instances or without.
    #[serde(default)]
    pub(crate) mig_enabled: bool,
}

fn yes() -> bool {
    true
}

/// What the child found: the GPUs in `--gpus` index order (PCI bus order,
/// then each MIG instance), then every other adapter (lavapipe, …).
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

    /// The NVIDIA GPUs as CUDA enumerates them, each with its MIG
    /// instances: what `CUDA_VISIBLE_DEVICES` names
    /// (`coordinator::scheduler_gpus`).
    pub(crate) fn nvidia_table(&self) -> Vec<coordinator::NvidiaDevice> {
        self.gpus
            .iter()
            .enumerate()
            .filter(|(_, g)| g.mig_of.is_none())
            .filter_map(|(i, g)| {
                Some(coordinator::NvidiaDevice {
                    index: i,
                    uuid: g.uuid.clone()?,
                    fastest_first: g.cuda_index,
                    mig: self
                        .gpus
                        .iter()
                        .enumerate()
                        .filter(|(_, m)| m.mig_of == Some(i))
                        .filter_map(|(j, m)| Some((j, m.uuid.clone()?)))
                        .collect(),
                    mig_mode: self.in_mig_mode(i),
                })
            })
            .collect()
    }

    /// Whether `--gpus` index `i` is a GPU in MIG mode (its instances run,
    /// each a device of its own, and none where it has none; CUDA gives
    /// the whole GPU none).
    pub(crate) fn in_mig_mode(&self, i: usize) -> bool {
        self.gpus.get(i).is_some_and(|g| g.mig_enabled)
            || self.gpus.iter().any(|g| g.mig_of == Some(i))
    }

    /// Why `--gpus` index `i` runs nothing: a GPU in MIG mode with no
    /// instances, which CUDA gives no device. `None` for any other.
    pub(crate) fn mig_without_instances(&self, i: usize) -> Option<String> {
        let gpu = self.gpus.get(i)?;
        (self.in_mig_mode(i) && !self.gpus.iter().any(|g| g.mig_of == Some(i))).then(|| {
            format!(
                "gpu:{i} ({}) is in MIG mode with no instances: create them with `nvidia-smi \
                 mig -cgi … -C`, or turn MIG mode off",
                gpu.name
            )
        })
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
        cuda_index: a.cuda_index,
        mig_of: a.mig_of,
        mig_enabled: a.mig_enabled,
    }
}

/// The child's side: enumerate in this process and print JSON, with each
/// NVIDIA GPU's place in the CUDA driver's order where `cuda_order` (which
/// starts the driver: `cuInit`).
pub(crate) fn print(cuda_order: bool) -> Outcome {
    let gpus = if cuda_order {
        gpu_worker::gpus_with_cuda_order()
    } else {
        gpu_worker::gpus()
    };
    let probe = Probe {
        gpus: gpus.into_iter().map(adapter).collect(),
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
    // and the scheduler's variables choose among them afterwards (the
    // CUDA driver would otherwise list only what CUDA_VISIBLE_DEVICES lets
    // it see).
    command
        .arg("probe-devices")
        .env_remove("CUDA_VISIBLE_DEVICES");
    // The driver's default order, fastest first, is the one order it
    // alone knows (bus order is the list's own); asking for it starts the
    // driver on every GPU, so it is asked only where an index of
    // CUDA_VISIBLE_DEVICES needs it.
    let env = |name: &str| std::env::var(name).ok();
    if needs_cuda_order(&env) {
        command
            .arg("--cuda-order")
            .env("CUDA_DEVICE_ORDER", "FASTEST_FIRST");
    }
    if let Some(dir) = pipeline_core::runtime_dir_for_children() {
        command.env("XDG_RUNTIME_DIR", dir);
    }
    read_probe(command, deadline(DEVICE_PROBE_DEADLINE))
}

/// Whether the device probe must ask the CUDA driver its fastest-first
/// order: only where `CUDA_VISIBLE_DEVICES` names a GPU by index before
/// its list ends, and `CUDA_DEVICE_ORDER` is not `PCI_BUS_ID` (bus order
/// is the probe's own).
fn needs_cuda_order(env: &dyn Fn(&str) -> Option<String>) -> bool {
    let order = coordinator::DeviceOrder::from_env(env("CUDA_DEVICE_ORDER").as_deref());
    if order == coordinator::DeviceOrder::PciBusId {
        return false;
    }
    env("CUDA_VISIBLE_DEVICES").is_some_and(|value| coordinator::names_an_index(&value))
}

/// The device probe `command` run to its end, or for `deadline` at most,
/// and its answer read.
fn read_probe(mut command: Command, deadline: Duration) -> anyhow::Result<Probe> {
    let output = match run_until(&mut command, deadline) {
        Ok(output) => output,
        Err(Ended::NotStarted(e)) => {
            return Err(e).context("cannot start device enumeration");
        }
        Err(Ended::TimedOut) => bail!(
            "device enumeration did not answer within {} and was stopped (is a GPU driver \
             hung? nvidia-smi says)",
            seconds(deadline)
        ),
    };
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

/// How long the device probe may take: NVML and, where asked, the CUDA
/// driver starting on every GPU (tens of seconds on many GPUs without
/// persistence mode).
const DEVICE_PROBE_DEADLINE: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::{Adapter, Probe};

    fn adapter(uuid: Option<&str>, cuda_index: Option<usize>, mig_of: Option<usize>) -> Adapter {
        Adapter {
            name: "gpu".to_owned(),
            kind: if mig_of.is_some() { "mig" } else { "discrete" }.to_owned(),
            backend: "cuda".to_owned(),
            driver: String::new(),
            pci_bus_id: None,
            memory: None,
            spec: None,
            uuid: uuid.map(str::to_owned),
            vulkan: false,
            capability: None,
            cuda_index,
            mig_of,
            mig_enabled: false,
        }
    }

    /// The coordinator never starts ONNX Runtime's CUDA provider itself
    /// (it would hold a CUDA context and memory on a GPU for the whole
    /// run): of the command's sources, only the probe child's
    /// [`super::try_onnx_cuda`] opens a session that can take it.
    #[test]
    fn only_a_child_process_starts_onnx_runtimes_cuda_provider() {
        fn sources(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).expect("cli/src reads") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    sources(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    found.push(path);
                }
            }
        }
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        assert!(files.len() > 10, "{files:?}");
        let starting: Vec<String> = files
            .iter()
            .filter(|f| {
                let text = std::fs::read_to_string(f).expect("a source file reads");
                // Split so that this test's own file is not counted for
                // its words.
                text.contains(&["session", "_on("].concat())
                    || text.contains(&["ep::", "CUDA"].concat())
            })
            .map(|f| f.strip_prefix(&src).unwrap_or(f).display().to_string())
            .collect();
        assert_eq!(starting, ["probe/onnx.rs"]);
    }

    /// A probe child that does not answer (a hung driver, here `sleep`)
    /// is killed at its deadline and said in one line, the device probe's
    /// and the ONNX trial's alike, well before the child would have
    /// ended; one that writes more than a pipe holds to both pipes, or
    /// fails, is read to its end as before.
    #[test]
    fn a_probe_child_past_its_deadline_is_stopped_and_said_in_one_line() {
        use super::onnx::onnx_trial;
        use super::read_probe;
        use std::process::Command;
        use std::time::{Duration, Instant};
        let hung = || {
            let mut sleep = Command::new("sleep");
            sleep.arg("30");
            sleep
        };
        let deadline = Duration::from_millis(300);
        let started = Instant::now();
        let trial = onnx_trial(hung(), deadline).expect_err("the trial hung");
        assert!(
            trial.contains("did not answer within 0.3 s") && !trial.contains('\n'),
            "{trial}"
        );
        let probe = format!(
            "{:#}",
            read_probe(hung(), deadline).expect_err("the probe hung")
        );
        assert!(
            probe.starts_with("device enumeration did not answer within 0.3 s")
                && !probe.contains('\n'),
            "{probe}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let sh = |script: &str| {
            let mut sh = Command::new("sh");
            sh.args(["-c", script]);
            sh
        };
        let chatty = sh(
            "head -c 1000000 /dev/zero >&2; head -c 1000000 /dev/zero | tr '\\0' ' '; \
             echo '{\"gpus\": [], \"others\": []}'",
        );
        let probe = read_probe(chatty, Duration::from_secs(60)).expect("a probe's answer");
        assert!(probe.gpus.is_empty() && probe.others.is_empty());
        let failed = onnx_trial(
            sh("echo 'pipeline: error: no cuDNN' >&2; exit 2"),
            Duration::from_secs(60),
        );
        assert_eq!(failed, Err("no cuDNN".to_owned()));
        assert_eq!(onnx_trial(sh("exit 0"), Duration::from_secs(60)), Ok(()));
    }

    /// The device probe starts the CUDA driver (`cuInit`, on every GPU) to
    /// ask its fastest-first order only where `CUDA_VISIBLE_DEVICES` names
    /// a GPU by index before its list ends and `CUDA_DEVICE_ORDER` is not
    /// PCI_BUS_ID: over every combination of the two.
    #[test]
    fn the_cuda_driver_is_asked_its_order_only_where_an_index_needs_it() {
        use super::needs_cuda_order;
        let values: [(Option<&str>, bool); 14] = [
            (None, false),
            (Some(""), false),
            (Some("0"), true),
            (Some(" 1 , 0"), true),
            (Some("GPU-abc"), false),
            (Some("GPU-abc,1"), true),
            (Some("MIG-abc,GPU-def"), false),
            (Some("-1"), false),
            (Some("-1,0"), false),
            (Some("NoDevFiles"), false),
            (Some("NoDevFiles,0"), false),
            (Some("all"), false),
            (Some(",0"), false),
            (Some("10000"), true),
        ];
        for order in [None, Some("FASTEST_FIRST"), Some("PCI_BUS_ID")] {
            for (value, index) in values {
                let env = |name: &str| match name {
                    "CUDA_DEVICE_ORDER" => order.map(str::to_owned),
                    "CUDA_VISIBLE_DEVICES" => value.map(str::to_owned),
                    _ => None,
                };
                assert_eq!(
                    needs_cuda_order(&env),
                    index && order != Some("PCI_BUS_ID"),
                    "{order:?} {value:?}"
                );
            }
        }
    }

    /// The table `CUDA_VISIBLE_DEVICES` is read over holds each NVIDIA GPU
    /// by its `--gpus` index with CUDA's place for it and its MIG
    /// instances, and nothing else: not another vendor's GPU, not a MIG
    /// instance as a GPU of its own.
    #[test]
    fn the_nvidia_table_holds_each_gpu_with_its_mig_instances() {
        let probe = Probe {
            gpus: vec![
                adapter(None, None, None),
                adapter(Some("GPU-a"), Some(1), None),
                adapter(Some("GPU-b"), Some(0), None),
                adapter(Some("MIG-b1"), None, Some(2)),
                adapter(Some("MIG-b2"), None, Some(2)),
            ],
            others: Vec::new(),
            nvidia: Vec::new(),
        };
        let table: Vec<_> = probe
            .nvidia_table()
            .into_iter()
            .map(|d| (d.index, d.uuid, d.fastest_first, d.mig, d.mig_mode))
            .collect();
        assert_eq!(
            table,
            vec![
                (1, "GPU-a".to_owned(), Some(1), vec![], false),
                (
                    2,
                    "GPU-b".to_owned(),
                    Some(0),
                    vec![(3, "MIG-b1".to_owned()), (4, "MIG-b2".to_owned())],
                    true
                ),
            ]
        );
        assert!(probe.in_mig_mode(2) && !probe.in_mig_mode(1) && !probe.in_mig_mode(3));
    }

    /// A GPU in MIG mode with no instances is in MIG mode (CUDA gives it
    /// no device), not a whole GPU, and is named with how to make them;
    /// in the table `CUDA_VISIBLE_DEVICES` is read over it is in MIG mode
    /// with none. Over every GPU of a machine with each kind.
    #[test]
    fn a_gpu_in_mig_mode_without_instances_is_no_whole_gpu() {
        let mut empty = adapter(Some("GPU-c"), None, None);
        empty.mig_enabled = true;
        empty.name = "A100".to_owned();
        let mut parent = adapter(Some("GPU-b"), None, None);
        parent.mig_enabled = true;
        let probe = Probe {
            gpus: vec![
                adapter(None, None, None),
                adapter(Some("GPU-a"), Some(0), None),
                parent,
                empty,
                adapter(Some("MIG-b1"), None, Some(2)),
            ],
            others: Vec::new(),
            nvidia: Vec::new(),
        };
        let want = [
            (false, false),
            (false, false),
            (true, false),
            (true, true),
            (false, false),
        ];
        for (i, (mig, empty)) in want.into_iter().enumerate() {
            assert_eq!(probe.in_mig_mode(i), mig, "gpu:{i}");
            let why = probe.mig_without_instances(i);
            assert_eq!(why.is_some(), empty, "gpu:{i}");
            if let Some(why) = why {
                assert!(
                    why.starts_with("gpu:3 (A100) is in MIG mode with no instances")
                        && why.contains("nvidia-smi mig -cgi")
                        && !why.contains('\n'),
                    "{why}"
                );
            }
        }
        assert_eq!(probe.mig_without_instances(9), None);
        let table = probe.nvidia_table();
        let c = table.iter().find(|d| d.uuid == "GPU-c").expect("GPU-c");
        assert!(c.mig_mode && c.mig.is_empty(), "{c:?}");
    }
}
