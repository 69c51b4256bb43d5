//! SigLIP's tokenizer: transformers' `SiglipTokenizer` over the
//! SentencePiece `spiece.model` that Hugging Face publishes beside a
//! `SiglipModel` checkpoint.
//!
//! The file is a protobuf (`sentencepiece_model.proto`), read by `prost`.
//! Its `precompiled_charsmap` becomes Hugging Face `tokenizers`'
//! `Precompiled` normalizer (SentencePiece's `nmt_nfkc`). What is
//! SentencePiece's own and not in `tokenizers` is written here, after its
//! `normalizer.cc` and `unigram_model.cc`:
//! - around the charsmap: leading spaces dropped, runs of spaces made one,
//!   the dummy `▁` prefix, spaces escaped as `▁`, trailing `▁` dropped;
//! - the Viterbi segmentation (`EncodeOptimized`), in `f32` as SentencePiece
//!   sums scores. `tokenizers`' Unigram sums in `f64`, so on repetitive
//!   text, where many segmentations score alike, it breaks ties otherwise
//!   (measured: 1 of the 260 test strings, `"x" × 500`, got other ids).
//!   Unknown characters are one unknown piece each, a run of them fused
//!   into one, and unknown, control and unused pieces never match text.
//!
//! Around it, `SiglipTokenizer` as transformers 5 runs it, quirks kept:
//! `▁` is put before the text; the text is split on the special tokens
//! `</s>` and `<unk>` (whitespace beside them stripped); each other part is
//! canonicalised (lower case, ASCII punctuation removed, whitespace runs
//! to one space, stripped) and encoded as `"<unk>" + part` with the pieces
//! of `"<unk>"` dropped again; a lone leading `▁` before a special token is
//! dropped; then cut to the context less one, `</s>` appended unless the
//! ids already end with it, padded with `</s>`.

use std::collections::HashMap;

use tokenizers::normalizers::Precompiled;
use tokenizers::{NormalizedString, Normalizer};

use crate::pystr::is_python_space;

/// The parts of `sentencepiece_model.proto` a tokenizer needs.
#[derive(Clone, PartialEq, prost::Message)]
struct ModelProto {
    #[prost(message, repeated, tag = "1")]
    pieces: Vec<PieceProto>,
    #[prost(message, optional, tag = "2")]
    trainer_spec: Option<TrainerSpec>,
    #[prost(message, optional, tag = "3")]
    normalizer_spec: Option<NormalizerSpec>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PieceProto {
    #[prost(string, optional, tag = "1")]
    piece: Option<String>,
    #[prost(float, optional, tag = "2")]
    score: Option<f32>,
    /// NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6.
    #[prost(int32, optional, tag = "3", default = "1")]
    kind: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TrainerSpec {
    /// UNIGRAM 1, BPE 2, WORD 3, CHAR 4.
    #[prost(int32, optional, tag = "3", default = "1")]
    model_type: Option<i32>,
    #[prost(bool, optional, tag = "24", default = "false")]
    treat_whitespace_as_suffix: Option<bool>,
    #[prost(bool, optional, tag = "35", default = "false")]
    byte_fallback: Option<bool>,
    #[prost(int32, optional, tag = "40", default = "0")]
    unk_id: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NormalizerSpec {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(bytes = "vec", optional, tag = "2")]
    precompiled_charsmap: Option<Vec<u8>>,
    #[prost(bool, optional, tag = "3", default = "true")]
    add_dummy_prefix: Option<bool>,
    #[prost(bool, optional, tag = "4", default = "true")]
    remove_extra_whitespaces: Option<bool>,
    #[prost(bool, optional, tag = "5", default = "true")]
    escape_whitespaces: Option<bool>,
}

/// SentencePiece's piece types that the segmentation never produces from
/// text: UNKNOWN, CONTROL, UNUSED.
const UNMATCHED: [i32; 3] = [2, 3, 5];
/// SentencePiece's NORMAL and USER_DEFINED piece types.
const NORMAL: i32 = 1;
const USER_DEFINED: i32 = 4;
/// SentencePiece's `kUnkPenalty`.
const UNK_PENALTY: f32 = 10.0;
/// SentencePiece's whitespace symbol.
const SPACE: char = '\u{2581}';

/// A SentencePiece Unigram model, encoding as `sentencepiece` does.
pub(crate) struct SentencePiece {
    /// The pieces text can match: id, score, and whether user-defined.
    matched: HashMap<String, (u32, f32, bool)>,
    /// The longest of them, in bytes.
    longest: usize,
    /// The lowest and highest score of the normal pieces.
    min_score: f32,
    max_score: f32,
    charsmap: Option<Precompiled>,
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
    /// Piece → id, as `piece_to_id` answers (the unknown id otherwise).
    ids: HashMap<String, u32>,
    unk: u32,
}

impl std::fmt::Debug for SentencePiece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentencePiece")
            .field("pieces", &self.ids.len())
            .field("unk", &self.unk)
            .finish_non_exhaustive()
    }
}

