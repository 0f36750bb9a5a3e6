use super::*;

const PID: i64 = 1000;

fn table() -> ProducerStateTable {
    table_with(ProducerStateConfig::default())
}

fn table_with(config: ProducerStateConfig) -> ProducerStateTable {
    match ProducerStateTable::new(config) {
        Ok(t) => t,
        Err(e) => panic!("test config invalid: {e}"),
    }
}

/// A data batch of `count` records from `first_seq` (wrapping).
fn batch(pid: i64, epoch: i16, first_seq: i32, count: i32) -> IncomingBatch {
    IncomingBatch {
        producer_id: pid,
        epoch,
        first_seq,
        last_seq: sequence::add(first_seq, count - 1),
        offset_delta: count - 1,
        max_timestamp: 1_700_000_000_000,
        is_transactional: false,
        is_control: false,
    }
}

fn txn(b: IncomingBatch) -> IncomingBatch {
    IncomingBatch {
        is_transactional: true,
        ..b
    }
}

/// Checks then records like the log does; returns the decision.
fn append(
    t: &mut ProducerStateTable,
    b: IncomingBatch,
    offset: i64,
    wall: i64,
) -> Result<Decision, ProducerError> {
    let d = t.check_client(&b)?;
    if d == Decision::Append {
        t.record(&b, offset, wall);
    }
    Ok(d)
}

fn dup(last_seq: i32, last_offset: i64, offset_delta: i32) -> Decision {
    Decision::Duplicate(BatchMetadata {
        last_seq,
        last_offset,
        offset_delta,
        timestamp: 1_700_000_000_000,
    })
}

#[test]
fn unknown_producer_is_accepted_at_any_sequence() {
    let t = table();
    for seq in [0, 1, 42, i32::MAX] {
        assert_eq!(t.check_client(&batch(PID, 0, seq, 1)), Ok(Decision::Append));
    }
}

#[test]
fn next_batch_in_sequence_is_appended_and_recorded() {
    let mut t = table();
    assert_eq!(
        append(&mut t, batch(PID, 0, 0, 3), 10, 1),
        Ok(Decision::Append)
    );
    assert_eq!(
        append(&mut t, batch(PID, 0, 3, 2), 13, 2),
        Ok(Decision::Append)
    );
    let e = t
        .get(PID)
        .map(|e| (e.last_seq(), e.batches().len(), e.last_append_ms()));
    assert_eq!(e, Some((4, 2, 2)));
}

#[test]
fn retry_of_each_of_the_five_retained_batches_returns_its_original_offsets() {
    let mut t = table();
    for i in 0..5 {
        append(&mut t, batch(PID, 0, i * 2, 2), 100 + i64::from(i) * 2, 0).ok();
    }
    for i in 0..5 {
        let got = t.check_client(&batch(PID, 0, i * 2, 2));
        assert_eq!(
            got,
            Ok(dup(i * 2 + 1, 101 + i64::from(i) * 2, 1)),
            "batch {i}"
        );
        if let Ok(Decision::Duplicate(m)) = got {
            assert_eq!(m.first_offset(), 100 + i64::from(i) * 2);
            assert_eq!(m.first_seq(), i * 2);
        }
    }
}

#[test]
fn retry_older_than_the_window_is_out_of_order() {
    let mut t = table();
    for i in 0..6 {
        append(&mut t, batch(PID, 0, i, 1), i64::from(i), 0).ok();
    }
    assert_eq!(
        t.check_client(&batch(PID, 0, 0, 1)),
        Err(ProducerError::OutOfOrderSequence {
            producer_id: PID,
            expected: 6,
            got: 0
        })
    );
    assert_eq!(t.check_client(&batch(PID, 0, 1, 1)), Ok(dup(1, 1, 0)));
}

#[test]
fn a_window_of_1024_deduplicates_its_oldest_batch() {
    let mut t = table_with(ProducerStateConfig {
        window: 1024,
        ..Default::default()
    });
    for i in 0..1030 {
        append(&mut t, batch(PID, 0, i, 1), i64::from(i), 0).ok();
    }
    assert_eq!(t.check_client(&batch(PID, 0, 6, 1)), Ok(dup(6, 6, 0)));
    assert!(matches!(
        t.check_client(&batch(PID, 0, 5, 1)),
        Err(ProducerError::OutOfOrderSequence { .. })
    ));
}

