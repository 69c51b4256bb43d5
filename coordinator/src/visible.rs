//! `CUDA_VISIBLE_DEVICES` read as CUDA reads it, over NVIDIA's own
//! enumeration of this machine ([`NvidiaDevice`], filled by the device
//! probe from NVML and the CUDA driver, and by hand in tests), into the
//! tool's `gpu:N` indices.
//!
//! - An index counts NVIDIA GPUs only, in CUDA's order: fastest first
//!   (the CUDA driver's own heuristic, which the probe asks it for) by
//!   default, PCI bus order with `CUDA_DEVICE_ORDER=PCI_BUS_ID`. The
//!   tool's `gpu:N` counts every GPU (an integrated one included) in bus
//!   order, so the two differ. Where the driver did not give its order,
//!   bus order stands in for fastest-first (equal GPUs are ordered so).
//! - `GPU-…` and `MIG-…` name a GPU or a MIG instance by UUID, or by a
//!   prefix of it that names one device only, as CUDA accepts.
//! - A GPU in MIG mode runs as its instances: naming it names each of them
//!   (CUDA gives a process one MIG instance, and a worker is one process).
//! - A negative index ends the list, as in CUDA (`-1` hides every GPU); an
//!   empty value is no GPU.
//!
//! Where CUDA silently keeps only the devices before an entry it cannot
//! read, this refuses the value in one line: a run on fewer GPUs, or on
//! the CPU, than the user asked for is worse than no run.

use std::fmt;

/// One NVIDIA GPU as its driver enumerates it: what `CUDA_VISIBLE_DEVICES`
/// can name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaDevice {
    /// Its `gpu:N` index: its place among every GPU of the machine in PCI
    /// bus order, so that ascending `index` is CUDA's `PCI_BUS_ID` order.
    pub index: usize,
    /// `GPU-…`, as `nvidia-smi -L` writes it.
    pub uuid: String,
    /// Its place in CUDA's default (fastest-first) order, where the CUDA
    /// driver said.
    pub fastest_first: Option<usize>,
    /// Its MIG instances, where MIG mode is on: each one's `gpu:N` index
    /// and `MIG-…` UUID.
    pub mig: Vec<(usize, String)>,
}