impl SentencePiece {
    /// The model in a `.model` file's bytes; a problem is one line.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        use prost::Message;
        let proto =
            ModelProto::decode(bytes).map_err(|e| format!("not a SentencePiece model ({e})"))?;
        if proto.pieces.is_empty() {
            return Err("not a SentencePiece model (it has no pieces)".to_owned());
        }
        let trainer = proto.trainer_spec.unwrap_or_default();
        let normalizer = proto.normalizer_spec.unwrap_or_default();
        if trainer.model_type() != 1 {
            return Err(format!(
                "a SentencePiece model of type {} (SigLIP's is Unigram, type 1)",
                trainer.model_type()
            ));
        }
        if trainer.treat_whitespace_as_suffix() {
            return Err(
                "treat_whitespace_as_suffix is set; SigLIP's model does not set it \
                        and it is not read here"
                    .to_owned(),
            );
        }
        let unk = usize::try_from(trainer.unk_id())
            .ok()
            .filter(|&u| u < proto.pieces.len())
            .ok_or_else(|| format!("its unk_id {} is not a piece", trainer.unk_id()))?;
        if trainer.byte_fallback() {
            return Err(
                "byte_fallback is set; SigLIP's model does not set it and it is not \
                        read here"
                    .to_owned(),
            );
        }
        let mut ids = HashMap::with_capacity(proto.pieces.len());
        let mut matched = HashMap::with_capacity(proto.pieces.len());
        let (mut min_score, mut max_score) = (f32::MAX, f32::MIN);
        for (id, piece) in proto.pieces.iter().enumerate() {
            let text = piece.piece().to_owned();
            ids.entry(text.clone()).or_insert(id as u32);
            let kind = piece.kind();
            if kind == NORMAL {
                min_score = min_score.min(piece.score());
                max_score = max_score.max(piece.score());
            }
            if !UNMATCHED.contains(&kind) && !text.is_empty() {
                matched
                    .entry(text)
                    .or_insert((id as u32, piece.score(), kind == USER_DEFINED));
            }
        }
        let longest = matched.keys().map(String::len).max().unwrap_or(0);
        let charsmap = match normalizer.precompiled_charsmap() {
            [] => None,
            bytes => Some(Precompiled::from(bytes).map_err(|e| {
                format!(
                    "its {} normalizer's charsmap does not read ({e})",
                    normalizer.name()
                )
            })?),
        };
        Ok(Self {
            matched,
            longest,
            min_score,
            max_score,
            charsmap,
            add_dummy_prefix: normalizer.add_dummy_prefix(),
            remove_extra_whitespaces: normalizer.remove_extra_whitespaces(),
            escape_whitespaces: normalizer.escape_whitespaces(),
            ids,
            unk: unk as u32,
        })
    }

    /// The id `piece_to_id` gives `piece`.
    pub(crate) fn id(&self, piece: &str) -> u32 {
        self.ids.get(piece).copied().unwrap_or(self.unk)
    }

    /// SentencePiece's normalization of `text`.
    fn normalize(&self, text: &str) -> String {
        let normalized = match &self.charsmap {
            Some(charsmap) => {
                let mut n = NormalizedString::from(text);
                charsmap
                    .normalize(&mut n)
                    .expect("the precompiled normalizer does not fail");
                n.get().to_owned()
            }
            None => text.to_owned(),
        };
        let space = if self.escape_whitespaces { SPACE } else { ' ' };
        let mut out = String::with_capacity(normalized.len() + 3);
        let body = if self.remove_extra_whitespaces {
            normalized.trim_start_matches(' ')
        } else {
            &normalized
        };
        if body.is_empty() {
            return out;
        }
        if self.add_dummy_prefix {
            out.push(space);
        }
        let mut previous_space = false;
        for c in body.chars() {
            if c == ' ' {
                if !(self.remove_extra_whitespaces && previous_space) {
                    out.push(space);
                }
                previous_space = true;
            } else {
                out.push(c);
                previous_space = false;
            }
        }
        if self.remove_extra_whitespaces {
            while out.ends_with(space) {
                out.pop();
            }
        }
        out
    }

    /// `encode(text, out_type=str)`: the pieces of `text`, an unknown run
    /// as its own characters.
    pub(crate) fn pieces(&self, text: &str) -> Vec<String> {
        let normalized = self.normalize(text);
        self.segment(&normalized)
            .into_iter()
            .map(|(start, end)| normalized[start..end].to_owned())
            .collect()
    }

    /// SentencePiece's `EncodeOptimized`: the best-scoring segmentation of
    /// `text`, as byte ranges, each unknown run one range.
    fn segment(&self, text: &str) -> Vec<(usize, usize)> {
        /// The best path ending at a position.
        #[derive(Clone, Copy)]
        struct Best {
            score: f32,
            /// Where its last piece starts; `None` before any path ends here.
            from: Option<usize>,
            unknown: bool,
        }
        let unk_score = self.min_score - UNK_PENALTY;
        let size = text.len();
        let mut best = vec![
            Best {
                score: 0.0,
                from: None,
                unknown: false,
            };
            size + 1
        ];
        let offer = |best: &mut [Best], end: usize, score: f32, from: usize, unknown: bool| {
            let node = &mut best[end];
            if node.from.is_none() || score > node.score {
                *node = Best {
                    score,
                    from: Some(from),
                    unknown,
                };
            }
        };
        for (start, c) in text.char_indices() {
            let here = best[start].score;
            let one = c.len_utf8();
            let mut single = false;
            let ends = text[start..]
                .char_indices()
                .map(|(i, c)| start + i + c.len_utf8())
                .take_while(|&end| end - start <= self.longest);
            for end in ends {
                if let Some(&(_, score, user)) = self.matched.get(&text[start..end]) {
                    let length = (end - start) as f32;
                    let score = if user {
                        length * self.max_score - 0.1
                    } else {
                        score
                    };
                    offer(&mut best, end, score + here, start, false);
                    single |= end - start == one;
                }
            }
            if !single {
                offer(&mut best, start + one, unk_score + here, start, true);
            }
        }
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let mut end = size;
        let mut fused_unknown = false;
        while end > 0 {
            let node = best[end];
            let start = node.from.expect("every position is reached");
            match ranges.last_mut() {
                Some(last) if node.unknown && fused_unknown => last.0 = start,
                _ => ranges.push((start, end)),
            }
            fused_unknown = node.unknown;
            end = start;
        }
        ranges.reverse();
        ranges
    }
}

