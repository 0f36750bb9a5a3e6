//! Leftover files of interrupted operations are handled by Kafka's startup protocol
//! (docs/design.md, "Recovery on open"): `.deleted`, `.cleaned` and `.tmp` files go; a `.swap` at
//! or above the smallest `.cleaned` offset was an unfinished clean and goes; other `.swap` files
//! complete their swap, replacing the segments whose offsets they cover.

use std::path::Path;

use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{Log, LogConfig};

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(4096)
        .segment_index_bytes(1024)
        .build()
        .unwrap()
}

fn filled(dir: &Path) -> Vec<i64> {
    let log = Log::open(dir, config()).unwrap();
    for i in 0..60 {
        let mut b = BatchBuilder::new();
        b.append(1_700_000_000_000 + i, None, Some(&[b'x'; 200][..]), &[]);
        log.append(&b.build().unwrap()).unwrap();
    }
    let bases = log.maintenance().segment_base_offsets();
    log.close().unwrap();
    bases
}

fn offsets(log: &Log) -> Vec<i64> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            assert!(b.is_crc_valid());
            out.push(b.base_offset());
            next = b.last_offset() + 1;
        }
    }
    out
}

fn name(base: i64, ext: &str) -> String {
    format!("{base:020}.{ext}")
}

#[test]
fn deleted_cleaned_and_tmp_leftovers_are_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let bases = filled(dir.path());
    let last = *bases.last().unwrap();
    let leftovers = [
        name(bases[1], "log.deleted"),
        name(bases[1], "index.deleted"),
        name(last + 100, "log.cleaned"),
        name(last + 100, "log.swap"), // at or above the smallest .cleaned: an unfinished clean
        name(7, "snapshot.tmp"),
        "oncelog.checkpoint.tmp".to_string(),
    ];
    for f in &leftovers {
        std::fs::write(dir.path().join(f), b"leftover").unwrap();
    }
    let log = Log::open(dir.path(), config()).unwrap();
    for f in &leftovers {
        assert!(!dir.path().join(f).exists(), "{f} still there");
        assert!(
            log.recovery_report()
                .leftovers
                .contains(&dir.path().join(f)),
            "{f} not reported"
        );
    }
    assert_eq!(offsets(&log), (0..60).collect::<Vec<_>>());
}

#[test]
fn an_interrupted_swap_is_completed_and_replaces_the_segments_it_covers() {
    let dir = tempfile::tempdir().unwrap();
    let bases = filled(dir.path());
    assert!(bases.len() >= 4, "{bases:?}");
    // A cleaner merged segments 1 and 2 into one, wrote it as a .swap, and crashed before
    // renaming the old segments away.
    let (a, b) = (bases[1], bases[2]);
    let mut merged = std::fs::read(dir.path().join(name(a, "log"))).unwrap();
    merged.extend(std::fs::read(dir.path().join(name(b, "log"))).unwrap());
    std::fs::write(dir.path().join(name(a, "log.swap")), &merged).unwrap();

    let log = Log::open(dir.path(), config()).unwrap();
    let expected: Vec<i64> = bases.iter().copied().filter(|&base| base != b).collect();
    assert_eq!(log.maintenance().segment_base_offsets(), expected);
    assert!(!dir.path().join(name(a, "log.swap")).exists());
    assert!(
        !dir.path().join(name(b, "log")).exists(),
        "the covered segment is gone"
    );
    assert_eq!(
        std::fs::read(dir.path().join(name(a, "log"))).unwrap(),
        merged
    );
    // Nothing lost, nothing twice, and the log goes on.
    assert_eq!(offsets(&log), (0..60).collect::<Vec<_>>());
    let mut batch = BatchBuilder::new();
    batch.append(0, None, Some(b"after"), &[]);
    log.append(&batch.build().unwrap()).unwrap();
    assert_eq!(log.log_end_offset(), 61);
}
