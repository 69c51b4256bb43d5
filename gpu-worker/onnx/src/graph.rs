//! What an ONNX model takes and gives, read from its graph by ONNX Runtime
//! (#41 item 1): the one image input the tool feeds (4-D, NCHW or NHWC
//! with 3 channels, or a dynamic channel axis named as optimum names it;
//! f32, f16 or u8, its batch and side fixed or dynamic)
//! and every output. A model the tool cannot feed (no image input,
//! several inputs, another layout or element type) is a one-line error
//! naming each input and its shape.

use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

use ort::session::Session;
use ort::value::{TensorElementType, ValueType};

/// How the image input lays out its pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `[batch, 3, height, width]`.
    Nchw,
    /// `[batch, height, width, 3]`.
    Nhwc,
}

/// The element type the image input takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PixelType {
    /// 32-bit floats (normalised pixels).
    F32,
    /// 16-bit floats.
    F16,
    /// Bytes (the model normalises itself).
    U8,
}

/// The image input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInput {
    /// Its name in the graph.
    pub name: String,
    /// NCHW or NHWC.
    pub layout: Layout,
    /// Its element type.
    pub pixels: PixelType,
    /// A fixed batch, or `None` for a dynamic one.
    pub batch: Option<usize>,
    /// The batch axis's symbolic name where the graph gives one (e.g.
    /// `batch`), else empty.
    pub batch_symbol: String,
    /// A fixed (height, width), or `None` where either is dynamic (the
    /// size must then be given).
    pub size: Option<(usize, usize)>,
}

/// One output: its name, shape (-1 where dynamic) and element type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Its name in the graph.
    pub name: String,
    /// Its dimensions, -1 where dynamic.
    pub shape: Vec<i64>,
    /// e.g. `Float32`.
    pub element: String,
    /// The first axis's symbolic name where the graph gives one, else
    /// empty.
    pub first_symbol: String,
}

/// What the tool feeds and reads of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    /// The image input.
    pub input: ImageInput,
    /// Every output, in the graph's order.
    pub outputs: Vec<Output>,
}

/// `outputs` as users read them in an error: `logits [?, 7] Float32, …`.
pub fn listed(outputs: &[Output]) -> String {
    outputs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A dimension list as users read it: `[N, 3, 224, 224]`, `?` dynamic.
struct Dims<'a>(&'a [i64]);

impl fmt::Display for Dims<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self
            .0
            .iter()
            .map(|&d| if d < 0 { "?".to_owned() } else { d.to_string() })
            .collect();
        write!(f, "[{}]", dims.join(", "))
    }
}

/// An input or output as users read it: `name [?, 3, 224, 224] Float32`.
fn describe_value(name: &str, value: &ValueType) -> String {
    match value {
        ValueType::Tensor { ty, shape, .. } => format!("{name} {} {ty:?}", Dims(shape)),
        other => format!("{name} ({other:?})"),
    }
}

