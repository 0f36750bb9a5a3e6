//! The processed-id store (`oncelog::processed`) rule by rule: recording and answering, a
//! restart, forgetting by age and by count (with tombstones that survive a restart), retention
//! that keeps the positions, the memory report, and every refused input by its kind.

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use oncelog::format::BatchBuilder;
use oncelog::processed::{Position, ProcessedConfig, ProcessedStore, Recorded};
use oncelog::{Clock, Environment, Log, LogConfig};

/// A clock the test moves by hand.
#[derive(Debug)]
struct HandClock(AtomicI64);

impl HandClock {
    fn new() -> Arc<HandClock> {
        Arc::new(HandClock(AtomicI64::new(1_700_000_000_000)))
    }
    fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::Relaxed);
    }
}

impl Clock for HandClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

fn small(config: ProcessedConfig) -> ProcessedConfig {
    config.with_log(
        LogConfig::builder()
            .segment_bytes(4096)
            .segment_index_bytes(1024)
            .prefault_bytes(0)
            .file_delete_delay_ms(0)
            .build()
            .unwrap(),
    )
}

fn open(dir: &Path, clock: &Arc<HandClock>, config: ProcessedConfig) -> ProcessedStore {
    let env = Environment::default().with_clock(clock.clone());
    ProcessedStore::open_in(env, dir, small(config)).expect("open the store")
}

fn at(source: &str, offset: i64) -> Position<'_> {
    Position { source, offset }
}

#[test]
fn a_recorded_id_is_handled_once_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = HandClock::new();
    let store = open(dir.path(), &clock, ProcessedConfig::default());
    assert!(!store.is_handled(b"m-1"));
    let first = store
        .record(b"m-1", at("orders-0", 8), b"charged 5")
        .unwrap();
    assert!(
        matches!(first, Recorded::New { offset: 0, .. }),
        "{first:?}"
    );
    assert!(store.is_handled(b"m-1"));
    assert_eq!(
        store
            .record(b"m-1", at("orders-0", 8), b"charged 5")
            .unwrap(),
        Recorded::AlreadyHandled { offset: 0 },
        "the redelivered message is not applied again"
    );
    store.record(b"m-2", at("orders-0", 9), b"").unwrap();
    assert_eq!(store.position("orders-0"), Some(9));
    store.close().unwrap();

    let store = open(dir.path(), &clock, ProcessedConfig::default());
    assert!(store.is_handled(b"m-1") && store.is_handled(b"m-2"));
    assert!(!store.is_handled(b"m-3"));
    assert_eq!(store.position("orders-0"), Some(9));
    assert_eq!(
        store.effect(b"m-1").unwrap().as_deref(),
        Some(&b"charged 5"[..])
    );
    assert_eq!(store.effect(b"m-3").unwrap(), None);
    assert_eq!(store.open_report().records_replayed, 4);
    assert_eq!(
        store.record(b"m-2", at("orders-0", 9), b"").unwrap(),
        Recorded::AlreadyHandled { offset: 2 }
    );
    store.close().unwrap();
}

#[test]
fn ids_are_forgotten_after_their_age_and_the_tombstones_outlive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = HandClock::new();
    let config = ProcessedConfig::default().with_forget_after_ms(Some(30_000));
    let store = open(dir.path(), &clock, config.clone());
    store.record(b"old", at("s", 1), b"").unwrap();
    clock.advance(20_000);
    store.record(b"new", at("s", 2), b"").unwrap();
    clock.advance(10_000);
    assert!(!store.is_handled(b"old"), "30 s after: forgotten");
    assert!(store.is_handled(b"new"));
    let report = store.maintain().unwrap();
    assert_eq!((report.forgotten, report.tombstones_written), (1, 1));
    // Handled again after it was forgotten: a new record.
    assert!(matches!(
        store.record(b"old", at("s", 3), b"").unwrap(),
        Recorded::New { .. }
    ));
    store.close().unwrap();
    let store = open(dir.path(), &clock, config);
    assert!(store.is_handled(b"old") && store.is_handled(b"new"));
    clock.advance(30_000);
    assert!(!store.is_handled(b"old") && !store.is_handled(b"new"));
    store.close().unwrap();
}