/// How CUDA numbers its devices (`CUDA_DEVICE_ORDER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceOrder {
    /// CUDA's default: the fastest first, by the driver's heuristic.
    FastestFirst,
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID`: ascending PCI bus id.
    PciBusId,
}

impl DeviceOrder {
    /// The order `CUDA_DEVICE_ORDER` (its value, if set) asks for: only
    /// `PCI_BUS_ID` changes CUDA's default.
    pub fn from_env(value: Option<&str>) -> Self {
        match value {
            Some(v) if v.trim() == "PCI_BUS_ID" => Self::PciBusId,
            _ => Self::FastestFirst,
        }
    }
}

impl fmt::Display for DeviceOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::FastestFirst => "fastest-first",
            Self::PciBusId => "PCI bus",
        })
    }
}

/// The `gpu:N` indices `CUDA_VISIBLE_DEVICES=value` makes visible, in the
/// value's order, over `gpus` numbered in `order`; or why the value names
/// no GPU, in one line.
pub fn cuda_visible(
    value: &str,
    order: DeviceOrder,
    gpus: &[NvidiaDevice],
) -> Result<Vec<usize>, String> {
    let said = |why: String| format!("CUDA_VISIBLE_DEVICES={value}: {why}");
    let ordered = cuda_order(order, gpus);
    let mut visible: Vec<usize> = Vec::new();
    if value.trim().is_empty() {
        return Ok(visible);
    }
    for entry in value.split(',').map(str::trim) {
        let named: Vec<usize> = if let Ok(n) = entry.parse::<i64>() {
            let Ok(n) = usize::try_from(n) else {
                break; // CUDA's end of the list: `-1` hides the rest.
            };
            let gpu = ordered.get(n).ok_or_else(|| {
                said(match ordered.len() {
                    0 => format!("{n} names no GPU: this machine has no NVIDIA GPU"),
                    count => format!(
                        "{n} names no GPU: CUDA numbers this machine's {count} NVIDIA GPU(s) \
                         0 to {} in {order} order (see nvidia-smi -L)",
                        count - 1
                    ),
                })
            })?;
            whole_or_instances(gpu)
        } else if has_uuid_prefix(entry) {
            by_uuid(entry, gpus).map_err(said)?
        } else if entry.is_empty() {
            return Err(said("an empty entry names no GPU".to_owned()));
        } else {
            return Err(said(format!(
                "`{entry}` is neither a CUDA device index nor a GPU-… or MIG-… UUID"
            )));
        };
        for index in named {
            if visible.contains(&index) {
                return Err(said(format!("names gpu:{index} twice")));
            }
            visible.push(index);
        }
    }
    Ok(visible)
}

/// `gpus` in the order CUDA numbers them. Fastest-first needs the
/// driver's order for every GPU; without it, bus order stands in.
fn cuda_order(order: DeviceOrder, gpus: &[NvidiaDevice]) -> Vec<&NvidiaDevice> {
    let mut ordered: Vec<&NvidiaDevice> = gpus.iter().collect();
    let known = gpus.iter().all(|g| g.fastest_first.is_some());
    match order {
        DeviceOrder::FastestFirst if known => {
            ordered.sort_by_key(|g| (g.fastest_first, g.index));
        }
        _ => ordered.sort_by_key(|g| g.index),
    }
    ordered
}

/// A GPU as a run takes it: itself, or each of its MIG instances where
/// MIG mode is on.
fn whole_or_instances(gpu: &NvidiaDevice) -> Vec<usize> {
    if gpu.mig.is_empty() {
        vec![gpu.index]
    } else {
        gpu.mig.iter().map(|(index, _)| *index).collect()
    }
}

/// Whether `entry` is written as a UUID: `GPU-…` or `MIG-…`.
pub(crate) fn has_uuid_prefix(entry: &str) -> bool {
    let lower = entry.to_ascii_lowercase();
    lower.starts_with("gpu-") || lower.starts_with("mig-")
}

/// The device whose UUID `entry` is, or begins, and names alone.
fn by_uuid(entry: &str, gpus: &[NvidiaDevice]) -> Result<Vec<usize>, String> {
    let wanted = entry.to_ascii_lowercase();
    let starts = |uuid: &str| uuid.to_ascii_lowercase().starts_with(&wanted);
    let mut found: Vec<(String, Vec<usize>)> = Vec::new();
    for gpu in gpus {
        if starts(&gpu.uuid) {
            found.push((gpu.uuid.clone(), whole_or_instances(gpu)));
        }
        for (index, uuid) in &gpu.mig {
            if starts(uuid) {
                found.push((uuid.clone(), vec![*index]));
            }
        }
    }
    match found.len() {
        1 => Ok(found.swap_remove(0).1),
        0 => Err(format!(
            "{entry} names no NVIDIA GPU or MIG instance of this machine (nvidia-smi -L lists \
             their UUIDs)"
        )),
        n => Err(format!(
            "{entry} begins {n} UUIDs ({}): give more of it",
            found
                .iter()
                .map(|(uuid, _)| uuid.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine as the probe would fill the table: an integrated GPU at
    /// `00:02.0` (gpu:0, not NVIDIA's, so not in the table), then three
    /// NVIDIA GPUs in bus order, gpu:1 to gpu:3, CUDA's fastest first
    /// being gpu:3, gpu:1, gpu:2; gpu:2 in MIG mode with two instances,
    /// gpu:4 and gpu:5.
    fn machine() -> Vec<NvidiaDevice> {
        let gpu = |index, uuid: &str, fastest, mig: &[(usize, &str)]| NvidiaDevice {
            index,
            uuid: uuid.to_owned(),
            fastest_first: fastest,
            mig: mig.iter().map(|(i, u)| (*i, (*u).to_owned())).collect(),
        };
        vec![
            gpu(1, "GPU-aaaa1111-0000-0000-0000-000000000001", Some(1), &[]),
            gpu(
                2,
                "GPU-aaaa2222-0000-0000-0000-000000000002",
                Some(2),
                &[
                    (4, "MIG-bbbb1111-0000-0000-0000-000000000004"),
                    (5, "MIG-bbbb2222-0000-0000-0000-000000000005"),
                ],
            ),
            gpu(3, "GPU-cccc3333-0000-0000-0000-000000000003", Some(0), &[]),
        ]
    }

    fn visible(value: &str, order: DeviceOrder) -> Result<Vec<usize>, String> {
        cuda_visible(value, order, &machine())
    }

    /// Every index, in each order, names the GPU CUDA numbers so (the
    /// integrated GPU never counts), a GPU in MIG mode as its instances;
    /// every pair of indices keeps the value's order.
    #[test]
    fn indices_count_nvidia_gpus_in_cudas_order() {
        use DeviceOrder::{FastestFirst, PciBusId};
        let cuda: [(DeviceOrder, [Vec<usize>; 3]); 2] = [
            (FastestFirst, [vec![3], vec![1], vec![4, 5]]),
            (PciBusId, [vec![1], vec![4, 5], vec![3]]),
        ];
        for (order, want) in &cuda {
            for (n, gpus) in want.iter().enumerate() {
                assert_eq!(visible(&n.to_string(), *order), Ok(gpus.clone()), "{n}");
                for (m, more) in want.iter().enumerate().filter(|(m, _)| *m != n) {
                    let both = [gpus.clone(), more.clone()].concat();
                    assert_eq!(visible(&format!("{n}, {m}"), *order), Ok(both));
                }
            }
            let past = visible("3", *order).expect_err("three NVIDIA GPUs");
            assert!(
                past.starts_with("CUDA_VISIBLE_DEVICES=3: 3 names no GPU")
                    && past.contains(&format!("{order} order"))
                    && !past.contains('\n'),
                "{past}"
            );
        }
    }

    /// `CUDA_DEVICE_ORDER` means fastest-first unless it says PCI_BUS_ID;
    /// where the driver gave no order, bus order stands in.
    #[test]
    fn the_order_is_cudas_and_bus_order_stands_in_without_the_driver() {
        assert_eq!(DeviceOrder::from_env(None), DeviceOrder::FastestFirst);
        assert_eq!(
            DeviceOrder::from_env(Some("FASTEST_FIRST")),
            DeviceOrder::FastestFirst
        );
        assert_eq!(
            DeviceOrder::from_env(Some("PCI_BUS_ID")),
            DeviceOrder::PciBusId
        );
        let mut unknown = machine();
        unknown[0].fastest_first = None;
        assert_eq!(
            cuda_visible("0", DeviceOrder::FastestFirst, &unknown),
            Ok(vec![1])
        );
    }

    /// Every UUID, whole or as any unique prefix, in either case, names its
    /// GPU or MIG instance (a GPU in MIG mode: its instances); a prefix
    /// that several begin is refused naming them, one nothing begins is
    /// refused, each in one line.
    #[test]
    fn uuids_and_their_unique_prefixes_name_gpus_and_mig_instances() {
        let named: [(&str, Vec<usize>); 5] = [
            ("GPU-aaaa1111-0000-0000-0000-000000000001", vec![1]),
            ("GPU-aaaa2222-0000-0000-0000-000000000002", vec![4, 5]),
            ("GPU-cccc3333-0000-0000-0000-000000000003", vec![3]),
            ("MIG-bbbb1111-0000-0000-0000-000000000004", vec![4]),
            ("MIG-bbbb2222-0000-0000-0000-000000000005", vec![5]),
        ];
        for (uuid, want) in &named {
            // Every prefix long enough to be unique, up to the whole UUID.
            for end in 9..=uuid.len() {
                let prefix = &uuid[..end];
                for form in [prefix.to_owned(), prefix.to_ascii_lowercase()] {
                    for order in [DeviceOrder::FastestFirst, DeviceOrder::PciBusId] {
                        assert_eq!(visible(&form, order), Ok(want.clone()), "{form}");
                    }
                }
            }
        }
        let shared = visible("GPU-aaaa", DeviceOrder::FastestFirst).expect_err("two begin it");
        assert!(
            shared.contains("begins 2 UUIDs") && shared.contains("GPU-aaaa1111"),
            "{shared}"
        );
        for nothing in [
            "GPU-ffff",
            "MIG-GPU-aaaa1111-0000-0000-0000-000000000001/1/0",
        ] {
            let e = visible(nothing, DeviceOrder::FastestFirst).expect_err(nothing);
            assert!(
                e.contains("names no NVIDIA GPU") && !e.contains('\n'),
                "{e}"
            );
        }
    }

    /// Empty is no GPU, and a negative index ends the list as in CUDA;
    /// anything else that names no device is refused, as is a device
    /// named twice, never read as "no GPU".
    #[test]
    fn what_names_no_gpu_is_refused_not_read_as_none() {
        for none in ["", " ", "-1", "-1,0"] {
            assert_eq!(visible(none, DeviceOrder::PciBusId), Ok(vec![]), "{none:?}");
        }
        assert_eq!(visible("0,-1,1", DeviceOrder::PciBusId), Ok(vec![1]));
        for bad in [
            "gpu0",
            "0,,1",
            "nvidia0",
            "all",
            "0,1,3",
            "0,GPU-aaaa1111,1",
        ] {
            let e = visible(bad, DeviceOrder::FastestFirst).expect_err(bad);
            assert!(
                e.starts_with(&format!("CUDA_VISIBLE_DEVICES={bad}: ")) && !e.contains('\n'),
                "{e}"
            );
        }
        // No NVIDIA GPU at all: an index names nothing either.
        let e = cuda_visible("0", DeviceOrder::FastestFirst, &[]).expect_err("no GPU");
        assert!(e.contains("this machine has no NVIDIA GPU"), "{e}");
    }
}
