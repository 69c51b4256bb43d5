//! The dataset: every item in a deterministic order, each with a stable
//! index, a name for the output and a [`Location`] for its bytes; and the
//! fixed-size chunks work is handed out in.
//!
//! [`Manifest::scan`] reads a local folder. Order is the byte order of the
//! path relative to the root (so `a.b/x.jpg` comes before `a/y.jpg`, as
//! `sort` would have it), independent of how the file system lists
//! directories. An unreadable folder or a symlink loop is recorded as a
//! problem and the scan goes on. The other layouts (lists, tables, shards,
//! object storage) are read by `loader::source` into the same shape.

use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::entries::Entries;
use crate::item::ItemIndex;
use crate::kept::Kept;
use crate::source::Location;

/// Extensions (lower-case) the scan picks up.
pub const IMAGE_EXTENSIONS: [&str; 8] = ["jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff"];

/// Something the scan could not look into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanProblem {
    /// Where.
    pub path: PathBuf,
    /// What went wrong (permission, symlink loop, …).
    pub message: String,
}

/// The scan could not start.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// The root is missing or not a folder.
    #[error("--data {0}: not a folder (or it does not exist)")]
    NotAFolder(PathBuf),
}

/// Every image of a dataset, in order, indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// What `--data` said.
    pub source: String,
    /// The images, item `i` the `i`-th, held compactly.
    pub entries: Entries,
    /// `--keep-columns`: the columns carried into the output, and their
    /// values per item.
    pub kept: Kept,
    /// Folders, links, shards or rows that could not be read.
    pub problems: Vec<ScanProblem>,
    /// A hash of the listed objects' sizes and ETags (remote sources), so a
    /// resumed run notices objects replaced under the same names.
    pub revision: Option<u64>,
}

impl Manifest {
    /// Walks `root` recursively (following symlinks, which is how datasets
    /// are often assembled) and keeps files with an image extension.
    pub fn scan(root: &Path) -> Result<Self, ScanError> {
        if !root.is_dir() {
            return Err(ScanError::NotAFolder(root.to_path_buf()));
        }
        let mut relative = Vec::new();
        let mut problems = Vec::new();
        for entry in walkdir::WalkDir::new(root).follow_links(true) {
            match entry {
                Ok(entry) if entry.file_type().is_file() && has_image_extension(entry.path()) => {
                    if let Ok(rel) = entry.path().strip_prefix(root) {
                        let stamp = entry.metadata().map_or(0, |m| {
                            let mtime = m
                                .modified()
                                .ok()
                                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                                .map_or(0, |d| d.as_nanos() as u64);
                            stamp_of(&[&m.len().to_le_bytes(), &mtime.to_le_bytes()])
                        });
                        relative.push((rel.to_path_buf(), stamp));
                    }
                }
                Ok(_) => {}
                Err(e) => problems.push(ScanProblem {
                    path: e
                        .path()
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|| root.to_path_buf()),
                    message: e.to_string(),
                }),
            }
        }
        relative.sort_by(|a, b| a.0.as_os_str().as_bytes().cmp(b.0.as_os_str().as_bytes()));
        // Workers may run in another folder: give them absolute paths.
        let absolute_root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        let mut entries = Entries::new();
        for (name, stamp) in relative {
            let location = Location::File {
                path: absolute_root.join(&name).into_os_string().into_vec(),
                range: None,
            };
            entries.push_stamped(name, location, stamp);
        }
        Ok(Self {
            source: root.to_string_lossy().into_owned(),
            entries,
            kept: Kept::default(),
            problems,
            revision: None,
        })
    }

    /// Per item, in order: a hash of its name and stamp, the identity
    /// `--update` matches items of a new scan with the old output's by.
    pub fn item_keys(&self) -> Vec<u64> {
        let mut keys = Vec::with_capacity(self.entries.len());
        self.for_each_item_key(|key| keys.push(key));
        keys
    }

    /// [`Manifest::item_keys`] one at a time, without collecting them.
    pub fn for_each_item_key(&self, mut f: impl FnMut(u64)) {
        let mut i = 0;
        self.entries.for_each_name(|name| {
            f(stamp_of(&[
                name,
                &[0],
                &self.entries.stamp(i).to_le_bytes(),
            ]));
            i += 1;
        });
    }

    /// A fingerprint of the input list (FNV-1a over the names, then the
    /// [`Manifest::revision`] and any kept columns' values), so a resumed run can tell that its inputs
    /// changed.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv64::default();
        self.entries.for_each_name(|name| {
            h.write(name);
            h.write(&[0]);
        });
        if let Some(revision) = self.revision {
            h.write(&revision.to_le_bytes());
        }
        if !self.kept.columns.is_empty() {
            self.kept.hash_into(|bytes| h.write(bytes));
        }
        h.0
    }
}

