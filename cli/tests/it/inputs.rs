//! `--data` in every layout (#16): the same images as a folder, a list
//! file, CSV/TSV/JSONL/Parquet manifests, Parquet with the bytes inside,
//! WebDataset shards, and URLs on a real HTTP server on 127.0.0.1 give the
//! same records in the same order; broken sources give the right records
//! or one clear line with exit 2. A network's faults are `network.rs`'s.

use std::fs;
use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::{ArrayRef, StructArray};
use serde_json::Value;

use crate::common;

use common::data::*;

#[test]
fn every_layout_gives_the_same_records_in_the_same_order() {
    let (dir, folder, names, reference) = shard_images(30);
    assert!(names.len() >= 12, "{names:?}");
    let cwd = dir.path();
    assert_eq!(paths(&reference), names);
    let expected = without_path(&reference);

    // A list file of relative paths (relative to the list's folder).
    let list = folder.join("list.txt");
    fs::write(&list, names.join("\n") + "\n\n").expect("list");
    // CSV, TSV and JSONL manifests with extra columns; absolute paths.
    let absolute: Vec<String> = names
        .iter()
        .map(|n| folder.join(n).to_string_lossy().into_owned())
        .collect();
    let mut csv = String::from("id,path,caption\n");
    let mut tsv = String::from("image_path\tid\n");
    let mut jsonl = String::new();
    for (i, path) in absolute.iter().enumerate() {
        csv += &format!("{i},{path},\"a, caption\"\n");
        tsv += &format!("{path}\t{i}\n");
        jsonl += &format!("{{\"id\": {i}, \"url\": \"{path}\"}}\n");
    }
    fs::write(cwd.join("m.csv"), csv).expect("csv");
    fs::write(cwd.join("m.tsv"), tsv).expect("tsv");
    fs::write(cwd.join("m.jsonl"), jsonl).expect("jsonl");
    // Parquet of paths, in a column named by --path-column.
    write_parquet(
        &cwd.join("paths.parquet"),
        vec![("file", strings(absolute.clone()))],
    );
    // Parquet with the bytes: Hugging Face's struct{bytes, path}.
    let mut bytes = BinaryBuilder::new();
    for name in &names {
        bytes.append_value(fs::read(folder.join(name)).expect("image"));
    }
    let image = StructArray::from(vec![
        (
            Arc::new(arrow_schema::Field::new(
                "bytes",
                arrow_schema::DataType::Binary,
                true,
            )),
            Arc::new(bytes.finish()) as ArrayRef,
        ),
        (
            Arc::new(arrow_schema::Field::new(
                "path",
                arrow_schema::DataType::Utf8,
                true,
            )),
            strings(names.clone()),
        ),
    ]);
    write_parquet(
        &cwd.join("bytes.parquet"),
        vec![("image", Arc::new(image) as ArrayRef)],
    );
    // WebDataset: 4 per shard, as a folder and as a brace pattern.
    let shards = write_shards(&folder, &names, &cwd.join("shards"), 4);
    let pattern = format!(
        "{}/shard-{{00000..{:05}}}.tar",
        cwd.join("shards").display(),
        shards.len() - 1
    );
    // URLs on a web server.
    let server = fixtures::fault_server::start(&folder, 0).expect("server starts");
    let urls: Vec<String> = names
        .iter()
        .map(|n| format!("{}/ok/{n}", server.base()))
        .collect();
    fs::write(cwd.join("urls.txt"), urls.join("\n")).expect("url list");
    // The list itself served by the server, with relative entries.
    fs::write(folder.join("served.txt"), names.join("\n")).expect("served list");

    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        ("list", list.to_string_lossy().into_owned(), vec![]),
        (
            "csv",
            cwd.join("m.csv").to_string_lossy().into_owned(),
            vec![],
        ),
        (
            "tsv",
            cwd.join("m.tsv").to_string_lossy().into_owned(),
            vec![],
        ),
        (
            "jsonl",
            cwd.join("m.jsonl").to_string_lossy().into_owned(),
            vec![],
        ),
        (
            "paths_parquet",
            cwd.join("paths.parquet").to_string_lossy().into_owned(),
            vec!["--path-column", "file"],
        ),
        (
            "bytes_parquet",
            cwd.join("bytes.parquet").to_string_lossy().into_owned(),
            vec![],
        ),
        (
            "shard_folder",
            cwd.join("shards").to_string_lossy().into_owned(),
            vec![],
        ),
        ("shard_pattern", pattern, vec![]),
        (
            "urls",
            cwd.join("urls.txt").to_string_lossy().into_owned(),
            vec![],
        ),
        (
            "served_list",
            format!("{}/ok/served.txt", server.base()),
            vec![],
        ),
    ];
    for (name, data, extra) in cases {
        let (out, records) = infer(cwd, &data, name, &extra);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        assert_eq!(without_path(&records), expected, "{name}: records differ");
        let got = paths(&records);
        match name {
            "list" => assert_eq!(got, names),
            "csv" | "tsv" | "jsonl" | "paths_parquet" => assert_eq!(got, absolute),
            "bytes_parquet" => assert_eq!(got, names, "the struct's path names the row"),
            "shard_folder" => assert_eq!(got[0], "shard-00000.tar/sample_0000"),
            "shard_pattern" => assert!(got[5].ends_with("shard-00001.tar/sample_0005"), "{got:?}"),
            "urls" => assert_eq!(got, urls),
            _ => assert_eq!(got, names),
        }
    }
}

