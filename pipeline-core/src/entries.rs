//! The manifest's items, held compactly: the coordinator keeps every item
//! of a run in memory, and at tens of millions of items one owned name and
//! one owned location each (~200 bytes with their allocations) is gigabytes.
//!
//! - **Names** are front-coded in blocks of [`BLOCK`]: each name stores only
//!   what differs from the one before (dataset paths share long prefixes),
//!   and a block's first name is stored whole, so any item is decoded from
//!   its block's start.
//! - **Locations** are a tag and varints. A location that is a shared
//!   prefix followed by the item's name (a folder's root, a list's folder or
//!   base URL) stores only the prefix's id; a tar member stores its shard's
//!   id and its range; a Parquet cell its file's and column's ids and its
//!   row. The prefixes, shards, files and columns are interned once.
//!
//! Items come back as owned [`ManifestEntry`] values, the same as they went
//! in (a unit test checks every kind round-trips).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fmt;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use integer_encoding::VarInt;

use crate::item::ItemIndex;
use crate::source::{ByteRange, Location};

/// One image of the dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestEntry {
    /// Position in the manifest.
    pub index: ItemIndex,
    /// What the output's `path` says: the path relative to a folder (as
    /// found on disk, possibly not UTF-8), a list's line, a table's cell,
    /// `SHARD/KEY` of a WebDataset member.
    pub name: PathBuf,
    /// Where its bytes are.
    pub location: Location,
}

/// Items per block: a random access decodes at most this many names.
pub(crate) const BLOCK: usize = 16;

// Location tags.
const FILE_AFTER: u8 = 0; // path = prefix ++ name: prefix id
const URL_AFTER: u8 = 1; // url = prefix ++ name: prefix id
const FILE_RAW: u8 = 2; // path inline: length, bytes
const URL_RAW: u8 = 3; // url inline: length, bytes
const FILE_RANGE: u8 = 4; // path id, offset, length
const URL_RANGE: u8 = 5; // url id, offset, length
const CELL: u8 = 6; // file id, column id, row

/// Every item of a manifest, in order; item `i` has index `i`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Entries {
    len: usize,
    /// Per item: varint bytes shared with the previous name (0 at a block's
    /// start), varint suffix length, the suffix.
    names: Vec<u8>,
    /// Per item: a tag and its fields (see the tags above).
    locations: Vec<u8>,
    /// Where each block starts in `names` and `locations`.
    blocks: Vec<(usize, usize)>,
    /// Interned prefixes, shard paths and URLs, files and columns.
    strings: Vec<Vec<u8>>,
    ids: HashMap<Vec<u8>, u32>,
    /// The last name pushed, for front coding.
    last: Vec<u8>,
    /// Per item, what says its bytes changed under the same name (a hash
    /// of size and mtime, or of size and ETag); empty when the source has
    /// none.
    stamps: Vec<u64>,
}

impl Entries {
    /// No items.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True without items.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held on the heap (the figure the memory benchmark explains).
    pub fn heap_bytes(&self) -> usize {
        self.names.capacity()
            + self.locations.capacity()
            + self.blocks.capacity() * std::mem::size_of::<(usize, usize)>()
            + self
                .strings
                .iter()
                .map(|s| 2 * s.capacity() + 48)
                .sum::<usize>()
            + self.last.capacity()
    }

    /// [`Entries::push`] with the item's stamp (see [`Entries::stamp`]).
    pub fn push_stamped(&mut self, name: impl Into<PathBuf>, location: Location, stamp: u64) {
        self.stamps.resize(self.len, 0);
        self.stamps.push(stamp);
        self.push(name, location);
    }

    /// What says item `i`'s bytes changed under the same name: a hash of
    /// its size and mtime (folders) or size and ETag (object listings);
    /// 0 where the source gives none.
    pub fn stamp(&self, i: usize) -> u64 {
        self.stamps.get(i).copied().unwrap_or(0)
    }