/// FNV-1a of `parts`, one after the other.
pub fn stamp_of(parts: &[&[u8]]) -> u64 {
    let mut h = Fnv64::default();
    for part in parts {
        h.write(part);
    }
    h.finish()
}

fn has_image_extension(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        IMAGE_EXTENSIONS
            .iter()
            .any(|known| e.eq_ignore_ascii_case(known))
    })
}

/// FNV-1a, 64 bits: a hash that is the same on every machine and every
/// build (unlike std's `DefaultHasher`), for fingerprints stored on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Self(0xCBF2_9CE4_8422_2325)
    }
}

impl Fnv64 {
    /// Feeds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// A fixed range of items with a stable id: chunk `id` holds items
/// `[id × size, min((id + 1) × size, n))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// Stable id: the same inputs and chunk size give the same chunks.
    pub id: u64,
    /// First item.
    pub start: ItemIndex,
    /// One past the last item.
    pub end: ItemIndex,
}

impl Chunk {
    /// Items in the chunk.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// True for a chunk with no items (never produced by [`plan_chunks`]).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// Cuts `items` items into chunks of `size` (the last may be shorter).
pub fn plan_chunks(items: u64, size: u64) -> Vec<Chunk> {
    let size = size.max(1);
    (0..items.div_ceil(size))
        .map(|id| Chunk {
            id,
            start: id * size,
            end: ((id + 1) * size).min(items),
        })
        .collect()
}

/// One of `count` disjoint parts of the chunk set (`--shard index/count`).
/// Chunks are dealt round-robin, so every shard gets a similar share of
/// the dataset's folders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u32,
    /// How many shards share the run.
    pub count: u32,
}

impl Shard {
    /// The whole dataset.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Whether this shard owns `chunk`.
    pub fn owns(&self, chunk: &Chunk) -> bool {
        chunk.id % u64::from(self.count) == u64::from(self.index)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// A `--shard` that is not `i/n` with `i < n`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--shard {0}: expected INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/4")]
pub struct BadShard(pub String);

impl FromStr for Shard {
    type Err = BadShard;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadShard(s.to_owned());
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn scan_sorts_by_relative_path_bytes_and_skips_non_images() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        for rel in [
            "a/y.jpg",
            "a.b/x.JPG",
            "b.png",
            "a/z/w.tiff",
            "notes.txt",
            "a/README",
        ] {
            let path = root.join(rel);
            fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
            fs::write(path, b"x").expect("write");
        }
        let manifest = Manifest::scan(root).expect("scan");
        let found: Vec<String> = manifest
            .entries
            .iter()
            .map(|e| e.name.to_str().expect("utf-8").to_owned())
            .collect();
        assert_eq!(found, ["a.b/x.JPG", "a/y.jpg", "a/z/w.tiff", "b.png"]);
        assert!(
            manifest
                .entries
                .iter()
                .enumerate()
                .all(|(i, e)| e.index == i as u64)
        );
        assert!(manifest.problems.is_empty());
    }

    #[test]
    fn symlink_loops_and_unreadable_folders_are_reported_not_fatal() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        fs::create_dir_all(root.join("loop")).expect("mkdir");
        std::os::unix::fs::symlink(root, root.join("loop/back")).expect("symlink");
        fs::write(root.join("ok.jpg"), b"x").expect("write");
        fs::create_dir_all(root.join("locked")).expect("mkdir");
        fs::write(root.join("locked/hidden.jpg"), b"x").expect("write");
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(root.join("locked"), fs::Permissions::from_mode(0o000)).expect("chmod");
        let root = root.to_path_buf();
        // Root reads mode-000 folders; capabilities are per thread, so drop
        // the override on a thread of our own.
        let manifest = std::thread::spawn(move || {
            use caps::{CapSet, Capability};
            for cap in [
                Capability::CAP_DAC_OVERRIDE,
                Capability::CAP_DAC_READ_SEARCH,
            ] {
                caps::drop(None, CapSet::Effective, cap).expect("drop a capability");
            }
            Manifest::scan(&root).expect("scan")
        })
        .join()
        .expect("scan thread");
        assert_eq!(manifest.entries.len(), 1, "{:?}", manifest.entries);
        let messages: Vec<&str> = manifest
            .problems
            .iter()
            .map(|p| p.message.as_str())
            .collect();
        assert!(messages.iter().any(|m| m.contains("loop")), "{messages:?}");
        assert!(
            messages.iter().any(|m| m.contains("ermission denied")),
            "{messages:?}"
        );
    }

