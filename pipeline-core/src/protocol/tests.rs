//! The wire format's round trips, its binary `SpanDone` bit for bit, and
//! its refusals of damaged frames.

use super::*;
use crate::item::ItemErrorKind;
use crate::model::ClassScore;

#[test]
fn frames_round_trip_and_end_cleanly() {
    let messages = vec![
        FromWorker::Ready {
            version: PROTOCOL_VERSION,
            device: "cpu".into(),
            batch_size: 8,
            prefetch: 2,
        },
        FromWorker::SpanDone {
            span: 3,
            outcomes: vec![
                ItemOutcome {
                    index: 7,
                    result: Ok(Prediction::TopK(vec![ClassScore {
                        class: 281,
                        prob: 0.5,
                    }])),
                },
                ItemOutcome {
                    index: 8,
                    result: Err(ItemError::new(ItemErrorKind::Decode, "bad")),
                },
            ],
            times: SpanTimes::default(),
            held_s: 0.0,
        },
        FromWorker::Progress {
            span: 3,
            items: 16,
            held_s: 0.875,
        },
    ];
    let mut wire = Vec::new();
    for m in &messages {
        write_frame(&mut wire, m).expect("write to a Vec");
    }
    let mut input = wire.as_slice();
    let mut back = Vec::new();
    while let Some(m) = read_frame::<_, FromWorker>(&mut input).expect("valid frames") {
        back.push(m);
    }
    assert_eq!(back, messages);
}

fn span_done() -> FromWorker {
    FromWorker::SpanDone {
        span: u64::MAX - 1,
        outcomes: vec![
            ItemOutcome {
                index: 1 << 40,
                result: Ok(Prediction::TopK(vec![
                    ClassScore {
                        class: 999,
                        prob: f32::MIN_POSITIVE / 3.0, // subnormal
                    },
                    ClassScore {
                        class: 0,
                        prob: -0.0,
                    },
                ])),
            },
            ItemOutcome {
                index: 2,
                result: Ok(Prediction::Embedding(vec![1.0e-38, f32::MAX, 0.1, -7.5])),
            },
            ItemOutcome {
                index: 3,
                result: Err(ItemError::new(ItemErrorKind::NotFound, "gone \"quoted\" ü")),
            },
            ItemOutcome {
                index: 4,
                result: Ok(Prediction::TopK(Vec::new())),
            },
            ItemOutcome {
                index: 5,
                result: Ok(Prediction::Outputs(vec![
                    OutputArray {
                        name: "boxes ü".into(),
                        shape: vec![2, 4],
                        values: ArrayValues::F32(vec![
                            -0.0,
                            f32::MIN_POSITIVE / 3.0,
                            1.0,
                            f32::MAX,
                            0.1,
                            -7.5,
                            f32::INFINITY,
                            2.0,
                        ]),
                    },
                    OutputArray {
                        name: "labels".into(),
                        shape: vec![2],
                        values: ArrayValues::I64(vec![i64::MIN, i64::MAX]),
                    },
                    OutputArray {
                        name: String::new(),
                        shape: vec![0, 4],
                        values: ArrayValues::F32(Vec::new()),
                    },
                ])),
            },
        ],
        times: SpanTimes {
            read_s: 0.25,
            batch_s: vec![0.5, 1.5],
            ..SpanTimes::default()
        },
        held_s: 0.1,
    }
}

#[test]
fn results_travel_binary_and_every_float_bit_survives() {
    let message = span_done();
    let mut wire = Vec::new();
    write_frame(&mut wire, &message).expect("write to a Vec");
    assert_eq!(wire[4], BINARY_SPAN_DONE, "not the binary layout");
    let back: FromWorker = read_frame(&mut wire.as_slice())
        .expect("valid")
        .expect("one frame");
    assert_eq!(back, message);
    let (FromWorker::SpanDone { outcomes: a, .. }, FromWorker::SpanDone { outcomes: b, .. }) =
        (&back, &message)
    else {
        unreachable!("both are SpanDone");
    };
    let bits = |o: &[ItemOutcome]| -> Vec<u32> {
        o.iter()
            .flat_map(|o| match &o.result {
                Ok(Prediction::TopK(s)) => s.iter().map(|s| s.prob.to_bits()).collect(),
                Ok(Prediction::Embedding(v)) => v.iter().map(|v| v.to_bits()).collect(),
                Ok(Prediction::Outputs(arrays)) => arrays
                    .iter()
                    .flat_map(|a| match &a.values {
                        ArrayValues::F32(v) => v.iter().map(|v| v.to_bits()).collect(),
                        ArrayValues::I64(v) => v.iter().map(|&v| v as u32).collect::<Vec<_>>(),
                    })
                    .collect(),
                Err(_) => Vec::new(),
            })
            .collect()
    };
    assert_eq!(bits(a), bits(b), "-0.0 and subnormals keep their bits");
}

#[test]
fn a_damaged_binary_frame_is_refused_whatever_the_damage() {
    let mut body = Vec::new();
    span_done().encode(&mut body).expect("encode");
    // Cut anywhere: refused, never a panic or a short result.
    for cut in 1..body.len() {
        let err = FromWorker::decode(&body[..cut]).expect_err("a cut body");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "cut at {cut}");
    }
    let mut trailing = body.clone();
    trailing.push(0);
    assert!(FromWorker::decode(&trailing).is_err(), "trailing bytes");
    // A count of outcomes far beyond the frame is refused before any
    // allocation. It sits after the tag, the chunk, `held_s` and the times.
    let times_len = u32::from_le_bytes(body[17..21].try_into().expect("4 bytes")) as usize;
    let count_at = 21 + times_len;
    let mut huge = body.clone();
    huge[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(FromWorker::decode(&huge).is_err(), "huge count");
    let mut bad_tag = body;
    bad_tag[count_at + 4 + 8] = 9;
    let err = FromWorker::decode(&bad_tag).expect_err("unknown tag");
    assert!(err.to_string().contains("tag 9"), "{err}");
}

#[test]
fn a_cut_frame_is_an_error_not_an_end() {
    let mut wire = Vec::new();
    write_frame(&mut wire, &ToWorker::Finish).expect("write to a Vec");
    wire.pop();
    let err = read_frame::<_, ToWorker>(&mut wire.as_slice()).expect_err("cut frame");
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    let mut header_only = &wire[..2];
    assert!(read_frame::<_, ToWorker>(&mut header_only).is_err());
}

#[test]
fn an_oversized_length_is_refused() {
    let wire = u32::MAX.to_le_bytes();
    let err = read_frame::<_, ToWorker>(&mut wire.as_slice()).expect_err("too large");
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
}
