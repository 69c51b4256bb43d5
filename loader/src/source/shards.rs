//! WebDataset tar shards: which shards (`{a..b}` patterns, folders),
//! their members, and samples grouped by key.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use pipeline_core::{ByteRange, Entries, Fnv64, Location, Manifest, ScanProblem, is_url};

use super::keep::{KeepFilter, Keeping, json_string};
use super::{SHARD_IMAGE_EXTENSIONS, SourceError, absolute};
use crate::remote::Remote;

/// The shards `data` names: one `.tar`, a folder of them, or a brace
/// pattern (`shards/{00000..00099}.tar`), local or remote.
pub fn shards(data: &str) -> Result<Vec<String>, SourceError> {
    if data.contains('{') {
        let bad = |message: String| SourceError::Read {
            path: data.to_owned(),
            message: format!("bad brace pattern: {message}"),
        };
        let tokens = bracoxide::tokenizer::tokenize(data).map_err(|e| bad(format!("{e:?}")))?;
        let pattern = bracoxide::parser::parse(&tokens).map_err(|e| bad(format!("{e:?}")))?;
        // Counted before it is expanded: `{a,b}` twenty times over, or
        // `{0..99999999999}`, or a long pattern named many times, would
        // fill the memory first (found by the `manifest_parsers` fuzz
        // target). Each name is at most about as long as the pattern.
        let names = expansions(&pattern).filter(|&n| n <= MAX_SHARDS);
        let bytes = names.map(|n| n.saturating_mul(data.len() as u64 + 20));
        if bytes.is_none_or(|b| b > MAX_SHARD_NAME_BYTES) {
            return Err(bad(format!(
                "it names more than {MAX_SHARDS} shards, or more than {} MiB of names",
                MAX_SHARD_NAME_BYTES >> 20
            )));
        }
        return bracoxide::expand(&pattern).map_err(|e| bad(format!("{e:?}")));
    }
    let path = Path::new(data);
    if !is_url(data) && path.is_dir() {
        let mut tars: Vec<String> = std::fs::read_dir(path)
            .map_err(|e| SourceError::Read {
                path: data.to_owned(),
                message: e.to_string(),
            })?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("tar")))
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        tars.sort();
        return Ok(tars);
    }
    Ok(vec![data.to_owned()])
}

/// The most shards one `--data` brace pattern may name (LAION-5B is about
/// 230,000 shards of 10,000 samples).
const MAX_SHARDS: u64 = 1_000_000;

/// The most bytes of shard names one brace pattern may expand to.
const MAX_SHARD_NAME_BYTES: u64 = 256 << 20;

/// How many names `node` expands to, `None` when it or any part of it
/// would expand to more than [`MAX_SHARDS`] (a part is expanded whole
/// even when the product is empty).
fn expansions(node: &bracoxide::parser::Node) -> Option<u64> {
    use bracoxide::parser::Node;
    let n = match node {
        Node::Text { .. } => 1,
        Node::BraceExpansion {
            prefix,
            inside,
            postfix,
            ..
        } => {
            let part = |p: &Option<Box<Node>>| p.as_deref().map_or(Some(1), expansions);
            part(prefix)?
                .checked_mul(part(inside)?)?
                .checked_mul(part(postfix)?)?
        }
        Node::Collection { items, .. } => items
            .iter()
            .try_fold(0u64, |sum, item| sum.checked_add(expansions(item)?))?,
        // A bound that is no number is refused when expanded.
        Node::Range { from, to, .. } => match (from.parse::<u64>(), to.parse::<u64>()) {
            (Ok(from), Ok(to)) => to.checked_sub(from).map_or(0, |d| d.saturating_add(1)),
            _ => 1,
        },
    };
    (n <= MAX_SHARDS).then_some(n)
}

