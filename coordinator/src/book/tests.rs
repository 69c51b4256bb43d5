//! The span book's rules, unit-tested without processes or files.

use pipeline_core::{ClassScore, Prediction, plan_chunks};

use super::*;

fn ok(items: Range<u64>) -> Vec<ItemOutcome> {
    items
        .map(|index| ItemOutcome {
            index,
            result: Ok(Prediction::TopK(vec![ClassScore {
                class: index as u32,
                prob: 1.0,
            }])),
        })
        .collect()
}

fn book(items: u64, chunk: u64) -> SpanBook {
    SpanBook::new(&plan_chunks(items, chunk), &HashSet::new())
}

#[test]
fn chunks_go_out_in_order_and_come_back_sorted_and_whole() {
    let committed: HashSet<u64> = [1].into();
    let mut book = SpanBook::new(&plan_chunks(10, 4), &committed);
    let first = book.next_for(7, true).expect("chunk 0");
    let second = book.next_for(7, false).expect("chunk 2");
    assert_eq!((book.items(first), book.items(second)), (0..4, 8..10));
    assert_eq!(book.next_for(7, false), None, "chunk 1 was committed");
    book.sent(first, 7);
    let mut outcomes = ok(0..4);
    outcomes.swap(0, 3);
    assert!(matches!(
        book.finished(first, 7, outcomes),
        Finished::Bad(_)
    ));
    assert_eq!(
        book.next_for(8, false),
        Some(first),
        "a bad result runs again"
    );
    book.sent(first, 8);
    match book.finished(first, 8, ok(0..4)) {
        Finished::Complete {
            chunk, outcomes, ..
        } => {
            assert_eq!(chunk, 0);
            let indices: Vec<u64> = outcomes.iter().map(|o| o.index).collect();
            assert_eq!(indices, [0, 1, 2, 3]);
        }
        other => panic!("{other:?}"),
    }
}

/// A poison image kills every worker that touches it: the book narrows
/// it down by halves to that one image, retries it alone, then fails
/// it; every other item of the chunk completes exactly once.
#[test]
fn a_poison_image_is_bisected_down_to_itself_and_failed() {
    let poison = 5;
    let mut book = book(8, 8);
    let mut worker = 0;
    let whole = book.next_for(worker, true).expect("the chunk");
    book.sent(whole, worker);
    assert!(
        book.worker_died(worker, &[whole], None, Death::Crashed, "died")
            .is_empty()
    );
    let mut done: Vec<ItemOutcome> = Vec::new();
    let mut deaths_alone = 0;
    loop {
        worker += 1;
        let Some(span) = book.next_suspect() else {
            break;
        };
        book.took_suspect();
        book.sent(span, worker);
        let items = book.items(span);
        if items.contains(&poison) {
            deaths_alone += 1;
            for (_, f) in book.worker_died(worker, &[span], Some(span), Death::Crashed, "died") {
                match f {
                    Finished::Recorded { images: 1 } => {}
                    Finished::Complete { outcomes, .. } => done = outcomes,
                    other => panic!("{other:?}"),
                }
            }
        } else {
            match book.finished(span, worker, ok(items)) {
                Finished::Recorded { .. } => {}
                Finished::Complete { outcomes, .. } => done = outcomes,
                other => panic!("{other:?}"),
            }
        }
    }
    // 8 → 4 → 2 → 1 (three splits), then the image alone 3 times.
    assert_eq!(book.counts().splits, 3);
    assert_eq!(deaths_alone, 3 + ISOLATED_FAILURES);
    let indices: Vec<u64> = done.iter().map(|o| o.index).collect();
    assert_eq!(
        indices,
        (0..8).collect::<Vec<_>>(),
        "every item once, in order"
    );
    for o in &done {
        match &o.result {
            Err(e) => {
                assert_eq!(o.index, poison);
                assert_eq!(e.kind, ItemErrorKind::WorkerCrash);
                assert!(e.message.contains("3 times"), "{}", e.message);
            }
            Ok(_) => assert_ne!(o.index, poison),
        }
    }
    assert!(book.drained());
}

#[test]
fn the_first_copy_of_a_speculative_span_wins() {
    let mut book = book(4, 2);
    let (a, b) = (1, 2);
    let first = book.next_for(a, true).expect("chunk 0");
    book.sent(first, a);
    let second = book.next_for(b, true).expect("chunk 1");
    book.sent(second, b);
    assert!(book.finished(second, b, ok(2..4)) != Finished::Stale);
    // B is idle, nothing is queued: it copies A's span.
    assert_eq!(book.next_for(b, false), None, "only an idle worker copies");
    assert_eq!(book.next_for(b, true), Some(first));
    book.sent(first, b);
    assert_eq!(book.counts().speculative, 1);
    assert_eq!(book.next_for(a, true), None, "two copies are enough");
    assert!(matches!(
        book.finished(first, b, ok(0..2)),
        Finished::Complete { chunk: 0, .. }
    ));
    assert_eq!(book.finished(first, a, ok(0..2)), Finished::Stale);
    // A dying with the copy afterwards costs nothing either.
    assert!(
        book.worker_died(a, &[first], None, Death::Crashed, "x")
            .is_empty()
    );
    assert!(book.drained() && book.next_suspect().is_none());
}

#[test]
fn a_lost_device_requeues_without_blame_and_a_stop_hands_out_nothing() {
    let mut book = book(6, 2);
    let span = book.next_for(0, true).expect("chunk 0");
    book.sent(span, 0);
    book.worker_died(0, &[span], None, Death::DeviceLost, "oom");
    assert_eq!(book.next_suspect(), None, "memory blames no image");
    assert_eq!(book.next_for(1, false), Some(span), "first in line again");
    assert_eq!(book.counts().retries, 1);
    book.stop();
    assert_eq!(book.next_for(1, false), None);
    assert!(book.drained());
}

#[test]
fn a_span_another_worker_still_runs_is_not_requeued_when_one_dies() {
    let mut book = book(2, 2);
    let span = book.next_for(0, true).expect("chunk 0");
    book.sent(span, 0);
    assert_eq!(book.next_for(1, true), Some(span));
    book.sent(span, 1);
    book.worker_died(0, &[span], None, Death::Crashed, "x");
    assert_eq!(book.next_suspect(), None, "worker 1 still runs it");
    assert!(matches!(
        book.finished(span, 1, ok(0..2)),
        Finished::Complete { .. }
    ));
}

#[test]
fn a_chunk_must_come_back_whole_and_in_order() {
    let outcome = |i| ok(i..i + 1).remove(0);
    let chunk = 10..13;
    assert!(check_outcomes(chunk.clone(), &[outcome(10), outcome(11), outcome(12)]).is_ok());
    assert!(check_outcomes(chunk.clone(), &[outcome(10), outcome(11)]).is_err());
    assert!(check_outcomes(chunk.clone(), &[outcome(10), outcome(12), outcome(11)]).is_err());
    assert!(check_outcomes(chunk.clone(), &[outcome(10), outcome(11), outcome(11)]).is_err());
}
