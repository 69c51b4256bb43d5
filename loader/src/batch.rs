//! What goes into the loader (work items in groups) and what comes out (batches).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use pipeline_core::{ItemError, ItemIndex, Location, Normalize};

/// One image to load: its stable index and where it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    /// Stable index in the manifest.
    pub index: ItemIndex,
    /// Where its bytes are.
    pub location: Location,
}

impl WorkItem {
    /// A whole local file.
    pub fn file(index: ItemIndex, path: &Path) -> Self {
        Self {
            index,
            location: Location::File {
                path: path.as_os_str().as_bytes().to_vec(),
                range: None,
            },
        }
    }
}

/// A unit of work (a span, for the worker). Batches never span two groups,
/// so the consumer knows when a group is complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkGroup {
    /// Caller's id for the group, echoed in every batch made from it.
    pub id: u64,
    /// Items in the order they should come out.
    pub items: Vec<WorkItem>,
}

/// A ready batch: `u8` pixels in NCHW order plus the items that failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The [`WorkGroup::id`] these items came from.
    pub group: u64,
    /// True on the group's last batch.
    pub group_done: bool,
    /// Item index of each row of `pixels`, in input order.
    pub indices: Vec<ItemIndex>,
    /// Items of this batch that could not be loaded, in input order.
    pub failures: Vec<(ItemIndex, ItemError)>,
    /// `indices.len() × 3 × side × side` bytes, channel-planar RGB.
    pub pixels: Vec<u8>,
    /// Height and width of each image.
    pub side: u32,
    /// Normalisation the device must apply, `(x - mean) / std`.
    pub normalize: Normalize,
    /// Seconds the loader's threads spent reading this batch's files,
    /// summed over threads.
    pub read_s: f64,
    /// Seconds they spent decoding and preprocessing them, summed likewise.
    pub decode_s: f64,
}

impl Batch {
    /// Bytes of one image in `pixels`.
    pub fn image_len(&self) -> usize {
        3 * self.side as usize * self.side as usize
    }

    /// The CHW pixels of row `row`.
    pub fn image(&self, row: usize) -> &[u8] {
        let n = self.image_len();
        &self.pixels[row * n..(row + 1) * n]
    }

    /// Number of items, loaded or failed, this batch accounts for.
    pub fn item_count(&self) -> usize {
        self.indices.len() + self.failures.len()
    }
}
