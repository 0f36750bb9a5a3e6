use super::*;
use crate::io::MapMode;

const DIR: &str = "/d";

fn fs_with_dir() -> SimFs {
    let fs = SimFs::new();
    fs.create_dir_all(Path::new(DIR)).expect("mkdir");
    fs
}

fn p(name: &str) -> PathBuf {
    Path::new(DIR).join(name)
}

fn write(fs: &SimFs, name: &str, bytes: &[u8]) -> Box<dyn File> {
    let f = fs.open(&p(name), OpenMode::Create).expect("open");
    f.write_all_at(bytes, 0).expect("write");
    f
}

#[test]
fn sync_data_and_sync_dir_make_a_file_survive_every_crash() {
    for seed in 0..50 {
        let fs = fs_with_dir();
        let f = write(&fs, "a", &[7u8; 10_000]);
        f.sync_data().expect("sync");
        fs.sync_dir(Path::new(DIR)).expect("sync dir");
        drop(f);
        fs.crash(seed);
        assert_eq!(fs.read_live(&p("a")).expect("a"), vec![7u8; 10_000]);
    }
}

#[test]
fn unsynced_writes_are_lost_kept_or_torn_depending_on_the_seed() {
    let (mut lost, mut kept, mut torn) = (0, 0, 0);
    for seed in 0..200 {
        let fs = fs_with_dir();
        let f = write(&fs, "a", &[1u8; PAGE]);
        f.sync_data().expect("sync");
        fs.sync_dir(Path::new(DIR)).expect("sync dir");
        f.write_all_at(&[2u8; PAGE], 0).expect("write");
        drop(f);
        fs.crash(seed);
        let after = fs.read_live(&p("a")).expect("a");
        assert_eq!(after.len(), PAGE);
        let new = after.iter().take_while(|&&b| b == 2).count();
        assert!(
            after[new..].iter().all(|&b| b == 1 || b == 0),
            "seed {seed}"
        );
        match new {
            0 if after[0] == 1 => lost += 1,
            PAGE => kept += 1,
            _ => torn += 1,
        }
    }
    assert!(lost > 0 && kept > 0 && torn > 0, "{lost} {kept} {torn}");
}

#[test]
fn a_rename_without_a_directory_sync_can_be_undone() {
    let mut undone = 0;
    for seed in 0..50 {
        let fs = fs_with_dir();
        let f = write(&fs, "a.tmp", b"new");
        f.sync_data().expect("sync");
        fs.sync_dir(Path::new(DIR)).expect("sync dir");
        fs.rename(&p("a.tmp"), &p("a")).expect("rename");
        drop(f);
        fs.crash(seed);
        let names = fs.list(Path::new(DIR)).expect("list");
        match (names.contains(&"a".into()), names.contains(&"a.tmp".into())) {
            (true, false) => assert_eq!(fs.read_live(&p("a")).expect("a"), b"new"),
            (false, true) => undone += 1,
            other => panic!("seed {seed}: half a rename {other:?}"),
        }
    }
    assert!(undone > 0);
    // With the directory synced, the rename always stays.
    for seed in 0..20 {
        let fs = fs_with_dir();
        let f = write(&fs, "a.tmp", b"new");
        f.sync_data().expect("sync");
        fs.rename(&p("a.tmp"), &p("a")).expect("rename");
        fs.sync_dir(Path::new(DIR)).expect("sync dir");
        drop(f);
        fs.crash(seed);
        assert_eq!(fs.read_live(&p("a")).expect("a"), b"new");
    }
}

#[test]
fn an_unsynced_creation_can_disappear() {
    let gone = (0..50)
        .filter(|&seed| {
            let fs = fs_with_dir();
            let f = write(&fs, "a", b"x");
            f.sync_data().expect("sync");
            drop(f);
            fs.crash(seed);
            !fs.exists(&p("a")).expect("exists")
        })
        .count();
    assert!(gone > 0 && gone < 50, "{gone}");
}

#[test]
fn an_injected_fault_fires_exactly_on_the_nth_operation_of_its_kind() {
    let fs = fs_with_dir();
    let f = write(&fs, "a", b"x");
    fs.fail_next(OpKind::SyncData, 3, libc::EIO);
    f.sync_data().expect("1st");
    f.write_all_at(b"y", 0).expect("other kinds do not count");
    f.sync_data().expect("2nd");
    let err = f.sync_data().expect_err("3rd fails");
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    f.sync_data().expect("once only");
    assert_eq!(fs.counters().injected_failures, 1);

    fs.fail_from(OpKind::Any, 2, libc::EIO);
    f.len().expect("1st op");
    assert!(f.len().is_err() && f.sync_data().is_err() && fs.list(Path::new(DIR)).is_err());
    fs.clear_faults();
    f.len().expect("cleared");
}

