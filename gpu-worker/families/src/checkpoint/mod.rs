//! A checkpoint file as a map from tensor name to host `f32` tensor, whatever
//! it was saved as: `torch.save` archives (`.pth`, `.pt`, `.bin`) through
//! burn's PyTorch reader, `.safetensors` through the `safetensors` crate.
//! Tensors are read on demand, so a full CLIP or SigLIP checkpoint costs
//! only its vision tower; half-precision and `f64` tensors widen to `f32`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pytorch_reader::{DType as PtDType, PytorchReader, Tensor as PtTensor};
use safetensors::{Dtype as StDtype, SafeTensors};

use crate::weights_error::WeightsError;

/// A tensor on the host, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// Its dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Its values, row-major.
    pub values: Vec<f32>,
}

impl HostTensor {
    /// `values` of `shape` (their counts agree).
    pub fn new(shape: Vec<usize>, values: Vec<f32>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), values.len());
        Self { shape, values }
    }

    /// The same values read as `[rows, cols]` and transposed, in cache
    /// blocks (`transpose`): the element-at-a-time loop wrote a column at a
    /// stride of `rows` floats and was 16% of a CLIP run's start (`perf`).
    pub fn transposed(&self) -> Self {
        let (rows, cols) = (self.shape[0], self.values.len() / self.shape[0].max(1));
        let mut values = vec![0.0; self.values.len()];
        transpose::transpose(&self.values, &mut values, cols, rows);
        Self::new(vec![cols, rows], values)
    }
}

enum Source {
    /// Names and shapes only: tests of layouts at full size.
    #[cfg(test)]
    ShapeOnly,
    /// A tensor of a safetensors file opened by its header
    /// ([`Checkpoint::open_shapes`]): read from the file when asked for,
    /// so that a check before any worker starts, or two scalars
    /// (`logit_scale`), do not read gigabytes. `dtype` is `None` for a
    /// type that is not a float.
    OnDisk {
        path: Arc<PathBuf>,
        dtype: Option<StDtype>,
        offset: u64,
        len: usize,
    },
    Pytorch(PtTensor),
    Safetensors {
        file: Arc<Vec<u8>>,
        dtype: StDtype,
        range: (usize, usize),
    },
}

/// One tensor's metadata and how to read it.
struct Entry {
    shape: Vec<usize>,
    source: Source,
}

/// The tensors of one weight file, by name.
pub struct Checkpoint {
    path: PathBuf,
    entries: BTreeMap<String, Entry>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.path)
            .field("tensors", &self.entries.len())
            .finish()
    }
}

