//! Opening a cleanly closed log writes nothing (the open of an idle partition costs no fsync,
//! which is what lets a log manager open thousands of them quickly): the clean checkpoint stays
//! on disk until the log's first change replaces it with the unclean one. Checked on the
//! simulated file system, with crashes at each point of that protocol.

use crate::common_sim;

use std::path::Path;

use common_sim::{client_batch, StepClock, DIR};
use oncelog::io::SimFs;
use oncelog::{AppendOutcome, Environment, Log, LogConfig};

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(16 << 10)
        .segment_index_bytes(512)
        .prefault_bytes(0)
        .build()
        .unwrap()
}

fn open(fs: &SimFs, clock: &std::sync::Arc<StepClock>) -> Log {
    let env = Environment::default()
        .with_fs(fs.as_dyn())
        .with_clock(clock.clone());
    Log::open_in(env, Path::new(DIR), config()).unwrap()
}

/// A log of 180 records over several segments, closed cleanly.
fn closed_log(fs: &SimFs, clock: &std::sync::Arc<StepClock>) {
    let log = open(fs, clock);
    for i in 0..60 {
        let b = client_batch(3, 200, 1_700_000_000_000 + i, None, i as u8);
        assert!(matches!(
            log.append(&b).unwrap(),
            AppendOutcome::Appended(_)
        ));
    }
    assert!(log.maintenance().segment_count() > 2);
    log.close().unwrap();
}

#[test]
fn a_clean_open_and_close_without_a_change_sync_nothing() {
    let (fs, clock) = (SimFs::new(), StepClock::new());
    closed_log(&fs, &clock);
    let before = fs.counters();
    let log = open(&fs, &clock);
    assert!(log.recovery_report().clean_shutdown);
    assert_eq!(log.recovery_report().segments_validated, 0);
    let opened = fs.counters();
    assert_eq!(
        (opened.data_syncs, opened.dir_syncs),
        (before.data_syncs, before.dir_syncs)
    );
    log.close().unwrap();
    let closed = fs.counters();
    assert_eq!(
        (closed.data_syncs, closed.dir_syncs),
        (before.data_syncs, before.dir_syncs)
    );
    let log = open(&fs, &clock);
    assert!(log.recovery_report().clean_shutdown);
    assert_eq!(log.log_end_offset(), 180);
    log.close().unwrap();
}

#[test]
fn a_crash_before_the_first_change_needs_no_recovery_and_loses_nothing() {
    for seed in 0..40 {
        let (fs, clock) = (SimFs::new(), StepClock::new());
        closed_log(&fs, &clock);
        let log = open(&fs, &clock);
        // Reads and waits change nothing.
        assert!(!log.read(0, 1 << 20).unwrap().is_empty());
        log.abandon();
        fs.crash(seed);
        let log = open(&fs, &clock);
        let r = log.recovery_report();
        assert!(r.clean_shutdown, "seed {seed}: {r:?}");
        assert_eq!(r.segments_validated, 0, "seed {seed}");
        assert!(r.truncations.is_empty(), "seed {seed}: {r:?}");
        assert_eq!(log.log_end_offset(), 180, "seed {seed}");
        log.close().unwrap();
    }
}

#[test]
fn the_first_append_after_a_clean_open_makes_a_crash_unclean() {
    for seed in 0..40 {
        let (fs, clock) = (SimFs::new(), StepClock::new());
        closed_log(&fs, &clock);
        let log = open(&fs, &clock);
        let b = client_batch(3, 200, 1_800_000_000_000, None, 0xee);
        assert!(matches!(
            log.append(&b).unwrap(),
            AppendOutcome::Appended(_)
        ));
        log.abandon();
        fs.crash(seed);
        let log = open(&fs, &clock);
        let r = log.recovery_report().clone();
        assert!(
            !r.clean_shutdown,
            "seed {seed}: the append came after the unclean checkpoint"
        );
        let end = log.log_end_offset();
        assert!(end == 180 || end == 183, "seed {seed}: {end}");
        log.close().unwrap();
    }
}
