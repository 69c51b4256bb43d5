//! `--gpus` → the devices (`chosen_devices`): `all`, `cpu`, `software`,
//! indices and ranges, checked against the machine's GPUs (enumerated in
//! a child, `probe/`) and against what the chosen engine runs on.

use pipeline_core::DeviceSpec;

/// The devices chosen, each once, and the notice saying how.
pub(super) type Chosen = (Vec<DeviceSpec>, Option<String>);

/// Why NVIDIA GPUs run on burn's Vulkan engine under `--engine auto`, when
/// any were found: the CUDA engine cannot run them (`why`).
pub(super) fn nvidia_on_vulkan(nvidia: usize, why: &str) -> Option<String> {
    (nvidia > 0).then(|| format!("NVIDIA GPUs run on Vulkan: {why}"))
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
pub(super) fn engine_runs_on(on: Runs, gpu: &crate::probe::Adapter) -> Result<(), String> {
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
    explain_vulkan: Option<&str>,
) -> Result<Chosen, String> {
    let flag = flag.trim();
    if flag.eq_ignore_ascii_case("all") {
        // A driver that crashes while enumerating costs the probe's
        // process; the run goes on on the CPU and says why.
        let probe = match crate::probe::probe() {
            Ok(probe) => probe,
            Err(e) => {
                let notice = format!("pipeline: warning: {e}; running on the CPU (burn flex)");
                return Ok((vec![DeviceSpec::Cpu], Some(notice)));
            }
        };
        let (gpus, nvidia) = (&probe.gpus, probe.nvidia.len());
        // GPU indices are PCI bus order (then MIG instances), as
        // nvidia-smi numbers GPUs; CUDA_VISIBLE_DEVICES is read over
        // NVIDIA's enumeration as CUDA reads it, and only a UUID that
        // names no GPU ends the command here rather than running on the
        // CPU.
        let given = coordinator::scheduler_gpus(&coordinator::process_env, &probe.nvidia_table())?;
        let chosen: Vec<DeviceSpec> = (0..gpus.len())
            .filter(|i| given.as_ref().is_none_or(|given| given.gpus.contains(i)))
            .filter(|i| match on {
                Runs::Vulkan => gpus[*i].vulkan,
                // A GPU in MIG mode runs as its instances.
                Runs::Cuda => gpus[*i].uuid.is_some() && !probe.in_mig_mode(*i),
            })
            .map(DeviceSpec::Gpu)
            .collect();
        let vulkan_gpus = gpus.iter().filter(|g| g.vulkan).count();
        // A GPU in MIG mode with no instances runs nothing under CUDA:
        // said, with how to make them, where the scheduler did not leave
        // it out.
        let idle_mig: Vec<String> = (0..gpus.len())
            .filter(|_| on == Runs::Cuda)
            .filter(|i| given.as_ref().is_none_or(|given| given.gpus.contains(i)))
            .filter_map(|i| probe.mig_without_instances(i))
            .collect();
        let names: Vec<String> = chosen.iter().map(ToString::to_string).collect();
        let notice = match (&given, chosen.is_empty()) {
            (Some(given), true) => {
                let why = given.why_none().unwrap_or_else(|| {
                    let end = given
                        .ended
                        .as_ref()
                        .map_or_else(String::new, |end| format!("; {end}"));
                    format!(
                        "{} names no {} GPU of this machine{end}",
                        given.source,
                        on.name()
                    )
                });
                format!("pipeline: {why}; running on the CPU (burn flex)")
            }
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
            (Some(given), false) => {
                let mut end = given
                    .ended
                    .as_ref()
                    .map_or_else(String::new, |end| format!("; {end}"));
                if given.bus_order_stands_in {
                    end.push_str(
                        "; its indices counted in PCI bus order, the CUDA driver not having \
                         given its fastest-first order",
                    );
                }
                format!(
                    "pipeline: devices {} (from {}{end})",
                    names.join(", "),
                    given.source
                )
            }
            (None, false) => format!("pipeline: devices {}", names.join(", ")),
        };
        let notice = match explain_vulkan
            .filter(|_| !chosen.is_empty())
            .and_then(|why| nvidia_on_vulkan(nvidia, why))
        {
            Some(why) => format!("{notice}; {why}"),
            None => notice,
        };
        let notice = idle_mig
            .iter()
            .fold(notice, |notice, why| format!("{notice}; left out: {why}"));
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
            let machine = probe(part)?;
            let gpus = &machine.gpus;
            let Some(gpu) = gpus.get(i) else {
                return Err(format!(
                    "--gpus {part}: this machine has {} GPU(s) (see `pipeline devices`); \
                     use cpu or software to run without one",
                    gpus.len()
                ));
            };
            engine_runs_on(on, gpu).map_err(|why| format!("--gpus {part}: {why}"))?;
            if on == Runs::Cuda
                && let Some(why) = machine.mig_without_instances(i)
            {
                return Err(format!("--gpus {part}: {why}"));
            }
            if on == Runs::Cuda && machine.in_mig_mode(i) {
                let instances: Vec<String> = gpus
                    .iter()
                    .filter(|g| g.mig_of == Some(i))
                    .filter_map(|g| g.spec.clone())
                    .collect();
                return Err(format!(
                    "--gpus {part}: {} is in MIG mode, and CUDA runs its instances only: name \
                     them ({})",
                    gpu.name,
                    instances.join(", ")
                ));
            }
        }
        if chosen.contains(&spec) {
            return Err(format!("--gpus lists {spec} twice"));
        }
        chosen.push(spec);
    }
    Ok((chosen, None))
}