    /// Appends an item named `name` (its index is the current length).
    pub fn push(&mut self, name: impl Into<PathBuf>, location: Location) {
        let name = name.into();
        let name = name.as_os_str().as_bytes();
        if self.len.is_multiple_of(BLOCK) {
            self.blocks.push((self.names.len(), self.locations.len()));
            self.last.clear();
        }
        let shared = self
            .last
            .iter()
            .zip(name)
            .take_while(|(a, b)| a == b)
            .count();
        put(&mut self.names, shared as u64);
        put(&mut self.names, (name.len() - shared) as u64);
        self.names.extend_from_slice(&name[shared..]);
        self.last.clear();
        self.last.extend_from_slice(name);
        self.push_location(name, location);
        self.len += 1;
    }

    fn push_location(&mut self, name: &[u8], location: Location) {
        match location {
            Location::File { path, range: None } => {
                self.push_after(FILE_AFTER, FILE_RAW, &path, name)
            }
            Location::Url { url, range: None } => {
                self.push_after(URL_AFTER, URL_RAW, url.as_bytes(), name)
            }
            Location::File {
                path,
                range: Some(r),
            } => self.push_range(FILE_RANGE, &path, r),
            Location::Url {
                url,
                range: Some(r),
            } => self.push_range(URL_RANGE, url.as_bytes(), r),
            Location::Cell { file, column, row } => {
                let (file, column) = (self.intern(&file), self.intern(column.as_bytes()));
                self.locations.push(CELL);
                put(&mut self.locations, u64::from(file));
                put(&mut self.locations, u64::from(column));
                put(&mut self.locations, row);
            }
        }
    }

    fn push_after(&mut self, after: u8, raw: u8, full: &[u8], name: &[u8]) {
        match full.strip_suffix(name) {
            Some(prefix) if !name.is_empty() => {
                let id = self.intern(prefix);
                self.locations.push(after);
                put(&mut self.locations, u64::from(id));
            }
            _ => {
                self.locations.push(raw);
                put(&mut self.locations, full.len() as u64);
                self.locations.extend_from_slice(full);
            }
        }
    }

    fn push_range(&mut self, tag: u8, whole: &[u8], range: ByteRange) {
        let id = self.intern(whole);
        self.locations.push(tag);
        put(&mut self.locations, u64::from(id));
        put(&mut self.locations, range.offset);
        put(&mut self.locations, range.len);
    }

    fn intern(&mut self, bytes: &[u8]) -> u32 {
        if let Some(&id) = self.ids.get(bytes) {
            return id;
        }
        let id = u32::try_from(self.strings.len()).expect("fewer than 2^32 distinct prefixes");
        self.strings.push(bytes.to_vec());
        self.ids.insert(bytes.to_vec(), id);
        id
    }

    /// Item `i`. Panics past the end, like indexing a slice.
    pub fn get(&self, i: usize) -> ManifestEntry {
        self.range(i..i + 1)
            .next()
            .unwrap_or_else(|| panic!("item {i} of {} items", self.len))
    }

    /// The name of item `i` (what the output's `path` says).
    pub fn name(&self, i: usize) -> PathBuf {
        self.get(i).name
    }

    /// Items `range`, in order, decoded as they are read.
    pub fn range(&self, range: Range<usize>) -> Cursor<'_> {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "items {range:?} of {} items",
            self.len
        );
        let block = range.start / BLOCK;
        let (names, locations) = self.blocks.get(block).copied().unwrap_or_default();
        let mut cursor = Cursor {
            entries: self,
            next: block * BLOCK,
            end: range.end,
            names,
            locations,
            name: Vec::new(),
        };
        while cursor.next < range.start {
            cursor.step();
        }
        cursor
    }

    /// Every item, in order.
    pub fn iter(&self) -> Cursor<'_> {
        self.range(0..self.len)
    }

    /// Calls `f` with every item's name (OS bytes), in order, without
    /// decoding locations.
    pub fn for_each_name(&self, mut f: impl FnMut(&[u8])) {
        let mut cursor = self.iter();
        while let Some(name) = cursor.next_name() {
            f(name);
        }
    }
}

