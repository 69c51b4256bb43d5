//! A CNN lowered to plain host data ([`CnnGraph`]): convolutions with
//! their BatchNorms folded in, over earlier values. The burn engine lowers
//! its loaded CNN modules into it; the CUDA engine plans from it.

/// What follows a convolution's bias (and residual).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvActivation {
    /// Nothing.
    Identity,
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, 0), 6)`.
    Relu6,
}

/// A convolution with its BatchNorm folded in, PyTorch's OIHW weights.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConv {
    /// Output channels.
    pub cout: usize,
    /// Input channels (all groups).
    pub cin: usize,
    /// Square kernel side.
    pub kernel: usize,
    /// Both axes' stride.
    pub stride: usize,
    /// Zero padding: top, left, bottom, right (TensorFlow's "SAME" is
    /// asymmetric).
    pub padding: [usize; 4],
    /// Groups (`cin` for a depthwise convolution).
    pub groups: usize,
    /// `[cout, cin / groups, kernel, kernel]`, row-major.
    pub weight: Vec<f32>,
    /// `[cout]` (the folded BatchNorm's shift).
    pub bias: Vec<f32>,
}

/// One op of a [`CnnGraph`]; value 0 is the normalised input, op `i`
/// makes value `i + 1`.
#[derive(Debug, Clone, PartialEq)]
pub enum CnnOp {
    /// `activation(conv(input) + bias + residual)`.
    Conv {
        /// The value convolved.
        input: usize,
        /// The convolution.
        conv: HostConv,
        /// A value of the output's shape added before the activation.
        residual: Option<usize>,
        /// After the sum.
        activation: ConvActivation,
    },
    /// torchvision ResNet's stem pool: 3×3, stride 2, padding 1 (padding
    /// never wins).
    MaxPool3x3S2 {
        /// The value pooled.
        input: usize,
    },
}

/// A folded CNN as ops over values: the last value's global mean is the
/// features, then the classifier where it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct CnnGraph {
    /// In order; each reads earlier values only.
    pub ops: Vec<CnnOp>,
    /// Width of the pooled features.
    pub features: usize,
    /// The classifier, `[features, classes]` row-major, and its bias
    /// `[classes]`; `None` for a checkpoint without its head.
    pub classifier: Option<(Vec<f32>, Vec<f32>)>,
}
