//! What a layout is made of: where a canonical tensor is in a file
//! ([`Place`]) and the rules that say so, shared by the layouts of
//! `mod.rs` and Hugging Face's of `hf.rs`.

/// Where a canonical tensor is in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
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
