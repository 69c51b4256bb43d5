//! What a layout is made of: where a canonical tensor is in a file
//! ([`Place`]) and the rules that say so, shared by the layouts of
//! `mod.rs` and Hugging Face's of `hf.rs`.

/// Where a canonical tensor is in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// One key, same shape.
    Key(String),
    /// One key, with unit axes in front (`[1, 1, D]` for `[D]`).
    Unsqueezed(String, usize),
    /// One key holding our values flat (`[C]` for `[C, 1, 1]`).
    Flat(String),
    /// One key of shape `[a, b]` holding our `[b, a]`.
    Transposed(String),
    /// Keys stacked along the first axis.
    Stacked(Vec<String>),
    /// The first of these whose every key the checkpoint has (a tensor
    /// upstream renamed or split between versions); the first, to name
    /// in an error, when none is whole.
    First(Vec<Place>),
}

impl Place {
    /// The same place under keys renamed by `f`.
    pub fn renamed(self, f: &dyn Fn(String) -> String) -> Place {
        match self {
            Place::Key(k) => Place::Key(f(k)),
            Place::Flat(k) => Place::Flat(f(k)),
            Place::Unsqueezed(k, n) => Place::Unsqueezed(f(k), n),
            Place::Transposed(k) => Place::Transposed(f(k)),
            Place::Stacked(keys) => Place::Stacked(keys.into_iter().map(f).collect()),
            Place::First(places) => {
                Place::First(places.into_iter().map(|p| p.renamed(f)).collect())
            }
        }
    }
}

/// A rule: canonical names matching `pattern` come from `place`, with
/// `$1`, `$2` filled from the pattern's groups.
pub(super) struct Rule {
    pub(super) pattern: &'static str,
    pub(super) place: fn(&str) -> Place,
}

macro_rules! rule {
    ($pattern:literal, |$c:ident| $place:expr) => {
        Rule {
            pattern: $pattern,
            place: |$c: &str| $place,
        }
    };
}

pub(super) fn key(s: String) -> Place {
    Place::Key(s)
}

/// `rest` (`norm1.weight`, `ls1`) with its module renamed by `table`
/// (ours → upstream's, an exact name or a module before `.weight`/`.bias`).
pub(super) fn renamed(rest: &str, table: &[(&str, &str)]) -> String {
    for (ours, theirs) in table {
        if rest == *ours {
            return (*theirs).to_owned();
        }
        if let Some(leaf) = rest.strip_prefix(ours).and_then(|r| r.strip_prefix('.')) {
            return format!("{theirs}.{leaf}");
        }
    }
    rest.to_owned()
}

pub(super) use rule;

/// Where a layout that is torchvision's ConvNeXt under other names keeps
/// each part (transformers', timm's).
pub(super) struct ConvNextNames {
    /// The stem's convolution and LayerNorm.
    pub(super) stem: [&'static str; 2],
    /// The stages' prefix (`{stages}.{s}`).
    pub(super) stages: &'static str,
    /// A stage's downsampling (`{stages}.{s}.{downsample}.{0,1}`).
    pub(super) downsample: &'static str,
    /// A stage's blocks (`{stages}.{s}.{blocks}.{j}`).
    pub(super) blocks: &'static str,
    /// A block's layer scale, `[C]` (torchvision's `[C, 1, 1]`).
    pub(super) scale: &'static str,
    /// A block's depthwise convolution, LayerNorm and two MLP layers
    /// (torchvision's `block.0`, `.2`, `.3`, `.5`).
    pub(super) modules: [&'static str; 4],
}

/// torchvision's `features.{c}` in such a layout: `features.0` the stem,
/// `features.{2s+1}` stage `s`'s blocks, `features.{2s}` (s ≥ 1) its
/// downsampling.
pub(super) fn convnext_feature(names: &ConvNextNames, c: &str) -> Place {
    let parts: Vec<&str> = c.splitn(3, '.').collect();
    let (Some(f), Some(j)) = (
        parts.first().and_then(|p| p.parse::<usize>().ok()),
        parts.get(1).and_then(|p| p.parse::<usize>().ok()),
    ) else {
        return key(format!("features.{c}"));
    };
    let rest = parts.get(2).copied().unwrap_or("");
    if f == 0 {
        let stem = names.stem.get(j).copied().unwrap_or("stem");
        return key(format!("{stem}.{rest}"));
    }
    let stages = names.stages;
    if f % 2 == 0 {
        return key(format!(
            "{stages}.{}.{}.{j}.{rest}",
            f / 2,
            names.downsample
        ));
    }
    let block = format!("{stages}.{}.{}.{j}", (f - 1) / 2, names.blocks);
    if rest == "layer_scale" {
        return Place::Flat(format!("{block}.{}", names.scale));
    }
    let [dw, norm, fc1, fc2] = names.modules;
    let table = [
        ("block.0", dw),
        ("block.2", norm),
        ("block.3", fc1),
        ("block.5", fc2),
    ];
    key(format!("{block}.{}", renamed(rest, &table)))
}
