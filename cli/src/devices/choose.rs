//! How `--engine` and `--gpus` choose the engine and the devices it runs
//! on (`engine_devices`), for every command that runs a model; `--gpus`
//! alone is read in `gpus.rs`. The tests here hold both.

use pipeline_core::{DeviceSpec, EngineKind};

use super::gpus::{Chosen, Runs, chosen_devices, nvidia_on_vulkan};
use crate::args::EngineArg;

/// `--engine` and `--gpus` → the devices, as [`chosen_devices`], and the
/// engine that runs on them (`cuda_fits`: whether the CUDA engine runs
/// this model at this precision, else why not):
/// - `auto`: the CUDA engine where `--gpus` picks NVIDIA GPUs only and it
///   can run them (each at or above its minimum compute capability, its
///   libraries load, it fits); else burn's, on whatever `--gpus` picks,
///   saying why NVIDIA GPUs run on Vulkan;
/// - `cpu`: the CPU, from `--gpus all` or `cpu`;
/// - `vulkan`: GPUs (or lavapipe) only: none is an error, not the CPU;
/// - `cuda`: the CUDA engine on GPUs only, when NVIDIA's libraries load
///   (else an error naming each missing one with its fix) and each GPU
///   picked is one it runs (else an error naming it).
pub(crate) fn engine_devices(
    engine: EngineArg,
    gpus: &str,
    cuda_fits: Result<(), String>,
) -> Result<(Vec<DeviceSpec>, EngineKind, Option<String>), String> {
    if engine == EngineArg::Auto {
        match auto_cuda(gpus, cuda_fits) {
            Ok(Some((devices, notice))) => return Ok((devices, EngineKind::Cuda, notice)),
            Ok(None) => {}
            Err(why) => {
                let (devices, notice) = chosen_devices(gpus, Runs::Vulkan, Some(&why))?;
                // An explicit list says nothing of itself: say why here.
                let notice =
                    notice.or_else(|| nvidia_on_vulkan(1, &why).map(|n| format!("pipeline: {n}")));
                return Ok((devices, EngineKind::Burn, notice));
            }
        }
    }
    if engine == EngineArg::Cuda {
        let (devices, notice) = chosen_devices(gpus, Runs::Cuda, None)?;
        // Refused here, in one line, rather than by every worker at start.
        // A probe that failed has already been said by `chosen_devices`;
        // the engine's own check at start remains.
        let probe = crate::probe::probe().ok();
        let picked = probe
            .as_ref()
            .map(|probe| capabilities(probe, &devices))
            .unwrap_or_default();
        let on_gpus = devices.iter().all(|d| matches!(d, DeviceSpec::Gpu(_)));
        if let Some(why) = cuda_refusal(
            &picked,
            gpus,
            on_gpus,
            || gpu_worker::cuda::libs::cuda_libraries().missing_line(),
            gpu_worker::cuda::kernels::supported_archs,
        ) {
            return Err(format!("--engine cuda: {why}"));
        }
        return Ok((devices, EngineKind::Cuda, notice));
    }
    let (devices, notice) = burn_devices(engine, gpus)?;
    Ok((devices, EngineKind::Burn, notice))
}

