//! `CUDA_VISIBLE_DEVICES` read as CUDA reads it, over NVIDIA's own
//! enumeration of this machine ([`NvidiaDevice`], filled by the device
//! probe from NVML and the CUDA driver, and by hand in tests), into the
//! tool's `gpu:N` indices.
//!
//! - An index counts NVIDIA GPUs only, in CUDA's order: fastest first
//!   (the CUDA driver's own heuristic, which the probe asks it for) by
//!   default, PCI bus order with `CUDA_DEVICE_ORDER=PCI_BUS_ID`. The
//!   tool's `gpu:N` counts every GPU (an integrated one included) in bus
//!   order, so the two differ. Where the driver did not give its order
//!   for a GPU not in MIG mode, bus order stands in for fastest-first
//!   (equal GPUs are ordered so), and the run says so.
//! - `GPU-…` and `MIG-…` name a GPU or a MIG instance by UUID, or by a
//!   prefix of it that names one device only, as CUDA accepts.
//! - A GPU in MIG mode runs as its instances: naming it names each of them
//!   (CUDA gives a process one MIG instance, and a worker is one process).
//! - As in CUDA, the list ends at the first entry that names no device: a
//!   negative index (`-1` hides every GPU), one past the last GPU
//!   (HTCondor's `10000`), an empty entry, anything that is neither an
//!   index nor a UUID (Slurm's `NoDevFiles`, `none`, `all`), or a device
//!   named again. What comes before it is visible; nothing, where it comes
//!   first. The entry that ended the list is kept, for the run to say.
//! - A `GPU-…`/`MIG-…` entry that names no device of this machine, or
//!   begins several UUIDs, is the one error: the user named a GPU that is
//!   not there, and a run without it is not what was asked for.

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
    /// Whether MIG mode is on. CUDA then lists its instances, not it, so
    /// the driver gives it no place of its own in fastest-first order.
    pub mig_mode: bool,
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

/// What `CUDA_VISIBLE_DEVICES` makes visible: the `gpu:N` indices, in
/// the value's order, and the entry that ended the list before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visible {
    /// The devices named, each once.
    pub gpus: Vec<usize>,
    /// The entry CUDA stops at, where one does before the value's end (a
    /// trailing comma, which hides nothing, is not one).
    pub ended: Option<ListEnd>,
    /// Whether its indices were counted in PCI bus order standing in for
    /// CUDA's fastest-first, which the CUDA driver did not give.
    pub bus_order_stands_in: bool,
}

/// The entry at which CUDA stops reading `CUDA_VISIBLE_DEVICES`, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEnd {
    /// The entry as written, trimmed (empty for an empty entry).
    pub entry: String,
    /// Why CUDA reads no device there, where more than "it is negative"
    /// is worth saying.
    pub why: Option<String>,
}

impl ListEnd {
    /// Whether the entry is `all`, which CUDA reads as no GPU though it
    /// is meant as every GPU.
    pub fn is_all(&self) -> bool {
        self.entry.eq_ignore_ascii_case("all")
    }
}

impl fmt::Display for ListEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entry.is_empty() {
            f.write_str("CUDA's list ends at an empty entry")?;
        } else {
            write!(f, "CUDA's list ends at `{}`", self.entry)?;
        }
        match &self.why {
            Some(why) => write!(f, ": {why}"),
            None => Ok(()),
        }
    }
}

/// The `gpu:N` indices `CUDA_VISIBLE_DEVICES=value` makes visible, in the
/// value's order, over `gpus` numbered in `order`; or, in one line, why a
/// `GPU-…`/`MIG-…` entry names no device of this machine, or several.
pub fn cuda_visible(
    value: &str,
    order: DeviceOrder,
    gpus: &[NvidiaDevice],
) -> Result<Visible, String> {
    let (ordered, stands_in) = cuda_order(order, gpus);
    let counted = std::cell::Cell::new(false);
    let visible = read_list(
        value,
        |n| match ordered.get(n) {
            Some(gpu) => {
                counted.set(true);
                Ok(whole_or_instances(gpu))
            }
            None if ordered.is_empty() => Err("this machine has no NVIDIA GPU".to_owned()),
            None => Err(format!(
                "CUDA numbers this machine's {} NVIDIA GPU(s) 0 to {} in {order} order; see \
                 nvidia-smi -L",
                ordered.len(),
                ordered.len() - 1
            )),
        },
        |entry| by_uuid(entry, gpus),
    )?;
    Ok(Visible {
        bus_order_stands_in: stands_in && counted.get(),
        ..visible
    })
}

