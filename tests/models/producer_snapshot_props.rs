//! Property tests: random producer tables (random windows, wrapping sequences, epoch bumps,
//! open transactions) survive a version-2 snapshot exactly, and a version-1 snapshot keeping
//! just each producer's newest batch.

use oncelog::format::sequence;
use oncelog::producer::snapshot::{decode, encode, SnapshotVersion};
use oncelog::producer::state::{Decision, IncomingBatch, ProducerStateTable};
use oncelog::producer::txn::Marker;
use oncelog::producer::{BatchMetadata, ProducerEntry, ProducerStateConfig};
use proptest::prelude::*;

/// What v1 keeps of an entry: the newest batch (stamped with the entry's last timestamp, as
/// Kafka restores it) and the last timestamp as the append clock.
fn v1_projection(e: &ProducerEntry) -> ProducerEntry {
    let newest = e.newest_batch().map(|b| BatchMetadata {
        timestamp: e.last_timestamp(),
        ..*b
    });
    ProducerEntry::restore(
        e.producer_id(),
        e.epoch(),
        e.coordinator_epoch(),
        e.last_timestamp(),
        e.current_txn_first_offset(),
        e.last_timestamp(),
        newest.into_iter().collect(),
    )
}

fn assert_round_trips(entries: &[ProducerEntry]) -> Result<(), TestCaseError> {
    let v2 = decode(&encode(entries, SnapshotVersion::V2, 0))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(v2.version, SnapshotVersion::V2);
    prop_assert_eq!(&v2.entries, &entries.to_vec());
    let v1 = decode(&encode(entries, SnapshotVersion::V1, 0))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(v1.version, SnapshotVersion::V1);
    let projected: Vec<ProducerEntry> = entries.iter().map(v1_projection).collect();
    prop_assert_eq!(&v1.entries, &projected);
    Ok(())
}

fn arb_batch() -> impl Strategy<Value = BatchMetadata> {
    (any::<i32>(), 0..i64::MAX, 0..i32::MAX, any::<i64>()).prop_map(
        |(last_seq, last_offset, offset_delta, timestamp)| BatchMetadata {
            last_seq,
            last_offset,
            offset_delta,
            timestamp,
        },
    )
}

fn arb_entry() -> impl Strategy<Value = ProducerEntry> {
    (
        0..i64::MAX,
        any::<i16>(),
        any::<i32>(),
        any::<i64>(),
        proptest::option::of(0..i64::MAX),
        any::<i64>(),
        proptest::collection::vec(arb_batch(), 0..40),
    )
        .prop_map(|(pid, epoch, coord, ts, txn, wall, batches)| {
            ProducerEntry::restore(pid, epoch, coord, ts, txn, wall, batches)
        })
}

/// One step of a producer's life.
#[derive(Debug, Clone)]
enum Op {
    /// A data batch of `count` records, transactional or not.
    Batch { pid: i64, count: i32, txn: bool },
    /// An epoch bump: the next batch starts at sequence 0.
    Bump { pid: i64 },
    /// A COMMIT/ABORT marker.
    Marker { pid: i64, coordinator_epoch: i32 },
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..20i64, 1..6i32, any::<bool>()).prop_map(|(pid, count, txn)| Op::Batch { pid, count, txn }),
        1 => (0..20i64).prop_map(|pid| Op::Bump { pid }),
        1 => (0..20i64, 0..5i32).prop_map(|(pid, coordinator_epoch)| Op::Marker { pid, coordinator_epoch }),
    ]
}