#[test]
fn the_oldest_ids_beyond_the_count_are_forgotten_with_tombstones_in_the_same_batch() {
    let dir = tempfile::tempdir().unwrap();
    let clock = HandClock::new();
    let config = ProcessedConfig::default().with_max_ids(Some(3));
    let store = open(dir.path(), &clock, config.clone());
    let mut tombstones = 0;
    for i in 0..5 {
        clock.advance(1);
        match store
            .record(format!("m-{i}").as_bytes(), at("s", i + 1), b"")
            .unwrap()
        {
            Recorded::New { tombstones: t, .. } => tombstones += t,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(tombstones, 2);
    let ids: Vec<_> = store.handled_ids().into_iter().map(|h| h.id).collect();
    assert_eq!(ids, ["m-2", "m-3", "m-4"].map(bytes::Bytes::from));
    assert_eq!(store.memory().ids, 3);
    store.close().unwrap();
    // Reopened with a lower limit: the oldest goes at once, its tombstone with the next write.
    let store = open(dir.path(), &clock, config.with_max_ids(Some(2)));
    assert_eq!(store.open_report().forgotten, 1);
    assert!(!store.is_handled(b"m-2") && store.is_handled(b"m-3"));
    assert_eq!(store.memory().pending_tombstones, 1);
    assert_eq!(store.maintain().unwrap().tombstones_written, 1);
    assert_eq!(store.memory().pending_tombstones, 0);
    store.close().unwrap();
}

#[test]
fn retention_deletes_forgotten_segments_and_keeps_the_positions() {
    let dir = tempfile::tempdir().unwrap();
    let clock = HandClock::new();
    let config = ProcessedConfig::default().with_forget_after_ms(Some(1_000));
    let store = open(dir.path(), &clock, config.clone());
    // Enough records to roll 4 KiB segments several times.
    for i in 0..200 {
        store
            .record(
                format!("message-{i:05}").as_bytes(),
                at("orders-1", i + 1),
                b"effect",
            )
            .unwrap();
    }
    store.record(b"other", at("orders-2", 77), b"").unwrap();
    let before = store.disk_bytes();
    clock.advance(5_000);
    let report = store.maintain().unwrap();
    assert_eq!(report.forgotten, 201);
    assert!(report.segments_deleted > 0, "{report:?}");
    assert_eq!(report.positions_rewritten, 2);
    assert!(store.disk_bytes() < before);
    assert_eq!(store.memory().ids, 0);
    store.close().unwrap();
    let store = open(dir.path(), &clock, config);
    assert_eq!(store.position("orders-1"), Some(200));
    assert_eq!(store.position("orders-2"), Some(77));
    assert!(!store.is_handled(b"message-00000"));
    store.close().unwrap();
}

#[test]
fn memory_is_reported_and_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let clock = HandClock::new();
    let store = open(
        dir.path(),
        &clock,
        ProcessedConfig::default().with_max_ids(Some(100)),
    );
    let empty = store.memory();
    for i in 0..100 {
        store
            .record(format!("id-{i:04}").as_bytes(), at("s", i), b"")
            .unwrap();
    }
    let full = store.memory();
    assert_eq!((full.ids, full.id_bytes, full.positions), (100, 700, 1));
    assert!(full.bytes > empty.bytes + 700, "{full:?}");
    for i in 100..1100 {
        store
            .record(format!("id-{i:04}").as_bytes(), at("s", i), b"")
            .unwrap();
    }
    let bounded = store.memory();
    assert_eq!(bounded.ids, 100, "bounded by max_ids");
    assert!(bounded.bytes < full.bytes * 4, "{bounded:?} vs {full:?}");
    store.close().unwrap();
}

#[test]
fn bad_inputs_are_refused_by_kind_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = HandClock::new();
    let store = open(dir.path(), &clock, ProcessedConfig::default());
    let kind = |r: Result<Recorded, oncelog::processed::ProcessedError>| r.unwrap_err().kind();
    assert_eq!(kind(store.record(b"", at("s", 0), b"")), "invalid_id");
    assert_eq!(
        kind(store.record(&vec![b'x'; 4097], at("s", 0), b"")),
        "invalid_id"
    );
    assert_eq!(kind(store.record(b"a", at("", 0), b"")), "invalid_source");
    assert_eq!(
        kind(store.record(b"a", at(&"s".repeat(256), 0), b"")),
        "invalid_source"
    );
    assert_eq!(
        kind(store.record(b"a", at("s", -1), b"")),
        "invalid_position"
    );
    assert_eq!(
        kind(store.record(b"a", at("s", 0), &vec![0; 256 * 1024 + 1])),
        "effect_too_large"
    );
    assert!(!store.is_handled(b"a"));
    assert_eq!(store.disk_bytes(), 0);
    store.close().unwrap();
    // The largest of each is accepted (by a store with segments of the default size).
    let big = tempfile::tempdir().unwrap();
    let store = ProcessedStore::open(big.path(), ProcessedConfig::default()).unwrap();
    store
        .record(
            &vec![b'x'; 4096],
            at(&"s".repeat(255), 0),
            &vec![1; 256 * 1024],
        )
        .unwrap();
    assert!(store.is_handled(&vec![b'x'; 4096]));
    store.close().unwrap();
    assert_eq!(kind(store.record(b"b", at("s", 0), b"")), "closed");
    assert_eq!(store.maintain().unwrap_err().kind(), "closed");
}