/// `value` read entry by entry as CUDA reads it: an index is what
/// `by_index` names, or ends the list (`Err`: why); a negative index, an
/// empty entry, anything that is neither an index nor a UUID, and a device
/// named again end it too, as in CUDA; a `GPU-…`/`MIG-…` entry is what
/// `by_uuid` names, or the error (a user naming a GPU that is not there).
pub(crate) fn read_list(
    value: &str,
    by_index: impl Fn(usize) -> Result<Vec<usize>, String>,
    by_uuid: impl Fn(&str) -> Result<Vec<usize>, String>,
) -> Result<Visible, String> {
    let mut visible = Visible {
        gpus: Vec::new(),
        ended: None,
        bus_order_stands_in: false,
    };
    if value.trim().is_empty() {
        return Ok(visible);
    }
    let entries: Vec<&str> = value.split(',').map(str::trim).collect();
    for (at, &entry) in entries.iter().enumerate() {
        let named = if has_uuid_prefix(entry) {
            Ok(by_uuid(entry).map_err(|why| format!("CUDA_VISIBLE_DEVICES={value}: {why}"))?)
        } else {
            match entry.parse::<i64>() {
                Ok(n) => usize::try_from(n)
                    .map_err(|_| None)
                    .and_then(|n| by_index(n).map_err(Some)),
                Err(_) if entry.is_empty() => Err(None),
                Err(_) if entry.eq_ignore_ascii_case("all") => {
                    Err(Some("CUDA reads it as no GPU".to_owned()))
                }
                Err(_) => Err(Some(
                    "neither an index nor a GPU-… or MIG-… UUID".to_owned(),
                )),
            }
        };
        let end = match named {
            Ok(named) => match named.iter().find(|i| visible.gpus.contains(i)) {
                Some(again) => Some(format!("gpu:{again} again")),
                None => {
                    visible.gpus.extend(named);
                    continue;
                }
            },
            Err(why) => why,
        };
        // A trailing comma ends nothing that was there.
        if !entries[at..].iter().all(|e| e.is_empty()) {
            visible.ended = Some(ListEnd {
                entry: entry.to_owned(),
                why: end,
            });
        }
        break;
    }
    Ok(visible)
}

