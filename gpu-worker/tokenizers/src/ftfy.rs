//! ftfy's `fix_text` with its default configuration, as open_clip's
//! tokenizer runs it on every text (`basic_clean`), ported from ftfy 6
//! (Apache-2.0, Robyn Speer). No Rust crate does this. Its data (charmaps,
//! regexes, entity tables, character maps) is generated from ftfy itself
//! into `ftfy_tables.json` by `scripts/make_ftfy_tables.py` and read by
//! `ftfy_data.rs`; the steps below follow `ftfy/__init__.py` and
//! `ftfy/fixes.py` in order:
//!
//! per line: repeat until nothing changes {
//!   unescape HTML entities (unless the text has a `<`), fix mojibake,
//!   C1 controls, Latin ligatures, full-width characters, curly quotes,
//!   line breaks, terminal escapes, control characters, NFC }
//!
//! Mojibake: text that ftfy's badness regex flags is encoded in each
//! single-byte charmap that can hold it and decoded as UTF-8 (with its
//! byte-A0 and lossy-sequence repairs, and CESU-8); failing that, embedded
//! UTF-8 runs are fixed alone, Latin-1 is read as Windows-1252, and C1
//! controls are replaced. Python's `html.unescape` is here too (open_clip
//! applies it twice after ftfy). The data is `ftfy_data.rs`'s.

use unicode_normalization::UnicodeNormalization;

use crate::ftfy_data::tables;

/// ftfy's `fix_text(text)`: each line fixed on its own; once a line holds
/// a `<`, HTML entities are left alone from there on (ftfy's "auto").
pub(crate) fn fix_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut unescape = true;
    for segment in text.split_inclusive('\n') {
        if segment.contains('<') {
            unescape = false;
        }
        out.push_str(&fix_segment(segment, unescape));
    }
    out
}

/// ftfy's `fix_and_explain` on one segment.
fn fix_segment(text: &str, unescape: bool) -> String {
    let mut text = text.to_owned();
    loop {
        let original = text.clone();
        if unescape {
            text = unescape_html(&text);
        }
        text = fix_encoding(&text);
        text = fix_c1_controls(&text);
        text = translate(&text, &tables().ligatures);
        text = translate(&text, &tables().width_map);
        text = uncurl_quotes(&text);
        text = fix_line_breaks(&text);
        text = tables().ansi.replace_all(&text, "").into_owned();
        text = translate(&text, &tables().control_chars);
        text = text.nfc().collect();
        if text == original {
            return text;
        }
    }
}

/// Each character's replacement from a sorted `(char, replacement)` table.
fn translate(text: &str, table: &[(char, String)]) -> String {
    if !text
        .chars()
        .any(|c| table.binary_search_by_key(&c, |&(k, _)| k).is_ok())
    {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match table.binary_search_by_key(&c, |&(k, _)| k) {
            Ok(i) => out.push_str(&table[i].1),
            Err(_) => out.push(c),
        }
    }
    out
}

fn lookup<'a>(table: &'a [(String, String)], key: &str) -> Option<&'a str> {
    table
        .binary_search_by(|(k, _)| k.as_str().cmp(key))
        .ok()
        .map(|i| table[i].1.as_str())
}

/// ftfy's `unescape_html`: entities ending in `;` that HTML5 names (and
/// their all-caps forms), and numeric references Python decodes whole.
fn unescape_html(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    tables()
        .entity
        .replace_all(text, |caps: &regex::Captures<'_>| {
            let entity = &caps[0];
            if let Some(value) = lookup(&tables().ftfy_entities, entity) {
                value.to_owned()
            } else if entity.starts_with("&#") {
                let unescaped = html_unescape(entity);
                if unescaped.contains(';') {
                    entity.to_owned()
                } else {
                    unescaped
                }
            } else {
                entity.to_owned()
            }
        })
        .into_owned()
}

