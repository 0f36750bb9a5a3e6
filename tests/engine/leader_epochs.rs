//! The leader-epoch cache through the log: epochs set by the caller and stamped on client
//! batches, epochs taken from replicated batches, Kafka's OffsetsForLeaderEpoch answers, the
//! `leader-epoch-checkpoint` file (Kafka's bytes, rebuilt when missing, refused with the line
//! when malformed).

use crate::common;

use std::path::Path;

use common::{batch, copy_dir, read_all, replicated_batch, T0};
use oncelog::format::{BatchBuilder, RecordBatch};
use oncelog::{BadMetadataFile, MetadataFile};
use oncelog::{EpochEndOffset, Log, LogConfig, OpenError, RewriteError};

const FILE: &str = "leader-epoch-checkpoint";

fn epochs(log: &Log) -> Vec<(i32, i64)> {
    log.replica()
        .leader_epochs()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect()
}

fn stamped(log: &Log) -> Vec<(i64, i32)> {
    read_all(log, usize::MAX)
        .iter()
        .map(|b| {
            let b = RecordBatch::parse(b).unwrap();
            (b.base_offset(), b.partition_leader_epoch())
        })
        .collect()
}

#[test]
fn set_leader_epoch_stamps_the_batches_appended_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.append(&batch(2, T0, 10)).unwrap();
    log.replica().set_leader_epoch(3).unwrap();
    log.append(&batch(2, T0, 10)).unwrap();
    log.append(&batch(2, T0, 10)).unwrap();
    log.replica().set_leader_epoch(3).unwrap(); // the same epoch: nothing changes
    log.replica().set_leader_epoch(7).unwrap();
    log.append(&batch(2, T0, 10)).unwrap();
    assert_eq!(stamped(&log), vec![(0, 0), (2, 3), (4, 3), (6, 7)]);
    // A new log's leader epoch is 0, as a new Kafka partition's.
    assert_eq!(epochs(&log), vec![(0, 0), (3, 2), (7, 6)]);
    assert_eq!(log.replica().leader_epoch(), 7);
    // Written before the call returned, in Kafka's format.
    assert_eq!(
        std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
        "0\n3\n0 0\n3 2\n7 6\n"
    );
}

#[test]
fn an_older_leader_epoch_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.replica().set_leader_epoch(5).unwrap();
    log.append(&batch(1, T0, 10)).unwrap();
    let before = common::dir_contents(dir.path());
    for stale in [4, -1] {
        match log.replica().set_leader_epoch(stale) {
            Err(e @ RewriteError::StaleLeaderEpoch { current: 5, .. }) => {
                assert_eq!(e.kind(), "stale_leader_epoch")
            }
            other => panic!("{stale}: {other:?}"),
        }
    }
    assert_eq!(log.replica().leader_epoch(), 5);
    assert_eq!(common::dir_contents(dir.path()), before);
}

#[test]
fn replicated_batches_bring_their_own_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let with_epoch = |base: i64, epoch: i32, n: usize| {
        let mut b = BatchBuilder::new()
            .base_offset(base)
            .partition_leader_epoch(epoch);
        for i in 0..n {
            b.append(T0 + i as i64, None, Some(b"r"), &[]);
        }
        b.build().unwrap()
    };
    log.replica().append(&with_epoch(0, 2, 3)).unwrap();
    log.replica().append(&with_epoch(3, 2, 2)).unwrap();
    log.replica().append(&with_epoch(5, 4, 1)).unwrap();
    log.replica()
        .append(&replicated_batch(6, 2, T0, 5))
        .unwrap(); // epoch 7
    assert_eq!(epochs(&log), vec![(2, 0), (4, 5), (7, 6)]);
    // Stored as the leader wrote them.
    assert_eq!(stamped(&log), vec![(0, 2), (3, 2), (5, 4), (6, 7)]);
}

#[test]
fn end_offset_for_epoch_answers_as_kafka_does() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(
        log.replica().end_offset_for_epoch(0),
        EpochEndOffset::UNDEFINED
    );
    log.replica().set_leader_epoch(2).unwrap();
    log.append(&batch(4, T0, 10)).unwrap(); // 0..3 in epoch 2
    log.replica().set_leader_epoch(5).unwrap();
    log.append(&batch(3, T0, 10)).unwrap(); // 4..6 in epoch 5
    let answer = |epoch| {
        let e = log.replica().end_offset_for_epoch(epoch);
        (e.leader_epoch, e.end_offset)
    };
    assert_eq!(answer(5), (5, 7), "the latest epoch ends at the log end");
    assert_eq!(answer(2), (2, 4), "an older one where the next starts");
    assert_eq!(
        answer(3),
        (2, 4),
        "an epoch that wrote nothing: its predecessor"
    );
    assert_eq!(
        answer(1),
        (1, 0),
        "below every known epoch: the first start"
    );
    assert_eq!(answer(6), (-1, -1), "above every known epoch: undefined");
    assert_eq!(answer(-1), (-1, -1), "the undefined epoch");
}

