//! `--task raw` (#41 item 5): which outputs are read (`raw_outputs`), and
//! each image's slice of each of them (`slices`) as the model gives it,
//! for the user to post-process (a detector's boxes,
//! scores and classes). Floats travel as f32 (f16 and f64 outputs
//! converted), integers and booleans as i64. An output is sliced along its
//! first axis, which must be the batch: one slice per image.

use half::f16;
use ort::session::SessionOutputs;
use ort::value::{DynValue, TensorElementType, ValueType};
use pipeline_core::{ArrayValues, OutputArray};

use super::graph::{self, ImageInput, Output};

/// Whether `--task raw` reads an output of `element` (ONNX Runtime's
/// name of its element type, as `graph.rs` records it).
pub fn readable(element: &str) -> bool {
    matches!(
        element,
        "Float32"
            | "Float16"
            | "Float64"
            | "Int8"
            | "Int16"
            | "Int32"
            | "Int64"
            | "Uint8"
            | "Uint16"
            | "Uint32"
            | "Uint64"
            | "Bool"
    )
}

/// The outputs `--task raw` reads, and those it leaves out: `wanted` (each
/// one the graph has, of a type it reads, with a batch axis), else every
/// such output (the others left out, with why).
pub fn raw_outputs(
    outputs: &[Output],
    input: &ImageInput,
    wanted: &[String],
) -> Result<(Vec<String>, Vec<String>), String> {
    let input_batch = input.batch;
    let listed = || graph::listed(outputs);
    // Why an output has no slice per image, if it has none; with `names`,
    // also a dynamic first axis named otherwise than the input's batch (a
    // detector's `num_dets`), which "every output" leaves out but a name
    // asked for is read (the pass checks its first axis is the batch:
    // some exporters name every tensor's batch axis apart).
    let unreadable = |o: &Output, names: bool| -> Option<&str> {
        if !readable(&o.element) {
            return Some("not numbers or booleans");
        }
        match o.shape.first() {
            None => Some("no batch axis"),
            Some(&d) if d >= 0 && usize::try_from(d).ok() != input_batch => Some("no batch axis"),
            Some(&d)
                if names
                    && d < 0
                    && !o.first_symbol.is_empty()
                    && !input.batch_symbol.is_empty()
                    && o.first_symbol != input.batch_symbol =>
            {
                Some("its first axis is named otherwise than the input's batch; --output names it")
            }
            _ => None,
        }
    };
    if wanted.is_empty() {
        let split = |names: bool| -> (Vec<&Output>, Vec<&Output>) {
            outputs.iter().partition(|o| unreadable(o, names).is_none())
        };
        // Where names leave nothing, the exporter named every axis apart.
        let names = !split(true).0.is_empty();
        let (read, left) = split(names);
        if read.is_empty() {
            return Err(format!(
                "no output can be read per image (--task raw reads numbers and booleans with a \
                 batch axis); its outputs: {}",
                listed()
            ));
        }
        let left = left
            .iter()
            .map(|o| format!("{o} ({})", unreadable(o, names).unwrap_or_default()))
            .collect();
        return Ok((read.iter().map(|o| o.name.clone()).collect(), left));
    }
    let mut read: Vec<String> = Vec::new();
    for w in wanted {
        if read.contains(w) {
            return Err(format!("output {w} is named twice"));
        }
        let o = outputs
            .iter()
            .find(|o| &o.name == w)
            .ok_or_else(|| format!("no output named {w}; its outputs: {}", listed()))?;
        if let Some(why) = unreadable(o, false) {
            return Err(format!(
                "output {o} cannot be read per image: {why} (--task raw reads numbers and \
                 booleans with a batch axis)"
            ));
        }
        read.push(o.name.clone());
    }
    Ok((read, Vec::new()))
}

/// Each of the `run` images' slices of the outputs `names`, in that order;
/// or why not, in one line.
pub(super) fn slices(
    outputs: &SessionOutputs<'_>,
    names: &[String],
    run: usize,
) -> Result<Vec<Vec<OutputArray>>, String> {
    let mut images: Vec<Vec<OutputArray>> =
        (0..run).map(|_| Vec::with_capacity(names.len())).collect();
    for name in names {
        let value = outputs
            .get(name.as_str())
            .ok_or_else(|| format!("the model gave no output {name}"))?;
        let (shape, values) = extract(value).map_err(|e| format!("output {name}: {e}"))?;
        if shape.first().copied() != i64::try_from(run).ok() {
            return Err(format!(
                "output {name} has shape {shape:?} for a batch of {run}: its first axis is not \
                 the batch, so it has no slice per image"
            ));
        }
        let dims = shape[1..]
            .iter()
            .map(|&d| u32::try_from(d))
            .collect::<Result<Vec<u32>, _>>()
            .map_err(|_| format!("output {name} has shape {shape:?}"))?;
        let each = values.len() / run.max(1);
        for (i, image) in images.iter_mut().enumerate() {
            let part = i * each..(i + 1) * each;
            image.push(OutputArray {
                name: name.clone(),
                shape: dims.clone(),
                values: match &values {
                    ArrayValues::F32(v) => ArrayValues::F32(v[part].to_vec()),
                    ArrayValues::I64(v) => ArrayValues::I64(v[part].to_vec()),
                },
            });
        }
    }
    Ok(images)
}

/// A tensor's shape and values, floats as f32 and integers as i64.
fn extract(value: &DynValue) -> Result<(Vec<i64>, ArrayValues), String> {
    let ValueType::Tensor { ty, .. } = value.dtype() else {
        return Err(format!("{:?} is not a tensor", value.dtype()));
    };
    macro_rules! read {
        ($t:ty, $kind:ident, $convert:expr) => {{
            let (shape, v) = value.try_extract_tensor::<$t>().map_err(|e| {
                // ONNX Runtime's messages span lines: one line here.
                e.to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })?;
            (
                shape.to_vec(),
                ArrayValues::$kind(v.iter().map($convert).collect()),
            )
        }};
    }
    Ok(match ty {
        TensorElementType::Float32 => read!(f32, F32, |&x| x),
        TensorElementType::Float16 => read!(f16, F32, |x| x.to_f32()),
        TensorElementType::Float64 => read!(f64, F32, |&x| x as f32),
        TensorElementType::Int8 => read!(i8, I64, |&x| i64::from(x)),
        TensorElementType::Int16 => read!(i16, I64, |&x| i64::from(x)),
        TensorElementType::Int32 => read!(i32, I64, |&x| i64::from(x)),
        TensorElementType::Int64 => read!(i64, I64, |&x| x),
        TensorElementType::Uint8 => read!(u8, I64, |&x| i64::from(x)),
        TensorElementType::Uint16 => read!(u16, I64, |&x| i64::from(x)),
        TensorElementType::Uint32 => read!(u32, I64, |&x| i64::from(x)),
        // Past i64::MAX they wrap, which no detector's indices reach.
        TensorElementType::Uint64 => read!(u64, I64, |&x| x as i64),
        TensorElementType::Bool => read!(bool, I64, |&x| i64::from(x)),
        other => return Err(format!("{other:?} values are not read")),
    })
}
