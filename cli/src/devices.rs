//! `pipeline devices`: every Vulkan adapter (name, type, backend, driver, PCI
//! bus id, memory where NVML knows it), which `--gpus` value selects it, the
//! CPU with its load, the JPEG decoder the loader runs (whether its SIMD
//! code was built), NVIDIA's libraries the CUDA engine would load
//! (where each was found, or its fix), and ONNX Runtime (where, its
//! version and execution providers, or its fix). Also how `--engine` and `--gpus`
//! choose devices (`engine_devices`, `chosen_devices`), for every command
//! that runs a model.

use pipeline_core::{DeviceSpec, EngineKind};
use serde::Serialize;

use crate::args::EngineArg;
use crate::exit::Outcome;

#[derive(Serialize)]
struct Listing {
    adapters: Vec<crate::probe::Adapter>,
    cpu: Cpu,
    /// NVIDIA GPUs as NVML names them.
    nvidia: Vec<String>,
    /// Why NVML's GPUs are not usable through Vulkan, and the fix.
    unusable_gpus: Option<String>,
    /// What decodes JPEGs, and whether with SIMD.
    jpeg_decoder: loader::JpegDecoder,
    /// The CUDA engine: what it is, and NVIDIA's libraries it loads.
    cuda: Cuda,
    /// ONNX Runtime, for users' own models.
    onnx_runtime: OnnxRuntime,
}

#[derive(Serialize)]
struct OnnxRuntime {
    /// What the ONNX engine does today.
    engine: &'static str,
    /// Where ONNX Runtime loaded from.
    library: Option<String>,
    version: Option<String>,
    /// Its execution providers.
    providers: Vec<String>,
    /// Why it did not load, with the fix.
    error: Option<String>,
}

fn onnx_runtime() -> OnnxRuntime {
    let engine = "not built yet (#41): --model FILE.onnx is refused; ONNX Runtime is found and \
                  loaded, as listed here";
    match gpu_worker::onnx::runtime::onnx_runtime() {
        Ok(rt) => OnnxRuntime {
            engine,
            library: Some(rt.library.clone()),
            version: Some(rt.version.clone()),
            providers: rt.providers.clone(),
            error: None,
        },
        Err(e) => OnnxRuntime {
            engine,
            library: None,
            version: None,
            providers: Vec::new(),
            error: Some(e.clone()),
        },
    }
}

#[derive(Serialize)]
struct Cuda {
    /// What the CUDA engine does today.
    engine: &'static str,
    libraries: Vec<CudaLibrary>,
}

#[derive(Serialize)]
struct CudaLibrary {
    name: &'static str,
    /// Where it loaded from; `None` when it did not.
    found: Option<String>,
    /// How to get it.
    fix: &'static str,
}

fn cuda() -> Cuda {
    let libs = gpu_worker::cuda::libs::cuda_libraries();
    Cuda {
        engine: "--engine cuda runs every model family and the text towers on NVIDIA GPUs, not \
                 yet verified on a GPU: each start checks one input against the f32 reference \
                 (#28); --engine auto runs Vulkan",
        libraries: libs
            .libs
            .iter()
            .map(|(lib, found)| CudaLibrary {
                name: lib.name(),
                found: found.as_ref().map(ToString::to_string),
                fix: lib.fix(),
            })
            .collect(),
    }
}

#[derive(Serialize)]
struct Cpu {
    spec: &'static str,
    cores: usize,
    /// 1, 5 and 15 minute load averages from /proc/loadavg.
    load: Option<[f64; 3]>,
}

fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