/// transformers' `SiglipTokenizer` (see the module's notes).
#[derive(Debug)]
pub struct SiglipTokenizer {
    model: SentencePiece,
    /// `</s>`: the end and pad token.
    eos: u32,
    /// Pieces of `"<unk>"` alone, dropped from before each part.
    unk_pieces: usize,
}

/// The special tokens `SiglipTokenizer` splits on.
const EOS: &str = "</s>";
const UNK: &str = "<unk>";

impl SiglipTokenizer {
    /// The tokenizer of a `spiece.model`'s bytes.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let model = SentencePiece::from_bytes(bytes)?;
        let eos = *model
            .ids
            .get(EOS)
            .ok_or("it has no </s> piece (SigLIP ends and pads with it)")?;
        let unk_pieces = model.pieces(UNK).len();
        Ok(Self {
            model,
            eos,
            unk_pieces,
        })
    }

    /// The ids of `text`, exactly `context` of them.
    pub(crate) fn encode(&self, text: &str, context: usize) -> Vec<u32> {
        let text = format!("{SPACE}{}", text.replace(SPACE, " "));
        let mut parts = split_special(&text);
        // The special tokens strip the whitespace beside them.
        for i in 0..parts.len() {
            if parts[i].1 {
                if i + 1 < parts.len() {
                    parts[i + 1].0 = parts[i + 1].0.trim_start_matches(is_python_space);
                }
                if i > 0 {
                    parts[i - 1].0 = parts[i - 1].0.trim_end_matches(is_python_space);
                }
            }
        }
        // Pieces, and whether each is a special token.
        let mut tokens: Vec<(u32, bool, bool)> = Vec::new();
        for (part, special) in parts {
            if part.is_empty() {
                continue;
            }
            if special {
                tokens.push((self.model.id(part), true, false));
                continue;
            }
            let canonical = siglip_canonicalize(part);
            let pieces = self.model.pieces(&format!("{UNK}{canonical}"));
            let skip = if pieces.len() >= self.unk_pieces {
                self.unk_pieces
            } else {
                0
            };
            for piece in &pieces[skip..] {
                let lone_space = piece.chars().eq([SPACE]);
                tokens.push((self.model.id(piece), false, lone_space));
            }
        }
        if tokens.len() > 1 && tokens[0].2 && tokens[1].1 {
            tokens.remove(0);
        }
        let mut ids: Vec<u32> = tokens.into_iter().map(|(id, _, _)| id).collect();
        ids.truncate(context.saturating_sub(1));
        if ids.last() != Some(&self.eos) {
            ids.push(self.eos);
        }
        ids.resize(context, self.eos);
        ids
    }
}