/// The ONNX Runtime environment, made once (the runtime loaded first).
fn environment() -> Result<&'static ort::environment::Environment, String> {
    static ENVIRONMENT: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();
    ENVIRONMENT
        .get_or_init(|| {
            super::runtime::onnx_runtime()
                .as_ref()
                .map_err(Clone::clone)?;
            ort::init()
                .with_name("pipeline")
                .build()
                .map_err(|e| format!("ONNX Runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The model at `path`, as the tool would feed it; or why not, in one line
/// (a file that is not a model ONNX Runtime loads, or one it cannot feed).
pub fn describe(path: &Path) -> Result<Graph, String> {
    // The graph's inputs and outputs are the file's: optimising it first
    // (a third of a ResNet-50's load) would change nothing read here.
    graph_of(&open(path, 1, false, false)?, path)
}

/// An ONNX Runtime session of the model at `path` on the CPU, with
/// `threads` intra-op threads; or why not, in one line.
pub fn session(path: &Path, threads: usize) -> Result<Session, String> {
    session_on(path, threads, false)
}

/// [`session`] on ONNX Runtime's CUDA execution provider (the process's
/// first visible GPU: workers get theirs as `CUDA_VISIBLE_DEVICES`) when
/// `cuda`; a provider that cannot start is the error, never a silent CPU.
/// Once started, the provider's CUDA context and memory pool stay until
/// the process exits: only a worker, or the coordinator's short-lived
/// trial child (`pipeline probe-onnx-cuda`), asks for it.
pub fn session_on(path: &Path, threads: usize, cuda: bool) -> Result<Session, String> {
    open(path, threads, cuda, true)
}

/// [`session_on`], its graph optimised (every level, ONNX Runtime's
/// default) when `optimized`.
fn open(path: &Path, threads: usize, cuda: bool, optimized: bool) -> Result<Session, String> {
    let env = environment()?;
    let one_line = |e: &dyn fmt::Display| {
        e.to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut builder = Session::builder(env)
        .map_err(|e| format!("ONNX Runtime: {e}"))?
        .with_intra_threads(threads.max(1))
        .map_err(|e| format!("ONNX Runtime: {e}"))?;
    if !optimized {
        builder = builder
            .with_optimization_level(ort::session::builder::GraphOptimizationLevel::Disable)
            .map_err(|e| format!("ONNX Runtime: {e}"))?;
    }
    if cuda {
        let provider = ort::ep::CUDA::default()
            .with_device_id(0)
            .build()
            .error_on_failure();
        builder = builder.with_execution_providers([provider]).map_err(|e| {
            format!(
                "ONNX Runtime's CUDA provider does not start here ({}); onnxruntime-gpu needs \
                 the CUDA and cuDNN libraries of its build (pip install onnxruntime-gpu[cuda,cudnn])",
                one_line(&e)
            )
        })?;
    } else {
        // The loader decodes on the same cores, at a lower priority: intra-op
        // threads that go on spinning after a pass, at the normal one, take
        // its time while the next batch is decoded (mobilenet_v3_small end
        // to end: 5.2 s → 2.9–3.2 s, BENCHMARKS.md, "ONNX models end to
        // end, 2026-11-28"). They stop when a pass ends, and still spin
        // between a pass's operators, where the model wants them.
        builder = builder
            .with_config_entry("session.force_spinning_stop", "1")
            .map_err(|e| format!("ONNX Runtime: {e}"))?;
    }
    builder.commit_from_file(path).map_err(|e| {
        let why = e.to_string();
        format!(
            "{}: not a model ONNX Runtime loads ({})",
            path.display(),
            why.split_whitespace().collect::<Vec<_>>().join(" ")
        )
    })
}

/// What `session` (of the model at `path`) takes and gives, as the tool
/// would feed it; or why it cannot, in one line.
pub fn graph_of(session: &Session, path: &Path) -> Result<Graph, String> {
    let inputs: Vec<(String, ValueType)> = session
        .inputs()
        .iter()
        .map(|o| (o.name().to_owned(), o.dtype().clone()))
        .collect();
    let outputs = session
        .outputs()
        .iter()
        .map(|o| match o.dtype() {
            ValueType::Tensor {
                ty,
                shape,
                dimension_symbols,
            } => Output {
                name: o.name().to_owned(),
                shape: shape.to_vec(),
                element: format!("{ty:?}"),
                first_symbol: dimension_symbols.first().cloned().unwrap_or_default(),
            },
            other => Output {
                name: o.name().to_owned(),
                shape: Vec::new(),
                element: format!("{other:?}"),
                first_symbol: String::new(),
            },
        })
        .collect();
    let input = image_input(&inputs).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Graph { input, outputs })
}

/// The name exporters give a dynamic channel axis (optimum's, and
/// transformers' ONNX configs' before it).
const CHANNEL_SYMBOLS: [&str; 1] = ["num_channels"];

/// The one image input among `inputs`, or why there is none to feed.
pub fn image_input(inputs: &[(String, ValueType)]) -> Result<ImageInput, String> {
    let listed = || {
        inputs
            .iter()
            .map(|(name, value)| describe_value(name, value))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let [(name, value)] = inputs else {
        return Err(format!(
            "the tool feeds one image input; this model has {}: {}",
            inputs.len(),
            listed()
        ));
    };
    let ValueType::Tensor {
        ty,
        shape,
        dimension_symbols,
    } = value
    else {
        return Err(format!("its input is not a tensor: {}", listed()));
    };
    let what = || describe_value(name, value);
    if shape.len() != 4 {
        return Err(format!(
            "its input {} is not an image batch (4 dimensions: N, C, H, W or N, H, W, C)",
            what()
        ));
    }
    // optimum's exports leave every axis dynamic, the channels' named
    // (`[batch_size, num_channels, height, width]`): such an axis takes
    // the three the tool feeds. A fixed 3 says it first.
    let named_channels = |axis: usize| {
        shape[axis] < 0
            && dimension_symbols
                .get(axis)
                .is_some_and(|s| CHANNEL_SYMBOLS.contains(&s.as_str()))
    };
    let layout = match (shape[1], shape[3]) {
        (3, _) => Layout::Nchw,
        (_, 3) => Layout::Nhwc,
        _ if named_channels(1) => Layout::Nchw,
        _ if named_channels(3) => Layout::Nhwc,
        _ => {
            return Err(format!(
                "its input {} has no 3-channel axis after the batch or last: neither NCHW nor \
                 NHWC RGB",
                what()
            ));
        }
    };
    let pixels = match ty {
        TensorElementType::Float32 => PixelType::F32,
        TensorElementType::Float16 => PixelType::F16,
        TensorElementType::Uint8 => PixelType::U8,
        _ => {
            return Err(format!(
                "its input {} takes {ty:?}; the tool feeds f32, f16 or u8 pixels",
                what()
            ));
        }
    };
    let (h, w) = match layout {
        Layout::Nchw => (shape[2], shape[3]),
        Layout::Nhwc => (shape[1], shape[2]),
    };
    let fixed = |d: i64| usize::try_from(d).ok().filter(|&d| d > 0);
    Ok(ImageInput {
        name: name.clone(),
        layout,
        pixels,
        batch: fixed(shape[0]),
        batch_symbol: dimension_symbols.first().cloned().unwrap_or_default(),
        size: fixed(h).zip(fixed(w)),
    })
}

impl fmt::Display for Output {
    /// `logits [?, 1000] Float32`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.name, Dims(&self.shape), self.element)
    }
}