    #[test]
    fn fingerprint_changes_with_the_input_list() {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::write(dir.path().join("a.jpg"), b"x").expect("write");
        let before = Manifest::scan(dir.path()).expect("scan").fingerprint();
        assert_eq!(
            before,
            Manifest::scan(dir.path()).expect("scan").fingerprint()
        );
        fs::write(dir.path().join("b.jpg"), b"x").expect("write");
        assert_ne!(
            before,
            Manifest::scan(dir.path()).expect("scan").fingerprint()
        );
    }

    #[test]
    fn fingerprint_covers_kept_values() {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::write(dir.path().join("a.jpg"), b"x").expect("write");
        let mut manifest = Manifest::scan(dir.path()).expect("scan");
        let plain = manifest.fingerprint();
        manifest.kept = Kept::new(vec!["caption".into()]);
        manifest.kept.push(&[Some("\"a cat\"")]);
        let kept = manifest.fingerprint();
        assert_ne!(plain, kept);
        manifest.kept = Kept::new(vec!["caption".into()]);
        manifest.kept.push(&[Some("\"a dog\"")]);
        assert_ne!(manifest.fingerprint(), kept);
    }

    #[test]
    fn a_missing_root_is_an_error() {
        assert!(matches!(
            Manifest::scan(Path::new("/nonexistent/data")),
            Err(ScanError::NotAFolder(_))
        ));
    }

    #[test]
    fn chunks_cover_every_item_once_and_shards_split_them() {
        for (items, size) in [(0u64, 4u64), (1, 4), (10, 3), (12, 4), (1000, 7)] {
            let chunks = plan_chunks(items, size);
            let mut next = 0;
            for (i, c) in chunks.iter().enumerate() {
                assert_eq!((c.id, c.start), (i as u64, next));
                assert!(!c.is_empty() && c.len() <= size);
                next = c.end;
            }
            assert_eq!(next, items);
            for count in 1..=4u32 {
                let owners: Vec<usize> = chunks
                    .iter()
                    .map(|c| {
                        (0..count)
                            .filter(|&index| Shard { index, count }.owns(c))
                            .count()
                    })
                    .collect();
                assert!(
                    owners.iter().all(|&n| n == 1),
                    "each chunk has exactly one shard"
                );
            }
        }
    }

    #[test]
    fn shard_parses_and_refuses_nonsense() {
        assert_eq!("1/4".parse::<Shard>(), Ok(Shard { index: 1, count: 4 }));
        assert_eq!(Shard { index: 3, count: 8 }.to_string(), "3/8");
        for bad in ["4/4", "1", "a/b", "0/0", "-1/3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