pub(crate) fn run(json: bool) -> Outcome {
    let probe = match crate::probe::probe() {
        Ok(probe) => probe,
        Err(e) => return Outcome::Failed(e),
    };
    let facts = crate::diagnose::Facts::of_this_machine(probe.nvidia.len(), probe.vulkan_gpus());
    let mut adapters = probe.gpus;
    adapters.extend(probe.others);
    let listing = Listing {
        adapters,
        nvidia: probe.nvidia,
        unusable_gpus: crate::diagnose::explain(&facts),
        jpeg_decoder: loader::jpeg_decoder(),
        cuda: cuda(),
        onnx_runtime: onnx_runtime(),
        cpu: Cpu {
            spec: "cpu",
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load: load_average(),
        },
    };
    if json {
        return match serde_json::to_string_pretty(&listing) {
            Ok(text) => crate::exit::print(&(text + "\n")),
            Err(e) => Outcome::Failed(format!("cannot encode the device list: {e}")),
        };
    }
    match table(&listing) {
        Ok(text) => crate::exit::print(&text),
        Err(e) => Outcome::Failed(format!("cannot format the device list: {e}")),
    }
}

/// The listing for people: one line per device.
fn table(listing: &Listing) -> Result<String, std::fmt::Error> {
    use std::fmt::Write;
    let mut text = String::new();
    writeln!(
        text,
        "{:<10} {:<11} {:<8} {:<14} {:<18} name (driver)",
        "--gpus", "type", "backend", "pci", "memory"
    )?;
    for a in &listing.adapters {
        let memory = a.memory.map_or("-".to_owned(), |(total, free)| {
            format!(
                "{:.1}/{:.1} GiB free",
                free as f64 / GIB,
                total as f64 / GIB
            )
        });
        writeln!(
            text,
            "{:<10} {:<11} {:<8} {:<14} {:<18} {} ({})",
            a.spec.as_deref().unwrap_or("-"),
            a.kind,
            a.backend,
            a.pci_bus_id.as_deref().unwrap_or("-"),
            memory,
            a.name,
            a.driver
        )?;
    }
    let load = listing.cpu.load.map_or("load unknown".to_owned(), |l| {
        format!("load {:.2} {:.2} {:.2}", l[0], l[1], l[2])
    });
    writeln!(
        text,
        "{:<10} {:<11} {:<8} {:<14} {:<18} {} cores, {load} (burn flex)",
        "cpu", "cpu", "-", "-", "-", listing.cpu.cores
    )?;
    if listing
        .adapters
        .iter()
        .all(|a| a.kind == "cpu" || a.kind == "other")
    {
        writeln!(text, "no GPU found: `--gpus all` runs on the CPU")?;
    }
    if let Some(why) = &listing.unusable_gpus {
        writeln!(text, "{why}")?;
    }
    writeln!(text, "JPEG decoder: {}", listing.jpeg_decoder)?;
    writeln!(text, "CUDA engine: {}", listing.cuda.engine)?;
    for lib in &listing.cuda.libraries {
        match &lib.found {
            Some(path) => writeln!(text, "  {:<9} {path}", lib.name)?,
            None => writeln!(text, "  {:<9} missing: {}", lib.name, lib.fix)?,
        }
    }
    let ort = &listing.onnx_runtime;
    match (&ort.library, &ort.error) {
        (Some(library), _) => writeln!(
            text,
            "ONNX Runtime: {} at {library}, providers {} (the ONNX engine is {})",
            ort.version.as_deref().unwrap_or("?"),
            ort.providers.join(", "),
            ort.engine
        )?,
        (None, error) => writeln!(
            text,
            "ONNX Runtime: {}",
            error.as_deref().unwrap_or("not loaded")
        )?,
    }

    Ok(text)
}

const GIB: f64 = (1u64 << 30) as f64;