#[test]
fn a_full_disk_fails_allocations_with_enospc_until_space_returns() {
    let fs = fs_with_dir();
    let f = write(&fs, "a", &[1u8; 100]);
    fs.set_capacity(Some(1000));
    f.allocate(1000).expect("fits");
    let err = f.allocate(1001).expect_err("full");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    let err = f.write_all_at(b"x", 1000).expect_err("full");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    fs.set_capacity(Some(2000));
    f.allocate(1500).expect("space is back");
    assert_eq!(fs.used_bytes(), 1500);
}

#[test]
fn the_same_seed_gives_the_same_crash_image() {
    let image = |seed: u64| {
        let fs = fs_with_dir();
        let f = write(&fs, "a", &[1u8; 5 * PAGE]);
        f.sync_data().expect("sync");
        fs.sync_dir(Path::new(DIR)).expect("sync dir");
        let noise: Vec<u8> = (0..7 * PAGE).map(|i| (i % 251) as u8 + 3).collect();
        f.write_all_at(&noise, 0).expect("write");
        drop(f);
        let report = fs.crash(seed);
        (fs.read_live(&p("a")).expect("a"), report)
    };
    for seed in 0..20 {
        assert_eq!(image(seed), image(seed), "seed {seed}");
    }
    assert!((0..20).any(|s| image(s) != image(s + 1)));
}

#[test]
fn writes_through_a_map_become_durable_only_with_msync_and_sync_data() {
    let fs = fs_with_dir();
    let f = fs.open(&p("log"), OpenMode::Create).expect("open");
    f.allocate(2 * PAGE as u64).expect("allocate");
    f.sync_data().expect("sync length");
    fs.sync_dir(Path::new(DIR)).expect("sync dir");
    let map = Arc::new(
        f.map(2 * PAGE, MapMode::ReadWrite { published: 0 })
            .expect("map"),
    );
    let mut w = map.writer().expect("writer");
    w.write(0, b"hello");
    w.publish(5);
    f.sync_data().expect("sync without msync");
    assert_eq!(fs.read_durable(&p("log")).expect("durable")[..5], [0u8; 5]);
    assert!(
        map.flush(0, 6).is_err(),
        "unpublished bytes cannot be msynced"
    );
    map.flush(0, 5).expect("msync");
    f.sync_data().expect("sync");
    assert_eq!(&fs.read_durable(&p("log")).expect("durable")[..5], b"hello");
    assert!(
        f.map(PAGE, MapMode::ReadOnly).is_err(),
        "one writer, no readers beside it"
    );
    drop(w);
    drop(map);
    drop(f);
    fs.crash(1);
    assert_eq!(&fs.read_live(&p("log")).expect("log")[..5], b"hello");
}

#[test]
fn a_mapped_file_shrunk_keeps_its_bytes_for_readers() {
    let fs = fs_with_dir();
    let f = fs.open(&p("log"), OpenMode::Create).expect("open");
    f.allocate(PAGE as u64).expect("allocate");
    let map = Arc::new(
        f.map(PAGE, MapMode::ReadWrite { published: 0 })
            .expect("map"),
    );
    let mut w = map.writer().expect("writer");
    w.write(0, b"abcdef");
    w.publish(6);
    let bytes = map.bytes(0, 6).expect("published");
    f.set_len(6).expect("trim while mapped");
    assert_eq!(f.len().expect("len"), 6);
    map.flush(0, 6).expect("msync below the new end");
    drop((w, map));
    assert_eq!(&bytes[..], b"abcdef");
    drop(bytes);
    let mut buf = [0u8; 16];
    assert_eq!(f.read_at(&mut buf, 0).expect("read"), 6);
    assert_eq!(&buf[..6], b"abcdef");
}

#[test]
#[should_panic(expected = "live writable map")]
fn crashing_with_a_live_writer_is_refused() {
    let fs = fs_with_dir();
    let f = fs.open(&p("log"), OpenMode::Create).expect("open");
    f.allocate(PAGE as u64).expect("allocate");
    let _map = f
        .map(PAGE, MapMode::ReadWrite { published: 0 })
        .expect("map");
    fs.crash(0);
}

