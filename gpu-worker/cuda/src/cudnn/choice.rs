//! How a convolution's algorithm is chosen (#40), apart from cuDNN's calls:
//! the order its candidates are tried in, what counts as cuDNN refusing
//! one (so the next is tried) rather than failing, and the error when
//! every one was refused.

use cudarc::cudnn::{result, sys};

use crate::gpu::GpuError;
use crate::plan::ConvActivation;

/// How a layer runs at one batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Choice {
    pub(super) algo: sys::cudnnConvolutionFwdAlgo_t,
    /// Through `cudnnConvolutionBiasActivationForward`.
    pub(super) fused: bool,
}

/// A layer's choices.
#[derive(Debug, Default)]
pub(super) struct Choices {
    pub(super) by_batch: std::collections::HashMap<usize, Choice>,
    pub(super) first: Option<Choice>,
}

/// Why a launch did not run.
pub(super) enum Launch {
    /// cuDNN refused this algorithm at this shape, or its workspace did
    /// not fit: another candidate may run.
    Refused(GpuError),
    /// Anything else (a fault): no other candidate is tried.
    Failed(GpuError),
}

/// Whether cuDNN's `status` refuses a configuration (not supported, a bad
/// parameter for it) rather than reports a failure.
pub(super) fn is_refusal(status: sys::cudnnStatus_t) -> bool {
    let code = status as u32;
    // cuDNN 8's BAD_PARAM and NOT_SUPPORTED, cuDNN 9's families of them.
    code == 3 || code == 9 || (2000..4000).contains(&code)
}

pub(super) fn refusal(what: &str) -> impl FnOnce(result::CudnnError) -> Launch + '_ {
    move |e| {
        let error = GpuError(format!("cuDNN {what}: {:?}", e.0));
        if is_refusal(e.0) {
            Launch::Refused(error)
        } else {
            Launch::Failed(error)
        }
    }
}

/// The order a layer's candidates are tried in at a new batch size: the
/// layer's first choice (if cuDNN offers its algorithm here), then fused
/// calls where the epilogue fuses (ReLU with any algorithm, identity with
/// `IMPLICIT_PRECOMP_GEMM` only; ReLU6 never), then every algorithm
/// unfused; `algos` best first, each pair once.
pub(super) fn candidates(
    algos: &[sys::cudnnConvolutionFwdAlgo_t],
    activation: ConvActivation,
    first: Option<Choice>,
) -> Vec<Choice> {
    use sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM as PRECOMP;
    let fuses = |algo| match activation {
        ConvActivation::Relu => true,
        ConvActivation::Identity => algo == PRECOMP,
        ConvActivation::Relu6 => false,
    };
    let mut order: Vec<Choice> = first
        .filter(|c| algos.contains(&c.algo))
        .into_iter()
        .collect();
    let fused = algos
        .iter()
        .filter(|&&a| fuses(a))
        .map(|&algo| Choice { algo, fused: true });
    let unfused = algos.iter().map(|&algo| Choice { algo, fused: false });
    for c in fused.chain(unfused) {
        if !order.contains(&c) {
            order.push(c);
        }
    }
    order
}

/// The error when every candidate was refused: out of memory when a
/// workspace did not fit (the backoff then halves the batch), else
/// cuDNN's refusals.
pub(super) fn refused_all(what: &str, refusals: Vec<GpuError>) -> GpuError {
    match refusals.iter().find(|e| e.0.contains("OUT_OF_MEMORY")) {
        Some(oom) => GpuError(format!("{what}: {oom}")),
        None => GpuError(format!(
            "{what} ({}); use --engine vulkan",
            refusals
                .iter()
                .map(|e| e.0.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::cudnnConvolutionFwdAlgo_t as Algo;

    const GEMM: Algo = Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    const PRECOMP: Algo = Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    const WINOGRAD: Algo = Algo::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;

    fn c(algo: Algo, fused: bool) -> Choice {
        Choice { algo, fused }
    }

    /// Fused calls first where the epilogue fuses, then every algorithm
    /// unfused, each once; the layer's first choice leads wherever cuDNN
    /// offers it, and is dropped where it does not.
    #[test]
    fn candidates_run_fused_first_and_the_layers_first_choice_before_all() {
        let algos = [WINOGRAD, PRECOMP, GEMM];
        assert_eq!(
            candidates(&algos, ConvActivation::Relu, None),
            [
                c(WINOGRAD, true),
                c(PRECOMP, true),
                c(GEMM, true),
                c(WINOGRAD, false),
                c(PRECOMP, false),
                c(GEMM, false)
            ]
        );
        assert_eq!(
            candidates(&algos, ConvActivation::Identity, None),
            [
                c(PRECOMP, true),
                c(WINOGRAD, false),
                c(PRECOMP, false),
                c(GEMM, false)
            ]
        );
        assert_eq!(
            candidates(&algos, ConvActivation::Relu6, Some(c(GEMM, false))),
            [c(GEMM, false), c(WINOGRAD, false), c(PRECOMP, false)]
        );
        assert_eq!(
            candidates(&[PRECOMP], ConvActivation::Relu, Some(c(GEMM, true))),
            [c(PRECOMP, true), c(PRECOMP, false)]
        );
    }

    /// Not supported and bad parameters, in cuDNN 8's codes and cuDNN 9's
    /// families, are refusals; an execution failure or an internal error is
    /// not.
    #[test]
    fn refusals_are_told_from_failures() {
        use sys::cudnnStatus_t as S;
        assert!(is_refusal(S::CUDNN_STATUS_NOT_SUPPORTED));
        assert!(is_refusal(S::CUDNN_STATUS_BAD_PARAM));
        assert!(!is_refusal(S::CUDNN_STATUS_EXECUTION_FAILED));
        assert!(!is_refusal(S::CUDNN_STATUS_INTERNAL_ERROR));
        assert!(!is_refusal(S::CUDNN_STATUS_SUCCESS));
    }
}
