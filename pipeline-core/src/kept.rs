//! `--keep-columns`' values: per item, each kept column's value as JSON
//! text, stored like the manifest's names (`entries.rs`) in blocks.

use crate::entries::{BLOCK, put, take};

/// Columns carried from the source into every output record
/// (`--keep-columns`): their names, and per item each one's value as JSON
/// text (or null), stored like names in blocks of 16.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// The columns, in output order (empty: none kept).
    pub columns: Vec<String>,
    /// Per item, per column: varint(length + 1), 0 for null, then the text.
    values: Vec<u8>,
    blocks: Vec<usize>,
    len: usize,
}

impl Kept {
    /// Keeps `columns`, no items yet.
    pub fn new(columns: Vec<String>) -> Self {
        Self {
            columns,
            ..Self::default()
        }
    }

    /// Items with values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True without items.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The next item's values, one JSON text (or null) per column.
    pub fn push<S: AsRef<str>>(&mut self, values: &[Option<S>]) {
        debug_assert_eq!(values.len(), self.columns.len());
        if self.len.is_multiple_of(BLOCK) {
            self.blocks.push(self.values.len());
        }
        for value in values {
            match value {
                Some(text) => {
                    let text = text.as_ref().as_bytes();
                    put(&mut self.values, text.len() as u64 + 1);
                    self.values.extend_from_slice(text);
                }
                None => put(&mut self.values, 0),
            }
        }
        self.len += 1;
    }

    /// Item `i`'s values, one JSON text (or null) per column; all null for
    /// an item past the last pushed.
    pub fn get(&self, i: usize) -> Vec<Option<&str>> {
        if i >= self.len {
            return vec![None; self.columns.len()];
        }
        let mut at = self.blocks[i / BLOCK];
        for _ in (i / BLOCK * BLOCK)..i {
            for _ in &self.columns {
                let n = take(&self.values, &mut at) as usize;
                at += n.saturating_sub(1);
            }
        }
        let mut out = Vec::with_capacity(self.columns.len());
        for _ in &self.columns {
            let n = take(&self.values, &mut at) as usize;
            out.push((n > 0).then(|| {
                let text = &self.values[at..at + n - 1];
                at += n - 1;
                std::str::from_utf8(text).expect("pushed as str")
            }));
        }
        out
    }

    /// Feeds the columns and every value to `h`, for the run identity.
    pub fn hash_into(&self, mut write: impl FnMut(&[u8])) {
        for column in &self.columns {
            write(column.as_bytes());
            write(&[0]);
        }
        write(&self.values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_values_come_back_per_item_and_null_stays_null() {
        let mut kept = Kept::new(vec!["id".into(), "caption".into()]);
        for i in 0..40 {
            let caption = (i % 3 != 0).then(|| format!("\"a photo {i}\""));
            kept.push(&[Some(i.to_string()), caption]);
        }
        for i in [0, 1, 15, 16, 17, 39] {
            let caption = (i % 3 != 0).then(|| format!("\"a photo {i}\""));
            assert_eq!(
                kept.get(i),
                vec![Some(i.to_string().as_str()), caption.as_deref()]
            );
        }
        assert_eq!(kept.get(40), vec![None, None]);
    }
}