/// `--engine` and `--gpus` → the devices, as [`chosen_devices`], and the
/// engine that runs on them:
/// - `auto`: whatever `--gpus` picks;
/// - `cpu`: the CPU, from `--gpus all` or `cpu`;
/// - `vulkan`: GPUs (or lavapipe) only: none is an error, not the CPU;
/// - `cuda`: the CUDA engine on GPUs only, when NVIDIA's libraries load
///   (else an error naming each missing one with its fix).
pub(crate) fn engine_devices(
    engine: EngineArg,
    gpus: &str,
) -> Result<(Vec<DeviceSpec>, EngineKind, Option<String>), String> {
    if engine == EngineArg::Cuda {
        if let Some(missing) = gpu_worker::cuda::libs::cuda_libraries().missing_line() {
            return Err(format!("--engine cuda: {missing}"));
        }
        let (devices, notice) = chosen_devices(gpus, Runs::Cuda, false)?;
        if devices.iter().any(|d| !matches!(d, DeviceSpec::Gpu(_))) {
            return Err(format!(
                "--engine cuda: no NVIDIA GPU to run on (--gpus {}); --engine cpu runs the CPU",
                gpus.trim()
            ));
        }
        return Ok((devices, EngineKind::Cuda, notice));
    }
    let (devices, notice) = burn_devices(engine, gpus)?;
    Ok((devices, EngineKind::Burn, notice))
}

/// The devices burn's engine runs for `--engine` (every engine but
/// `cuda`, which is refused).
fn burn_devices(
    engine: EngineArg,
    gpus: &str,
) -> Result<(Vec<DeviceSpec>, Option<String>), String> {
    match engine {
        EngineArg::Auto => chosen_devices(gpus, Runs::Vulkan, true),
        EngineArg::Cpu => {
            let flag = gpus.trim();
            if flag.eq_ignore_ascii_case("all") || flag.eq_ignore_ascii_case("cpu") {
                Ok((vec![DeviceSpec::Cpu], None))
            } else {
                Err(format!(
                    "--engine cpu runs on the CPU; --gpus {flag} names GPUs (leave --gpus out, \
                     or use --engine vulkan)"
                ))
            }
        }
        EngineArg::Vulkan => {
            let (devices, notice) = chosen_devices(gpus, Runs::Vulkan, false)?;
            if devices.contains(&DeviceSpec::Cpu) {
                let why = notice
                    .as_deref()
                    .and_then(|n| n.strip_prefix("pipeline: "))
                    .map(|n| n.split("; running on the CPU").next().unwrap_or(n))
                    .map_or_else(String::new, |n| format!(" ({n})"));
                return Err(format!(
                    "--engine vulkan: no Vulkan GPU to run on{why}; --gpus software runs \
                     Mesa's lavapipe, --engine cpu the CPU"
                ));
            }
            Ok((devices, notice))
        }
        EngineArg::Cuda => unreachable!("engine_devices takes --engine cuda"),
    }
}

/// Why NVIDIA GPUs run on burn's Vulkan engine under `--engine auto`, when
/// any were found.
fn nvidia_on_vulkan(nvidia: usize) -> Option<String> {
    (nvidia > 0).then(|| {
        "NVIDIA GPUs run on Vulkan: the CUDA engine (--engine cuda) is not yet verified on a \
         GPU (#28)"
            .to_owned()
    })
}

/// What the chosen engine runs on: `--gpus all` takes the GPUs it can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runs {
    /// burn's GPU engine: GPUs Vulkan sees.
    Vulkan,
    /// The CUDA engine: NVIDIA's GPUs, with or without Vulkan.
    Cuda,
}

impl Runs {
    fn name(self) -> &'static str {
        match self {
            Self::Vulkan => "Vulkan",
            Self::Cuda => "NVIDIA",
        }
    }
}

/// Whether the engine runs on `gpu`: burn's needs Vulkan to see it, the
/// CUDA engine an NVIDIA GPU; else why not, with the engine that does.
fn engine_runs_on(on: Runs, gpu: &crate::probe::Adapter) -> Result<(), String> {
    match on {
        Runs::Vulkan if !gpu.vulkan => Err(format!(
            "{} has no Vulkan driver here; --engine cuda runs it",
            gpu.name
        )),
        Runs::Cuda if gpu.uuid.is_none() => Err(format!(
            "{} is not an NVIDIA GPU the driver lists; --engine cuda runs NVIDIA GPUs only",
            gpu.name
        )),
        _ => Ok(()),
    }
}