/// WebDataset shards: an item per key with an image member, named
/// `SHARD/KEY`, located as a byte range of its shard. A key without an image
/// member becomes an item on its first member, which fails as `unsupported`
/// or `decode`: nothing in a shard vanishes silently.
pub(super) fn webdataset(
    data: &str,
    mut keeping: Keeping,
    client: &dyn Fn() -> Result<&'static Remote, SourceError>,
) -> Result<Manifest, SourceError> {
    let shards = shards(data)?;
    let mut entries = Entries::new();
    let mut problems = Vec::new();
    let mut h = Fnv64::default();
    for shard in &shards {
        let members = if is_url(shard) {
            let bytes = client()?.get(shard, None).map_err(|e| SourceError::Read {
                path: shard.clone(),
                message: e.message,
            })?;
            h.write(&(bytes.len() as u64).to_le_bytes());
            scan_tar(&bytes[..], keeping.filter())
        } else {
            match File::open(shard) {
                Ok(file) => scan_tar(BufReader::new(file), keeping.filter()),
                Err(e) => {
                    return Err(SourceError::Read {
                        path: shard.clone(),
                        message: e.to_string(),
                    });
                }
            }
        };
        let (members, problem) = members;
        if let Some(message) = problem {
            problems.push(ScanProblem {
                path: PathBuf::from(pipeline_core::redact_url(shard).into_owned()),
                message,
            });
        }
        let shard_name = shard_name(data, shard);
        for (key, range, kept) in samples(members) {
            keeping.push(kept);
            let location = if is_url(shard) {
                Location::Url {
                    url: shard.clone(),
                    range: Some(range),
                }
            } else {
                Location::File {
                    path: absolute(Path::new(shard)),
                    range: Some(range),
                }
            };
            // A member rewritten in place moves or resizes: `--update`
            // sees it.
            let stamp =
                pipeline_core::stamp_of(&[&range.offset.to_le_bytes(), &range.len.to_le_bytes()]);
            entries.push_stamped(format!("{shard_name}/{key}"), location, stamp);
        }
    }
    Ok(Manifest {
        source: data.to_owned(),
        entries,
        kept: keeping.finish()?,
        problems,
        revision: shards.iter().any(|s| is_url(s)).then(|| h.finish()),
    })
}

/// How a shard is named in outputs: relative to a folder of shards, else
/// as given, a URL by its object (`object_url`: no credential in outputs,
/// the same name when it is signed again).
fn shard_name(data: &str, shard: &str) -> String {
    let dir = data.trim_end_matches('/');
    match shard.strip_prefix(dir).and_then(|s| s.strip_prefix('/')) {
        Some(rest) if Path::new(data).is_dir() => rest.to_owned(),
        _ => pipeline_core::object_url(shard).into_owned(),
    }
}

/// A tar member: its path, where its body is, and the body itself when
/// `--keep-columns` keeps its extension.
type Member = (String, ByteRange, Option<Vec<u8>>);

/// The extension of a member path: its file name after the first dot,
/// lower-cased (`a/000.seg.png` → `seg.png`).
fn member_ext(path: &str) -> String {
    let file = path.rsplit_once('/').map_or(path, |(_, f)| f);
    file.split_once('.')
        .map_or("", |(_, ext)| ext)
        .to_ascii_lowercase()
}

/// The regular files of a tar stream, in order, and what stopped the scan
/// early (a truncated or corrupt shard).
fn scan_tar(reader: impl Read, keep: &KeepFilter) -> (Vec<Member>, Option<String>) {
    let mut archive = tar::Archive::new(reader);
    let mut members = Vec::new();
    let entries = match archive.entries() {
        Ok(entries) => entries,
        Err(e) => return (members, Some(format!("not a tar file: {e}"))),
    };
    for entry in entries {
        match entry {
            Ok(mut entry) => {
                if !entry.header().entry_type().is_file() {
                    continue;
                }
                let path = match entry.path() {
                    Ok(p) => p.to_string_lossy().into_owned(),
                    Err(e) => return (members, Some(format!("bad member name: {e}"))),
                };
                let range = ByteRange {
                    offset: entry.raw_file_position(),
                    len: entry.size(),
                };
                let mut body = None;
                if keep.wants(&member_ext(&path), &SHARD_IMAGE_EXTENSIONS) {
                    let mut bytes = Vec::new();
                    if let Err(e) = entry.read_to_end(&mut bytes) {
                        return (members, Some(format!("shard ends early in {path}: {e}")));
                    }
                    body = Some(bytes);
                }
                members.push((path, range, body));
            }
            Err(e) => {
                return (
                    members,
                    Some(format!("shard ends early (truncated or corrupt): {e}")),
                );
            }
        }
    }
    (members, None)
}

