//! `--task raw` in Parquet (#41): one column `outputs`, a list per row of
//! `struct<name: utf8, shape: list<uint32>, dtype: utf8, f32:
//! list<float32>, i64: list<int64>>`, the one of `f32` and `i64` that
//! `dtype` names holding the values (the other null): the JSONL record's
//! `outputs` as columns, every value exact, whatever the model's outputs
//! (the schema does not depend on them). Null for failed items.

use std::io;
use std::sync::Arc;

use arrow_array::UInt32Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type, UInt32Type};
use arrow_array::{Array, ArrayRef, Float32Array, Int64Array, ListArray, StringArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields};
use pipeline_core::{ArrayValues, OutputArray, Prediction};

use super::record::Record;

fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", item, false)))
}

fn array_fields() -> Fields {
    Fields::from(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("shape", list_of(DataType::UInt32), false),
        Field::new("dtype", DataType::Utf8, false),
        Field::new("f32", list_of(DataType::Float32), true),
        Field::new("i64", list_of(DataType::Int64), true),
    ])
}

/// The `outputs` column's field.
pub(super) fn raw_field() -> Field {
    Field::new("outputs", list_of(DataType::Struct(array_fields())), true)
}

fn offsets(ends: Vec<i32>) -> OffsetBuffer<i32> {
    OffsetBuffer::new(ScalarBuffer::from(ends))
}

fn list(item: DataType, ends: Vec<i32>, values: ArrayRef, valid: Option<Vec<bool>>) -> ListArray {
    ListArray::new(
        Arc::new(Field::new("item", item, false)),
        offsets(ends),
        values,
        valid.map(NullBuffer::from),
    )
}

/// The `outputs` column of `rows`.
pub(super) fn raw_column(rows: &[Record]) -> io::Result<ArrayRef> {
    let (mut names, mut dtypes) = (Vec::new(), Vec::new());
    let (mut shape_ends, mut dims) = (vec![0i32], Vec::new());
    let (mut f32_ends, mut f32s, mut f32_valid) = (vec![0i32], Vec::new(), Vec::new());
    let (mut i64_ends, mut i64s, mut i64_valid) = (vec![0i32], Vec::new(), Vec::new());
    let (mut row_ends, mut row_valid) = (vec![0i32], Vec::new());
    let end = |n: usize| {
        i32::try_from(n).map_err(|_| io::Error::other("too many values for a row group"))
    };
    for r in rows {
        let arrays: &[OutputArray] = match &r.result {
            Ok(Prediction::Outputs(arrays)) => arrays,
            Ok(other) => {
                return Err(io::Error::other(format!(
                    "item {} holds no raw outputs: {other:?}",
                    r.index
                )));
            }
            Err(_) => &[],
        };
        for a in arrays {
            names.push(a.name.as_str());
            dims.extend_from_slice(&a.shape);
            shape_ends.push(end(dims.len())?);
            match &a.values {
                ArrayValues::F32(v) => {
                    dtypes.push("f32");
                    f32s.extend_from_slice(v);
                    f32_valid.push(true);
                    i64_valid.push(false);
                }
                ArrayValues::I64(v) => {
                    dtypes.push("i64");
                    i64s.extend_from_slice(v);
                    i64_valid.push(true);
                    f32_valid.push(false);
                }
            }
            f32_ends.push(end(f32s.len())?);
            i64_ends.push(end(i64s.len())?);
        }
        row_ends.push(end(names.len())?);
        row_valid.push(r.result.is_ok());
    }
    let entries = StructArray::new(
        array_fields(),
        vec![
            Arc::new(StringArray::from(names)),
            Arc::new(list(
                DataType::UInt32,
                shape_ends,
                Arc::new(UInt32Array::from(dims)),
                None,
            )),
            Arc::new(StringArray::from(dtypes)),
            Arc::new(list(
                DataType::Float32,
                f32_ends,
                Arc::new(Float32Array::from(f32s)),
                Some(f32_valid),
            )),
            Arc::new(list(
                DataType::Int64,
                i64_ends,
                Arc::new(Int64Array::from(i64s)),
                Some(i64_valid),
            )),
        ],
        None,
    );
    Ok(Arc::new(list(
        DataType::Struct(array_fields()),
        row_ends,
        Arc::new(entries),
        Some(row_valid),
    )))
}

