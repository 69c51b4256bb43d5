//! ftfy's data, read once from `ftfy_tables.json`, which
//! `scripts/make_ftfy_tables.py` generates from ftfy itself (Apache-2.0,
//! Robyn Speer): its single-byte charmaps, its regexes (rewritten from
//! Python's parse of them, so Rust's `regex` and `fancy-regex` read the
//! same language), its HTML entity table, Python's HTML5 one, and the
//! character maps of its small fixers. Data, not code: `ftfy.rs` runs it.

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::bytes::Regex as BytesRegex;
use serde::Deserialize;

/// The generated file, in the binary.
const JSON: &str = include_str!("ftfy_tables.json");

/// The file as written.
#[derive(Deserialize)]
struct Raw {
    charmaps: Vec<(String, String)>,
    badness: String,
    utf8_detector: String,
    ansi: String,
    altered_utf8: String,
    lossy_utf8: String,
    ftfy_entities: Vec<(String, String)>,
    html5_entities: Vec<(String, String)>,
    invalid_charrefs: Vec<(u32, char)>,
    invalid_codepoints: Vec<u32>,
    control_chars: Vec<(char, String)>,
    ligatures: Vec<(char, String)>,
    width_map: Vec<(char, String)>,
}

/// One of ftfy's single-byte charmaps, both ways.
pub(crate) struct Charmap {
    /// Its codec name (`latin-1`, `sloppy-windows-1252`, …).
    pub(crate) name: String,
    /// Each byte's character.
    pub(crate) decode: [char; 256],
    encode: HashMap<char, u8>,
}

impl Charmap {
    /// `text.encode(name)`, if every character has a byte. (ftfy's
    /// `possible_encoding` is exactly this: its regex is the charmap's
    /// image, byte 0x1A's character in place of U+001A.)
    pub(crate) fn encode(&self, text: &str) -> Option<Vec<u8>> {
        text.chars().map(|c| self.encode.get(&c).copied()).collect()
    }
}

/// Everything `ftfy.rs` looks up, ready to use. Tables of pairs are
/// sorted by key (code point order), for binary search.
pub(crate) struct Tables {
    /// `CHARMAP_ENCODINGS`, in ftfy's order.
    pub(crate) charmaps: Vec<Charmap>,
    pub(crate) badness: regex::Regex,
    pub(crate) utf8_detector: fancy_regex::Regex,
    pub(crate) ansi: regex::Regex,
    pub(crate) altered_utf8: BytesRegex,
    pub(crate) lossy_utf8: BytesRegex,
    /// ftfy's `HTML_ENTITY_RE`.
    pub(crate) entity: regex::Regex,
    /// Python html's `_charref`.
    pub(crate) charref: regex::Regex,
    /// ftfy's `HTML_ENTITIES` (with its upper-case forms).
    pub(crate) ftfy_entities: Vec<(String, String)>,
    /// Python's `html.entities.html5` (names with and without `;`).
    pub(crate) html5_entities: Vec<(String, String)>,
    /// Python html's `_invalid_charrefs`.
    pub(crate) invalid_charrefs: Vec<(u32, char)>,
    /// Python html's `_invalid_codepoints`.
    pub(crate) invalid_codepoints: Vec<u32>,
    /// ftfy's `CONTROL_CHARS` (each removed).
    pub(crate) control_chars: Vec<(char, String)>,
    /// ftfy's `LIGATURES`.
    pub(crate) ligatures: Vec<(char, String)>,
    /// ftfy's `WIDTH_MAP`.
    pub(crate) width_map: Vec<(char, String)>,
}

/// The tables, parsed and compiled on first use.
pub(crate) fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let raw: Raw = serde_json::from_str(JSON).expect("ftfy_tables.json is generated valid");
        let regex = |p: &str| regex::Regex::new(p).expect("ftfy's regexes compile");
        let bytes = |p: &str| BytesRegex::new(p).expect("ftfy's byte regexes compile");
        Tables {
            charmaps: raw
                .charmaps
                .into_iter()
                .map(|(name, table)| {
                    let decode: Vec<char> = table.chars().collect();
                    let decode: [char; 256] =
                        decode.try_into().expect("a charmap has 256 characters");
                    let encode = decode
                        .iter()
                        .enumerate()
                        .map(|(byte, &c)| (c, byte as u8))
                        .collect();
                    Charmap {
                        name,
                        decode,
                        encode,
                    }
                })
                .collect(),
            badness: regex(&raw.badness),
            utf8_detector: fancy_regex::Regex::new(&raw.utf8_detector)
                .expect("ftfy's UTF-8 detector compiles"),
            ansi: regex(&raw.ansi),
            altered_utf8: bytes(&raw.altered_utf8),
            lossy_utf8: bytes(&raw.lossy_utf8),
            entity: regex("&#?[0-9A-Za-z]{1,24};"),
            charref: regex(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\x0C <&#;]{1,32};?)"),
            ftfy_entities: raw.ftfy_entities,
            html5_entities: raw.html5_entities,
            invalid_charrefs: raw.invalid_charrefs,
            invalid_codepoints: raw.invalid_codepoints,
            control_chars: raw.control_chars,
            ligatures: raw.ligatures,
            width_map: raw.width_map,
        }
    })
}