#[test]
fn gap_is_out_of_order_with_expected_and_got() {
    let mut t = table();
    append(&mut t, batch(PID, 0, 0, 5), 0, 0).ok();
    let err = t.check_client(&batch(PID, 0, 7, 1));
    assert_eq!(
        err,
        Err(ProducerError::OutOfOrderSequence {
            producer_id: PID,
            expected: 5,
            got: 7
        })
    );
    let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("1000") && msg.contains("expected 5") && msg.contains("got 7"),
        "{msg}"
    );
}

#[test]
fn partial_overlap_with_a_retained_batch_is_not_a_duplicate() {
    let mut t = table();
    append(&mut t, batch(PID, 0, 0, 5), 0, 0).ok();
    assert!(matches!(
        t.check_client(&batch(PID, 0, 0, 3)),
        Err(ProducerError::OutOfOrderSequence { .. })
    ));
}

#[test]
fn sequences_wrap_at_i32_max() {
    let mut t = table();
    // A batch ending exactly at i32::MAX, then one starting at 0.
    assert_eq!(
        append(&mut t, batch(PID, 0, i32::MAX - 1, 2), 0, 0),
        Ok(Decision::Append)
    );
    assert_eq!(
        append(&mut t, batch(PID, 0, 0, 1), 2, 0),
        Ok(Decision::Append)
    );
    // A batch spanning the wrap.
    let mut t = table();
    append(&mut t, batch(PID, 0, i32::MAX - 3, 2), 0, 0).ok();
    let spanning = batch(PID, 0, i32::MAX - 1, 4);
    assert_eq!(spanning.last_seq, 1);
    assert_eq!(append(&mut t, spanning, 2, 0), Ok(Decision::Append));
    assert_eq!(t.check_client(&spanning), Ok(dup(1, 5, 3)));
    assert_eq!(
        append(&mut t, batch(PID, 0, 2, 1), 6, 0),
        Ok(Decision::Append)
    );
    assert_eq!(
        t.check_client(&batch(PID, 0, 4, 1)),
        Err(ProducerError::OutOfOrderSequence {
            producer_id: PID,
            expected: 3,
            got: 4
        })
    );
}

#[test]
fn expected_sequence_after_i32_max_is_zero() {
    let mut t = table();
    append(&mut t, batch(PID, 0, i32::MAX, 1), 0, 0).ok();
    assert_eq!(
        t.check_client(&batch(PID, 0, 5, 1)),
        Err(ProducerError::OutOfOrderSequence {
            producer_id: PID,
            expected: 0,
            got: 5
        })
    );
}

#[test]
fn stale_epoch_is_invalid_producer_epoch() {
    let mut t = table();
    append(&mut t, batch(PID, 3, 0, 1), 0, 0).ok();
    assert_eq!(
        t.check_client(&batch(PID, 2, 1, 1)),
        Err(ProducerError::InvalidProducerEpoch {
            producer_id: PID,
            current: 3,
            got: 2
        })
    );
}

#[test]
fn new_epoch_must_start_at_sequence_zero() {
    let mut t = table();
    append(&mut t, batch(PID, 0, 0, 1), 0, 0).ok();
    assert_eq!(
        t.check_client(&batch(PID, 1, 1, 1)),
        Err(ProducerError::OutOfOrderSequence {
            producer_id: PID,
            expected: 0,
            got: 1
        })
    );
    assert_eq!(t.check_client(&batch(PID, 1, 0, 1)), Ok(Decision::Append));
}

#[test]
fn epoch_bump_discards_the_window() {
    let mut t = table();
    for i in 0..3 {
        append(&mut t, batch(PID, 0, i, 1), i64::from(i), 0).ok();
    }
    append(&mut t, batch(PID, 1, 0, 1), 3, 0).ok();
    assert_eq!(t.get(PID).map(|e| e.batches().len()), Some(1));
    // The old epoch's retries are fenced, not deduplicated.
    assert!(matches!(
        t.check_client(&batch(PID, 0, 1, 1)),
        Err(ProducerError::InvalidProducerEpoch { .. })
    ));
    assert_eq!(t.check_client(&batch(PID, 1, 0, 1)), Ok(dup(0, 3, 0)));
}