#[test]
fn broken_sources_give_error_records_or_one_clear_line() {
    let (dir, root, names) = images(6);
    let cwd = dir.path();
    // A shard with a member that is not an image and a truncated last one.
    let shards = write_shards(&root, &names[..3], &cwd.join("shards"), 3);
    let mut builder = tar::Builder::new(fs::File::create(cwd.join("bad.tar")).expect("tar"));
    append(
        &mut builder,
        "good.png",
        &fs::read(root.join(&names[1])).expect("image"),
    );
    append(&mut builder, "text.jpg", b"this is not an image at all");
    append(&mut builder, "meta.json", b"{}");
    let big = fs::read(&shards[0]).expect("shard bytes");
    append(&mut builder, "last.png", &big);
    builder.finish().expect("tar written");
    drop(builder);
    let full = fs::read(cwd.join("bad.tar")).expect("tar bytes");
    // Cut inside the last member's body.
    fs::write(cwd.join("bad.tar"), &full[..full.len() - 3000]).expect("truncated");
    let (out, records) = infer(
        cwd,
        cwd.join("bad.tar").to_str().expect("utf-8"),
        "bad",
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let kinds: Vec<(String, Value)> = records
        .iter()
        .map(|r| {
            (
                r["path"].as_str().expect("path").to_owned(),
                r["error"]["kind"].clone(),
            )
        })
        .collect();
    let shard = cwd.join("bad.tar").to_string_lossy().into_owned();
    assert_eq!(
        kinds,
        vec![
            (format!("{shard}/good"), Value::Null),
            (format!("{shard}/text"), Value::from("unsupported")),
            (format!("{shard}/meta"), Value::from("unsupported")),
            (format!("{shard}/last"), Value::from("io")),
        ],
        "{}",
        stderr(&out)
    );

    // An empty manifest, one without its column, an unknown layout, a bad
    // --input-format: exit 2 and one line.
    fs::write(cwd.join("empty.csv"), "path\n").expect("csv");
    fs::write(cwd.join("nocol.csv"), "id,caption\n1,x\n").expect("csv");
    fs::write(cwd.join("data.bin"), "x").expect("file");
    let cases: [(&str, &[&str], &str); 5] = [
        ("empty.csv", &[], "no items"),
        (
            "nocol.csv",
            &[],
            "no column `path`, `url`, `image_path` (it has: id, caption)",
        ),
        ("nocol.csv", &["--path-column", "file"], "no column `file`"),
        ("data.bin", &[], "--input-format"),
        (
            "data.bin",
            &["--input-format", "zip"],
            "unknown input format `zip`",
        ),
    ];
    for (data, extra, expected) in cases {
        let (out, _) = infer(cwd, cwd.join(data).to_str().expect("utf-8"), "x", extra);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{data}: {text}");
        assert_eq!(text.lines().count(), 1, "{data}: {text}");
        assert!(text.contains(expected), "{data}: {text}");
    }
}
