//! `pipeline devices`: every Vulkan adapter (name, type, backend, driver, PCI
//! bus id, memory where NVML knows it), which `--gpus` value selects it, the
//! CPU with its load, the JPEG decoder the loader runs (whether its SIMD
//! code was built), NVIDIA's libraries the CUDA engine would load
//! (where each was found, or its fix), and ONNX Runtime (where, its
//! version and execution providers, or its fix). How `--engine` and
//! `--gpus` choose devices, for every command that runs a model, is
//! `choose.rs`.

use serde::Serialize;

use crate::exit::Outcome;

mod choose;
mod gpus;

pub(crate) use choose::engine_devices;
pub(crate) use gpus::{Runs, chosen_devices, cuda_uuids};

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
    let engine = "--model FILE.onnx runs on ONNX Runtime's CPU provider (its CUDA provider is \
                  not built yet)";
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
        engine: "--engine cuda runs every model family and the text towers on NVIDIA GPUs in \
                 f16 (every family passed its parity test on an H100, 2026-11-26; each start \
                 checks one input against the f32 reference); --engine auto takes it on NVIDIA \
                 GPUs when the libraries below load",
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
            "ONNX Runtime: {} at {library}, providers {} ({})",
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