#[test]
fn producer_with_unknown_epoch_is_accepted_at_any_sequence() {
    let mut t = table();
    t.load([ProducerEntry::restore(
        PID,
        NO_EPOCH,
        -1,
        0,
        None,
        0,
        vec![],
    )]);
    assert_eq!(t.check_client(&batch(PID, 4, 17, 1)), Ok(Decision::Append));
}

#[test]
fn non_idempotent_batches_bypass_the_table() {
    let mut t = table_with(ProducerStateConfig {
        max_producers: Some(1),
        limit_policy: ProducerLimitPolicy::Reject,
        ..Default::default()
    });
    append(&mut t, batch(1, 0, 0, 1), 0, 0).ok();
    let anonymous = IncomingBatch {
        producer_id: -1,
        epoch: -1,
        first_seq: -1,
        last_seq: -1,
        ..batch(0, 0, 0, 1)
    };
    assert_eq!(t.check_client(&anonymous), Ok(Decision::Append));
    assert_eq!(t.record(&anonymous, 5, 0), None);
    assert_eq!(t.len(), 1);
}

#[test]
fn transactional_batch_opens_a_transaction_at_its_first_offset() {
    let mut t = table();
    append(&mut t, txn(batch(PID, 0, 0, 2)), 40, 0).ok();
    append(&mut t, txn(batch(PID, 0, 2, 2)), 42, 0).ok();
    assert_eq!(
        t.get(PID).and_then(|e| e.current_txn_first_offset()),
        Some(40)
    );
}

#[test]
fn non_transactional_batch_during_an_open_transaction_is_invalid_txn_state() {
    let mut t = table();
    append(&mut t, txn(batch(PID, 0, 0, 1)), 40, 0).ok();
    assert_eq!(
        t.check_client(&batch(PID, 0, 1, 1)),
        Err(ProducerError::InvalidTxnState {
            producer_id: PID,
            txn_first_offset: 40
        })
    );
    // A retry of the transactional batch is still a duplicate: that check comes first.
    assert_eq!(t.check_client(&txn(batch(PID, 0, 0, 1))), Ok(dup(0, 40, 0)));
}

fn marker(epoch: i16, coordinator_epoch: i32, offset: i64) -> Marker {
    Marker {
        producer_id: PID,
        epoch,
        coordinator_epoch,
        timestamp: 77,
        offset,
        is_abort: true,
    }
}

#[test]
fn marker_closes_the_transaction_and_updates_epochs_and_timestamp() {
    let mut t = table();
    append(&mut t, txn(batch(PID, 0, 0, 1)), 40, 0).ok();
    assert_eq!(t.check_marker(&marker(0, 2, 41), 0), Ok(()));
    let done = t.record_marker(&marker(0, 2, 41), 9);
    assert_eq!(
        done,
        Some(CompletedTxn {
            producer_id: PID,
            first_offset: 40,
            marker_offset: 41,
            is_abort: true,
            last_stable_offset: 42,
        })
    );
    let e = t.get(PID).map(|e| {
        (
            e.current_txn_first_offset(),
            e.coordinator_epoch(),
            e.last_timestamp(),
            e.batches().len(),
        )
    });
    assert_eq!(e, Some((None, 2, 77, 1)));
    assert_eq!(
        t.record_marker(&marker(1, 2, 42), 9),
        None,
        "no transaction open"
    );
    assert_eq!(
        t.get(PID).map(|e| (e.epoch(), e.batches().len())),
        Some((1, 0))
    );
}

#[test]
fn marker_from_an_older_coordinator_or_epoch_is_refused() {
    let mut t = table();
    t.record_marker(&marker(2, 5, 0), 0);
    assert_eq!(
        t.check_marker(&marker(2, 4, 1), 0),
        Err(ProducerError::CoordinatorFenced {
            producer_id: PID,
            current: 5,
            got: 4
        })
    );
    assert_eq!(
        t.check_marker(&marker(1, 5, 1), 0),
        Err(ProducerError::InvalidProducerEpoch {
            producer_id: PID,
            current: 2,
            got: 1
        })
    );
}