#[test]
fn a_file_removed_while_mapped_keeps_its_bytes_for_the_map_and_is_gone_after_a_crash() {
    let fs = fs_with_dir();
    let f = fs.open(&p("old.log"), OpenMode::Create).expect("open");
    f.allocate(PAGE as u64).expect("allocate");
    let map = Arc::new(
        f.map(PAGE, MapMode::ReadWrite { published: 0 })
            .expect("map"),
    );
    let mut w = map.writer().expect("writer");
    w.write(0, b"batch");
    w.publish(5);
    let bytes = map.bytes(0, 5).expect("published");
    fs.remove_file(&p("old.log")).expect("remove while mapped");
    drop(f);
    // As on Linux: the unlinked file's pages live on for its maps, and an msync of them is
    // harmless (it writes back to a file that no directory names any more).
    map.flush(0, 5).expect("msync of a removed file");
    w.write(5, b"more");
    w.publish(9);
    assert_eq!(&bytes[..], b"batch");
    assert_eq!(map.published_slice(), b"batchmore");
    assert!(!fs.exists(&p("old.log")).expect("exists"));
    drop((w, map));
    fs.sync_dir(Path::new(DIR)).expect("sync dir");
    fs.crash(3);
    assert_eq!(
        &bytes[..],
        b"batch",
        "a reader's bytes outlive even a crash image"
    );
    assert!(!fs.exists(&p("old.log")).expect("exists"));
}

/// A partition directory with one durable file, as the log manager has it before a deletion.
fn fs_with_partition() -> SimFs {
    let fs = fs_with_dir();
    fs.create_dir_all(&p("t-0")).expect("mkdir");
    let f = fs.open(&p("t-0/0.log"), OpenMode::Create).expect("open");
    f.write_all_at(b"data", 0).expect("write");
    f.sync_data().expect("sync");
    fs.sync_dir(&p("t-0")).expect("sync partition dir");
    fs
}

#[test]
fn a_directory_rename_is_lost_or_kept_whole_until_its_parent_is_synced() {
    let (mut lost, mut kept) = (0, 0);
    for seed in 0..64 {
        let fs = fs_with_partition();
        fs.rename(&p("t-0"), &p("t-0.abc-delete")).expect("rename dir");
        assert!(!fs.exists(&p("t-0")).expect("exists"));
        assert_eq!(fs.read_live(&p("t-0.abc-delete/0.log")).expect("moved"), b"data");
        fs.crash(seed);
        let (old, new) = (p("t-0/0.log"), p("t-0.abc-delete/0.log"));
        match (fs.exists(&old).expect("old"), fs.exists(&new).expect("new")) {
            (true, false) => lost += 1,
            (false, true) => kept += 1,
            other => panic!("seed {seed}: the directory is in both or neither place: {other:?}"),
        }
        let name = if fs.exists(&old).expect("old") { old } else { new };
        assert_eq!(fs.read_live(&name).expect("file"), b"data", "seed {seed}");
    }
    assert!(lost > 0 && kept > 0, "{lost} {kept}");
    let fs = fs_with_partition();
    fs.rename(&p("t-0"), &p("t-0.abc-delete")).expect("rename dir");
    fs.sync_dir(Path::new(DIR)).expect("sync parent");
    fs.crash(7);
    assert!(!fs.exists(&p("t-0")).expect("exists"));
    assert!(fs.exists(&p("t-0.abc-delete/0.log")).expect("exists"));
}

#[test]
fn a_removed_directory_comes_back_only_until_its_parent_is_synced() {
    let mut back = 0;
    for seed in 0..64 {
        let fs = fs_with_partition();
        assert_eq!(
            fs.remove_dir(&p("t-0")).map_err(|e| e.kind()),
            Err(io::ErrorKind::DirectoryNotEmpty),
            "a directory with files is not removed"
        );
        fs.remove_file(&p("t-0/0.log")).expect("remove file");
        fs.remove_dir(&p("t-0")).expect("remove dir");
        assert!(!fs.exists(&p("t-0")).expect("exists"));
        fs.crash(seed);
        if fs.exists(&p("t-0")).expect("exists") {
            back += 1;
            // Back with what it durably held: the file's removal may be lost too.
            let names = fs.list(&p("t-0")).expect("list");
            assert!(names.is_empty() || names == ["0.log"], "seed {seed}: {names:?}");
        }
    }
    assert!(back > 0, "a lost removal must bring the directory back for some seed");
    for seed in 0..16 {
        let fs = fs_with_partition();
        fs.remove_file(&p("t-0/0.log")).expect("remove file");
        fs.sync_dir(&p("t-0")).expect("sync");
        fs.remove_dir(&p("t-0")).expect("remove dir");
        fs.sync_dir(Path::new(DIR)).expect("sync parent");
        fs.crash(seed);
        assert!(!fs.exists(&p("t-0")).expect("exists"), "seed {seed}");
    }
}