/// `gpus` in the order CUDA numbers them, and whether bus order stood in
/// for fastest-first. Fastest-first needs the driver's place for every GPU
/// not in MIG mode (one in MIG mode has none: the driver lists its
/// instances, whose UUIDs are not the GPU's, and it comes after those with
/// a place); without it, bus order stands in.
fn cuda_order(order: DeviceOrder, gpus: &[NvidiaDevice]) -> (Vec<&NvidiaDevice>, bool) {
    let mut ordered: Vec<&NvidiaDevice> = gpus.iter().collect();
    let known = gpus
        .iter()
        .filter(|g| !g.mig_mode)
        .all(|g| g.fastest_first.is_some());
    let stands_in = order == DeviceOrder::FastestFirst && !known;
    if order == DeviceOrder::FastestFirst && known {
        ordered.sort_by_key(|g| (g.fastest_first.is_none(), g.fastest_first, g.index));
    } else {
        ordered.sort_by_key(|g| g.index);
    }
    (ordered, stands_in)
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

/// Whether CUDA reads an index in `value` (a `CUDA_VISIBLE_DEVICES`)
/// before its list ends: what needs CUDA's own order of the GPUs, which
/// a UUID does not.
pub fn names_an_index(value: &str) -> bool {
    value
        .split(',')
        .map(str::trim)
        .find(|entry| !has_uuid_prefix(entry))
        .is_some_and(|entry| entry.parse::<i64>().is_ok_and(|n| n >= 0))
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
            mig_mode: !mig.is_empty(),
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
        cuda_visible(value, order, &machine()).map(|v| v.gpus)
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
            let past = cuda_visible("3", *order, &machine()).expect("the list ends at 3");
            let end = past.ended.expect("3 ends the list").to_string();
            assert!(
                past.gpus.is_empty()
                    && end.starts_with("CUDA's list ends at `3`: CUDA numbers this machine's 3")
                    && end.contains(&format!("{order} order"))
                    && !end.contains('\n'),
                "{end}"
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
        // The driver lists a GPU in MIG mode as its instances, so it has no
        // place of its own (cuDeviceGetUuid_v2 answers the instance's
        // UUID): the others keep fastest-first, whatever place it had.
        // Any other GPU without a place, in any combination: bus order,
        // said.
        for unknown in 0..8u32 {
            let mut gpus = machine();
            for (bit, gpu) in gpus.iter_mut().enumerate() {
                if unknown & (1 << bit) != 0 {
                    gpu.fastest_first = None;
                }
            }
            let stands_in = unknown & 0b101 != 0;
            for (order, want) in [
                (DeviceOrder::FastestFirst, [vec![3], vec![1], vec![4, 5]]),
                (DeviceOrder::PciBusId, [vec![1], vec![4, 5], vec![3]]),
            ] {
                let by_bus = [vec![1], vec![4, 5], vec![3]];
                let want = if stands_in { &by_bus } else { &want };
                for (n, gpus_n) in want.iter().enumerate() {
                    let got = cuda_visible(&n.to_string(), order, &gpus).expect("an index");
                    assert_eq!(&got.gpus, gpus_n, "{unknown:03b} {order} {n}");
                    assert_eq!(
                        got.bus_order_stands_in,
                        stands_in && order == DeviceOrder::FastestFirst,
                        "{unknown:03b} {order} {n}"
                    );
                }
                // A UUID counts nothing: nothing stood in.
                let by_uuid = cuda_visible("GPU-cccc3333", order, &gpus).expect("a UUID");
                assert!(!by_uuid.bus_order_stands_in, "{unknown:03b}");
            }
        }
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

    /// One entry of a generated value: what it is written as, and what
    /// CUDA makes of it on [`machine`] in fastest-first order.
    #[derive(Clone, Copy)]
    enum Kind {
        /// Names these `gpu:N`.
        Names(&'static [usize]),
        /// Ends the list (CUDA reads no device there).
        Ends,
        /// A UUID that names nothing, or several: the one error.
        Refused,
    }

    /// Every entry kind CUDA_VISIBLE_DEVICES holds in the wild: indices in
    /// and past range (HTCondor's 10000), negative, empty, Slurm's
    /// NoDevFiles and the other words users set, Dockerfiles' `all`,
    /// UUIDs and MIG UUIDs whole or as prefixes, and prefixes that name
    /// nothing or several.
    const ENTRIES: [(&str, Kind); 15] = [
        ("0", Kind::Names(&[3])),
        ("1", Kind::Names(&[1])),
        ("2", Kind::Names(&[4, 5])),
        ("3", Kind::Ends),
        ("10000", Kind::Ends),
        ("-1", Kind::Ends),
        ("", Kind::Ends),
        ("NoDevFiles", Kind::Ends),
        ("none", Kind::Ends),
        ("void", Kind::Ends),
        ("all", Kind::Ends),
        ("GPU-cccc3333", Kind::Names(&[3])),
        ("MIG-bbbb1111", Kind::Names(&[4])),
        ("GPU-ffff", Kind::Refused),
        ("GPU-aaaa", Kind::Refused),
    ];

    /// Over every value of one to three entries of every kind, in every
    /// position: the devices before the first entry that names none (or
    /// one named again) are visible, that entry is named as the end
    /// (unless only empty entries follow it: a trailing comma), and a
    /// UUID naming nothing or several before it is one line naming the
    /// variable. Nothing CUDA reads as "no GPU" is an error.
    #[test]
    fn the_list_ends_where_cudas_does_over_every_combination_of_entries() {
        let mut values: Vec<Vec<usize>> = (0..ENTRIES.len()).map(|i| vec![i]).collect();
        for _ in 1..3 {
            let longer: Vec<Vec<usize>> = values
                .iter()
                .filter(|v| v.len() == values.last().map_or(0, Vec::len))
                .flat_map(|v| (0..ENTRIES.len()).map(move |i| [v.clone(), vec![i]].concat()))
                .collect();
            values.extend(longer);
        }
        assert_eq!(values.len(), 15 + 15 * 15 + 15 * 15 * 15);
        for picks in &values {
            let written: Vec<&str> = picks.iter().map(|&i| ENTRIES[i].0).collect();
            let value = written.join(",");
            let mut want_gpus: Vec<usize> = Vec::new();
            let mut want_end: Option<&str> = None;
            let mut refused = false;
            for (at, &i) in picks.iter().enumerate() {
                let ends = match ENTRIES[i].1 {
                    Kind::Names(gpus) if gpus.iter().any(|g| want_gpus.contains(g)) => true,
                    Kind::Names(gpus) => {
                        want_gpus.extend(gpus);
                        false
                    }
                    Kind::Ends => true,
                    Kind::Refused => {
                        refused = true;
                        break;
                    }
                };
                if ends {
                    if !written[at..].iter().all(|e| e.is_empty()) {
                        want_end = Some(written[at]);
                    }
                    break;
                }
            }
            let got = cuda_visible(&value, DeviceOrder::FastestFirst, &machine());
            if refused {
                let e = got.expect_err(&value);
                assert!(
                    e.starts_with(&format!("CUDA_VISIBLE_DEVICES={value}: ")) && !e.contains('\n'),
                    "{value:?}: {e}"
                );
                continue;
            }
            let got = got.unwrap_or_else(|e| panic!("{value:?}: {e}"));
            assert_eq!(got.gpus, want_gpus, "{value:?}");
            assert_eq!(
                got.ended.as_ref().map(|end| end.entry.as_str()),
                want_end,
                "{value:?}"
            );
            if let Some(end) = &got.ended {
                assert!(!end.to_string().contains('\n'), "{value:?}: {end}");
            }
        }
        // No NVIDIA GPU at all: an index names nothing, and ends the list.
        let none = cuda_visible("0", DeviceOrder::FastestFirst, &[]).expect("no GPU");
        let end = none.ended.expect("0 ends the list").to_string();
        assert!(
            none.gpus.is_empty() && end.contains("this machine has no NVIDIA GPU"),
            "{end}"
        );
    }
}
