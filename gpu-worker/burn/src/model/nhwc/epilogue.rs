//! What follows a GEMM on the channels-last path, in one pass over its
//! output: bias, then a residual, then ReLU or GELU ([`Then`]).

use burn::tensor::Tensor;
use burn_flex::{Flex, FlexTensor};
use multiversion::multiversion;
use rayon::prelude::*;

use crate::model::activation::gelu_one;
use crate::model::cpu::{compact_values, fused_multiply_add};

/// Output rows per parallel task of the epilogue.
const ROWS: usize = 32;

/// What follows a GEMM, in one pass over its output: bias, then optionally
/// a residual, then optionally an activation.
#[derive(Clone, Copy)]
pub(crate) enum Then<'a> {
    /// Bias only.
    Bias,
    /// Bias, then ReLU.
    Relu,
    /// Bias, then GELU (erf form).
    Gelu,
    /// Bias plus the residual.
    Add(&'a Tensor<2>),
    /// Bias plus the residual, then ReLU.
    AddRelu(&'a Tensor<2>),
}

/// What [`epilogue_rows`] applies after bias and residual.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Activation {
    None,
    Relu,
    Gelu,
}

impl Then<'_> {
    /// The residual's compact values, if any (checked to be `[rows, cout]`,
    /// the output's shape), and the activation.
    pub(super) fn parts(self, rows: usize, cout: usize) -> (Option<FlexTensor>, Activation) {
        let (residual, activation) = match self {
            Then::Bias => (None, Activation::None),
            Then::Relu => (None, Activation::Relu),
            Then::Gelu => (None, Activation::Gelu),
            Then::Add(r) => (Some(r), Activation::None),
            Then::AddRelu(r) => (Some(r), Activation::Relu),
        };
        let residual = residual.map(|r| {
            assert_eq!(r.dims(), [rows, cout], "the residual matches the output");
            compact_values(r)
        });
        (residual, activation)
    }
}

/// `then` applied to a GEMM's output in place: `[rows, Cout]`.
pub(super) fn epilogue(out: Tensor<2>, bias: &[f32], then: Then<'_>) -> Tensor<2> {
    let [rows, cout] = out.dims();
    let mut flex = compact_values(&out);
    drop(out); // the storage is now ours alone
    let (residual, activation) = then.parts(rows, cout);
    let residual = residual
        .as_ref()
        .map(|r| r.as_slice::<f32>().expect("compact"));
    epilogue_in_place(flex.storage_mut::<f32>(), bias, residual, activation);
    Tensor::from_primitive::<Flex>(flex)
}

/// Bias, residual and activation on `[rows, Cout]` values, in parallel.
pub(super) fn epilogue_in_place(
    values: &mut [f32],
    bias: &[f32],
    residual: Option<&[f32]>,
    activation: Activation,
) {
    let cout = bias.len();
    assert_eq!(values.len() % cout, 0, "one bias per output channel");
    let fused = fused_multiply_add();
    let chunk = ROWS * cout;
    values
        .par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(i, out)| {
            let res = residual.map(|r| &r[i * chunk..i * chunk + out.len()]);
            if fused {
                epilogue_fused(out, bias, res, activation)
            } else {
                epilogue_rows::<false>(out, bias, res, activation)
            }
        });
}

#[multiversion(targets("x86_64+avx2+fma"))]
fn epilogue_fused(out: &mut [f32], bias: &[f32], residual: Option<&[f32]>, act: Activation) {
    epilogue_rows::<true>(out, bias, residual, act)
}

#[inline(always)]
fn epilogue_rows<const FMA: bool>(
    out: &mut [f32],
    bias: &[f32],
    residual: Option<&[f32]>,
    act: Activation,
) {
    match act {
        Activation::None => rows(out, bias, residual, |v| v),
        // `max(v, 0)` with NaN kept, as PyTorch's ReLU.
        Activation::Relu => rows(out, bias, residual, |v| if v < 0.0 { 0.0 } else { v }),
        Activation::Gelu => rows(out, bias, residual, gelu_one::<FMA>),
    }
}

#[inline(always)]
fn rows(out: &mut [f32], bias: &[f32], residual: Option<&[f32]>, f: impl Fn(f32) -> f32) {
    let width = bias.len();
    match residual {
        Some(res) => {
            for (row, res) in out.chunks_exact_mut(width).zip(res.chunks_exact(width)) {
                for ((v, b), r) in row.iter_mut().zip(bias).zip(res) {
                    *v = f(*v + b + r);
                }
            }
        }
        None => {
            for row in out.chunks_exact_mut(width) {
                for (v, b) in row.iter_mut().zip(bias) {
                    *v = f(*v + b);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::nhwc::{dense, matrix};
    use burn::tensor::TensorData;
    use pipeline_core::DeviceSpec;

    fn flat(t: Tensor<2>) -> Vec<f32> {
        t.into_data().try_to_vec::<f32>().expect("f32")
    }

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(want)
            .fold(0.0f32, |m, (g, w)| m.max((g - w).abs()));
        assert!(worst <= 1e-5 * scale, "{what}: max |difference| {worst:e}");
    }

    #[test]
    fn the_epilogue_adds_and_activates_in_one_pass() {
        let device = crate::open(&DeviceSpec::Cpu).expect("the CPU opens");
        let (rows, cols) = (70, 5); // more rows than one parallel task
        let values: Vec<f32> = (0..rows * cols).map(|i| i as f32 / 50.0 - 3.0).collect();
        let x = Tensor::<2>::from_data(TensorData::new(values.clone(), [rows, cols]), &device);
        let residual: Vec<f32> = values.iter().map(|v| v * 0.5 - 0.25).collect();
        let r = Tensor::<2>::from_data(TensorData::new(residual.clone(), [rows, cols]), &device);
        let bias = [0.5, -1.0, 0.0, 2.0, -0.125];
        let identity = matrix(
            (0..cols * cols)
                .map(|i| if i % (cols + 1) == 0 { 1.0 } else { 0.0 })
                .collect(),
            cols,
            cols,
        );
        let gelu = |v: f32| {
            (0.5 * f64::from(v) * (1.0 + libm::erf(f64::from(v) / std::f64::consts::SQRT_2))) as f32
        };
        for (then, name) in [
            (Then::Bias, "bias"),
            (Then::Relu, "relu"),
            (Then::Gelu, "gelu"),
            (Then::Add(&r), "add"),
            (Then::AddRelu(&r), "add relu"),
        ] {
            let got = flat(dense(x.clone(), &identity, &bias, then));
            let want: Vec<f32> = values
                .iter()
                .zip(&residual)
                .enumerate()
                .map(|(i, (v, res))| {
                    let b = v + bias[i % cols];
                    match name {
                        "bias" => b,
                        "relu" => b.max(0.0),
                        "gelu" => gelu(b),
                        "add" => b + res,
                        _ => (b + res).max(0.0),
                    }
                })
                .collect();
            assert_close(&got, &want, name);
        }
        // The input itself is untouched (the GEMM's output is a new tensor).
        assert_eq!(flat(x), values);
    }
}