fn limited(max: usize, policy: ProducerLimitPolicy) -> ProducerStateTable {
    table_with(ProducerStateConfig {
        max_producers: Some(max),
        limit_policy: policy,
        ..Default::default()
    })
}

#[test]
fn eviction_picks_the_longest_idle_producer() {
    let mut t = limited(3, ProducerLimitPolicy::EvictLongestIdle);
    append(&mut t, batch(1, 0, 0, 1), 0, 100).ok();
    append(&mut t, batch(2, 0, 0, 1), 1, 50).ok();
    append(&mut t, batch(3, 0, 0, 1), 2, 200).ok();
    append(&mut t, batch(2, 0, 1, 1), 3, 300).ok(); // 2 is now the most recent
    assert_eq!(t.record(&batch(4, 0, 0, 1), 4, 400), Some(1));
    assert_eq!(t.len(), 3);
    assert!(t.get(1).is_none());
    assert_eq!(t.record(&batch(5, 0, 0, 1), 5, 500), Some(3));
}

#[test]
fn eviction_never_picks_a_producer_with_an_open_transaction() {
    let mut t = limited(2, ProducerLimitPolicy::EvictLongestIdle);
    append(&mut t, txn(batch(1, 0, 0, 1)), 0, 10).ok();
    append(&mut t, batch(2, 0, 0, 1), 1, 20).ok();
    assert_eq!(t.record(&batch(3, 0, 0, 1), 2, 30), Some(2));
    // Only the transactional producer is older than 3; nobody can go, so the table overflows.
    assert_eq!(t.record(&batch(4, 0, 0, 1), 3, 40), Some(3));
    assert!(t.get(1).is_some());
    // Once its transaction ends, it is evictable again.
    t.record_marker(
        &Marker {
            producer_id: 1,
            epoch: 0,
            coordinator_epoch: 0,
            timestamp: 0,
            offset: 4,
            is_abort: false,
        },
        15,
    );
    assert_eq!(t.record(&batch(5, 0, 0, 1), 5, 50), Some(1));
}

#[test]
fn reject_policy_refuses_new_producers_at_the_limit() {
    let mut t = limited(2, ProducerLimitPolicy::Reject);
    append(&mut t, batch(1, 0, 0, 1), 0, 0).ok();
    append(&mut t, batch(2, 0, 0, 1), 1, 0).ok();
    assert_eq!(
        t.check_client(&batch(3, 0, 0, 1)),
        Err(ProducerError::TooManyProducers {
            producer_id: 3,
            limit: 2
        })
    );
    // Known producers go on; replication is never refused.
    assert_eq!(t.check_client(&batch(1, 0, 1, 1)), Ok(Decision::Append));
    assert_eq!(t.record_replicated(&batch(3, 0, 0, 1), 2, 0), None);
    assert_eq!(t.len(), 3);
}

#[test]
fn expiry_goes_by_append_wall_clock_only() {
    let config = ProducerStateConfig {
        expiration_ms: 1000,
        ..Default::default()
    };
    let mut t = table_with(config);
    // Producer 1's record timestamps are ancient but it appended recently.
    let mut old_clock = batch(1, 0, 0, 1);
    old_clock.max_timestamp = 0;
    t.record(&old_clock, 0, 5_000);
    // Producer 2's record timestamps are in the future but it appended long ago.
    let mut future = batch(2, 0, 0, 1);
    future.max_timestamp = i64::MAX / 2;
    t.record(&future, 1, 1_000);
    assert_eq!(t.expire(5_500), 1);
    assert!(t.get(1).is_some() && t.get(2).is_none());
    assert_eq!(t.expire(5_999), 0);
    assert_eq!(t.expire(6_000), 1);
}

#[test]
fn expiry_never_removes_a_producer_with_an_open_transaction() {
    let mut t = table_with(ProducerStateConfig {
        expiration_ms: 10,
        max_producers: Some(5),
        ..Default::default()
    });
    t.record(&txn(batch(1, 0, 0, 1)), 0, 0);
    t.record(&batch(2, 0, 0, 1), 1, 0);
    assert_eq!(t.expire(1_000_000), 1);
    assert!(t.get(1).is_some());
    assert!(t.idle.is_empty(), "the idle index follows expiry");
}