/// The NVIDIA GPUs' UUIDs by `--gpus` index where `devices` has a GPU
/// (workers get theirs as `CUDA_VISIBLE_DEVICES`); empty otherwise, and
/// when the machine's GPUs cannot be listed.
pub(crate) fn cuda_uuids(devices: &[DeviceSpec]) -> std::collections::BTreeMap<usize, String> {
    if !devices.iter().any(|d| matches!(d, DeviceSpec::Gpu(_))) {
        return Default::default();
    }
    crate::probe::probe()
        .map(|p| p.cuda_uuids())
        .unwrap_or_default()
}

/// `--gpus` → the devices, each once (before `--workers-per-gpu`), and
/// a notice saying how `all` chose (and, with `explain_vulkan`, why
/// NVIDIA GPUs it found run on Vulkan).
pub(crate) fn chosen_devices(
    flag: &str,
    on: Runs,
    explain_vulkan: bool,
) -> Result<(Vec<DeviceSpec>, Option<String>), String> {
    let flag = flag.trim();
    if flag.eq_ignore_ascii_case("all") {
        // A driver that crashes while enumerating costs the probe's
        // process; the run goes on on the CPU and says why.
        let (gpus, nvidia) = match crate::probe::probe() {
            Ok(probe) => (probe.gpus, probe.nvidia.len()),
            Err(e) => {
                let notice = format!("pipeline: warning: {e}; running on the CPU (burn flex)");
                return Ok((vec![DeviceSpec::Cpu], Some(notice)));
            }
        };
        // GPU indices are PCI bus order, as nvidia-smi and CUDA with
        // CUDA_DEVICE_ORDER=PCI_BUS_ID number them.
        let given = coordinator::scheduler_gpus(&coordinator::process_env);
        let chosen: Vec<DeviceSpec> = (0..gpus.len())
            .filter(|i| {
                given
                    .as_ref()
                    .is_none_or(|(allowed, _)| allowed.contains(i))
            })
            .filter(|i| match on {
                Runs::Vulkan => gpus[*i].vulkan,
                Runs::Cuda => gpus[*i].uuid.is_some(),
            })
            .map(DeviceSpec::Gpu)
            .collect();
        let vulkan_gpus = gpus.iter().filter(|g| g.vulkan).count();
        let names: Vec<String> = chosen.iter().map(ToString::to_string).collect();
        let notice = match (&given, chosen.is_empty()) {
            (Some((_, source)), true) => format!(
                "pipeline: {source} names no {} GPU of this machine; running on the CPU \
                 (burn flex)",
                on.name()
            ),
            (None, true) => {
                let facts = crate::diagnose::Facts::of_this_machine(nvidia, vulkan_gpus);
                match crate::diagnose::explain(&facts) {
                    Some(why) => format!(
                        "pipeline: {why}; running on the CPU (burn flex){}",
                        if on == Runs::Vulkan && gpus.iter().any(|g| g.uuid.is_some()) {
                            "; --engine cuda runs NVIDIA GPUs without Vulkan"
                        } else {
                            ""
                        }
                    ),
                    None => "pipeline: no GPU found; running on the CPU (burn flex)".to_owned(),
                }
            }
            (Some((_, source)), false) => {
                format!("pipeline: devices {} (from {source})", names.join(", "))
            }
            (None, false) => format!("pipeline: devices {}", names.join(", ")),
        };
        let shown = if chosen.is_empty() || !explain_vulkan {
            0
        } else {
            nvidia
        };
        let notice = match nvidia_on_vulkan(shown) {
            Some(why) => format!("{notice}; {why}"),
            None => notice,
        };
        if chosen.is_empty() {
            return Ok((vec![DeviceSpec::Cpu], Some(notice)));
        }
        return Ok((chosen, Some(notice)));
    }
    if flag.eq_ignore_ascii_case("none") {
        return Ok((vec![DeviceSpec::Cpu], None));
    }
    let mut chosen = Vec::new();
    let mut probed = None;
    let mut probe = |part: &str| -> Result<crate::probe::Probe, String> {
        if probed.is_none() {
            probed = Some(crate::probe::probe().map_err(|e| format!("--gpus {part}: {e}"))?);
        }
        Ok(probed.clone().unwrap_or_default())
    };
    for part in flag.split(',') {
        let part = part.trim();
        let spec = if part.contains(':') && part.contains('.') {
            // A PCI bus id, as nvidia-smi and lspci print it.
            let index = probe(part)?.gpu_by_pci(part).ok_or_else(|| {
                format!("--gpus {part}: no GPU at that PCI bus id (see `pipeline devices`)")
            })?;
            DeviceSpec::Gpu(index)
        } else {
            part.parse().map_err(|e| format!("--gpus: {e}"))?
        };
        if spec == DeviceSpec::Software && !probe(part)?.has_software() {
            return Err(format!(
                "--gpus {part}: Mesa's lavapipe (a Vulkan device on the CPU) is not installed; \
                 install the mesa-vulkan-drivers package, or use --gpus cpu"
            ));
        }
        if let DeviceSpec::Gpu(i) = spec {
            let gpus = probe(part)?.gpus;
            let Some(gpu) = gpus.get(i) else {
                return Err(format!(
                    "--gpus {part}: this machine has {} GPU(s) (see `pipeline devices`); \
                     use cpu or software to run without one",
                    gpus.len()
                ));
            };
            engine_runs_on(on, gpu).map_err(|why| format!("--gpus {part}: {why}"))?;
        }
        if chosen.contains(&spec) {
            return Err(format!("--gpus lists {spec} twice"));
        }
        chosen.push(spec);
    }
    Ok((chosen, None))
}

