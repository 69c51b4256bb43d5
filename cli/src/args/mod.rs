//! The command line, as clap derive types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod preprocess_flags;

pub(crate) use preprocess_flags::PreprocessFlagArgs;

/// Batch image inference over every GPU of a machine, or a cluster.
#[derive(Debug, Parser)]
#[command(name = "pipeline", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a model over every image under a folder and write predictions.
    Infer(Box<InferArgs>),
    /// List the devices `infer` can use.
    Devices(DevicesArgs),
    /// List the models, their tasks, preprocessing and checkpoint layouts.
    Models(ModelsArgs),
    /// Measure throughput per stage, on real or generated images.
    Bench(Box<BenchArgs>),
    /// Assemble the final output from the part files of all shards.
    Merge(MergeArgs),
    /// Embed lines of text with a CLIP checkpoint's text tower, comparable
    /// with its image embeddings.
    EmbedText(Box<EmbedTextArgs>),
    /// Write what the model sees of each image, its exact input crop, as a
    /// PNG: to check a crop, or to compare with another pipeline byte for
    /// byte.
    Preprocess(Box<PreprocessArgs>),
    /// One device's worker process (spawned by `infer`; speaks the protocol
    /// on stdin/stdout).
    #[command(hide = true)]
    Worker,
    /// Enumerate the Vulkan devices and print them as JSON (run by the
    /// other commands as a child, so that a driver crash costs the child).
    #[command(hide = true)]
    ProbeDevices(ProbeDevicesArgs),
    /// Start ONNX Runtime's CUDA provider on a model once, and say why not
    /// where it does not start (run by `infer` as a child, so that the
    /// coordinator holds no CUDA context or memory on a GPU).
    #[command(hide = true)]
    ProbeOnnxCuda(ProbeOnnxCudaArgs),
}

/// `pipeline probe-devices`.
#[derive(Debug, Args)]
pub(crate) struct ProbeDevicesArgs {
    /// Ask the CUDA driver each NVIDIA GPU's place in its order (starts
    /// the driver on every GPU).
    #[arg(long)]
    pub(crate) cuda_order: bool,
}

/// `pipeline probe-onnx-cuda`.
#[derive(Debug, Args)]
pub(crate) struct ProbeOnnxCudaArgs {
    /// The ONNX model.
    pub(crate) model: PathBuf,
    /// The ONNX Runtime library the coordinator loaded.
    #[arg(long)]
    pub(crate) runtime: Option<String>,
}

/// What `infer` computes per image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TaskArg {
    /// Softmax over the classes, keep the top k.
    Classify,
    /// The pooled penultimate features.
    Embed,
    /// With --model FILE.onnx: each image's slice of every output (or of
    /// --output A,B), named, as the model gives it (JSONL).
    Raw,
}

/// Which engine runs the model (`--engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum EngineArg {
    /// The CUDA engine on NVIDIA GPUs where NVIDIA's libraries load and it
    /// runs the model (in f16); else burn's: Vulkan on GPUs, the CPU
    /// engine without one.
    Auto,
    /// NVIDIA's libraries (cuDNN, cuBLASLt, NVRTC), loaded at run time, for
    /// every image family, in f16; each start checks one image against the
    /// f32 reference. A one-line error says what it lacks.
    Cuda,
    /// burn on Vulkan GPUs (or Mesa's lavapipe, `--gpus software`).
    Vulkan,
    /// burn on the CPU (`--gpus cpu`).
    Cpu,
}

