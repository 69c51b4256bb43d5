//! The loader's first stage: turning a group's locations into bytes, in
//! order, ahead of the decoders.
//!
//! Local files (whole or a tar member's range) are read by the decoder
//! threads themselves, in parallel, so they pass through here untouched.
//! Remote objects are fetched `--io-concurrency` at a time on the process's
//! [`Remote`] client; consecutive members of one remote shard are fetched as
//! one ranged request, so a shard is read sequentially, not per member.
//! Parquet cells are read per file and row range, one read per group.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Instant;

use arrow_array::{Array, BinaryArray, LargeBinaryArray, StructArray};
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use pipeline_core::{ByteRange, ItemError, ItemErrorKind, ItemIndex, Location, RemoteSpec};

use crate::batch::WorkItem;
use crate::remote::Remote;

/// Largest single request a run of shard members is merged into.
const MAX_MERGED_BYTES: u64 = 64 << 20;

/// An item on its way to a decoder.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A local file (or a range of one), read by the decoder thread.
    Read(Location),
    /// Bytes already here, or why there are none; with the seconds spent.
    Ready(Result<Bytes, ItemError>, f64),
}

/// One request: a whole object, or one range covering consecutive members.
struct Request {
    url: String,
    range: Option<Range<u64>>,
    /// The items it serves: index in the group, and their range in the
    /// response (`None`: the whole response).
    items: Vec<(usize, Option<Range<usize>>)>,
}

/// Fetches `items` and passes each, in order, to `send`; stops early when
/// `send` returns false (the consumer is gone).
pub(crate) fn fetch_group(
    items: Vec<WorkItem>,
    remote: RemoteSpec,
    mut send: impl FnMut(ItemIndex, Pending) -> bool,
) {
    let mut cells = read_cells(&items);
    let requests = plan_requests(&items);
    let indices: Vec<ItemIndex> = items.iter().map(|item| item.index).collect();
    let mut pending: Vec<Option<Pending>> = items
        .into_iter()
        .map(|item| match item.location {
            file @ Location::File { .. } => Some(Pending::Read(file)),
            Location::Cell { .. } => cells.remove(&item.index).map(|(r, s)| Pending::Ready(r, s)),
            Location::Url { .. } => None,
        })
        .collect();
    let mut next = 0;
    // Sends every item before `upto` that is ready.
    let mut flush = |upto: usize, pending: &mut Vec<Option<Pending>>, next: &mut usize| -> bool {
        while *next < upto {
            let Some(p) = pending[*next].take() else {
                return true;
            };
            if !send(indices[*next], p) {
                return false;
            }
            *next += 1;
        }
        true
    };
    if !requests.is_empty() {
        let client = match Remote::shared(remote) {
            Ok(client) => Some(client),
            Err(e) => {
                for request in &requests {
                    for (i, _) in &request.items {
                        pending[*i] = Some(Pending::Ready(
                            Err(ItemError::new(ItemErrorKind::Io, e.to_string())),
                            0.0,
                        ));
                    }
                }
                None
            }
        };
        if let Some(client) = client {
            let spans: Vec<Vec<(usize, Option<Range<usize>>)>> =
                requests.iter().map(|r| r.items.clone()).collect();
            let mut alive = true;
            client.get_each(
                requests.into_iter().map(|r| (r.url, r.range)).collect(),
                |i, result, seconds| {
                    // A merged request's time is shared by its members;
                    // their bytes are views of the one response (no copy).
                    let seconds = seconds / spans[i].len().max(1) as f64;
                    for (item, slice) in &spans[i] {
                        let bytes = match (&result, slice) {
                            (Ok(b), None) => Ok(b.clone()),
                            (Ok(b), Some(s)) => Ok(b.slice(s.clone())),
                            (Err(e), _) => Err(e.clone()),
                        };
                        pending[*item] = Some(Pending::Ready(bytes, seconds));
                    }
                    let upto = spans[i].iter().map(|(item, _)| item + 1).max().unwrap_or(0);
                    alive = flush(upto, &mut pending, &mut next);
                    alive
                },
            );
            if !alive {
                return;
            }
        }
    }
    for p in pending.iter_mut().filter(|p| p.is_none()) {
        *p = Some(Pending::Ready(
            Err(ItemError::new(ItemErrorKind::Io, "not fetched")),
            0.0,
        ));
    }
    flush(indices.len(), &mut pending, &mut next);
}

/// The remote requests a group needs: one per whole object, one per run
/// of consecutive ranges of the same object (up to [`MAX_MERGED_BYTES`]).
fn plan_requests(items: &[WorkItem]) -> Vec<Request> {
    let mut requests: Vec<Request> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Location::Url { url, range } = &item.location else {
            continue;
        };
        if let (Some(range), Some(last)) = (range, requests.last_mut())
            && let Some(merged) = merge(last, url, *range, i)
        {
            last.range = Some(merged);
            continue;
        }
        requests.push(Request {
            url: url.clone(),
            range: range.map(|r| r.offset..r.end()),
            items: vec![(i, range.map(|r| 0..r.len as usize))],
        });
    }
    requests
}