#[cfg(test)]
mod tests {
    use super::{Runs, engine_runs_on, nvidia_on_vulkan};
    use crate::probe::Adapter;

    fn gpu(name: &str, uuid: Option<&str>, vulkan: bool) -> Adapter {
        Adapter {
            name: name.to_owned(),
            kind: "discrete".to_owned(),
            backend: if vulkan { "vulkan" } else { "cuda" }.to_owned(),
            driver: String::new(),
            pci_bus_id: None,
            memory: None,
            spec: Some("gpu:0".to_owned()),
            uuid: uuid.map(str::to_owned),
            vulkan,
        }
    }

    /// An explicit `--gpus N` names a GPU the engine can run: Vulkan's for
    /// burn, NVIDIA's for CUDA; another is one line naming the engine that
    /// runs it.
    #[test]
    fn an_explicit_gpu_must_be_one_the_engine_runs_on() {
        let both = gpu("H100", Some("GPU-1"), true);
        let cuda_only = gpu("H200", Some("GPU-2"), false);
        let amd = gpu("Radeon", None, true);
        assert_eq!(engine_runs_on(Runs::Vulkan, &both), Ok(()));
        assert_eq!(engine_runs_on(Runs::Cuda, &both), Ok(()));
        assert_eq!(engine_runs_on(Runs::Cuda, &cuda_only), Ok(()));
        assert_eq!(engine_runs_on(Runs::Vulkan, &amd), Ok(()));
        let e = engine_runs_on(Runs::Vulkan, &cuda_only).expect_err("no Vulkan");
        assert!(e.contains("H200") && e.contains("--engine cuda"), "{e}");
        let e = engine_runs_on(Runs::Cuda, &amd).expect_err("not NVIDIA");
        assert!(e.contains("Radeon") && e.contains("NVIDIA"), "{e}");
    }

    /// `--gpus all` says why NVIDIA GPUs it found run on Vulkan, in one
    /// line, and says nothing of CUDA on other machines.
    #[test]
    fn nvidia_gpus_on_vulkan_are_explained() {
        assert_eq!(nvidia_on_vulkan(0), None);
        let why = nvidia_on_vulkan(2).expect("explained");
        assert!(why.starts_with("NVIDIA GPUs run on Vulkan: "), "{why}");
        assert!(!why.contains('\n'), "{why}");
    }
}
