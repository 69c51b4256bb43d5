use coordinator::Stages;

use super::measure::{Sample, median, percentile};
use super::modes::default_chunk;
use super::*;

#[test]
fn a_sweep_is_every_combination_last_axis_fastest() {
    let axes = parse_sweep(&["batch=8,32".into(), "workers=1,2".into()]).expect("valid");
    let base = Point {
        batch: None,
        workers: 1,
        loader_threads: 2,
    };
    let got: Vec<(Option<usize>, usize)> = points(base, &axes)
        .iter()
        .map(|p| (p.batch, p.workers))
        .collect();
    assert_eq!(
        got,
        vec![(Some(8), 1), (Some(8), 2), (Some(32), 1), (Some(32), 2)]
    );
    assert_eq!(points(base, &[]), vec![base]);
}

#[test]
fn bad_sweeps_say_what_is_wrong() {
    for (spec, needle) in [
        ("batch", "KEY=V"),
        ("batch=0", "not a number"),
        ("batch=8,x", "not a number"),
        ("colour=1", "unknown key"),
    ] {
        let e = parse_sweep(&[spec.into()]).expect_err(spec);
        assert!(
            e.contains(needle) && e.starts_with("--sweep"),
            "{spec}: {e}"
        );
    }
    let twice = parse_sweep(&["batch=1".into(), "batch-size=2".into()]);
    assert!(twice.expect_err("twice").contains("twice"));
}

#[test]
fn default_chunks_are_whole_batches() {
    assert_eq!(default_chunk(200, 1, 8), 16); // 12 → 16
    assert_eq!(default_chunk(100_000, 1, 16), 256);
    assert_eq!(default_chunk(100_000, 1, 96), 288); // 256 → 3 batches
    assert_eq!(default_chunk(10, 4, 8), 8);
    assert_eq!(default_chunk(10_000, 2, 512), 512);
}

#[test]
fn sizes_parse_and_refuse() {
    assert_eq!(parse_size("500x375"), Ok((500, 375)));
    assert_eq!(parse_size("4032X3024"), Ok((4032, 3024)));
    for bad in ["500", "0x10", "axb", "20000x10"] {
        assert!(parse_size(bad).is_err(), "{bad}");
    }
}

#[test]
fn median_and_nearest_rank_percentiles() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile(&sorted, 0.5), Some(50.0));
    assert_eq!(percentile(&sorted, 0.99), Some(99.0));
    assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
    assert_eq!(percentile(&[], 0.5), None);
}

fn measured(stages: Stages, loader_threads: usize) -> Measured {
    Measured {
        point: Point {
            batch: Some(8),
            workers: 1,
            loader_threads,
        },
        devices: 1,
        samples: vec![Sample {
            images_per_s: 10.0,
            steady: true,
            whole_images_per_s: 8.0,
            images: 100,
            batch_size: 8,
            stages,
            latencies_s: vec![0.1; 13],
            peak_rss_bytes: None,
            cpu_s: None,
        }],
    }
}

#[test]
fn the_limiting_stage_is_the_group_with_the_least_capacity() {
    // Device: 10 s of compute for 100 images → 10 images/s. Loader:
    // 8 thread-seconds of decoding over 2 threads → 25 images/s.
    let compute_bound = Stages {
        read_s: 0.5,
        decode_s: 7.5,
        upload_s: 0.5,
        compute_s: 9.0,
        readback_s: 0.5,
        write_s: 0.1,
        ..Stages::default()
    };
    let m = measured(compute_bound.clone(), 2);
    assert_eq!(m.limiting_stage(Mode::EndToEnd), "compute");
    let rows = m.stage_rows(Mode::EndToEnd);
    let decode = rows
        .iter()
        .find(|r| r.stage == "decode+preprocess")
        .expect("row");
    assert!((decode.images_per_s.expect("rate") - 100.0 * 2.0 / 7.5).abs() < 1e-9);
    // 30 thread-seconds of decoding on one thread: 3.3 images/s, below
    // the device's 10.
    let decode_bound = Stages {
        decode_s: 30.0,
        ..compute_bound
    };
    assert_eq!(m.loader_limit(Mode::EndToEnd).map(|_| ()), None);
    let slow = measured(decode_bound, 1);
    assert_eq!(slow.limiting_stage(Mode::EndToEnd), "decode+preprocess");
    // By how much: 100 images / 30.5 thread-seconds against 100 / 10 s.
    let limit = slow
        .loader_limit(Mode::EndToEnd)
        .expect("the loader limits");
    assert!((limit.loader_images_per_s - 100.0 / 30.5).abs() < 1e-9);
    assert!((limit.device_images_per_s - 10.0).abs() < 1e-9);
    assert!(
        limit
            .sentence(1)
            .contains("3.3 images/s, the devices 10.0 (67% idle)")
    );
    assert_eq!(slow.loader_limit(Mode::LoaderOnly).map(|_| ()), None);
}

#[test]
fn a_warm_up_batch_does_not_count_as_compute() {
    // As on the H100: 13 batches of 0.03 s and a first one of 2.3 s; the loader
    // sustains 100 × 14 / 28 = 50 images/s, the device's steady work far
    // more. Counting the warm-up, compute would look like the limit.
    let stages = Stages {
        read_s: 0.1,
        decode_s: 28.0,
        upload_s: 0.1,
        compute_s: 2.3 + 13.0 * 0.03,
        readback_s: 0.01,
        write_s: 0.1,
        ..Stages::default()
    };
    let mut m = measured(stages, 14);
    m.samples[0].latencies_s = std::iter::once(2.3)
        .chain(std::iter::repeat_n(0.03, 13))
        .collect();
    assert!((m.warm_up_excess_s() - 2.27).abs() < 1e-9);
    let rows = m.stage_rows(Mode::EndToEnd);
    let compute = rows.iter().find(|r| r.stage == "compute").expect("row");
    assert!((compute.busy_s - 0.42).abs() < 1e-9, "{}", compute.busy_s);
    assert_eq!(m.limiting_stage(Mode::EndToEnd), "decode+preprocess");
    // Without the outlier nothing is taken away.
    m.samples[0].latencies_s = vec![0.03; 14];
    assert_eq!(m.warm_up_excess_s(), 0.0);
}