/// A sample: its key, its image member's range, and its kept members'
/// values (`(extension, JSON text)`).
type Sample = (String, ByteRange, Vec<(String, String)>);

/// Members grouped into samples by key (the path up to the first dot of its
/// file name), in order of first appearance; each sample's image member and
/// kept members.
fn samples(members: Vec<Member>) -> Vec<Sample> {
    let mut order: Vec<String> = Vec::new();
    // Per key, its members with their extensions in place of their paths.
    let mut by_key: BTreeMap<String, Vec<Member>> = BTreeMap::new();
    for (path, range, body) in members {
        let ext = member_ext(&path);
        let key = path[..path.len() - ext.len()]
            .strip_suffix('.')
            .unwrap_or(&path)
            .to_owned();
        let group = by_key.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            Vec::new()
        });
        group.push((ext, range, body));
    }
    order
        .into_iter()
        .map(|key| {
            let members = by_key.remove(&key).unwrap_or_default();
            let image = SHARD_IMAGE_EXTENSIONS
                .iter()
                .find_map(|want| members.iter().position(|(ext, ..)| ext == want))
                .unwrap_or(0);
            let range = members[image].1;
            let kept = members
                .into_iter()
                .enumerate()
                .filter(|(i, _)| *i != image)
                .filter_map(|(_, (ext, _, body))| {
                    let body = body?;
                    let text = String::from_utf8_lossy(&body);
                    let value = match ext.as_str() {
                        "json" => serde_json::from_str::<serde_json::Value>(&text)
                            .map_or_else(|_| json_string(&text), |v| v.to_string()),
                        _ => json_string(&text),
                    };
                    Some((ext, value))
                })
                .collect();
            (key, range, kept)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_group_members_by_key_and_pick_the_image() {
        let r = |offset| ByteRange { offset, len: 1 };
        let members = vec![
            ("a/000.txt".to_owned(), r(0), Some(b"a cat".to_vec())),
            ("a/000.png".to_owned(), r(1), None),
            ("a/000.jpg".to_owned(), r(2), None),
            ("a/000.json".to_owned(), r(5), Some(br#"{"w": 3}"#.to_vec())),
            ("b.cls".to_owned(), r(3), None),
            ("a/001.seg.png".to_owned(), r(4), None),
        ];
        let got = samples(members);
        let kept = vec![
            ("txt".to_owned(), "\"a cat\"".to_owned()),
            ("json".to_owned(), r#"{"w":3}"#.to_owned()),
        ];
        assert_eq!(
            got,
            vec![
                ("a/000".to_owned(), r(2), kept),
                ("b".to_owned(), r(3), Vec::new()),
                ("a/001".to_owned(), r(4), Vec::new()),
            ]
        );
    }

    #[test]
    fn brace_patterns_expand_in_order() {
        let got = shards("s/{00..02}.tar").expect("expands");
        assert_eq!(got, ["s/00.tar", "s/01.tar", "s/02.tar"]);
        let got = shards("{a,b}/{1..2}.tar").expect("expands");
        assert_eq!(got, ["a/1.tar", "a/2.tar", "b/1.tar", "b/2.tar"]);
    }

    #[test]
    fn brace_patterns_too_large_to_expand_are_refused_before_expanding() {
        // 2^30 names; and a range past the limit whose product is empty.
        let doubling = "{a,b}".repeat(30);
        for pattern in [
            format!("s/{doubling}.tar"),
            "s/{0..99999999999}.tar".to_owned(),
            "s/{1..99999999}{5..1}.tar".to_owned(),
            // 500,000 names of 1 KB each.
            format!("s/{}{{0..499999}}.tar", "x".repeat(1000)),
        ] {
            let message = shards(&pattern).expect_err("too many").to_string();
            assert!(message.contains("more than 1000000 shards"), "{message}");
        }
        assert_eq!(shards("s/{0..9999}.tar").expect("expands").len(), 10_000);
    }
}
