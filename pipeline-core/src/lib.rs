//! The shared vocabulary of `pipeline`: the dataset manifest and its chunks,
//! what an item is and how one can fail, devices, models and tasks, how
//! images are preprocessed and which limits guard decoding, and the
//! coordinator⇄worker protocol.
//!
//! This crate links neither burn nor `image`, so the coordinator, the loader
//! and the workers can all speak it without pulling in each other's weight.

#![deny(missing_docs)]

mod device;
mod entries;
mod hub_model;
mod item;
mod kept;
mod labels;
mod manifest;
mod model;
mod model_ref;
mod panic;
mod preprocess;
mod preprocess_config;
mod preprocess_flags;
mod protocol;
mod redact;
mod registry;
mod resolved;
mod source;
mod span_times;

pub use device::{
    DeviceSpec, UnknownDevice, allocator_env, autotune_dir, cache_dir, runtime_dir_for_children,
};
pub use entries::{Cursor, Entries, ManifestEntry};
pub use hub_model::{
    HubActivation, HubConfig, HubModel, HubResNet, HubShape, HubText, hub_config, hub_text,
    open_clip_config, open_clip_text, scores_from_config,
};
pub use item::{ItemError, ItemErrorKind, ItemIndex};
pub use kept::Kept;
pub use labels::{
    ClassLabels, IMAGENET_CLASSES, Prompts, ZeroShotClasses, imagenet_label, imagenet_labels,
    labels_from_config,
};
pub use manifest::{
    BadShard, Chunk, Fnv64, IMAGE_EXTENSIONS, Manifest, ScanError, ScanProblem, Shard, plan_chunks,
    stamp_of,
};
pub use model::{
    ArrayValues, ClassScore, EmbedPooling, Family, ModelKind, OutputArray, Precision, Prediction,
    Scores, Task, UnknownModel,
};
pub use model_ref::{Channels, ModelRef, OnnxModel};
pub use panic::panic_message;
pub use preprocess::{
    CropRounding, DecodeLimits, MAX_SIDE, Normalize, PreprocessSpec, ResizeFilter, SpecError,
    keys_cubic,
};
pub use preprocess_config::{ConfigSource, spec_from_config};
pub use preprocess_flags::{PreprocessFlags, spec_from_flags};
pub use protocol::{
    Frame, FromWorker, ItemOutcome, MAX_FRAME_BYTES, PROTOCOL_VERSION, ToWorker,
    WORKER_EXIT_DEVICE_LOST, WORKER_EXIT_ORPHANED, WorkItemSpec, WorkerConfig, read_frame,
    write_frame,
};
pub use redact::{
    CREDENTIAL_PARAMETERS, REDACTED, SECRET_VARIABLES, object_identity, object_url, redact_message,
    redact_text, redact_url,
};
pub use registry::{EngineKind, MemoryModel, ModelSpec};
pub use resolved::{CheckpointLayout, LogitParams, ResolvedWeights};
pub use source::{
    ByteRange, DataSpec, InputFormat, Location, RemoteSpec, UnknownInputFormat, is_url,
};
pub use span_times::{RemoteRetries, SpanTimes};