#[test]
fn load_keeps_the_newest_batches_of_a_longer_window() {
    let mut t = table_with(ProducerStateConfig {
        window: 2,
        ..Default::default()
    });
    let batches = (0..4)
        .map(|s| BatchMetadata {
            last_seq: s,
            last_offset: i64::from(s),
            offset_delta: 0,
            timestamp: 0,
        })
        .collect();
    t.load([ProducerEntry::restore(PID, 0, -1, 0, None, 0, batches)]);
    let seqs: Vec<i32> = t
        .get(PID)
        .map(|e| e.batches().map(|b| b.last_seq).collect())
        .unwrap_or_default();
    assert_eq!(seqs, vec![2, 3]);
}

#[test]
fn load_applies_the_eviction_limit() {
    let mut t = limited(2, ProducerLimitPolicy::EvictLongestIdle);
    t.load((0..4).map(|pid| ProducerEntry::restore(pid, 0, -1, 0, None, 100 - pid, vec![])));
    assert_eq!(t.len(), 2);
    assert!(
        t.get(2).is_none() && t.get(3).is_none(),
        "pids 2 and 3 appended longest ago"
    );
}

fn marker_of(pid: i64, epoch: i16, offset: i64, is_abort: bool) -> Marker {
    Marker {
        producer_id: pid,
        epoch,
        coordinator_epoch: 0,
        timestamp: 5,
        offset,
        is_abort,
    }
}

#[test]
fn the_ongoing_set_follows_open_transactions_earliest_first() {
    let mut t = table();
    assert_eq!(t.first_ongoing_offset(), None);
    append(&mut t, txn(batch(1, 0, 0, 2)), 10, 0).ok();
    append(&mut t, txn(batch(2, 0, 0, 1)), 12, 0).ok();
    append(&mut t, txn(batch(1, 0, 2, 1)), 13, 0).ok();
    assert_eq!(t.ongoing().collect::<Vec<_>>(), [(10, 1), (12, 2)]);
    assert_eq!(t.first_ongoing_offset(), Some(10));
    t.record_marker(&marker_of(1, 0, 14, false), 0);
    assert_eq!(t.first_ongoing_offset(), Some(12));
    t.record_marker(&marker_of(2, 0, 15, false), 0);
    assert_eq!(t.first_ongoing_offset(), None);
}

#[test]
fn an_aborted_transactions_index_lso_is_the_earliest_other_open_transaction() {
    // Kafka's lastStableOffset(completedTxn): another producer's open transaction holds the
    // index entry's last stable offset back, the producer's own does not.
    let mut t = table();
    append(&mut t, txn(batch(1, 0, 0, 1)), 0, 0).ok();
    append(&mut t, txn(batch(2, 0, 0, 1)), 1, 0).ok();
    append(&mut t, txn(batch(3, 0, 0, 1)), 2, 0).ok();
    let done = t.record_marker(&marker_of(2, 0, 3, true), 0);
    assert_eq!(done.map(|c| (c.first_offset, c.last_stable_offset)), Some((1, 0)));
    let done = t.record_marker(&marker_of(1, 0, 4, true), 0);
    assert_eq!(done.map(|c| (c.first_offset, c.last_stable_offset)), Some((0, 2)));
    let done = t.record_marker(&marker_of(3, 0, 5, true), 0);
    assert_eq!(done.map(|c| c.last_stable_offset), Some(6), "none left: marker + 1");
}

#[test]
fn a_transactional_batch_after_a_marker_opens_the_next_transaction() {
    let mut t = table();
    append(&mut t, txn(batch(PID, 0, 0, 2)), 0, 0).ok();
    t.record_marker(&marker_of(PID, 0, 2, false), 0);
    // The retry of the committed transaction's batch is a duplicate, and opens nothing.
    assert_eq!(t.check_client(&txn(batch(PID, 0, 0, 2))), Ok(dup(1, 1, 1)));
    assert_eq!(t.first_ongoing_offset(), None);
    // The next batch, same epoch, continues the sequence and opens a new transaction (without
    // KIP-890 verification, Kafka's log accepts it so).
    assert_eq!(
        append(&mut t, txn(batch(PID, 0, 2, 1)), 3, 0),
        Ok(Decision::Append)
    );
    assert_eq!(t.first_ongoing_offset(), Some(3));
    // And a non-transactional one inside it is refused.
    assert!(matches!(
        t.check_client(&batch(PID, 0, 3, 1)),
        Err(ProducerError::InvalidTxnState { txn_first_offset: 3, .. })
    ));
}