/// Python's `html.unescape`.
pub(crate) fn html_unescape(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    tables()
        .charref
        .replace_all(text, |caps: &regex::Captures<'_>| replace_charref(&caps[1]))
        .into_owned()
}

/// Python html's `_replace_charref` for the text after `&`.
fn replace_charref(s: &str) -> String {
    if let Some(number) = s.strip_prefix('#') {
        let (digits, radix) = match number.strip_prefix(['x', 'X']) {
            Some(hex) => (hex, 16),
            None => (number, 10),
        };
        let digits = digits.trim_end_matches(';');
        // Python's int() has no limit; anything past u64 is past 0x10FFFF.
        let num = u64::from_str_radix(digits, radix).unwrap_or(u64::MAX);
        let invalid = &tables().invalid_charrefs;
        if let Ok(i) = invalid.binary_search_by_key(&num, |&(k, _)| u64::from(k)) {
            return invalid[i].1.to_string();
        }
        if (0xD800..=0xDFFF).contains(&num) || num > 0x10FFFF {
            return '\u{FFFD}'.to_string();
        }
        if tables()
            .invalid_codepoints
            .binary_search(&(num as u32))
            .is_ok()
        {
            return String::new();
        }
        return char::from_u32(num as u32).map_or_else(String::new, |c| c.to_string());
    }
    if let Some(value) = lookup(&tables().html5_entities, s) {
        return value.to_owned();
    }
    // The longest name that is a prefix, at least 2 characters long.
    let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
    for x in (2..bounds.len()).rev() {
        let (name, rest) = s.split_at(bounds[x]);
        if let Some(value) = lookup(&tables().html5_entities, name) {
            return format!("{value}{rest}");
        }
    }
    format!("&{s}")
}

/// ftfy's `is_bad`.
fn is_bad(text: &str) -> bool {
    tables().badness.is_match(text)
}

/// ftfy's `fix_encoding`: one step at a time until nothing changes.
fn fix_encoding(text: &str) -> String {
    let mut text = text.to_owned();
    loop {
        let fixed = fix_encoding_step(&text);
        if fixed == text {
            return text;
        }
        text = fixed;
    }
}

/// ftfy's `_fix_encoding_one_step_and_explain`.
fn fix_encoding_step(text: &str) -> String {
    if text.is_empty() || text.is_ascii() || !is_bad(text) {
        return text.to_owned();
    }
    let mut possible = Vec::new();
    for map in &tables().charmaps {
        let Some(mut bytes) = map.encode(text) else {
            continue;
        };
        possible.push(map.name.as_str());
        if map.name != "macroman" && tables().altered_utf8.is_match(&bytes) {
            bytes = restore_byte_a0(&bytes);
        }
        if map.name.starts_with("sloppy") {
            bytes = tables()
                .lossy_utf8
                .replace_all(&bytes, "\u{FFFD}".as_bytes())
                .into_owned();
        }
        let decoded = if bytes.contains(&0xED) || bytes.contains(&0xC0) {
            decode_utf8_variants(&bytes)
        } else {
            String::from_utf8(bytes).ok()
        };
        if let Some(fixed) = decoded {
            return fixed;
        }
    }
    if tables().utf8_detector.is_match(text).unwrap_or(false) {
        let fixed = decode_inconsistent_utf8(text);
        if fixed != text {
            return fixed;
        }
    }
    // ftfy asks whether "windows-1252" is among the possible encodings,
    // which only ever holds "sloppy-windows-1252": so Latin-1 text is
    // always tried as Windows-1252.
    if possible.contains(&"latin-1") {
        let cp1252 = &tables().charmaps[1];
        debug_assert_eq!(cp1252.name, "sloppy-windows-1252");
        // Strict Windows-1252: five bytes are undefined.
        let fixed: Option<String> = text
            .chars()
            .map(|c| {
                let byte = c as u32;
                match byte {
                    0x81 | 0x8D | 0x8F | 0x90 | 0x9D => None,
                    _ => Some(cp1252.decode[byte as usize]),
                }
            })
            .collect();
        if let Some(fixed) = fixed
            && fixed != text
        {
            return fixed;
        }
    }
    if text.chars().any(is_c1) {
        return fix_c1_controls(text);
    }
    text.to_owned()
}

fn is_c1(c: char) -> bool {
    ('\u{80}'..='\u{9F}').contains(&c)
}

/// ftfy's `fix_c1_controls`: each C1 control as its Windows-1252 byte.
fn fix_c1_controls(text: &str) -> String {
    if !text.chars().any(is_c1) {
        return text.to_owned();
    }
    let cp1252 = &tables().charmaps[1].decode;
    text.chars()
        .map(|c| if is_c1(c) { cp1252[c as usize] } else { c })
        .collect()
}

/// ftfy's `decode_inconsistent_utf8`: each run that looks like UTF-8 read
/// as a single-byte encoding, fixed alone if it is bad and not the whole.
fn decode_inconsistent_utf8(text: &str) -> String {
    let detector = &tables().utf8_detector;
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for found in detector.find_iter(text) {
        let Ok(found) = found else { break };
        out.push_str(&text[last..found.start()]);
        let part = found.as_str();
        if part.len() < text.len() && is_bad(part) {
            out.push_str(&fix_encoding(part));
        } else {
            out.push_str(part);
        }
        last = found.end();
    }
    out.push_str(&text[last..]);
    out
}

/// ftfy's `restore_byte_a0`: `C3 20` before a word (not Portuguese `à`
/// before `quele`, `quela`, `quilo`, `s `, or a space) becomes `C3 A0 20`,
/// then spaces inside would-be UTF-8 sequences become A0.
fn restore_byte_a0(bytes: &[u8]) -> Vec<u8> {
    let mut grave = Vec::with_capacity(bytes.len() + 8);
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == 0xC3 && bytes.get(i + 1) == Some(&b' ') {
            let after = &bytes[i + 2..];
            let excluded = [&b" "[..], b"quele", b"quela", b"quilo", b"s "]
                .iter()
                .any(|p| after.starts_with(p));
            if !excluded {
                grave.extend_from_slice(&[0xC3, 0xA0, b' ']);
                i += 2;
                continue;
            }
        }
        grave.push(bytes[i]);
        i += 1;
    }
    tables()
        .altered_utf8
        .replace_all(&grave, |caps: &regex::bytes::Captures<'_>| {
            caps[0]
                .iter()
                .map(|&b| if b == b' ' { 0xA0 } else { b })
                .collect::<Vec<u8>>()
        })
        .into_owned()
}

