use super::*;
use crate::io::RealFs;
use crate::producer::entry::ProducerEntry;
use crate::producer::snapshot::{encode, SnapshotVersion};

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"))
}

fn names(d: &Path) -> Vec<String> {
    let mut n = RealFs.list(d).unwrap_or_default();
    n.sort();
    n
}

fn snapshot_bytes(pid: i64) -> Vec<u8> {
    encode(
        [&ProducerEntry::restore(pid, 0, -1, 0, None, 0, vec![])],
        SnapshotVersion::V2,
        0,
    )
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn names_are_twenty_digit_offsets() {
    assert_eq!(file_name(1234), "00000000000000001234.snapshot");
    assert_eq!(parse_file_name("00000000000000001234.snapshot"), Some(1234));
    assert_eq!(parse_file_name("1234.snapshot"), None);
    assert_eq!(parse_file_name("00000000000000001234.snapshot.tmp"), None);
    assert_eq!(
        parse_file_name("00000000000000001234.snapshot.corrupt"),
        None
    );
    assert_eq!(parse_file_name("0000000000000000123x.snapshot"), None);
    assert_eq!(
        parse_file_name("99999999999999999999.snapshot"),
        None,
        "beyond i64"
    );
}

#[test]
fn list_is_sorted_and_ignores_other_files() {
    let d = dir();
    for o in [30, 5, 100] {
        ok(write(&RealFs, d.path(), o, &snapshot_bytes(o)));
    }
    ok(std::fs::write(
        d.path().join("00000000000000000000.log"),
        b"x",
    ));
    ok(std::fs::write(
        d.path().join("00000000000000000007.snapshot.tmp"),
        b"x",
    ));
    let offsets: Vec<i64> = ok(list(&RealFs, d.path()))
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert_eq!(offsets, vec![5, 30, 100]);
}

#[test]
fn prepared_snapshot_is_invisible_until_finished() {
    let d = dir();
    let pending = ok(prepare(&RealFs, d.path(), 42, &snapshot_bytes(1)));
    assert!(ok(list(&RealFs, d.path())).is_empty());
    assert!(ok(load_newest(&RealFs, d.path(), i64::MAX))
        .newest
        .is_none());
    assert_eq!(ok(pending.finish(&RealFs)), d.path().join(file_name(42)));
    assert_eq!(
        names(d.path()),
        vec!["00000000000000000042.snapshot".to_string()]
    );
    let loaded = ok(load_newest(&RealFs, d.path(), i64::MAX));
    assert_eq!(
        loaded.newest.map(|(o, s)| (o, s.entries.len())),
        Some((42, 1))
    );
}

#[test]
fn abandoned_snapshot_leaves_nothing() {
    let d = dir();
    ok(ok(prepare(&RealFs, d.path(), 42, &snapshot_bytes(1))).abandon(&RealFs));
    assert!(names(d.path()).is_empty());
}

#[test]
fn load_takes_the_newest_at_or_below_the_limit() {
    let d = dir();
    for o in [10, 20, 30] {
        ok(write(&RealFs, d.path(), o, &snapshot_bytes(o)));
    }
    let loaded = ok(load_newest(&RealFs, d.path(), 25));
    assert_eq!(
        loaded
            .newest
            .as_ref()
            .map(|(o, s)| (*o, s.entries[0].producer_id())),
        Some((20, 20))
    );
    assert!(loaded.quarantined.is_empty());
    assert_eq!(
        names(d.path()).len(),
        3,
        "snapshots above the limit are left alone"
    );
}

#[test]
fn corrupt_snapshot_is_renamed_aside_and_the_older_one_used() {
    let d = dir();
    ok(write(&RealFs, d.path(), 10, &snapshot_bytes(10)));
    let mut bad = snapshot_bytes(20);
    bad[12] ^= 0xff;
    ok(write(&RealFs, d.path(), 20, &bad));
    ok(write(&RealFs, d.path(), 30, &snapshot_bytes(30)[..15]));
    let loaded = ok(load_newest(&RealFs, d.path(), 100));
    assert_eq!(loaded.newest.map(|(o, _)| o), Some(10));
    let q: Vec<(i64, bool)> = loaded
        .quarantined
        .iter()
        .map(|q| {
            (
                q.offset,
                matches!(q.error, SnapshotError::CrcMismatch { .. }),
            )
        })
        .collect();
    assert_eq!(q, vec![(30, true), (20, true)]);
    assert_eq!(
        names(d.path()),
        vec![
            "00000000000000000010.snapshot".to_string(),
            "00000000000000000020.snapshot.corrupt".to_string(),
            "00000000000000000030.snapshot.corrupt".to_string(),
        ]
    );
    assert_eq!(
        ok(std::fs::read(
            d.path().join("00000000000000000020.snapshot.corrupt")
        )),
        bad,
        "kept as it was"
    );
}

#[test]
fn no_valid_snapshot_loads_nothing() {
    let d = dir();
    ok(write(&RealFs, d.path(), 10, b"garbage"));
    let loaded = ok(load_newest(&RealFs, d.path(), 100));
    assert!(loaded.newest.is_none());
    assert!(matches!(
        loaded.quarantined[0].error,
        SnapshotError::TooShort { len: 7, .. }
    ));
}

#[test]
fn delete_above_removes_only_later_snapshots() {
    let d = dir();
    for o in [10, 20, 30] {
        ok(write(&RealFs, d.path(), o, &snapshot_bytes(o)));
    }
    assert_eq!(ok(delete_above(&RealFs, d.path(), 20)), vec![30]);
    assert_eq!(names(d.path()).len(), 2);
}

#[test]
fn delete_below_never_removes_the_newest_snapshot() {
    let d = dir();
    for o in [10, 20, 30] {
        ok(write(&RealFs, d.path(), o, &snapshot_bytes(o)));
    }
    assert_eq!(ok(delete_below(&RealFs, d.path(), 20)), vec![10]);
    assert_eq!(ok(delete_below(&RealFs, d.path(), 1000)), vec![20]);
    assert_eq!(
        names(d.path()),
        vec!["00000000000000000030.snapshot".to_string()]
    );
}

#[test]
fn strays_are_snapshots_off_segment_bases_except_the_newest_at_the_end() {
    // Segments at 0, 100, 200; snapshots at bases plus interval ones and the end-of-log one.
    let snaps = [0, 50, 100, 150, 200, 250, 260];
    assert_eq!(stray_snapshots(&snaps, &[0, 100, 200]), vec![50, 150, 250]);
    // The newest stray below the largest base is a stray too.
    assert_eq!(stray_snapshots(&[0, 50], &[0, 100]), vec![50]);
    // Without segments, only the newest is kept.
    assert_eq!(stray_snapshots(&[5, 9], &[]), vec![5]);
    assert!(stray_snapshots(&[], &[0]).is_empty());
}

#[test]
fn remove_strays_keeps_bases_and_the_newest() {
    let d = dir();
    for o in [0, 50, 100, 150] {
        ok(write(&RealFs, d.path(), o, &snapshot_bytes(o)));
    }
    assert_eq!(ok(remove_strays(&RealFs, d.path(), &[100, 0])), vec![50]);
    // Even a newest snapshot below the largest base is kept: it may be the only good state.
    assert_eq!(
        ok(remove_strays(&RealFs, d.path(), &[0, 100, 200])),
        Vec::<i64>::new()
    );
}
