"""Reads a `pipeline` output the way users do and checks it against the
same run's JSONL records: numpy and embedding-reader (what autofaiss
reads through) for npy shards, pyarrow for Parquet and npy metadata,
DuckDB for Parquet. Exits non-zero with the first mismatch.

    check.py npy JSONL DIR f32|f16
    check.py parquet JSONL FILE_OR_DIR f32|f16
"""
import glob
import json
import os
import sys

import duckdb
import numpy as np
import pyarrow.parquet as pq
from embedding_reader import EmbeddingReader


def expected(jsonl, dtype):
    rows = [json.loads(line) for line in open(jsonl)]
    for r in rows:
        if "embedding" in r:
            r["embedding"] = np.array(r["embedding"], dtype=np.float32).astype(dtype)
    return rows


def numbered(pattern):
    # img_emb_10 after img_emb_9: by the shard number, as embedding-reader does.
    return sorted(glob.glob(pattern), key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))


def check_npy(jsonl, folder, dtype):
    want = expected(jsonl, dtype)
    embs = numbered(os.path.join(folder, "img_emb", "img_emb_*.npy"))
    metas = numbered(os.path.join(folder, "metadata", "metadata_*.parquet"))
    assert len(embs) == len(metas) > 0, (embs, metas)
    rows = 0
    for emb_path, meta_path in zip(embs, metas):
        emb = np.load(emb_path)
        meta = pq.read_table(meta_path).to_pylist()
        assert emb.dtype == dtype and emb.ndim == 2, (emb_path, emb.dtype, emb.shape)
        assert emb.shape[0] == len(meta), (emb_path, emb.shape, len(meta))
        for vector, m in zip(emb, meta):
            w = want[rows]
            assert (m["index"], m["path"]) == (w["index"], w["path"]), (m, w["path"])
            if "error" in w:
                assert m["error_kind"] == w["error"]["kind"], m
                assert not vector.any(), f"row {rows}: a failed item's row is zeros"
            else:
                assert m["error_kind"] is None, m
                assert np.array_equal(vector, w["embedding"]), f"row {rows} differs"
            rows += 1
    assert rows == len(want), (rows, len(want))
    # embedding-reader, in small pieces that cross shard boundaries.
    reader = EmbeddingReader(
        embeddings_folder=os.path.join(folder, "img_emb"),
        metadata_folder=os.path.join(folder, "metadata"),
        meta_columns=["index", "path"],
        file_format="parquet_npy",
    )
    assert (reader.count, reader.dimension) == (len(want), emb.shape[1]), (reader.count, reader.dimension)
    seen = 0
    for data, meta in reader(batch_size=5, start=0, end=reader.count, max_piece_size=3, parallel_pieces=1, show_progress=False):
        for vector, (_, m) in zip(data, meta.iterrows()):
            w = want[int(m["index"])]
            assert m["path"] == w["path"], (m["path"], w["path"])
            expect = w["embedding"] if "error" not in w else np.zeros_like(vector)
            assert np.array_equal(vector.astype(dtype), expect), f"embedding-reader row {seen}"
            seen += 1
    assert seen == len(want), (seen, len(want))
    return rows


def check_parquet(jsonl, path, dtype):
    want = expected(jsonl, dtype)
    files = sorted(glob.glob(os.path.join(path, "*.parquet"))) if os.path.isdir(path) else [path]
    got = []
    for f in files:
        meta = pq.ParquetFile(f).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                assert meta.row_group(g).column(c).compression == "ZSTD", (f, g, c)
        table = pq.read_table(f)
        kind = table.schema.field("embedding").type
        assert kind.list_size > 0 and str(kind.value_type) == {"float32": "float", "float16": "halffloat"}[dtype], kind
        got.extend(table.to_pylist())
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want):
        assert (g["index"], g["path"]) == (w["index"], w["path"])
        if "error" in w:
            assert g["embedding"] is None and g["error_kind"] == w["error"]["kind"], g
        else:
            assert np.array_equal(np.array(g["embedding"], dtype=dtype), w["embedding"])
    glob_path = os.path.join(path, "*.parquet") if os.path.isdir(path) else path
    [(count, with_embedding, first)] = duckdb.sql(
        f"select count(*), count(embedding), min_by(embedding, index) filter (embedding is not null) "
        f"from read_parquet('{glob_path}')"
    ).fetchall()
    ok = [w for w in want if "error" not in w]
    assert (count, with_embedding) == (len(want), len(ok)), (count, with_embedding)
    assert np.array_equal(np.array(first, dtype=dtype), ok[0]["embedding"]), "duckdb's first embedding"
    return len(got)


if __name__ == "__main__":
    kind, jsonl, path, dtype = sys.argv[1:5]
    dtype = {"f32": "float32", "f16": "float16"}[dtype]
    n = {"npy": check_npy, "parquet": check_parquet}[kind](jsonl, path, dtype)
    print(f"ok {n}")