/// `pipeline infer`.
#[derive(Debug, Args)]
pub(crate) struct InferArgs {
    /// The images: a folder (scanned recursively, sorted), a list file
    /// (.txt), a table (.csv, .tsv, .jsonl, .parquet) of paths or URLs,
    /// Parquet with the image bytes, WebDataset shards (a .tar, a folder of
    /// them, `shards/{00000..00099}.tar`), or any of them at an `s3://` or
    /// `http(s)://` URL (`s3://bucket/prefix/` is listed as a folder).
    #[arg(long, value_name = "DIR|FILE|URL")]
    pub(crate) data: String,
    #[command(flatten)]
    pub(crate) source: SourceArgs,
    #[command(flatten)]
    pub(crate) run: RunArgs,
    #[command(flatten)]
    pub(crate) preprocess: PreprocessFlagArgs,
    #[command(flatten)]
    pub(crate) onnx: crate::onnx_args::OnnxArgs,
    /// Images per chunk, the unit of dispatch and retry.
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) chunk_size: u64,
    /// Output file.
    #[arg(long, default_value = "predictions.jsonl", value_name = "FILE")]
    pub(crate) out: PathBuf,
    /// jsonl, csv, parquet or npy (default: from --out's extension, else
    /// jsonl). npy (with --task embed) writes a folder:
    /// img_emb/img_emb_N.npy and metadata/metadata_N.parquet.
    #[arg(long, value_name = "FORMAT")]
    pub(crate) format: Option<String>,
    #[command(flatten)]
    pub(crate) layout: LayoutArgs,
    /// Replace an existing output and delete the parts of an earlier run.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) overwrite: bool,
    /// Treat an existing, complete output as done (exit 0) instead of
    /// refusing it. Interrupted runs resume with or without this flag.
    #[arg(long)]
    pub(crate) resume: bool,
    /// Bring an existing, complete output up to date with a changed source:
    /// compute only new and changed items (same name and size and mtime, or
    /// ETag, is unchanged), drop deleted ones; the result equals a fresh
    /// run's.
    #[arg(long, conflicts_with_all = ["overwrite", "resume"])]
    pub(crate) update: bool,
    /// `--update` that also computes again the items that failed (for
    /// transient failures).
    #[arg(long, conflicts_with_all = ["overwrite", "resume"])]
    pub(crate) retry_failed: bool,
    /// Seconds that work in flight may take to finish after SIGINT/SIGTERM.
    #[arg(long, default_value_t = 20.0, value_name = "SECS")]
    pub(crate) grace: f64,
    /// Seconds without progress before a busy worker is killed as hung
    /// (`auto`: 120 + 2 per image of its batch, 5× that before its first
    /// batch).
    #[arg(long, default_value = "auto", value_name = "auto|SECS")]
    pub(crate) hang_timeout: String,
    /// Run only shard INDEX of COUNT (e.g. `0/4`). Without it the shard comes
    /// from Slurm (array task, srun task) or a Kubernetes Indexed Job.
    #[arg(long, value_name = "INDEX/COUNT")]
    pub(crate) shard: Option<String>,
    /// Shards of a Kubernetes Indexed Job (its `completions`), with
    /// `JOB_COMPLETION_INDEX` as this pod's shard.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) num_shards: Option<u32>,
    /// With shards: the shard that finds every chunk committed when it
    /// ends assembles the output (else run `pipeline merge`).
    #[arg(long)]
    pub(crate) merge: bool,
    /// Also write the run's summary, per-worker and per-stage times as JSON.
    #[arg(long, value_name = "FILE.json")]
    pub(crate) report: Option<PathBuf>,
    /// No progress and no summary; errors only.
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