#[test]
fn a_non_transactional_batch_after_the_marker_is_accepted() {
    let mut t = table();
    append(&mut t, txn(batch(PID, 0, 0, 1)), 0, 0).ok();
    t.record_marker(&marker_of(PID, 0, 1, true), 0);
    assert_eq!(
        append(&mut t, batch(PID, 0, 1, 1), 2, 0),
        Ok(Decision::Append)
    );
    assert_eq!(t.first_ongoing_offset(), None);
}

#[test]
fn under_transaction_version_2_a_marker_must_bump_the_epoch() {
    let mut t = table();
    append(&mut t, txn(batch(PID, 3, 0, 1)), 0, 0).ok();
    // The data's own epoch: Kafka 4's TV2 refuses it while the transaction is open.
    assert_eq!(
        t.check_marker(&marker_of(PID, 3, 1, false), 2),
        Err(ProducerError::InvalidProducerEpoch {
            producer_id: PID,
            current: 3,
            got: 3
        })
    );
    // Under TV 0/1 the same marker is fine (librdkafka's transactions).
    assert_eq!(t.check_marker(&marker_of(PID, 3, 1, false), 1), Ok(()));
    // The bumped epoch ends the transaction and starts the new epoch with an empty window.
    assert_eq!(t.check_marker(&marker_of(PID, 4, 1, false), 2), Ok(()));
    t.record_marker(&marker_of(PID, 4, 1, false), 0);
    assert_eq!(t.get(PID).map(|e| (e.epoch(), e.batches().len())), Some((4, 0)));
    // A retry of that marker (same epoch, nothing open) is written again, as Kafka does.
    assert_eq!(t.check_marker(&marker_of(PID, 4, 2, false), 2), Ok(()));
    // The old epoch's batches are fenced; the new epoch starts at sequence 0.
    assert!(matches!(
        t.check_client(&txn(batch(PID, 3, 1, 1))),
        Err(ProducerError::InvalidProducerEpoch { .. })
    ));
    assert!(matches!(
        t.check_client(&txn(batch(PID, 4, 1, 1))),
        Err(ProducerError::OutOfOrderSequence { expected: 0, got: 1, .. })
    ));
    assert_eq!(t.check_client(&txn(batch(PID, 4, 0, 1))), Ok(Decision::Append));
}

#[test]
fn a_marker_for_an_unknown_producer_is_accepted_and_completes_nothing() {
    let mut t = table();
    assert_eq!(t.check_marker(&marker_of(9, 0, 0, true), 2), Ok(()));
    assert_eq!(t.record_marker(&marker_of(9, 0, 0, true), 0), None);
    let e = t.get(9).map(|e| (e.epoch(), e.coordinator_epoch(), e.last_timestamp()));
    assert_eq!(e, Some((0, 0, 5)));
}

#[test]
fn load_restores_the_open_transactions() {
    let mut t = table();
    t.load([
        ProducerEntry::restore(1, 0, 3, 0, Some(40), 0, vec![]),
        ProducerEntry::restore(2, 0, -1, 0, None, 0, vec![]),
        ProducerEntry::restore(3, 0, 3, 0, Some(17), 0, vec![]),
    ]);
    assert_eq!(t.ongoing().collect::<Vec<_>>(), [(17, 3), (40, 1)]);
    t.load([ProducerEntry::restore(1, 0, 3, 0, None, 0, vec![])]);
    assert_eq!(t.first_ongoing_offset(), None, "a reload replaces the set");
}

#[test]
fn applying_an_empty_control_batch_only_registers_the_producer() {
    let mut t = table();
    assert_eq!(t.apply(&Logged::Empty { producer_id: 4 }, 0, 0), None);
    let e = t.get(4).map(|e| (e.epoch(), e.batches().len(), e.has_open_txn()));
    assert_eq!(e, Some((NO_EPOCH, 0, false)));
}