pub(crate) fn put(out: &mut Vec<u8>, value: u64) {
    let mut buf = [0u8; 10];
    let n = value.encode_var(&mut buf);
    out.extend_from_slice(&buf[..n]);
}

pub(crate) fn take(bytes: &[u8], at: &mut usize) -> u64 {
    let (value, n) = u64::decode_var(&bytes[*at..]).expect("a varint written by push");
    *at += n;
    value
}

/// Items of an [`Entries`], decoded one at a time.
pub struct Cursor<'a> {
    entries: &'a Entries,
    next: usize,
    end: usize,
    names: usize,
    locations: usize,
    /// The name of the item last stepped over.
    name: Vec<u8>,
}

impl Cursor<'_> {
    /// Decodes the next name into `self.name` and returns the location's
    /// tag offset, leaving `self.locations` past the location.
    fn step(&mut self) -> usize {
        let e = self.entries;
        let shared = take(&e.names, &mut self.names) as usize;
        let suffix = take(&e.names, &mut self.names) as usize;
        self.name.truncate(shared);
        self.name
            .extend_from_slice(&e.names[self.names..self.names + suffix]);
        self.names += suffix;
        let at = self.locations;
        let l = &e.locations;
        self.locations += 1;
        match l[at] {
            FILE_AFTER | URL_AFTER => {
                take(l, &mut self.locations);
            }
            FILE_RAW | URL_RAW => {
                let n = take(l, &mut self.locations) as usize;
                self.locations += n;
            }
            FILE_RANGE | URL_RANGE | CELL => {
                for _ in 0..3 {
                    take(l, &mut self.locations);
                }
            }
            tag => unreachable!("location tag {tag}"),
        }
        self.next += 1;
        at
    }

    /// The next item's name (OS bytes), without decoding its location.
    pub fn next_name(&mut self) -> Option<&[u8]> {
        if self.next >= self.end {
            return None;
        }
        self.step();
        Some(&self.name)
    }

    fn location(&self, at: usize) -> Location {
        let e = self.entries;
        let l = &e.locations;
        let mut p = at + 1;
        let string = |p: &mut usize| e.strings[take(l, p) as usize].clone();
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("URLs and columns are UTF-8");
        match l[at] {
            FILE_AFTER => Location::File {
                path: [string(&mut p).as_slice(), &self.name].concat(),
                range: None,
            },
            URL_AFTER => Location::Url {
                url: text([string(&mut p).as_slice(), &self.name].concat()),
                range: None,
            },
            FILE_RAW | URL_RAW => {
                let n = take(l, &mut p) as usize;
                let bytes = l[p..p + n].to_vec();
                if l[at] == FILE_RAW {
                    Location::File {
                        path: bytes,
                        range: None,
                    }
                } else {
                    Location::Url {
                        url: text(bytes),
                        range: None,
                    }
                }
            }
            FILE_RANGE | URL_RANGE => {
                let whole = string(&mut p);
                let range = Some(ByteRange {
                    offset: take(l, &mut p),
                    len: take(l, &mut p),
                });
                if l[at] == FILE_RANGE {
                    Location::File { path: whole, range }
                } else {
                    Location::Url {
                        url: text(whole),
                        range,
                    }
                }
            }
            CELL => Location::Cell {
                file: string(&mut p),
                column: text(string(&mut p)),
                row: take(l, &mut p),
            },
            tag => unreachable!("location tag {tag}"),
        }
    }
}