/// Drives a table through `ops` with the real rules; sequences start just below i32::MAX so
/// they wrap.
fn build_table(window: usize, ops: &[Op]) -> ProducerStateTable {
    let config = ProducerStateConfig::default().with_window(window);
    let mut table = ProducerStateTable::new(config).unwrap_or_else(|e| panic!("{e}"));
    let mut offset = 0i64;
    let mut wall = 1_000i64;
    for op in ops {
        wall += 7;
        match *op {
            Op::Batch { pid, count, txn } => {
                let (epoch, next) = table.get(pid).map_or((0, i32::MAX - 10), |e| {
                    let epoch = e.epoch().max(0);
                    let next = if e.last_seq() < 0 {
                        0
                    } else {
                        sequence::add(e.last_seq(), 1)
                    };
                    (epoch, next)
                });
                let b = IncomingBatch {
                    producer_id: pid,
                    epoch,
                    first_seq: next,
                    last_seq: sequence::add(next, count - 1),
                    offset_delta: count - 1,
                    max_timestamp: 1_700_000_000_000 + offset,
                    is_transactional: txn || table.get(pid).is_some_and(|e| e.has_open_txn()),
                    is_control: false,
                };
                if table.check_client(&b) == Ok(Decision::Append) {
                    table.record(&b, offset, wall);
                    offset += i64::from(count);
                }
            }
            Op::Bump { pid } => {
                let epoch = table.get(pid).map_or(0, |e| e.epoch().saturating_add(1));
                let b = IncomingBatch {
                    producer_id: pid,
                    epoch,
                    first_seq: 0,
                    last_seq: 0,
                    offset_delta: 0,
                    max_timestamp: 1_700_000_000_000 + offset,
                    is_transactional: false,
                    is_control: false,
                };
                if table.get(pid).is_some_and(|e| e.has_open_txn()) {
                    continue;
                }
                table.record(&b, offset, wall);
                offset += 1;
            }
            Op::Marker {
                pid,
                coordinator_epoch,
            } => {
                let epoch = table.get(pid).map_or(0, |e| e.epoch().max(0));
                let m = Marker {
                    producer_id: pid,
                    epoch,
                    coordinator_epoch,
                    timestamp: wall,
                    offset,
                    is_abort: false,
                };
                if table.check_marker(&m, 0).is_ok() {
                    table.record_marker(&m, wall);
                    offset += 1;
                }
            }
        }
    }
    table
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn arbitrary_entries_round_trip_through_v2_exactly_and_v1_newest_only(
        entries in proptest::collection::vec(arb_entry(), 0..30)
    ) {
        assert_round_trips(&entries)?;
    }

    #[test]
    fn tables_built_by_the_rules_round_trip_through_snapshots(
        window in 1usize..12,
        ops in proptest::collection::vec(arb_op(), 0..200),
    ) {
        let table = build_table(window, &ops);
        let entries: Vec<ProducerEntry> = table.iter().cloned().collect();
        prop_assert!(entries.iter().all(|e| e.batches().len() <= window));
        assert_round_trips(&entries)?;
        // Loading the v2 snapshot into a fresh table gives back the same state.
        let mut reloaded = ProducerStateTable::new(*table.config()).unwrap_or_else(|e| panic!("{e}"));
        let decoded = decode(&encode(table.iter(), SnapshotVersion::V2, 0)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        reloaded.load(decoded.entries);
        prop_assert_eq!(reloaded.len(), table.len());
        for e in table.iter() {
            prop_assert_eq!(reloaded.get(e.producer_id()), Some(e));
        }
    }
}

#[test]
fn docs_format_md_v2_example_matches_the_encoder() {
    let e = ProducerEntry::restore(
        7,
        2,
        4,
        1_700_000_000_000,
        None,
        123_456,
        vec![BatchMetadata {
            last_seq: 9,
            last_offset: 60,
            offset_delta: 9,
            timestamp: 1_700_000_000_000,
        }],
    );
    let bytes = encode([&e], SnapshotVersion::V2, 0);
    let hex: String = bytes[6..].iter().map(|b| format!("{b:02x}")).collect();
    let doc = "00000001\
               0000000000000007 0002 00000004 0000018bcfe56800 ffffffffffffffff 000000000001e240 00000001\
               00000009 000000000000003c 00000009 0000018bcfe56800";
    assert_eq!(hex, doc.split_whitespace().collect::<String>());
    assert_eq!(&bytes[..2], &[0, 2]);
}
