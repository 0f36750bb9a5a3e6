//! A partition's disk grows with its writer: a partition that gets one record
//! holds the small first step ([`oncelog::segment::space::FIRST_STEP`]) of real disk, not a
//! whole `allocation_step_bytes` (32 MiB: ten auto-created topics held 322 MB); the steps double
//! with the file up to the configured one, across many appends, and every byte appended reads
//! back. (A full disk stays a typed error at the append that needed the space: tests/full_disk.rs,
//! tests/fault_full_disk.rs and tests/segment_space.rs.)

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::segment::space::FIRST_STEP;
use oncelog::{AppendOutcome, FlushPolicy, Log, LogConfig, Preallocation};

fn record(value_len: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    b.append(
        1_700_000_000_000,
        Some(b"k"),
        Some(&vec![7u8; value_len]),
        &[],
    );
    b.build().unwrap()
}

/// Bytes of disk a file holds (`st_blocks` are 512-byte units).
fn disk_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.ends_with(".log") || n.ends_with(".index") || n.ends_with(".timeindex")
        })
        .collect()
}

#[test]
fn a_partition_with_one_record_holds_only_the_first_step_of_disk() {
    for (flush, preallocation) in [
        (FlushPolicy::Manual, Preallocation::Auto),
        (FlushPolicy::Always, Preallocation::Auto),
        (FlushPolicy::Manual, Preallocation::Reserved),
        (FlushPolicy::Manual, Preallocation::Zeroed),
    ] {
        let what = format!("{flush:?}, {preallocation:?}");
        // Ten partitions, the default step (32 MiB), each given one record and left open.
        let dirs: Vec<_> = (0..10).map(|_| tempfile::tempdir().unwrap()).collect();
        let logs: Vec<Log> = dirs
            .iter()
            .map(|d| {
                let log = Log::open(
                    d.path(),
                    LogConfig::builder()
                        .flush_policy(flush)
                        .preallocation(preallocation)
                        .build()
                        .unwrap(),
                )
                .unwrap();
                assert!(matches!(
                    log.append(&record(100)).unwrap(),
                    AppendOutcome::Appended(_)
                ));
                log.flush().unwrap();
                log
            })
            .collect();
        // Let a background growth or prefault settle (none is due this early).
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut total = 0;
        for d in &dirs {
            let log_file = d.path().join("00000000000000000000.log");
            let on_disk = disk_bytes(&log_file);
            assert!(
                on_disk <= FIRST_STEP as u64,
                "{what}: the .log of a one-record partition holds {on_disk} bytes of disk"
            );
            assert!(std::fs::metadata(&log_file).unwrap().len() <= FIRST_STEP as u64);
            for f in segment_files(d.path()) {
                total += disk_bytes(&f);
            }
        }
        // The indexes start small too: the ten partitions hold about ten first steps.
        assert!(
            total <= 10 * (FIRST_STEP as u64 + 16 * 1024),
            "{what}: ten one-record partitions hold {total} bytes of disk"
        );
        for log in logs {
            log.close().unwrap();
        }
    }
}

#[test]
fn the_allocation_grows_with_the_writer_across_many_appends() {
    for preallocation in [Preallocation::Reserved, Preallocation::Zeroed] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(
            dir.path(),
            LogConfig::builder()
                .segment_bytes(64 << 20)
                .allocation_step_bytes(4 << 20)
                .preallocation(preallocation)
                .build()
                .unwrap(),
        )
        .unwrap();
        let log_file = dir.path().join("00000000000000000000.log");
        let batch = record(1000);
        let mut sizes = Vec::new();
        let mut appended = 0usize;
        // 24 MiB through one segment: past the first steps and several full ones.
        while appended < 24 << 20 {
            assert!(matches!(
                log.append(&batch).unwrap(),
                AppendOutcome::Appended(_)
            ));
            appended += batch.len();
            let len = std::fs::metadata(&log_file).unwrap().len();
            if sizes.last() != Some(&len) {
                sizes.push(len);
            }
            // Never granted more than the file holds: the allocation is ahead of the writer.
            assert!(len as usize >= appended, "{preallocation:?}");
        }
        // The file grew in many small steps first, then in steps of at most 4 MiB (plus what
        // the writer's catching up may add at once).
        assert!(
            sizes[0] <= FIRST_STEP as u64,
            "{preallocation:?}: {sizes:?}"
        );
        assert!(sizes.len() >= 6, "{preallocation:?}: {sizes:?}");
        for w in sizes.windows(2) {
            assert!(w[1] - w[0] <= 8 << 20, "{preallocation:?}: {sizes:?}");
        }
        let n = appended / batch.len();
        log.flush().unwrap();
        // Everything reads back, and close trims the file to its batches.
        let mut next = 0;
        let mut count = 0;
        while next < log.log_end_offset() {
            let bytes = log.read(next, 1 << 20).unwrap();
            for item in BatchIter::new(&bytes) {
                let (_, b) = item.unwrap();
                assert!(b.is_crc_valid());
                next = b.last_offset() + 1;
                count += 1;
            }
        }
        assert_eq!(count, n);
        log.close().unwrap();
        assert_eq!(
            std::fs::metadata(&log_file).unwrap().len() as usize,
            appended,
            "{preallocation:?}"
        );
    }
}

/// On the simulated file system with room for the first step but not the doubled one: the
/// append that needs the next step fails with a typed out-of-space error before any byte of it
/// is written, everything appended before reads back, and appends resume once space returns.
#[test]
fn a_full_disk_at_a_doubling_step_is_a_typed_error_and_appends_resume() {
    use oncelog::io::SimFs;
    use oncelog::{AppendError, Environment};
    let fs = SimFs::new();
    let env = Environment::default().with_fs(fs.as_dyn());
    let dir = Path::new("/sim/p-0");
    let cfg = LogConfig::builder()
        .segment_bytes(64 << 20)
        .preallocation(Preallocation::Reserved)
        .prefault_bytes(0)
        .build()
        .unwrap();
    let log = Log::open_in(env.clone(), dir, cfg.clone()).unwrap();
    // Room for the first step and its indexes, not for the second.
    fs.set_capacity(Some(fs.used_bytes() + FIRST_STEP as u64 + 64 * 1024));
    let batch = record(1000);
    let mut appended = 0;
    let err = loop {
        match log.append(&batch) {
            Ok(AppendOutcome::Appended(_)) => appended += 1,
            Ok(other) => panic!("{other:?}"),
            Err(e) => break e,
        }
        assert!(appended < 10_000, "the capacity was never met");
    };
    let AppendError::Io(io) = &err else {
        panic!("not an I/O error: {err:?}");
    };
    assert_eq!(io.source.raw_os_error(), Some(libc::ENOSPC), "{err}");
    // The whole first step was used.
    assert!(
        appended * batch.len() > FIRST_STEP - batch.len(),
        "{appended}"
    );
    assert_eq!(log.log_end_offset(), appended as i64);
    fs.set_capacity(None);
    assert!(matches!(
        log.append(&batch).unwrap(),
        AppendOutcome::Appended(a) if a.first_offset == appended as i64
    ));
    log.flush().unwrap();
    let mut next = 0;
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            assert!(b.is_crc_valid());
            next = b.last_offset() + 1;
        }
    }
    assert_eq!(next, appended as i64 + 1);
    log.close().unwrap();
    let log = Log::open_in(env, dir, cfg).unwrap();
    assert_eq!(log.log_end_offset(), appended as i64 + 1);
}
