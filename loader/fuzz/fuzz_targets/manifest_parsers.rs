//! Any bytes as a manifest or a shard: a list, a CSV, TSV or JSONL table
//! (the first byte picks which, and whether columns are kept), a WebDataset
//! tar (odd sizes, `../` and absolute member names, long names), or a
//! `--data` brace pattern. `loader::source::open` must return a manifest
//! or one error, never panic; a shard member that does not lie inside the
//! shard (a truncated last member, kept so that it becomes an `io` record)
//! must come with the manifest's truncation warning.

#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use pipeline_core::{DataSpec, InputFormat, Location, RemoteSpec};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("manifest-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let (format, name) = match mode % 6 {
        0 => (InputFormat::List, "m.txt"),
        1 => (InputFormat::Csv, "m.csv"),
        2 => (InputFormat::Tsv, "m.tsv"),
        3 => (InputFormat::Jsonl, "m.jsonl"),
        4 => (InputFormat::Webdataset, "m.tar"),
        _ => {
            // A brace pattern of shards under the folder (none exist).
            let Ok(pattern) = std::str::from_utf8(body) else {
                return;
            };
            let data = format!("{}/{pattern}.tar", dir.display());
            let _ = loader::source::shards(&data);
            return;
        }
    };
    let path = dir.join(name);
    let Ok(mut file) = std::fs::File::create(&path) else {
        return;
    };
    if file.write_all(body).is_err() {
        return;
    }
    drop(file);
    let mut spec = DataSpec::new(path.to_string_lossy().into_owned());
    spec.format = Some(format);
    if mode & 0x80 != 0 {
        spec.keep_columns = vec!["*".into()];
    }
    if let Ok(manifest) = loader::source::open(&spec, RemoteSpec::default()) {
        for i in 0..manifest.entries.len() {
            if let Location::File {
                range: Some(range), ..
            } = manifest.entries.get(i).location
            {
                assert!(
                    range.offset + range.len <= body.len() as u64 || !manifest.problems.is_empty(),
                    "member {i} at {range:?} past the end of a {}-byte shard, unreported",
                    body.len()
                );
            }
        }
    }
});