impl Checkpoint {
    /// The names and shapes of `path`'s tensors, for a check before any
    /// worker starts: of a `.safetensors` file only its header is read
    /// (a tensor's data is read when asked for, where [`Checkpoint::open`]
    /// reads the whole file: 0.3 s of a 344 MB ViT-B's start,
    /// BENCHMARKS.md), and the file must be as long as the header says;
    /// other formats open as `open` does.
    pub fn open_shapes(path: &Path) -> Result<Self, WeightsError> {
        if is_index(path) {
            return Self::open_sharded(path, Self::open_shapes);
        }
        if path.extension().and_then(|e| e.to_str()) != Some("safetensors") || !path.is_file() {
            return Self::open(path);
        }
        let unreadable = |message: String| WeightsError::Unreadable {
            path: path.to_path_buf(),
            message: format!("not a complete safetensors file ({message})"),
        };
        let mut file = std::fs::File::open(path).map_err(|e| unreadable(e.to_string()))?;
        let length = file
            .metadata()
            .map_err(|e| unreadable(e.to_string()))?
            .len();
        let mut n = [0u8; 8];
        std::io::Read::read_exact(&mut file, &mut n).map_err(|e| unreadable(e.to_string()))?;
        let n = u64::from_le_bytes(n);
        if n > 100 << 20 || 8 + n > length {
            return Err(unreadable(format!("a header of {n} bytes")));
        }
        let mut header = vec![0u8; n as usize];
        std::io::Read::read_exact(&mut file, &mut header).map_err(|e| unreadable(e.to_string()))?;
        #[derive(serde::Deserialize)]
        struct Info {
            shape: Vec<usize>,
            dtype: String,
            data_offsets: (u64, u64),
        }
        let shared = Arc::new(path.to_path_buf());
        let mut tensors: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| unreadable(e.to_string()))?;
        tensors.remove("__metadata__");
        let mut entries = BTreeMap::new();
        let mut end = 0;
        for (name, info) in tensors {
            let info: Info =
                serde_json::from_value(info).map_err(|e| unreadable(format!("{name}: {e}")))?;
            end = end.max(info.data_offsets.1);
            let (start, stop) = info.data_offsets;
            if stop < start {
                return Err(unreadable(format!("{name}: data offsets {start}..{stop}")));
            }
            let source = Source::OnDisk {
                path: Arc::clone(&shared),
                dtype: match info.dtype.as_str() {
                    "F32" => Some(StDtype::F32),
                    "F64" => Some(StDtype::F64),
                    "F16" => Some(StDtype::F16),
                    "BF16" => Some(StDtype::BF16),
                    _ => None,
                },
                offset: 8 + n + start,
                len: usize::try_from(stop - start).map_err(|e| unreadable(e.to_string()))?,
            };
            entries.insert(
                name,
                Entry {
                    shape: info.shape,
                    source,
                },
            );
        }
        if 8 + n + end != length {
            return Err(unreadable(format!(
                "{length} bytes where its header says {}",
                8 + n + end
            )));
        }
        if entries.is_empty() {
            return Err(WeightsError::Unreadable {
                path: path.to_path_buf(),
                message: "the file holds no tensors".to_owned(),
            });
        }
        Ok(Self {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// Opens `path`, reading only the names, shapes and types. A sharded
    /// checkpoint is opened by its index ([`Checkpoint::open_sharded`]).
    pub fn open(path: &Path) -> Result<Self, WeightsError> {
        if !path.is_file() {
            return Err(WeightsError::NotFound(path.to_path_buf()));
        }
        if is_index(path) {
            return Self::open_sharded(path, Self::open);
        }
        let unreadable = |message: String| WeightsError::Unreadable {
            path: path.to_path_buf(),
            message,
        };
        let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let entries = match extension {
            "pth" | "pt" | "bin" | "ckpt" => {
                let reader = PytorchReader::new(path).map_err(|e| {
                    let message = one_line(&e);
                    if message.contains("__torch__") || is_torchscript(path) {
                        unreadable(TORCHSCRIPT.to_owned())
                    } else {
                        unreadable(message)
                    }
                })?;
                if reader.is_empty() && is_torchscript(path) {
                    return Err(unreadable(TORCHSCRIPT.to_owned()));
                }
                let mut entries = BTreeMap::new();
                for (name, tensor) in reader.into_tensors() {
                    let shape = tensor.shape().to_vec();
                    entries.insert(
                        name,
                        Entry {
                            shape,
                            source: Source::Pytorch(tensor),
                        },
                    );
                }
                entries
            }
            "safetensors" => {
                let bytes = std::fs::read(path).map_err(|e| unreadable(e.to_string()))?;
                let file = Arc::new(bytes);
                let (_, metadata) = SafeTensors::read_metadata(&file)
                    .map_err(|e| unreadable(format!("not a complete safetensors file ({e:?})")))?;
                let mut entries = BTreeMap::new();
                for (name, info) in metadata.tensors() {
                    let start = 8 + header_len(&file);
                    entries.insert(
                        name,
                        Entry {
                            shape: info.shape.clone(),
                            source: Source::Safetensors {
                                file: Arc::clone(&file),
                                dtype: info.dtype,
                                range: (start + info.data_offsets.0, start + info.data_offsets.1),
                            },
                        },
                    );
                }
                entries
            }
            _ => return Err(WeightsError::UnknownFormat(path.to_path_buf())),
        };
        if entries.is_empty() {
            return Err(unreadable("the file holds no tensors".to_owned()));
        }
        Ok(Self {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// A sharded checkpoint by its index (`model.safetensors.index.json`,
    /// as transformers saves a model beyond its shard size): each tensor
    /// of the index's `weight_map` from its shard beside the index, each
    /// shard opened by `open_one`; as transformers loads them, a shard's
    /// tensors the index does not name are not the model's.
    fn open_sharded(
        path: &Path,
        open_one: fn(&Path) -> Result<Self, WeightsError>,
    ) -> Result<Self, WeightsError> {
        let unreadable = |message: String| WeightsError::Unreadable {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
        let index: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| unreadable(format!("not a shard index ({e})")))?;
        let map = index
            .get("weight_map")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| unreadable("a shard index without a weight_map".to_owned()))?;
        let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, shard) in map {
            // A shard is a file beside the index, never a path elsewhere.
            let shard = shard
                .as_str()
                .filter(|s| {
                    !s.is_empty()
                        && !s.contains(['/', '\\'])
                        && *s != ".."
                        && !is_index(Path::new(s))
                })
                .ok_or_else(|| unreadable(format!("{name}'s shard is {shard}, not a file name")))?;
            by_shard.entry(shard).or_default().push(name);
        }
        let folder = path.parent().unwrap_or(Path::new("."));
        let mut entries = BTreeMap::new();
        for (shard, names) in by_shard {
            let mut opened = open_one(&folder.join(shard))?;
            for name in names {
                let entry = opened
                    .entries
                    .remove(name)
                    .ok_or_else(|| unreadable(format!("{name} is not in its shard {shard}")))?;
                entries.insert(name.to_owned(), entry);
            }
        }
        if entries.is_empty() {
            return Err(unreadable("the index names no tensors".to_owned()));
        }
        Ok(Self {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// A checkpoint of names and shapes without data.
    #[cfg(test)]
    pub fn from_shapes(path: &str, shapes: BTreeMap<String, Vec<usize>>) -> Self {
        Self {
            path: PathBuf::from(path),
            entries: shapes
                .into_iter()
                .map(|(name, shape)| {
                    let source = Source::ShapeOnly;
                    (name, Entry { shape, source })
                })
                .collect(),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Whether the file has `name`.
    pub fn has(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The shape of `name`, if the file has it.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// Reads `name` as `f32`.
    pub fn read(&self, name: &str) -> Result<HostTensor, WeightsError> {
        let unreadable = |message: String| WeightsError::Unreadable {
            path: self.path.clone(),
            message,
        };
        let entry = self
            .entries
            .get(name)
            .ok_or_else(|| unreadable(format!("no tensor {name}")))?;
        let values = match &entry.source {
            #[cfg(test)]
            Source::ShapeOnly => vec![0.0; entry.shape.iter().product()],
            Source::Pytorch(tensor) => {
                let bytes = tensor.read().map_err(|e| unreadable(one_line(&e)))?;
                pytorch_to_f32(tensor.dtype(), &bytes)
                    .ok_or_else(|| unreadable(format!("tensor {name} is not a float tensor")))?
            }
            Source::Safetensors { file, dtype, range } => {
                let bytes = &file[range.0..range.1];
                safetensors_to_f32(*dtype, bytes)
                    .ok_or_else(|| unreadable(format!("tensor {name} is not a float tensor")))?
            }
            Source::OnDisk {
                path,
                dtype,
                offset,
                len,
            } => {
                use std::io::{Read, Seek};
                let mut bytes = vec![0u8; *len];
                let mut file = std::fs::File::open(path.as_path())
                    .map_err(|e| unreadable(format!("{}: {e}", path.display())))?;
                file.seek(std::io::SeekFrom::Start(*offset))
                    .and_then(|_| file.read_exact(&mut bytes))
                    .map_err(|e| unreadable(format!("tensor {name}: {e}")))?;
                dtype
                    .and_then(|d| safetensors_to_f32(d, &bytes))
                    .ok_or_else(|| unreadable(format!("tensor {name} is not a float tensor")))?
            }
        };
        Ok(HostTensor::new(entry.shape.clone(), values))
    }
}

/// What we say of a TorchScript archive (OpenAI's original `ViT-B-32.pt`).
const TORCHSCRIPT: &str = "this is a TorchScript archive (OpenAI's original CLIP .pt), which burn's \
    reader cannot read; use open_clip's open_clip_pytorch_model.bin or .safetensors of the same model, \
    or save its state_dict: torch.save(torch.jit.load(F).state_dict(), 'clip.pth')";

/// A `torch.jit.save` archive has a `constants.pkl` or `code/` entry.
fn is_torchscript(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    has(b"constants.pkl") || has(b"/code/__torch__")
}

/// Whether `path` is a sharded checkpoint's index (`*.index.json`).
pub fn is_index(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".index.json"))
}

fn header_len(file: &[u8]) -> usize {
    let mut len = [0u8; 8];
    len.copy_from_slice(&file[..8]);
    usize::try_from(u64::from_le_bytes(len)).unwrap_or(usize::MAX)
}

/// A reader error on one line.
fn one_line(error: &dyn std::fmt::Display) -> String {
    error
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn pytorch_to_f32(dtype: PtDType, bytes: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        PtDType::F32 => le_chunks::<4>(bytes).map(f32::from_ne_bytes).collect(),
        PtDType::F64 => le_chunks::<8>(bytes)
            .map(|b| f64::from_ne_bytes(b) as f32)
            .collect(),
        PtDType::F16 => le_chunks::<2>(bytes)
            .map(|b| half::f16::from_ne_bytes(b).to_f32())
            .collect(),
        PtDType::BF16 => le_chunks::<2>(bytes)
            .map(|b| half::bf16::from_ne_bytes(b).to_f32())
            .collect(),
        _ => return None,
    })
}

fn safetensors_to_f32(dtype: StDtype, bytes: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        StDtype::F32 => le_chunks::<4>(bytes).map(f32::from_le_bytes).collect(),
        StDtype::F64 => le_chunks::<8>(bytes)
            .map(|b| f64::from_le_bytes(b) as f32)
            .collect(),
        StDtype::F16 => le_chunks::<2>(bytes)
            .map(|b| half::f16::from_le_bytes(b).to_f32())
            .collect(),
        StDtype::BF16 => le_chunks::<2>(bytes)
            .map(|b| half::bf16::from_le_bytes(b).to_f32())
            .collect(),
        _ => return None,
    })
}

fn le_chunks<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    bytes.chunks_exact(N).map(|c| {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        a
    })
}

#[cfg(test)]
mod tests;