#[test]
fn truncation_and_retention_cut_the_epoch_cache() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        LogConfig::builder()
            .segment_bytes(4096)
            .file_delete_delay_ms(0)
            .build()
            .unwrap(),
    )
    .unwrap();
    for epoch in [1, 2, 3, 4] {
        log.replica().set_leader_epoch(epoch).unwrap();
        for _ in 0..10 {
            log.append(&batch(5, T0, 100)).unwrap();
        }
    }
    assert_eq!(epochs(&log), vec![(1, 0), (2, 50), (3, 100), (4, 150)]);
    log.replica().truncate_to(120).unwrap();
    assert_eq!(epochs(&log), vec![(1, 0), (2, 50), (3, 100)]);
    log.flush().unwrap();
    log.delete_records(60).unwrap();
    assert_eq!(epochs(&log), vec![(2, 60), (3, 100)]);
    log.close().unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
        "0\n2\n2 60\n3 100\n"
    );
    // After a reopen the leader epoch is the latest in the cache; a new leader sets its own.
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.replica().leader_epoch(), 3);
    assert_eq!(epochs(&log), vec![(2, 60), (3, 100)]);
}

#[test]
fn a_missing_epoch_file_is_rebuilt_from_the_batches() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.replica().set_leader_epoch(1).unwrap();
    log.append(&batch(2, T0, 10)).unwrap();
    log.replica().set_leader_epoch(4).unwrap();
    log.append(&batch(2, T0, 10)).unwrap();
    log.close().unwrap();
    std::fs::remove_file(dir.path().join(FILE)).unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(epochs(&log), vec![(1, 0), (4, 2)]);
    assert_eq!(log.replica().leader_epoch(), 4);
    log.close().unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
        "0\n2\n1 0\n4 2\n"
    );
}

fn userchic() -> tempfile::TempDir {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kafka-logdirs/userchic-mymicroservices/postCreated-0");
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&src, dir.path());
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let mut perm = std::fs::metadata(&p).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perm.set_readonly(false);
        std::fs::set_permissions(&p, perm).unwrap();
    }
    dir
}

#[test]
fn the_kafka_fixture_epochs_load_and_are_written_back_byte_for_byte() {
    let dir = userchic();
    let original = std::fs::read(dir.path().join(FILE)).unwrap();
    assert_eq!(original, b"0\n4\n60 11\n64 12\n66 13\n68 16\n");
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(epochs(&log), vec![(60, 11), (64, 12), (66, 13), (68, 16)]);
    assert_eq!(log.replica().leader_epoch(), 68);
    assert_eq!(
        log.replica().end_offset_for_epoch(64),
        EpochEndOffset {
            leader_epoch: 64,
            end_offset: 13
        }
    );
    // The broker's batches carry the same epochs.
    let by_batch: Vec<(i64, i32)> = stamped(&log);
    assert_eq!(
        by_batch.iter().map(|b| b.1).collect::<Vec<_>>(),
        vec![60, 64, 66, 66, 66, 68]
    );
    log.close().unwrap();
    assert_eq!(std::fs::read(dir.path().join(FILE)).unwrap(), original);
    // Rewritten from the cache (the same entries), still Kafka's bytes.
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.replica().set_leader_epoch(69).unwrap();
    log.close().unwrap();
    assert_eq!(
        std::fs::read(dir.path().join(FILE)).unwrap(),
        b"0\n5\n60 11\n64 12\n66 13\n68 16\n69 17\n"
    );
}

#[test]
fn a_malformed_epoch_file_is_refused_naming_the_line_and_changes_nothing() {
    let cases: [(&[u8], Option<usize>, &str); 9] = [
        (b"0\n2\n60 11\nsixty 12\n", Some(4), "epoch"),
        (b"0\n2\n60 11\n", None, "declared"),
        (b"0\n1\n60 11\n64 12\n", Some(4), "more entries"),
        (b"1\n1\n60 11\n", Some(1), "version"),
        (b"0\n2\n60 11\n59 12\n", Some(4), "does not follow"),
        (b"0\n2\n60 11\n61 11\n", Some(4), "does not follow"),
        (b"0\n1\n-3 11\n", Some(3), "negative"),
        (b"0\n1\n60 11 12\n", Some(3), "fields"),
        (b"0\n1\n\xff\xfe 11\n", None, "UTF-8"),
    ];
    for (bytes, line, what) in cases {
        let dir = userchic();
        std::fs::write(dir.path().join(FILE), bytes).unwrap();
        let before = common::dir_contents(dir.path());
        match Log::open(dir.path(), LogConfig::default()) {
            Err(OpenError::BadMetadataFile(
                e @ BadMetadataFile {
                    file: MetadataFile::LeaderEpochs,
                    ..
                },
            )) => {
                assert_eq!(e.line, line, "{e}");
                assert!(
                    e.reason.contains(what) || e.to_string().contains(what),
                    "{what:?} not in {e}"
                );
                assert!(e.to_string().contains(FILE), "{e}");
            }
            Err(other) => panic!("{:?}: {other}", String::from_utf8_lossy(bytes)),
            Ok(_) => panic!("{:?} was accepted", String::from_utf8_lossy(bytes)),
        }
        assert_eq!(
            common::dir_contents(dir.path()),
            before,
            "a refusal changed files"
        );
    }
    // A directory in its place, and a file too large to be one.
    let dir = userchic();
    std::fs::remove_file(dir.path().join(FILE)).unwrap();
    std::fs::create_dir(dir.path().join(FILE)).unwrap();
    let e = Log::open(dir.path(), LogConfig::default()).err().unwrap();
    assert_eq!(e.kind(), "bad_epoch_checkpoint", "{e}");
    let dir = userchic();
    let f = std::fs::File::create(dir.path().join(FILE)).unwrap();
    f.set_len(1 << 40).unwrap();
    let e = Log::open(dir.path(), LogConfig::default()).err().unwrap();
    assert_eq!(e.kind(), "bad_epoch_checkpoint", "{e}");
}