/// Extends `last` to cover `range` of `url` if it is the next item, of the
/// same object, at or after its end, and the result stays small enough.
fn merge(last: &mut Request, url: &str, range: ByteRange, item: usize) -> Option<Range<u64>> {
    let current = last.range.clone()?;
    let prev_item = last.items.last()?.0;
    if last.url != url
        || prev_item + 1 != item
        || range.offset < current.end
        || range.end() - current.start > MAX_MERGED_BYTES
    {
        return None;
    }
    let start = (range.offset - current.start) as usize;
    last.items
        .push((item, Some(start..start + range.len as usize)));
    Some(current.start..range.end())
}

/// Reads the group's Parquet cells: per file, the rows from the first to the
/// last asked for, the image column only.
fn read_cells(items: &[WorkItem]) -> HashMap<ItemIndex, (Result<Bytes, ItemError>, f64)> {
    // (file, column) → (item, row)
    type Rows = Vec<(ItemIndex, u64)>;
    let mut by_file: HashMap<(&[u8], &str), Rows> = HashMap::new();
    for item in items {
        if let Location::Cell { file, column, row } = &item.location {
            by_file
                .entry((file.as_slice(), column.as_str()))
                .or_default()
                .push((item.index, *row));
        }
    }
    let mut out = HashMap::new();
    for ((file, column), rows) in by_file {
        let started = Instant::now();
        let first = rows.iter().map(|r| r.1).min().unwrap_or(0);
        let last = rows.iter().map(|r| r.1).max().unwrap_or(0);
        let read = read_rows(file, column, first..last + 1);
        let seconds = started.elapsed().as_secs_f64() / rows.len() as f64;
        for (index, row) in rows {
            let result = match &read {
                Ok(cells) => cells
                    .get((row - first) as usize)
                    .cloned()
                    .unwrap_or_else(|| {
                        Err(ItemError::new(
                            ItemErrorKind::Io,
                            format!("row {row} is past the end of the file"),
                        ))
                    }),
                Err(e) => Err(e.clone()),
            };
            out.insert(index, (result, seconds));
        }
    }
    out
}

/// Rows `rows` of `column` (binary, or a struct with a `bytes` field).
fn read_rows(
    file: &[u8],
    column: &str,
    rows: Range<u64>,
) -> Result<Vec<Result<Bytes, ItemError>>, ItemError> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(file));
    let bad = |e: &dyn std::fmt::Display| {
        ItemError::new(ItemErrorKind::Io, format!("{}: {e}", path.display()))
    };
    let handle = std::fs::File::open(path).map_err(|e| bad(&e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(handle).map_err(|e| bad(&e))?;
    let root = builder
        .schema()
        .fields()
        .iter()
        .position(|f| f.name() == column)
        .ok_or_else(|| bad(&format!("no column `{column}`")))?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), [root]);
    let selection = RowSelection::from(vec![
        RowSelector::skip(rows.start as usize),
        RowSelector::select((rows.end - rows.start) as usize),
    ]);
    let reader = builder
        .with_projection(mask)
        .with_row_selection(selection)
        .build()
        .map_err(|e| bad(&e))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| bad(&e))?;
        let mut array = batch.column(0).clone();
        if let Some(s) = array.as_any().downcast_ref::<StructArray>() {
            array = s
                .column_by_name("bytes")
                .cloned()
                .ok_or_else(|| bad(&"the image struct has no `bytes`"))?;
        }
        let cell = |v: Option<&[u8]>| {
            v.map(Bytes::copy_from_slice)
                .ok_or_else(|| ItemError::new(ItemErrorKind::NotFound, "the image cell is empty"))
        };
        if let Some(a) = array.as_any().downcast_ref::<BinaryArray>() {
            out.extend(a.iter().map(cell));
        } else if let Some(a) = array.as_any().downcast_ref::<LargeBinaryArray>() {
            out.extend(a.iter().map(cell));
        } else {
            return Err(bad(&format!(
                "`{column}` is {}, not bytes",
                array.data_type()
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_item(index: u64, url: &str, offset: u64, len: u64) -> WorkItem {
        WorkItem {
            index,
            location: Location::Url {
                url: url.to_owned(),
                range: Some(ByteRange { offset, len }),
            },
        }
    }

    #[test]
    fn consecutive_members_of_a_shard_become_one_request() {
        let items = vec![
            url_item(0, "s3://b/a.tar", 512, 100),
            url_item(1, "s3://b/a.tar", 1536, 50),
            url_item(2, "s3://b/b.tar", 512, 10),
            WorkItem {
                index: 3,
                location: Location::Url {
                    url: "http://h/x.jpg".into(),
                    range: None,
                },
            },
        ];
        let requests = plan_requests(&items);
        assert_eq!(requests.len(), 3);
        assert_eq!(requests[0].range, Some(512..1586));
        assert_eq!(
            requests[0].items,
            vec![(0, Some(0..100)), (1, Some(1024..1074))]
        );
        assert_eq!(requests[1].range, Some(512..522));
        assert_eq!(requests[2].range, None);
        assert_eq!(requests[2].items, vec![(3, None)]);
    }
}