/// The device, model and loader flags `infer` and `bench` share.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Devices: `all` (every GPU `CUDA_VISIBLE_DEVICES` allows, else the CPU),
    /// `cpu`, `software` (Mesa's software Vulkan), GPU indices `0,2` (PCI bus
    /// order, as nvidia-smi) or PCI bus ids `0000:01:00.0`.
    #[arg(long, default_value = "all", value_name = "LIST")]
    pub(crate) gpus: String,
    /// The engine: auto, cuda, vulkan or cpu (`pipeline devices` says what
    /// each GPU gets and what the CUDA engine lacks).
    #[arg(long, value_enum, default_value_t = EngineArg::Auto, value_name = "ENGINE")]
    pub(crate) engine: EngineArg,
    /// Worker processes per device.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) workers_per_gpu: u32,
    /// A model `pipeline models` lists: resnet50, vit_b_16, convnext_tiny,
    /// clip_vit_b_32, siglip_base_patch16_224, dinov2_vitb14, …; or your own
    /// FILE.onnx (run by ONNX Runtime on the CPU).
    #[arg(long, default_value = "efficientnet_lite0", value_name = "NAME")]
    pub(crate) model: String,
    /// Checkpoint as its upstream publishes it (.pth, .pt, .bin or
    /// .safetensors; the layout is told from its tensor names). Without it the model's cached file
    /// (see scripts/fetch-weights.sh) is used, else seeded random weights.
    #[arg(long, value_name = "FILE")]
    pub(crate) weights: Option<PathBuf>,
    /// Seed of the random weights used when there is no weight file.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(crate) seed: u64,
    /// What to compute per image (default: classify for classifiers,
    /// embed for CLIP, SigLIP and DINOv2).
    #[arg(long, value_enum)]
    pub(crate) task: Option<TaskArg>,
    /// DINOv2 embeddings: the class token (`cls`, the default), the patch
    /// mean (`mean`) or both concatenated (`cls+mean`).
    #[arg(long, value_name = "cls|mean|cls+mean")]
    pub(crate) pooling: Option<String>,
    /// The float type the model computes in: `auto` (f16 on a GPU whose
    /// Vulkan driver computes in it, f32 on the CPU and lavapipe), `f32`,
    /// `f16` or `bf16`. Softmax and the read-back stay f32.
    #[arg(long, default_value = "auto", value_name = "auto|f32|f16|bf16")]
    pub(crate) precision: String,
    /// Zero-shot classification: labels, inline (`"cat,dog,a red car"`)
    /// or one per line in a .txt, embedded by the checkpoint's text tower
    /// through --prompt (CLIP); or a .npy or .safetensors matrix of class
    /// text embeddings (one row per class, CLIP or SigLIP), labels one per
    /// line in the .txt of the same name beside it (or, in a .safetensors,
    /// a JSON list under its `labels` metadata). Implies --task classify.
    #[arg(long, value_name = "LABELS|FILE")]
    pub(crate) classes: Option<String>,
    /// With --classes labels: a prompt template, `{}` for the label
    /// (default "a photo of a {}."); repeat it to average several, as
    /// open_clip does; `imagenet` is open_clip's 80 ImageNet templates.
    #[arg(long = "prompt", value_name = "TEMPLATE")]
    pub(crate) prompts: Vec<String>,
    /// With --classes labels: the tokenizer file, a Hugging Face
    /// tokenizer.json or SigLIP's spiece.model (by default a hub repo's
    /// own, or the one beside a Hugging Face checkpoint; OpenCLIP and
    /// OpenAI checkpoints use open_clip's built-in tokenizer).
    #[arg(long, value_name = "FILE")]
    pub(crate) tokenizer: Option<PathBuf>,
    /// Classes kept per image (classify).
    #[arg(long, default_value_t = 5, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) top_k: u32,
    /// Images per forward pass: `auto` or a number.
    #[arg(long, default_value = "auto", value_name = "auto|N")]
    pub(crate) batch_size: String,
    #[command(flatten)]
    pub(crate) decode: DecodeArgs,
    /// Decoder threads per worker (default: with GPUs, the cores less one
    /// shared among the workers; on `cpu`/`software`, every core, the
    /// decoders at background priority beside the model).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) loader_threads: Option<u32>,
    /// Remote reads (`s3://`, `http(s)://`) in flight per worker.
    #[arg(long, default_value_t = 32, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) io_concurrency: u32,
    /// Seconds one remote request may take, body included (a request that
    /// resumes a broken body gets its own).
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub(crate) io_timeout: f64,
    /// Retries per remote item, with exponential backoff and jitter: after
    /// no answer, a timeout, a 5xx, 408 or 429 (obeying `Retry-After`), or
    /// a body that broke (resumed from where it broke where the server
    /// allows).
    #[arg(long, default_value_t = 5, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=100))]
    pub(crate) io_retries: u32,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
}

/// How images are decoded and resized, for every command that loads them.
#[derive(Debug, Args)]
pub(crate) struct DecodeArgs {
    /// Decode JPEGs at least twice the resize target at a reduced DCT scale
    /// (1/2, 1/4, 1/8), as Pillow's `draft` does: much faster on big photos,
    /// slightly different pixels.
    #[arg(long)]
    pub(crate) jpeg_draft: bool,
    /// Faster decode and resize (zune-jpeg, SIMD resize) whose crops differ
    /// from Pillow's by a few levels; the default matches Pillow to the byte.
    #[arg(long)]
    pub(crate) fast_preprocess: bool,
}

/// The decoder's limits, for every command that loads images.
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// Largest image, in pixels, decoded (larger ones become `too_large`
    /// records; the default is Pillow's decompression-bomb limit).
    #[arg(long, default_value_t = 89_478_485, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_pixels: u64,
    /// Largest file or object, in bytes, read for one item.
    #[arg(long, default_value_t = 512 << 20, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_file_bytes: u64,
}