#[test]
fn bad_settings_are_refused_by_field() {
    let dir = tempfile::tempdir().unwrap();
    for (config, field) in [
        (
            ProcessedConfig::default().with_forget_after_ms(Some(0)),
            "forget_after_ms",
        ),
        (ProcessedConfig::default().with_max_ids(Some(0)), "max_ids"),
    ] {
        let err = ProcessedStore::open(dir.path(), config).unwrap_err();
        assert_eq!(err.kind(), "config");
        assert!(err.to_string().contains(field), "{err}");
    }
    // A log setting out of range, set directly (the builder would refuse it).
    let mut log = LogConfig::default();
    log.segment_bytes = 1;
    assert!(log.clone().into_builder().build().is_err());
    let err =
        ProcessedStore::open(dir.path(), ProcessedConfig::default().with_log(log)).unwrap_err();
    assert_eq!(
        err.kind(),
        "config",
        "the log's own settings are checked too"
    );
}

#[test]
fn a_second_writer_of_the_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = HandClock::new();
    let store = open(dir.path(), &clock, ProcessedConfig::default());
    let err = ProcessedStore::open(dir.path(), small(ProcessedConfig::default())).unwrap_err();
    assert_eq!(err.kind(), "locked");
    store.close().unwrap();
    ProcessedStore::open(dir.path(), small(ProcessedConfig::default()))
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn a_log_of_other_records_is_not_taken_for_a_store() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), small(ProcessedConfig::default()).log).unwrap();
        let mut b = BatchBuilder::new();
        b.append(1, Some(b"\x01ok"), Some(&[0; 9]), &[]);
        b.append(2, Some(b"order-1"), Some(b"{}"), &[]);
        log.append(&b.build().unwrap()).unwrap();
        log.close().unwrap();
    }
    let err = ProcessedStore::open(dir.path(), small(ProcessedConfig::default())).unwrap_err();
    assert_eq!(err.kind(), "foreign_record");
    assert!(err.to_string().contains("offset 1"), "{err}");
}

#[test]
fn an_id_handled_again_after_it_was_forgotten_stays_handled_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = HandClock::new();
    let config = ProcessedConfig::default().with_forget_after_ms(Some(1_000));
    let store = open(dir.path(), &clock, config.clone());
    store.record(b"x", at("s", 1), b"first").unwrap();
    clock.advance(2_000);
    // No maintain in between: its tombstone is still pending when it is handled again.
    assert!(matches!(
        store.record(b"x", at("s", 2), b"second").unwrap(),
        Recorded::New { tombstones: 0, .. }
    ));
    store.close().unwrap();
    let store = open(dir.path(), &clock, config);
    assert!(
        store.is_handled(b"x"),
        "the new record is not erased by the old tombstone"
    );
    assert_eq!(store.effect(b"x").unwrap().as_deref(), Some(&b"second"[..]));
    store.close().unwrap();
}

#[test]
fn forgotten_ids_are_compacted_away_by_maintain() {
    let dir = tempfile::tempdir().unwrap();
    let clock = HandClock::new();
    // Forgetting by count alone: only compaction can give the disk back.
    let config = ProcessedConfig::default().with_max_ids(Some(50));
    let store = open(dir.path(), &clock, config.clone());
    let handle = |from: i64| {
        for i in from..from + 2_000 {
            clock.advance(1);
            store
                .record(format!("m-{i}").as_bytes(), at("s", i + 1), b"effect")
                .unwrap();
        }
    };
    handle(0);
    let uncompacted = store.disk_bytes();
    let first = store.maintain().unwrap();
    // Superseded handled records and old positions go at once; the tombstones stay for the
    // delete horizon (a day), as Kafka's cleaner keeps them.
    assert!(first.records_compacted > 1_000, "{first:?}");
    let after_first = store.disk_bytes();
    assert!(after_first < uncompacted, "{uncompacted} -> {after_first}");
    // Two days on, as many ids again: the first round's tombstones are past their horizon.
    clock.advance(2 * 24 * 3600 * 1000);
    handle(2_000);
    let second = store.maintain().unwrap();
    assert!(
        second.records_compacted > first.records_compacted,
        "{first:?} {second:?}"
    );
    let after_second = store.disk_bytes();
    // The disk holds about one round's tombstones and the live ids, not every id ever handled.
    assert!(
        after_second < after_first + after_first / 4,
        "{uncompacted} -> {after_first} -> {after_second}"
    );
    store.close().unwrap();
    // What compaction kept is the store: the last 50 ids and the position.
    let store = open(dir.path(), &clock, config);
    assert_eq!(store.memory().ids, 50);
    assert!(store.is_handled(b"m-3999") && store.is_handled(b"m-3950"));
    assert!(!store.is_handled(b"m-3949") && !store.is_handled(b"m-0"));
    assert_eq!(store.position("s"), Some(4_000));
    // A retry of a remembered id is still answered as handled.
    assert!(matches!(
        store.record(b"m-3999", at("s", 4_000), b"effect").unwrap(),
        Recorded::AlreadyHandled { .. }
    ));
    store.close().unwrap();
}