/// A replicated batch of `n` records at `base` written by leader epoch `epoch`.
fn at_epoch(base: i64, n: usize, epoch: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new()
        .base_offset(base)
        .partition_leader_epoch(epoch);
    for i in 0..n {
        b.append(T0 + i as i64, None, Some(b"v"), &[]);
    }
    b.build().unwrap()
}

#[test]
fn an_epoch_a_batch_brings_is_written_to_the_file_before_the_checkpoint_that_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.replica().append(&at_epoch(0, 3, 5)).unwrap();
    log.replica().append(&at_epoch(3, 2, 7)).unwrap();
    assert_eq!(epochs(&log), vec![(5, 0), (7, 3)]);
    // Not written on the append path (Kafka's KAFKA-15046): each entry is at or above the
    // recovery point on disk, which recovery rebuilds from the batches.
    assert!(!dir.path().join(FILE).exists());
    log.flush().unwrap();
    assert!(
        !dir.path().join(FILE).exists(),
        "a flush without a checkpoint"
    );
    // A roll and a flush: the checkpoint now records a recovery point past both entries, so
    // the file holds them first.
    log.roll().unwrap();
    log.flush().unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
        "0\n2\n5 0\n7 3\n"
    );
    log.close().unwrap();
}

#[test]
fn epochs_not_yet_in_the_file_come_back_from_the_batches_after_a_crash() {
    use crate::common_sim::StepClock;
    use oncelog::io::SimFs;
    use oncelog::Environment;
    for crash_seed in 0..16u64 {
        let fs = SimFs::new();
        let env = || {
            Environment::default()
                .with_fs(fs.as_dyn())
                .with_clock(StepClock::new())
        };
        let config = LogConfig::builder()
            .segment_bytes(1024)
            .segment_index_bytes(1024)
            .prefault_bytes(0)
            .build()
            .unwrap();
        let log = Log::open_in(env(), "/p", config.clone()).unwrap();
        log.replica().append(&at_epoch(0, 3, 5)).unwrap();
        log.replica().append(&at_epoch(3, 2, 7)).unwrap();
        // Sealed and flushed: a checkpoint with a recovery point past epoch 7's start.
        log.roll().unwrap();
        log.flush().unwrap();
        log.replica().append(&at_epoch(5, 4, 9)).unwrap();
        let durable_end = log.recovery_point();
        assert_eq!(durable_end, 5);
        log.flush().unwrap();
        assert_eq!(epochs(&log), vec![(5, 0), (7, 3), (9, 5)]);
        // The power goes: nothing more is written.
        log.abandon();
        fs.crash(crash_seed);
        let log = Log::open_in(env(), "/p", config).unwrap();
        assert_eq!(
            log.log_end_offset(),
            9,
            "seed {crash_seed}: every flushed batch is back"
        );
        assert_eq!(
            epochs(&log),
            vec![(5, 0), (7, 3), (9, 5)],
            "seed {crash_seed}: the file's entries and the one rebuilt from its batch"
        );
        // The open adds the rebuilt entry to the file no sooner than the appends would: the
        // file is as the crash left it until the log's next checkpoint (here, its close).
        let file = |fs: &SimFs| {
            String::from_utf8(
                fs.read_live(Path::new("/p/leader-epoch-checkpoint"))
                    .unwrap(),
            )
            .unwrap()
        };
        assert_eq!(file(&fs), "0\n2\n5 0\n7 3\n", "seed {crash_seed}");
        log.close().unwrap();
        assert_eq!(file(&fs), "0\n3\n5 0\n7 3\n9 5\n", "seed {crash_seed}");
    }
}