#[test]
fn a_writable_map_reserves_room_its_writer_is_granted_only_as_the_file_grows() {
    let fs = fs_with_dir();
    let f = fs.open(&p("log"), OpenMode::Create).expect("open");
    f.allocate(PAGE as u64).expect("allocate");
    let map = Arc::new(
        f.map(4 * PAGE, MapMode::ReadWrite { published: 0 })
            .expect("a writable map may be longer than its file"),
    );
    let mut w = map.writer().expect("writer");
    assert_eq!((w.limit(), w.capacity()), (PAGE, 4 * PAGE));
    let past_the_end = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        w.write(PAGE, b"x");
    }));
    assert!(past_the_end.is_err(), "a write past the file's end is refused");
    f.write_zeros(PAGE as u64, 2 * PAGE as u64).expect("grow");
    w.grant(3 * PAGE);
    w.write(PAGE, b"after the first page");
    w.publish(PAGE + 20);
    assert!(
        f.map(5 * PAGE, MapMode::ReadOnly).is_err(),
        "a read-only map must fit in the file"
    );
    drop(w);
    drop(map);
    assert_eq!(fs.read_live(&p("log")).expect("log").len(), 3 * PAGE);
}

#[test]
fn write_zeros_allocates_like_allocate_and_never_erases_data() {
    let fs = fs_with_dir();
    let f = write(&fs, "a", b"data");
    let allocations = || fs.counters().ops;
    let before = allocations();
    f.write_zeros(4, 100).expect("zeros after the data");
    assert_eq!(allocations(), before + 1);
    assert_eq!(fs.read_live(&p("a")).expect("a").len(), 104);
    let err = f.write_zeros(0, 8).expect_err("over data");
    assert!(err.to_string().contains("holds data"), "{err}");
    // Nor over bytes written through a map and not yet written back.
    let map = Arc::new(
        f.map(2 * PAGE, MapMode::ReadWrite { published: 4 })
            .expect("map"),
    );
    let mut w = map.writer().expect("writer");
    w.write(4, b"mapped");
    w.publish(10);
    drop(w);
    let err = f.write_zeros(4, 6).expect_err("over mapped data");
    assert!(err.to_string().contains("holds data"), "{err}");
    drop(map);
    // A full disk fails it as it fails an allocation, and a fault aimed at allocations hits it.
    fs.set_capacity(Some(fs.used_bytes() + 10));
    let err = f.write_zeros(104, 11).expect_err("full");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    fs.set_capacity(None);
    fs.fail_next(OpKind::Allocate, 1, libc::EIO);
    assert_eq!(
        f.write_zeros(104, 11).expect_err("injected").raw_os_error(),
        Some(libc::EIO)
    );
}

#[test]
fn a_durable_msync_makes_its_range_and_the_length_durable_and_nothing_else() {
    let fs = fs_with_dir();
    let f = fs.open(&p("log"), OpenMode::Create).expect("open");
    fs.sync_dir(Path::new(DIR)).expect("sync dir");
    f.write_zeros(0, 3 * PAGE as u64).expect("grow");
    let map = Arc::new(
        f.map(3 * PAGE, MapMode::ReadWrite { published: 0 })
            .expect("map"),
    );
    let mut w = map.writer().expect("writer");
    w.write(0, &[1u8; PAGE]);
    w.write(PAGE, &[2u8; PAGE]);
    w.publish(2 * PAGE);
    let syncs = fs.counters().data_syncs;
    map.sync(PAGE, PAGE).expect("ranged sync");
    assert_eq!(fs.counters().data_syncs, syncs + 1, "counted as a data sync");
    let durable = fs.read_durable(&p("log")).expect("durable");
    assert_eq!(durable.len(), 3 * PAGE, "the length is durable");
    assert_eq!(durable[..PAGE], [0u8; PAGE], "the first page was not synced");
    assert_eq!(durable[PAGE..2 * PAGE], [2u8; PAGE]);
    // A fault aimed at fsync hits it.
    fs.fail_next(OpKind::SyncData, 1, libc::EIO);
    assert!(map.sync(0, PAGE).is_err());
}

