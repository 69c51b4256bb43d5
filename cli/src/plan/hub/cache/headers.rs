//! What a hub's response headers may name in the cache. `hf-hub` makes a
//! file's ETag the name of its blob and its `X-Repo-Commit` the name of a
//! snapshot folder, as sent; from a mirror (`HF_ENDPOINT`) a `../` or an
//! absolute path there writes outside the cache. Here each is checked
//! before anything is written:
//! - an ETag (or `X-Linked-Etag`) is a hex digest, bare, in the hub's
//!   quoted form `"…"`, or weak (`W/"…"`); the blob is named by the digest
//!   alone, as Python's `huggingface_hub` names it (`_normalize_etag`);
//! - a commit is 40 hex digits.

/// The longest digest taken (SHA-512's, 128 hex digits).
const LONGEST: usize = 128;

/// The digest an ETag header names a blob by, or `None` where it is no
/// hex digest.
pub(super) fn etag(value: &str) -> Option<&str> {
    let value = value.trim();
    let value = value.strip_prefix("W/").unwrap_or(value);
    let digest = match value.strip_prefix('"') {
        Some(quoted) => quoted.strip_suffix('"')?,
        None => value,
    };
    (!digest.is_empty() && digest.len() <= LONGEST && digest.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(digest)
}

/// The commit an `X-Repo-Commit` header names (lower case), or `None`
/// where it is no commit hash.
pub(super) fn commit(value: &str) -> Option<String> {
    let value = value.trim();
    (value.len() == 40 && value.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| value.to_ascii_lowercase())
}

/// A header's value as a message shows it: printable, and short.
pub(super) fn shown(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    let mut shown: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        shown.push('…');
    }
    format!("{shown:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etag_is_a_hex_digest_bare_quoted_or_weak() {
        let sha = "c53afb57bd7e030e4d6e74ebc7eea8dc8dd4631694c467527f75b5e47095f443";
        for (header, digest) in [
            (sha.to_owned(), sha),
            (format!("\"{sha}\""), sha),
            (format!("W/\"{sha}\""), sha),
            (
                " \"37f110ad3467f04fd730443cb2b670529c3d2049\" ".to_owned(),
                "37f110ad3467f04fd730443cb2b670529c3d2049",
            ),
            // An S3 mirror's MD5: a digest, though no checksum the tool
            // checks.
            (
                "\"9e107d9d372bb6826bd81d3542a419d6\"".to_owned(),
                "9e107d9d372bb6826bd81d3542a419d6",
            ),
        ] {
            assert_eq!(etag(&header), Some(digest), "{header}");
        }
        for bad in [
            "",
            "\"\"",
            "W/\"\"",
            "\"../../../../escaped\"",
            "../blob",
            "/tmp/abs",
            "\"/tmp/abs\"",
            "\"ab/cd\"",
            "\"abc",
            "abc\"",
            "\"ab\"cd\"",
            "W/\"ab..cd\"",
            "d41d8cd98f00b204e9800998ecf8427e-3",
            "\"ab\\\\cd\"",
            "ab cd",
            "ab\0cd",
            "a".repeat(LONGEST + 1).as_str(),
        ] {
            assert_eq!(etag(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_commit_is_40_hex_digits() {
        let c = "85D337D1A1B4C2ADC5C67EC89E6D652EC0BAB1C6";
        assert_eq!(commit(c), Some(c.to_ascii_lowercase()));
        for bad in [
            "",
            "main",
            "../../../../x",
            "/tmp/x",
            &c[..39],
            format!("{c}0").as_str(),
            format!("../{}", &c[3..]).as_str(),
        ] {
            assert_eq!(commit(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_header_is_shown_printable_and_short() {
        assert_eq!(shown(b"../x"), "\"../x\"");
        assert_eq!(shown(b"a\nb"), "\"a\\nb\"");
        let long = shown(&[b'a'; 200]);
        assert!(long.chars().count() < 90, "{long}");
    }
}
