//! The tensors a model takes, by canonical name: from a checkpoint in one
//! of the published layouts (checked whole first: missing, extra and
//! mis-shaped tensors are one error), or seeded random ones.

use std::collections::BTreeSet;

use regex::Regex;

use crate::checkpoint::{Checkpoint, HostTensor};
use crate::layout::{Layout, LayoutRules, Place, chosen, file_shapes, place, text_place};
use crate::weights_error::WeightsError;
use crate::weights_error::summarise;

/// Where a model's tensors come from.
enum Origin<'a> {
    File(&'a Checkpoint, Layout),
    /// A text tower's tensors in a checkpoint (the image tower's are
    /// someone else's).
    Text(&'a Checkpoint, Layout),
    /// Deterministic values from the seed and each tensor's name, the same
    /// on every device and in every process.
    Seeded(u64),
}

/// The tensors a model takes from a checkpoint (or a seed), by canonical
/// name.
pub struct Tensors<'a> {
    origin: Origin<'a>,
    model: String,
    /// Canonical name → shape the model expects.
    wanted: Vec<(String, Vec<usize>)>,
}

impl<'a> Tensors<'a> {
    /// Checks that `checkpoint` (in `layout`) holds exactly the `wanted`
    /// tensors of `model`, apart from the keys the layout skips.
    pub fn check(
        checkpoint: &'a Checkpoint,
        layout: Layout,
        model: &str,
        wanted: Vec<(String, Vec<usize>)>,
    ) -> Result<Self, WeightsError> {
        let (mut problems, used) = shape_problems(checkpoint, &wanted, |n| place(layout, n));
        let skipped: Vec<Regex> = layout
            .skipped()
            .iter()
            .map(|p| Regex::new(p).expect("layout patterns are valid regexes"))
            .collect();
        for name in checkpoint.names() {
            let bookkeeping = name.ends_with("num_batches_tracked");
            if !used.contains(name) && !bookkeeping && !skipped.iter().any(|re| re.is_match(name)) {
                problems.push(format!("{name} is not in the model"));
            }
        }
        if !problems.is_empty() {
            return Err(WeightsError::Mismatch {
                path: checkpoint.path().to_path_buf(),
                model: model.to_owned(),
                problem: summarise(&format!("it looks like {layout} checkpoint"), &problems),
            });
        }
        Ok(Self {
            origin: Origin::File(checkpoint, layout),
            model: model.to_owned(),
            wanted,
        })
    }

    /// Checks that `checkpoint` (in `layout`) holds the text tower's
    /// `wanted` tensors with their shapes; the file's other tensors (the
    /// image tower) are not the text tower's business.
    pub fn check_text(
        checkpoint: &'a Checkpoint,
        layout: Layout,
        model: &str,
        wanted: Vec<(String, Vec<usize>)>,
    ) -> Result<Self, WeightsError> {
        let (problems, _) = shape_problems(checkpoint, &wanted, |n| text_place(layout, n));
        if !problems.is_empty() {
            return Err(WeightsError::Mismatch {
                path: checkpoint.path().to_path_buf(),
                model: model.to_owned(),
                problem: summarise(
                    &format!("its text tower does not fit (it looks like {layout} checkpoint)"),
                    &problems,
                ),
            });
        }
        Ok(Self {
            origin: Origin::Text(checkpoint, layout),
            model: model.to_owned(),
            wanted,
        })
    }

    /// Seeded random tensors for `wanted` (benchmarks and tests without a
    /// weight file): LayerNorm scales near 1, biases near 0, layer scales
    /// near 0.1, other tensors uniform with unit variance per fan-in.
    pub fn seeded(seed: u64, model: &str, wanted: Vec<(String, Vec<usize>)>) -> Self {
        Self {
            origin: Origin::Seeded(seed),
            model: model.to_owned(),
            wanted,
        }
    }

    /// The tensor the model calls `name`, as the model wants it.
    pub fn take(&self, name: &str) -> Result<HostTensor, WeightsError> {
        let shape = self
            .wanted
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("{} asked for {name}, which it did not declare", self.model));
        let (checkpoint, place) = match self.origin {
            Origin::File(checkpoint, layout) => (checkpoint, place(layout, name)),
            Origin::Text(checkpoint, layout) => (checkpoint, text_place(layout, name)),
            Origin::Seeded(seed) => return Ok(seeded_tensor(seed, name, shape)),
        };
        let place = chosen(place, &|k| checkpoint.shape(k).is_some());
        let tensor = match place {
            Place::Key(k) | Place::Unsqueezed(k, _) | Place::Flat(k) => checkpoint.read(&k)?,
            Place::Transposed(k) => checkpoint.read(&k)?.transposed(),
            Place::Stacked(keys) => {
                let mut values = Vec::new();
                for k in keys {
                    values.extend(checkpoint.read(&k)?.values);
                }
                HostTensor::new(shape.clone(), values)
            }
            Place::First(_) => unreachable!("chosen() narrowed it"),
        };
        Ok(HostTensor::new(shape, tensor.values))
    }
}

/// The `wanted` tensors that `checkpoint` lacks or holds in another shape,
/// each in words, and every file key they were looked for under (`place`
/// says where a canonical name is).
fn shape_problems(
    checkpoint: &Checkpoint,
    wanted: &[(String, Vec<usize>)],
    place: impl Fn(&str) -> Place,
) -> (Vec<String>, BTreeSet<String>) {
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (name, shape) in wanted {
        let chosen = chosen(place(name), &|k| checkpoint.shape(k).is_some());
        for (file_key, file_shape) in file_shapes(&chosen, shape) {
            match checkpoint.shape(&file_key) {
                None => problems.push(format!("{file_key} is missing")),
                Some(got) if got != file_shape.as_slice() => {
                    problems.push(format!("{file_key} is {got:?}, expected {file_shape:?}"))
                }
                Some(_) => {}
            }
            used.insert(file_key);
        }
    }
    (problems, used)
}

/// SplitMix64 over the FNV-1a hash of the seed and the name: values in [0, 1).
fn units(seed: u64, name: &str, n: usize) -> impl Iterator<Item = f32> {
    let start = name.bytes().fold(0xCBF2_9CE4_8422_2325 ^ seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    });
    (1..=n as u64).map(move |i| {
        let mut z = start.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f64 / (1u64 << 24) as f64) as f32
    })
}

fn seeded_tensor(seed: u64, name: &str, shape: Vec<usize>) -> HostTensor {
    let n = shape.iter().product::<usize>();
    let u = units(seed, name, n);
    let leaf = name.rsplit('.').next().unwrap_or(name);
    let values: Vec<f32> = if shape.len() == 1 && (name.contains("norm") || leaf == "weight") {
        u.map(|u| 0.9 + 0.2 * u).collect()
    } else if leaf == "bias" {
        u.map(|u| (u - 0.5) * 0.1).collect()
    } else if leaf.starts_with("ls") || leaf == "layer_scale" {
        u.map(|u| 0.05 + 0.1 * u).collect()
    } else {
        let fan_in = if shape.len() > 1 {
            shape[1..].iter().product::<usize>()
        } else {
            shape[0]
        };
        let bound = (3.0 / fan_in.max(1) as f64).sqrt() as f32;
        u.map(|u| (u * 2.0 - 1.0) * bound).collect()
    };
    HostTensor::new(shape, values)
}