/// How a binary output is laid out.
#[derive(Debug, Args)]
pub(crate) struct LayoutArgs {
    /// Embeddings in npy and parquet output: f32, or f16 (half the size;
    /// relative rounding ≤ 2^-11).
    #[arg(long, default_value = "f32", value_name = "f32|f16")]
    pub(crate) embedding_dtype: String,
    /// Parquet compression (also npy's metadata): zstd, snappy or none.
    #[arg(long, default_value = "zstd", value_name = "CODEC")]
    pub(crate) compression: String,
    /// Records per file: npy shards (default 1,000,000); for parquet, a
    /// folder of part-NNNNN.parquet files instead of one file.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) shard_rows: Option<u64>,
}

/// How `--data` is read.
#[derive(Debug, Args)]
pub(crate) struct SourceArgs {
    /// The layout of `--data`, when its name does not tell: folder, list,
    /// csv, tsv, jsonl, parquet or webdataset.
    #[arg(long, value_name = "FORMAT")]
    pub(crate) input_format: Option<String>,
    /// The table column with the image path or URL (default: the first of
    /// `path`, `url`, `image_path`).
    #[arg(long, value_name = "NAME")]
    pub(crate) path_column: Option<String>,
    /// The Parquet column with the image bytes: binary, or Hugging Face's
    /// `struct{bytes, path}` (default: `image` when there is no path column).
    #[arg(long, value_name = "NAME")]
    pub(crate) image_column: Option<String>,
    /// Table columns (or WebDataset member extensions such as `txt,json`)
    /// to carry into every output record next to `index` and `path`; `*`
    /// keeps all but the image's.
    #[arg(long, value_name = "A,B|*", value_delimiter = ',')]
    pub(crate) keep_columns: Vec<String>,
}

/// `pipeline preprocess`.
#[derive(Debug, Args)]
pub(crate) struct PreprocessArgs {
    /// The images, in any layout `infer --data` reads.
    #[arg(long, value_name = "DIR|FILE|URL")]
    pub(crate) data: String,
    #[command(flatten)]
    pub(crate) source: SourceArgs,
    /// The model whose preprocessing to run (`pipeline models` lists each
    /// one's resize, crop and filter).
    #[arg(long, default_value = "efficientnet_lite0", value_name = "NAME")]
    pub(crate) model: String,
    /// The checkpoint `infer` would run: a Hugging Face layout crops as its
    /// image processor does (an odd margin rounds down), any other as
    /// torchvision does.
    #[arg(long, value_name = "FILE")]
    pub(crate) weights: Option<PathBuf>,
    /// A model's own preprocessing, run instead of `--model`'s: a Hugging
    /// Face image processor's `preprocessor_config.json` or a timm
    /// `config.json` (its `pretrained_cfg`), byte-identical to the
    /// upstream's PIL preprocessing.
    #[arg(long, value_name = "FILE", conflicts_with = "weights")]
    pub(crate) config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) flags: PreprocessFlagArgs,
    /// A new or empty folder: one PNG per image, `index.jsonl` listing
    /// each item in input order with its PNG or its error.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,
    #[command(flatten)]
    pub(crate) decode: DecodeArgs,
    /// Decoder threads (default: every core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) loader_threads: Option<u32>,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
}

/// `pipeline bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Images to measure on, in any layout `infer --data` reads (else
    /// `--synthetic`).
    #[arg(long, value_name = "DIR|FILE|URL", required_unless_present_any = ["synthetic", "model_only"], conflicts_with = "synthetic")]
    pub(crate) data: Option<String>,
    #[command(flatten)]
    pub(crate) source: SourceArgs,
    /// Measure on N generated photo-like JPEGs of `--size` (written to a
    /// temporary folder and removed afterwards).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub(crate) synthetic: Option<u64>,
    /// Size of the generated images.
    #[arg(long, default_value = "500x375", value_name = "WxH")]
    pub(crate) size: String,
    #[command(flatten)]
    pub(crate) run: RunArgs,
    /// Images per chunk (default: about 16 chunks per worker, 16 to 256).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) chunk_size: Option<u64>,
    /// Measured runs per configuration; the median is reported.
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) repeat: u32,
    /// Measure every combination, e.g. `--sweep batch=8,32,128 workers=1,2`
    /// (`batch`, `workers` per device, `loader-threads`).
    #[arg(long, num_args = 1.., value_name = "KEY=V,V")]
    pub(crate) sweep: Vec<String>,
    /// The model alone on pre-made `u8` batches, no loader and no processes:
    /// the ceiling the whole pipeline is compared with.
    #[arg(long, conflicts_with = "loader_only")]
    pub(crate) model_only: bool,
    /// The loader alone (read, decode, preprocess) in this process, no
    /// model: with `--loader-threads 1`, its speed per core.
    #[arg(long)]
    pub(crate) loader_only: bool,
    /// Batches per measured run with `--model-only`, after one warm-up batch.
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) batches: u32,
    /// Write the results as JSON.
    #[arg(long, value_name = "FILE.json")]
    pub(crate) json: Option<PathBuf>,
    /// Draw images/s across the sweep as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
    /// No progress lines; the table and errors only.
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