impl Iterator for Cursor<'_> {
    type Item = ManifestEntry;

    fn next(&mut self) -> Option<ManifestEntry> {
        if self.next >= self.end {
            return None;
        }
        let index = self.next as ItemIndex;
        let at = self.step();
        Some(ManifestEntry {
            index,
            name: PathBuf::from(OsStr::from_bytes(&self.name)),
            location: self.location(at),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Cursor<'_> {}

impl<'a> IntoIterator for &'a Entries {
    type Item = ManifestEntry;
    type IntoIter = Cursor<'a>;

    fn into_iter(self) -> Cursor<'a> {
        self.iter()
    }
}

impl FromIterator<ManifestEntry> for Entries {
    /// Collects entries in order; their `index` fields are not consulted
    /// (item `i` is the `i`-th).
    fn from_iter<T: IntoIterator<Item = ManifestEntry>>(iter: T) -> Self {
        let mut entries = Self::new();
        for e in iter {
            entries.push(e.name, e.location);
        }
        entries
    }
}

impl fmt::Debug for Entries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> Location {
        Location::File {
            path: path.as_bytes().to_vec(),
            range: None,
        }
    }

    fn sample() -> Vec<(PathBuf, Location)> {
        let range = Some(ByteRange {
            offset: 512,
            len: 70_000,
        });
        let mut items = vec![
            ("a/b.jpg".into(), file("/root/a/b.jpg")),
            ("a/c.jpg".into(), file("/root/a/c.jpg")),
            ("./odd.jpg".into(), file("/root/odd.jpg")), // not prefix ++ name
            (
                "x.png".into(),
                Location::Url {
                    url: "http://h:1/d/x.png".into(),
                    range: None,
                },
            ),
            (
                "s3://b/k.jpg".into(),
                Location::Url {
                    url: "s3://b/k.jpg".into(),
                    range: None,
                },
            ),
            (
                "shard-0.tar/k1".into(),
                Location::File {
                    path: b"/sh/shard-0.tar".to_vec(),
                    range,
                },
            ),
            (
                "shard-0.tar/k2".into(),
                Location::Url {
                    url: "s3://b/shard-0.tar".into(),
                    range,
                },
            ),
            (
                "m.parquet#7".into(),
                Location::Cell {
                    file: b"/d/m.parquet".to_vec(),
                    column: "image".into(),
                    row: 7,
                },
            ),
            (
                PathBuf::from(OsStr::from_bytes(b"not-utf8-\xff.jpg")),
                Location::File {
                    path: b"/root/not-utf8-\xff.jpg".to_vec(),
                    range: None,
                },
            ),
            ("".into(), file("/root/")),
        ];
        for i in 0..40 {
            let name = format!("part-{:03}/{i:09}.jpg", i / 7);
            let location = file(&format!("/data/{name}"));
            items.push((name.into(), location));
        }
        items
    }

    #[test]
    fn every_kind_of_location_comes_back_as_it_went_in() {
        let items = sample();
        let mut entries = Entries::new();
        for (name, location) in items.clone() {
            entries.push(name, location);
        }
        assert_eq!(entries.len(), items.len());
        let back: Vec<(PathBuf, Location)> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                assert_eq!(e.index, i as u64);
                (e.name, e.location)
            })
            .collect();
        assert_eq!(back, items);
        // Random access and ranges that start and end inside blocks.
        for i in [0, 9, 15, 16, 17, 31, 32, items.len() - 1] {
            assert_eq!(
                (entries.get(i).name, entries.get(i).location),
                items[i].clone()
            );
        }
        let middle: Vec<PathBuf> = entries.range(13..35).map(|e| e.name).collect();
        let want: Vec<PathBuf> = items[13..35].iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(middle, want);
        assert_eq!(entries.range(20..20).count(), 0);
    }

    #[test]
    fn a_large_listing_takes_a_few_bytes_an_item() {
        let mut entries = Entries::new();
        let n = 100_000;
        for i in 0..n {
            let name = format!("/data/laion/part-{:05}/{i:09}.jpg", i / 10_000);
            let location = file(&name);
            entries.push(name, location);
        }
        let per_item = entries.heap_bytes() as f64 / n as f64;
        // 36-byte names; an owned entry takes ~200 bytes. Measured: 16.4.
        assert!(per_item < 24.0, "{per_item} bytes an item");
        assert_eq!(
            entries.name(54_321),
            PathBuf::from("/data/laion/part-00005/000054321.jpg")
        );
    }
}