/// The devices burn's engine runs for `--engine` (every engine but
/// `cuda`, which is refused).
fn burn_devices(engine: EngineArg, gpus: &str) -> Result<Chosen, String> {
    match engine {
        EngineArg::Auto => chosen_devices(gpus, Runs::Vulkan, None),
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
            let (devices, notice) = chosen_devices(gpus, Runs::Vulkan, None)?;
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

/// What `--engine auto` runs.
#[derive(Debug, PartialEq, Eq)]
enum Auto {
    /// The CUDA engine, on the NVIDIA GPUs `--gpus` picked.
    Cuda,
    /// burn's engine on whatever `--gpus` picks (no NVIDIA GPU among them,
    /// or another device beside them, so that one run's records come from
    /// one engine).
    Burn,
    /// burn's engine, though `--gpus` picked NVIDIA GPUs: why the CUDA
    /// engine cannot run them.
    BurnBecause(String),
}

/// `--engine auto`'s choice for `--gpus flag` on a machine with `nvidia`
/// NVIDIA GPUs, given what `--gpus` picks for the CUDA engine
/// (`cuda_pick`, `None` where it names a GPU that is not NVIDIA's),
/// whether the CUDA engine runs this model at this precision
/// (`cuda_fits`) and the libraries it lacks (`missing`, one line).
fn auto_engine(
    flag: &str,
    nvidia: usize,
    cuda_pick: Option<&[DeviceSpec]>,
    cuda_fits: Result<(), String>,
    missing: Option<String>,
) -> Auto {
    let off_gpu = ["cpu", "none", "software"]
        .iter()
        .any(|f| flag.trim().eq_ignore_ascii_case(f));
    let all_nvidia = cuda_pick.is_some_and(|devices| {
        !devices.is_empty() && devices.iter().all(|d| matches!(d, DeviceSpec::Gpu(_)))
    });
    if off_gpu || nvidia == 0 || !all_nvidia {
        return Auto::Burn;
    }
    match (cuda_fits, missing) {
        (Err(why), _) | (Ok(()), Some(why)) => Auto::BurnBecause(why),
        (Ok(()), None) => Auto::Cuda,
    }
}

/// Under `--engine auto`, the devices the CUDA engine runs (see
/// [`auto_engine`]) with the notice; `Ok(None)` for burn's engine,
/// `Err(why)` for burn's with why NVIDIA GPUs run on Vulkan.
fn auto_cuda(gpus: &str, cuda_fits: Result<(), String>) -> Result<Option<Chosen>, String> {
    // The CPU and lavapipe are burn's: no probe, no NVIDIA library loaded.
    if auto_engine(gpus, 1, Some(&[DeviceSpec::Gpu(0)]), Ok(()), None) == Auto::Burn {
        return Ok(None);
    }
    let Ok(probe) = crate::probe::probe() else {
        return Ok(None);
    };
    let nvidia = probe.nvidia.len();
    let picked = if nvidia == 0 {
        None
    } else {
        chosen_devices(gpus, Runs::Cuda, None).ok()
    };
    let cuda_pick = picked.as_ref().map(|(devices, _)| devices.as_slice());
    let on_gpus = cuda_pick
        .is_some_and(|d| !d.is_empty() && d.iter().all(|d| matches!(d, DeviceSpec::Gpu(_))));
    // Each GPU picked must be one the engine runs (its kernels need
    // Ampere) before NVIDIA's libraries are loaded, which happens only
    // where the CUDA engine would run; then one their NVRTC compiles for
    // (CUDA 13 left out the GPUs before Turing).
    let missing = if on_gpus && cuda_fits.is_ok() {
        let picked_gpus = capabilities(&probe, cuda_pick.unwrap_or_default());
        below_minimum(&picked_gpus)
            .or_else(|| gpu_worker::cuda::libs::cuda_libraries().missing_line())
            .or_else(|| {
                unsupported_gpu(&picked_gpus, &gpu_worker::cuda::kernels::supported_archs())
            })
    } else {
        None
    };
    match auto_engine(gpus, nvidia, cuda_pick, cuda_fits, missing) {
        Auto::Burn => Ok(None),
        Auto::BurnBecause(why) => Err(why),
        Auto::Cuda => {
            let (devices, notice) = picked.unwrap_or_default();
            let names: Vec<String> = devices.iter().map(ToString::to_string).collect();
            let mut notice =
                notice.unwrap_or_else(|| format!("pipeline: devices {}", names.join(", ")));
            notice.push_str(" on the CUDA engine (NVIDIA's libraries)");
            let left_out = probe
                .gpus
                .iter()
                .filter(|g| g.vulkan && g.uuid.is_none())
                .count();
            if gpus.trim().eq_ignore_ascii_case("all") && left_out > 0 {
                notice.push_str(&format!(
                    "; {left_out} other GPU(s) left out: --engine vulkan runs every GPU"
                ));
            }
            Ok(Some((devices, Some(notice))))
        }
    }
}

/// The name and compute capability of each GPU of `devices`, as the probe
/// saw them.
fn capabilities<'a>(
    probe: &'a crate::probe::Probe,
    devices: &[DeviceSpec],
) -> Vec<(&'a str, Option<(i32, i32)>)> {
    devices
        .iter()
        .filter_map(|d| match d {
            DeviceSpec::Gpu(i) => probe.gpus.get(*i),
            _ => None,
        })
        .map(|g| (g.name.as_str(), g.capability))
        .collect()
}

/// Why `--engine cuda` cannot run the GPUs it `picked` (name, compute
/// capability; `on_gpus`: whether `--gpus flag` picked GPUs only), in the
/// order a user can act on: a GPU below the engine's minimum first, which
/// no library mends (so a T4's user is not sent to install gigabytes, then
/// refused); then NVIDIA's libraries (`missing`, asked only here: it
/// loads them); then no GPU to run on; then a GPU their NVRTC does not
/// compile for (`supported`, asked only here).
fn cuda_refusal(
    picked: &[(&str, Option<(i32, i32)>)],
    flag: &str,
    on_gpus: bool,
    missing: impl FnOnce() -> Option<String>,
    supported: impl FnOnce() -> Vec<i32>,
) -> Option<String> {
    if let Some(why) = below_minimum(picked) {
        return Some(format!("{why}; --engine vulkan runs it"));
    }
    if let Some(missing) = missing() {
        return Some(missing);
    }
    if !on_gpus {
        return Some(format!(
            "no NVIDIA GPU to run on (--gpus {}); --engine cpu runs the CPU",
            flag.trim()
        ));
    }
    unsupported_gpu(picked, &supported()).map(|why| format!("{why}; --engine vulkan runs it"))
}

/// Why the CUDA engine cannot run one of `gpus` (name, compute
/// capability): it is older than the engine's minimum
/// ([`gpu_worker::cuda::MIN_COMPUTE_CAPABILITY`], the number `Gpu::open`
/// refuses below). `None` where every GPU is at or above it, or did not
/// say.
fn below_minimum(gpus: &[(&str, Option<(i32, i32)>)]) -> Option<String> {
    let minimum = gpu_worker::cuda::MIN_COMPUTE_CAPABILITY;
    gpus.iter().find_map(|&(name, capability)| {
        let (major, minor) = capability.filter(|c| *c < minimum)?;
        Some(format!(
            "the CUDA engine needs compute capability {}.{} or newer, and {name} is \
             {major}.{minor}",
            minimum.0, minimum.1
        ))
    })
}

/// Why the CUDA engine cannot run one of `gpus` (name, compute capability):
/// NVRTC, which compiles its kernels, has no architecture at or below the
/// GPU's (`supported`, as 75, 80, …; a newer GPU takes the newest's PTX).
/// `None` where it can run them all, or where NVRTC or the GPU did not say.
fn unsupported_gpu(gpus: &[(&str, Option<(i32, i32)>)], supported: &[i32]) -> Option<String> {
    let oldest = supported.iter().min()?;
    gpus.iter().find_map(|&(name, capability)| {
        let (major, minor) = capability?;
        gpu_worker::cuda::kernels::target_for((major, minor), supported)
            .is_none()
            .then(|| {
                format!(
                    "the CUDA engine's NVRTC compiles for compute capability {}.{} and newer, \
                     and {name} is {major}.{minor}",
                    oldest / 10,
                    oldest % 10
                )
            })
    })
}

#[cfg(test)]
mod tests {
    use crate::devices::gpus::{Runs, engine_runs_on, nvidia_on_vulkan};
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
            capability: None,
            cuda_index: None,
            mig_of: None,
            mig_enabled: false,
        }
    }

    /// `auto` and `--engine cuda` keep the CUDA engine off a GPU older
    /// than its minimum, 8.0 (a T4 or RTX 2080 at 7.5, a V100 at 7.0),
    /// naming the minimum and the GPU, over every capability from 3.0 to
    /// 12.9; an A100 (8.0) and anything newer run, as does a GPU that did
    /// not say.
    #[test]
    fn a_gpu_older_than_the_engines_minimum_stays_off_the_cuda_engine() {
        use super::below_minimum;
        assert_eq!(gpu_worker::cuda::MIN_COMPUTE_CAPABILITY, (8, 0));
        assert_eq!(
            below_minimum(&[("Tesla T4", Some((7, 5)))]).as_deref(),
            Some("the CUDA engine needs compute capability 8.0 or newer, and Tesla T4 is 7.5")
        );
        assert_eq!(
            below_minimum(&[("A100", Some((8, 0))), ("Tesla V100", Some((7, 0)))]).as_deref(),
            Some("the CUDA engine needs compute capability 8.0 or newer, and Tesla V100 is 7.0")
        );
        assert_eq!(below_minimum(&[("A100", Some((8, 0)))]), None);
        assert_eq!(below_minimum(&[("unknown", None)]), None);
        for major in 3..=12 {
            for minor in 0..=9 {
                let why = below_minimum(&[("H100", Some((9, 0))), ("gpu", Some((major, minor)))]);
                assert_eq!(why.is_some(), major < 8, "{major}.{minor}: {why:?}");
                if let Some(why) = why {
                    assert!(
                        why.contains("8.0") && why.ends_with(&format!("gpu is {major}.{minor}")),
                        "{why}"
                    );
                }
            }
        }
    }

    /// Above the minimum, the CUDA engine stays off a GPU its NVRTC
    /// cannot compile for (a future NVRTC that left out Ampere), names
    /// it, and says nothing where it can, or where the GPU or NVRTC did
    /// not say.
    #[test]
    fn a_gpu_older_than_nvrtcs_oldest_architecture_stays_on_vulkan() {
        use super::unsupported_gpu;
        let cuda13 = [75, 80, 86, 89, 90, 100, 120];
        assert_eq!(unsupported_gpu(&[("H100", Some((9, 0)))], &cuda13), None);
        assert_eq!(unsupported_gpu(&[("A100", Some((8, 0)))], &cuda13), None);
        // Newer than NVRTC knows: PTX for the newest, not refused.
        assert_eq!(unsupported_gpu(&[("next", Some((13, 0)))], &cuda13), None);
        assert_eq!(unsupported_gpu(&[("unknown", None)], &cuda13), None);
        assert_eq!(unsupported_gpu(&[("A100", Some((8, 0)))], &[]), None);
        let hopper_on = [90, 100, 120];
        let why = unsupported_gpu(
            &[("H100", Some((9, 0))), ("A100", Some((8, 0)))],
            &hopper_on,
        )
        .expect("the Ampere is refused");
        assert_eq!(
            why,
            "the CUDA engine's NVRTC compiles for compute capability 9.0 and newer, and A100 \
             is 8.0"
        );
    }

    /// `--engine cuda` refuses a GPU below the engine's minimum before it
    /// looks for NVIDIA's libraries (a T4's user is not told to install
    /// them, then refused), and asks for the libraries, and then NVRTC's
    /// architectures, only where nothing before refused: over every
    /// combination of GPUs picked, libraries, `--gpus` picking GPUs only,
    /// and NVRTC's architectures.
    #[test]
    fn engine_cuda_refuses_an_old_gpu_before_asking_for_nvidias_libraries() {
        use super::cuda_refusal;
        use std::cell::Cell;
        let t4 = ("Tesla T4", Some((7, 5)));
        let a100 = ("A100", Some((8, 0)));
        let h100 = ("H100", Some((9, 0)));
        let unknown = ("unknown", None);
        type Picked<'a> = Vec<(&'a str, Option<(i32, i32)>)>;
        let picks: [Picked<'_>; 6] = [
            vec![],
            vec![a100],
            vec![t4],
            vec![h100, t4],
            vec![a100, h100],
            vec![unknown],
        ];
        let lacking = "the CUDA engine needs cuDNN: pip install nvidia-cudnn-cu13";
        for picked in &picks {
            for missing in [None, Some(lacking)] {
                for on_gpus in [true, false] {
                    for supported in [vec![75, 80, 90], vec![90, 100]] {
                        let (asked_libraries, asked_nvrtc) = (Cell::new(false), Cell::new(false));
                        let got = cuda_refusal(
                            picked,
                            " all ",
                            on_gpus,
                            || {
                                asked_libraries.set(true);
                                missing.map(str::to_owned)
                            },
                            || {
                                asked_nvrtc.set(true);
                                supported.clone()
                            },
                        );
                        let old = picked.iter().any(|g| g.1.is_some_and(|c| c < (8, 0)));
                        let nvrtc_lacks = picked
                            .iter()
                            .any(|g| g.1.is_some_and(|c| c < (supported[0] / 10, 0)));
                        let case = format!("{picked:?} {missing:?} {on_gpus} {supported:?}");
                        let want: Option<&str> = if old {
                            Some("the CUDA engine needs compute capability 8.0 or newer")
                        } else if missing.is_some() {
                            Some(lacking)
                        } else if !on_gpus {
                            Some("no NVIDIA GPU to run on (--gpus all)")
                        } else if nvrtc_lacks {
                            Some("the CUDA engine's NVRTC compiles for")
                        } else {
                            None
                        };
                        match (&got, want) {
                            (Some(got), Some(want)) => {
                                assert!(got.starts_with(want), "{case}: {got}");
                                assert!(!got.contains('\n'), "{case}: {got}");
                            }
                            (got, want) => assert_eq!(got.as_deref(), want, "{case}"),
                        }
                        assert_eq!(asked_libraries.get(), !old, "{case}");
                        assert_eq!(
                            asked_nvrtc.get(),
                            !old && missing.is_none() && on_gpus,
                            "{case}"
                        );
                    }
                }
            }
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

    /// `--engine auto` takes the CUDA engine exactly where `--gpus` picks
    /// NVIDIA GPUs only, the engine runs the model and its libraries
    /// load; every other case is burn's, with the reason where NVIDIA GPUs
    /// were picked. Over every combination of the five inputs.
    #[test]
    fn auto_takes_the_cuda_engine_exactly_where_it_can_run_the_nvidia_gpus_picked() {
        use super::{Auto, auto_engine};
        use pipeline_core::DeviceSpec;
        let gpus = [DeviceSpec::Gpu(0), DeviceSpec::Gpu(1)];
        let with_cpu = [DeviceSpec::Gpu(0), DeviceSpec::Cpu];
        let picks: [Option<&[DeviceSpec]>; 4] = [None, Some(&[]), Some(&gpus), Some(&with_cpu)];
        for flag in ["all", "0", "0,1", "cpu", "none", "software", " CPU "] {
            for nvidia in [0, 2] {
                for (p, pick) in picks.iter().enumerate() {
                    for fits in [Ok(()), Err("the CUDA engine computes in f16".to_owned())] {
                        for missing in [None, Some("the CUDA engine needs cuDNN".to_owned())] {
                            let got =
                                auto_engine(flag, nvidia, *pick, fits.clone(), missing.clone());
                            let on_nvidia = !["cpu", "none", "software"]
                                .contains(&flag.trim().to_lowercase().as_str())
                                && nvidia > 0
                                && p == 2;
                            let want = match (on_nvidia, &fits, &missing) {
                                (false, _, _) => Auto::Burn,
                                (true, Err(why), _) | (true, Ok(()), Some(why)) => {
                                    Auto::BurnBecause(why.clone())
                                }
                                (true, Ok(()), None) => Auto::Cuda,
                            };
                            assert_eq!(
                                got, want,
                                "{flag:?} nvidia {nvidia} pick {pick:?} {fits:?} {missing:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// `--gpus all` says why NVIDIA GPUs it found run on Vulkan, in one
    /// line, and says nothing of CUDA on other machines.
    #[test]
    fn nvidia_gpus_on_vulkan_are_explained() {
        let lacking = "the CUDA engine needs cuDNN: pip install nvidia-cudnn-cu13";
        assert_eq!(nvidia_on_vulkan(0, lacking), None);
        let why = nvidia_on_vulkan(2, lacking).expect("explained");
        assert_eq!(why, format!("NVIDIA GPUs run on Vulkan: {lacking}"));
        assert!(!why.contains('\n'), "{why}");
    }
}
