use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{AppendOutcome, Log, LogConfig};

fn batch(n: usize, ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for i in 0..n {
        b.append(ts + i as i64, Some(b"key"), Some(&[b'v'; 100][..]), &[]);
    }
    b.build().expect("build")
}

fn small() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(64 * 1024)
        .segment_index_bytes(4096)
        .build()
        .unwrap()
}

#[test]
fn appends_roll_read_back_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    let mut expected = 0;
    for i in 0..200 {
        match log.append(&batch(10, 1_700_000_000_000 + i)).unwrap() {
            AppendOutcome::Appended(info) => {
                assert_eq!(info.first_offset, expected);
                assert_eq!(info.last_offset, expected + 9);
                expected += 10;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(
        log.maintenance().segment_count() > 3,
        "rolled: {}",
        log.maintenance().segment_count()
    );
    let check = |log: &Log| {
        let mut next = 0;
        while next < log.log_end_offset() {
            let bytes = log.read(next, 10_000).unwrap();
            assert!(!bytes.is_empty());
            for item in BatchIter::new(&bytes) {
                let (_, b) = item.unwrap();
                assert!(b.is_crc_valid());
                assert_eq!(b.base_offset(), next.max(b.base_offset()));
                next = b.last_offset() + 1;
            }
        }
        assert_eq!(next, 2000);
    };
    check(&log);
    log.close().unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    assert!(log.recovery_report().clean_shutdown);
    assert_eq!(log.log_end_offset(), 2000);
    check(&log);
    for i in 0..50 {
        log.append(&batch(10, 1_700_000_001_000 + i)).unwrap();
    }
    log.abandon();
    let log = Log::open(dir.path(), small()).unwrap();
    let report = log.recovery_report().clone();
    assert!(!report.clean_shutdown);
    assert!(report.truncations.is_empty(), "{report:?}");
    assert_eq!(log.log_end_offset(), 2500);
}