/// ftfy's `utf-8-variants` codec, strict: UTF-8, plus Java's `C0 80` for
/// U+0000 and CESU-8's surrogate pairs; anything else invalid is `None`.
fn decode_utf8_variants(bytes: &[u8]) -> Option<String> {
    let special = |i: usize| -> bool {
        let at = |k: usize| bytes.get(i + k).copied();
        match bytes[i] {
            0xC0 => matches!(at(1), None | Some(0x80)),
            0xED => match at(1) {
                None => true,
                Some(0xA0..=0xBF) => matches!(at(2), None | Some(0x80..=0xBF)),
                Some(_) => false,
            },
            _ => false,
        }
    };
    let mut out = String::with_capacity(bytes.len());
    let mut pos = 0;
    while pos < bytes.len() {
        let Some(start) = (pos..bytes.len()).find(|&i| special(i)) else {
            out.push_str(std::str::from_utf8(&bytes[pos..]).ok()?);
            break;
        };
        out.push_str(std::str::from_utf8(&bytes[pos..start]).ok()?);
        let rest = &bytes[start..];
        if rest[0] == 0xC0 {
            if rest.len() < 2 {
                return None;
            }
            out.push('\0');
            pos = start + 2;
            continue;
        }
        let cesu = rest.len() >= 6
            && (0xA0..=0xAF).contains(&rest[1])
            && (0x80..=0xBF).contains(&rest[2])
            && rest[3] == 0xED
            && (0xB0..=0xBF).contains(&rest[4])
            && (0x80..=0xBF).contains(&rest[5]);
        if !cesu {
            return None;
        }
        let code = ((u32::from(rest[1]) & 0x0F) << 16)
            + ((u32::from(rest[2]) & 0x3F) << 10)
            + ((u32::from(rest[4]) & 0x0F) << 6)
            + (u32::from(rest[5]) & 0x3F)
            + 0x10000;
        out.push(char::from_u32(code)?);
        pos = start + 6;
    }
    Some(out)
}

/// ftfy's `uncurl_quotes`.
fn uncurl_quotes(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\u{2BC}' | '\u{2018}'..='\u{201B}' => '\'',
            '\u{201C}'..='\u{201F}' => '"',
            c => c,
        })
        .collect()
}

/// ftfy's `fix_line_breaks`.
fn fix_line_breaks(text: &str) -> String {
    text.replace("\r\n", "\n")
        .replace(['\r', '\u{2028}', '\u{2029}', '\u{85}'], "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ftfy's own doctests.
    #[test]
    fn ftfys_examples() {
        for (input, want) in [
            ("sÃ³", "só"),
            ("voilÃ le travail", "voilà le travail"),
            ("&lt;tag&gt;", "<tag>"),
            ("P&EACUTE;REZ", "PÉREZ"),
            ("&ntilde; &Ntilde; &NTILDE; &nTILDE;", "ñ Ñ Ñ &nTILDE;"),
            ("&ATILDE;&SUP3;", "ó"),
            ("\u{201C}here\u{2019}s a test\u{201D}", "\"here's a test\""),
            (
                "What is this \u{85} I don't even",
                "What is this … I don't even",
            ),
            ("ＬＯＵＤ　ＮＯＩＳＥＳ", "LOUD NOISES"),
            ("\u{FB01}sh", "fish"),
            ("â€œ like this â€\u{FFFD}", "\" like this \u{FFFD}"),
        ] {
            assert_eq!(fix_text(input), want, "{input:?}");
        }
        assert_eq!(
            html_unescape("&amp;amp; &ampx &#x41;&#0;"),
            "&amp; &x A\u{FFFD}"
        );
    }

    #[test]
    fn cesu_8_and_java_nulls_decode_and_lone_surrogates_do_not() {
        assert_eq!(
            decode_utf8_variants(b"a\xed\xa0\xbd\xed\xb8\x80\xc0\x80b").as_deref(),
            Some("a\u{1F600}\0b")
        );
        assert_eq!(decode_utf8_variants(b"\xed\xa0\xbd"), None);
    }
}