/// `text` split on `</s>` and `<unk>`, left to right: each part, and
/// whether it is one of them.
fn split_special(text: &str) -> Vec<(&str, bool)> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < text.len() {
        let tail = &text[i..];
        match [EOS, UNK].into_iter().find(|s| tail.starts_with(s)) {
            Some(special) => {
                parts.push((&text[start..i], false));
                parts.push((&text[i..i + special.len()], true));
                i += special.len();
                start = i;
            }
            None => i += tail.chars().next().map_or(1, char::len_utf8),
        }
    }
    parts.push((&text[start..], false));
    parts
}

/// transformers' `SiglipTokenizer.canonicalize_text`: lower case, ASCII
/// punctuation removed, runs of whitespace (Python's `\s`) to one space,
/// stripped.
pub(crate) fn siglip_canonicalize(text: &str) -> String {
    let lower = text.to_lowercase();
    let kept: String = lower
        .chars()
        .filter(|c| !c.is_ascii_punctuation())
        .collect();
    kept.split(is_python_space)
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// open_clip's `canonicalize_text` (its `HFTokenizer(clean="canonicalize")`,
/// which SigLIP's `tokenizer.json` runs behind): `_` to a space, ASCII
/// punctuation removed, lower case, whitespace runs to one space, stripped.
pub(crate) fn open_clip_canonicalize(text: &str) -> String {
    siglip_canonicalize(&text.replace('_', " "))
}