/// Row `r`'s arrays of an `outputs` column, as [`raw_column`] wrote them.
pub(crate) fn raw_arrays(column: &ListArray, r: usize) -> io::Result<Vec<OutputArray>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let entries = column.value(r);
    let s = entries.as_struct();
    let names = s.column(0).as_string::<i32>();
    let shapes = s.column(1).as_list::<i32>();
    let dtypes = s.column(2).as_string::<i32>();
    let f32s = s.column(3).as_list::<i32>();
    let i64s = s.column(4).as_list::<i32>();
    (0..s.len())
        .map(|k| {
            let shape = shapes
                .value(k)
                .as_primitive::<UInt32Type>()
                .values()
                .to_vec();
            let values = match dtypes.value(k) {
                "f32" if f32s.is_valid(k) => ArrayValues::F32(
                    f32s.value(k)
                        .as_primitive::<Float32Type>()
                        .values()
                        .to_vec(),
                ),
                "i64" if i64s.is_valid(k) => {
                    ArrayValues::I64(i64s.value(k).as_primitive::<Int64Type>().values().to_vec())
                }
                other => return Err(bad(&format!("raw output of dtype `{other}` has no values"))),
            };
            Ok(OutputArray {
                name: names.value(k).to_owned(),
                shape,
                values,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline_core::{ItemError, ItemErrorKind};

    /// Rows of several arrays, none, and an error read back as written,
    /// every value exact (f32 bits, i64 past 2^53, empty arrays, scalars).
    #[test]
    fn the_outputs_column_reads_back_as_written() {
        let arrays = vec![
            OutputArray {
                name: "boxes".into(),
                shape: vec![2, 2],
                values: ArrayValues::F32(vec![-0.0, 1e-45, f32::MAX, 0.1]),
            },
            OutputArray {
                name: "classes".into(),
                shape: vec![],
                values: ArrayValues::I64(vec![(1 << 53) + 1]),
            },
            OutputArray {
                name: "none".into(),
                shape: vec![0, 4],
                values: ArrayValues::F32(Vec::new()),
            },
        ];
        let record = |index: u64, result| Record {
            index,
            path: format!("{index}.jpg"),
            kept: Vec::new(),
            result,
        };
        let rows = vec![
            record(0, Ok(Prediction::Outputs(arrays.clone()))),
            record(1, Err(ItemError::new(ItemErrorKind::Decode, "bad"))),
            record(2, Ok(Prediction::Outputs(Vec::new()))),
            record(3, Ok(Prediction::Outputs(arrays[1..2].to_vec()))),
        ];
        let column = raw_column(&rows).expect("a column");
        assert_eq!(column.data_type(), raw_field().data_type());
        let list = column.as_list::<i32>();
        assert!(list.is_null(1), "a failed item's outputs are null");
        let back = raw_arrays(list, 0).expect("row 0");
        assert_eq!(back, arrays);
        let ArrayValues::F32(v) = &back[0].values else {
            unreachable!("floats")
        };
        assert_eq!(v[0].to_bits(), (-0.0f32).to_bits());
        assert_eq!(raw_arrays(list, 2).expect("row 2"), Vec::new());
        assert_eq!(raw_arrays(list, 3).expect("row 3"), arrays[1..2].to_vec());
        // A row that is not raw outputs cannot be written as them.
        let embedding = [record(4, Ok(Prediction::Embedding(vec![1.0])))];
        assert!(raw_column(&embedding).is_err());
    }
}