#[test]
fn shared_locks_exclude_an_exclusive_one_and_each_other_not() {
    let fs = fs_with_dir();
    let path = p(".lock");
    let kind = |r: io::Result<FileLock>| r.err().map(|e| e.kind());
    // Nothing to share before the file exists; nothing is created.
    assert_eq!(kind(fs.try_lock_shared(&path)), Some(io::ErrorKind::NotFound));
    assert!(!fs.exists(&path).unwrap());
    let exclusive = fs.try_lock(&path, "process 1").unwrap();
    assert_eq!(kind(fs.try_lock_shared(&path)), Some(io::ErrorKind::WouldBlock));
    drop(exclusive);
    let a = fs.try_lock_shared(&path).unwrap();
    let b = fs.try_lock_shared(&path).unwrap();
    assert_eq!(kind(fs.try_lock(&path, "process 2")), Some(io::ErrorKind::WouldBlock));
    drop(a);
    assert_eq!(kind(fs.try_lock(&path, "process 2")), Some(io::ErrorKind::WouldBlock));
    drop(b);
    let exclusive = fs.try_lock(&path, "process 2").unwrap();
    drop(exclusive);
    // A crash releases shared locks as it does exclusive ones.
    let _held = fs.try_lock_shared(&path).unwrap();
    fs.crash(1);
    if fs.exists(&path).unwrap() {
        assert!(fs.try_lock(&path, "process 3").is_ok());
    }
}

#[test]
fn a_range_written_back_is_durable_after_the_next_sync_of_any_file() {
    let fs = fs_with_dir();
    let records = write(&fs, "records", &[0u8; 2 * PAGE]);
    let log = write(&fs, "log", &[0u8; PAGE]);
    records.sync_data().expect("sync the zeros and the length");
    log.sync_data().expect("sync");
    fs.sync_dir(Path::new(DIR)).expect("sync dir");

    records.write_all_at(b"entry 1", 100).expect("write");
    assert!(records.write_back_for_flush(0, PAGE as u64).expect("write back"));
    // Written back, not flushed: nothing durable yet.
    assert_eq!(fs.read_durable(&p("records")).expect("durable")[100..107], [0u8; 7]);
    // Written again after the write-back: the device holds the earlier bytes.
    records.write_all_at(b"entry 2", 100).expect("write");
    log.write_all_at(b"batch", 0).expect("write");
    log.sync_data().expect("the log's sync flushes the device");
    assert_eq!(&fs.read_durable(&p("records")).expect("durable")[100..107], b"entry 1");
    assert_eq!(&fs.read_durable(&p("log")).expect("durable")[..5], b"batch");
    // One flush covers one write-back: the later write is not durable by the next sync.
    log.sync_data().expect("sync");
    assert_eq!(&fs.read_durable(&p("records")).expect("durable")[100..107], b"entry 1");

    // Past the durable length nothing could be promised: asking is the engine's mistake.
    records.write_all_at(&[9u8; 10], 2 * PAGE as u64).expect("grow");
    let err = records
        .write_back_for_flush(2 * PAGE as u64, 10)
        .expect_err("past the durable length");
    assert!(err.to_string().contains("past the durable length"), "{err}");
}

#[test]
fn a_write_back_only_started_is_made_durable_by_no_flush() {
    let fs = fs_with_dir();
    let records = write(&fs, "records", &[0u8; PAGE]);
    let log = write(&fs, "log", &[0u8; PAGE]);
    records.sync_data().expect("sync");
    log.sync_data().expect("sync");
    fs.sync_dir(Path::new(DIR)).expect("sync dir");
    records.write_all_at(b"entry 1", 100).expect("write");
    // Started, never waited for: the device may not have it when the flush is issued, so a
    // flush promises nothing of it (File::start_write_back is a hint; a write_back_for_flush
    // that waits is what a flush covers).
    records.start_write_back(0, PAGE as u64);
    log.write_all_at(b"batch", 0).expect("write");
    log.sync_data().expect("sync");
    assert_eq!(fs.read_durable(&p("records")).expect("durable")[100..107], [0u8; 7]);
    assert!(records.write_back_for_flush(0, PAGE as u64).expect("write back"));
    log.sync_data().expect("sync");
    assert_eq!(&fs.read_durable(&p("records")).expect("durable")[100..107], b"entry 1");
}

#[test]
fn a_range_written_back_and_never_flushed_may_be_lost_in_a_crash() {
    let (mut lost, mut kept) = (0, 0);
    for seed in 0..100 {
        let fs = fs_with_dir();
        let f = write(&fs, "records", &[0u8; PAGE]);
        f.sync_data().expect("sync");
        fs.sync_dir(Path::new(DIR)).expect("sync dir");
        f.write_all_at(&[5u8; 64], 0).expect("write");
        assert!(f.write_back_for_flush(0, 64).expect("write back"));
        drop(f);
        fs.crash(seed);
        match fs.read_live(&p("records")).expect("records")[0] {
            5 => kept += 1,
            _ => lost += 1,
        }
    }
    assert!(lost > 0 && kept > 0, "lost {lost}, kept {kept}");
}