/// `pipeline devices`.
#[derive(Debug, Args)]
pub(crate) struct DevicesArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `pipeline models`.
#[derive(Debug, Args)]
pub(crate) struct ModelsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `pipeline merge`.
#[derive(Debug, Args)]
pub(crate) struct MergeArgs {
    /// The output the shards wrote parts for (`FILE.parts` next to it).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
    /// jsonl, csv, parquet or npy (default: from --out's extension, else
    /// jsonl).
    #[arg(long, value_name = "FORMAT")]
    pub(crate) format: Option<String>,
    #[command(flatten)]
    pub(crate) layout: LayoutArgs,
    /// No summary; errors only.
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

/// `pipeline embed-text`.
#[derive(Debug, Args)]
pub(crate) struct EmbedTextArgs {
    /// A CLIP or SigLIP model (`pipeline models` says which have a text
    /// tower), or a hub CLIP or SigLIP repo (`ORG/NAME[@REVISION]`: its
    /// weights and tokenizer from the repo).
    #[arg(long, value_name = "NAME|ORG/NAME")]
    pub(crate) model: String,
    /// The checkpoint (OpenCLIP/OpenAI; Hugging Face CLIPModel with its
    /// tokenizer.json beside it, or SiglipModel with its spiece.model).
    /// Without it, seeded random weights.
    #[arg(long, value_name = "FILE")]
    pub(crate) weights: Option<PathBuf>,
    /// Seed of the random weights used when there is no weight file.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(crate) seed: u64,
    /// The texts: a UTF-8 file, one text per line (empty lines included),
    /// or one text given here.
    #[arg(long, value_name = "FILE|TEXT")]
    pub(crate) text: String,
    /// Where to write: a .jsonl or .parquet file, or a folder (npy).
    #[arg(long, value_name = "PATH")]
    pub(crate) out: PathBuf,
    /// jsonl, parquet or npy (clip-retrieval's text_emb/ and metadata/);
    /// by default from --out's extension, a folder meaning npy.
    #[arg(long, value_name = "jsonl|parquet|npy")]
    pub(crate) format: Option<String>,
    /// A Hugging Face tokenizer.json or SigLIP's spiece.model (default: a
    /// hub repo's own, or the one beside a Hugging Face checkpoint;
    /// open_clip's built-in one for OpenCLIP/OpenAI).
    #[arg(long, value_name = "FILE")]
    pub(crate) tokenizer: Option<PathBuf>,
    /// The device: `all` takes the first GPU (else the CPU), `cpu`,
    /// `software`, or a GPU index or PCI bus id.
    #[arg(long, default_value = "all", value_name = "DEVICE")]
    pub(crate) gpus: String,
    /// The engine, as `infer --engine`: auto, cuda, vulkan or cpu.
    #[arg(long, value_enum, default_value_t = EngineArg::Auto, value_name = "ENGINE")]
    pub(crate) engine: EngineArg,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) batch_size: u32,
    /// The embeddings' float type in Parquet and npy: f32 or f16.
    #[arg(long, default_value = "f32", value_name = "f32|f16")]
    pub(crate) embedding_dtype: String,
    /// Replace an existing output.
    #[arg(long)]
    pub(crate) overwrite: bool,
    /// Print nothing but errors.
    #[arg(long, hide = true)]
    pub(crate) quiet: bool,
    /// Write the zero-shot class matrix of the labels in --text, through
    /// --prompt, to --out (.safetensors): `infer --classes "…"` runs this.
    #[arg(long, hide = true)]
    pub(crate) class_matrix: bool,
    /// With --class-matrix: the prompt templates.
    #[arg(long = "prompt", hide = true, value_name = "TEMPLATE")]
    pub(crate) prompts: Vec<String>,
}
