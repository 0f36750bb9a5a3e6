//! A real full file system (a 1 MiB tmpfs, mounted when running as root): appends fail with a
//! typed out-of-space error at the roll that cannot get its space, never a SIGBUS; everything
//! acknowledged stays readable; appends resume once space returns; nothing is lost on reopen.

use std::path::{Path, PathBuf};
use std::process::Command;

use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{AppendError, AppendOutcome, Log, LogConfig};

struct Tmpfs {
    dir: tempfile::TempDir,
}

/// The tests take turns: `mount` and `umount` are forked while another test's log holds its
/// directory lock, and a forked child shares the lock's open file until it execs, so a reopen
/// right after a close could find the lock still held.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` on a fresh directory, or `None` where this machine forbids it.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn batch(seq: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(1, 0, seq);
    for i in 0..10 {
        b.append(1_700_000_000_000 + i, None, Some(&[0xAB; 200][..]), &[]);
    }
    b.build().unwrap()
}

fn read_all(log: &Log) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            assert!(b.is_crc_valid());
            out.push((b.base_offset(), b.last_offset()));
            next = b.last_offset() + 1;
        }
    }
    out
}

#[test]
fn a_full_tmpfs_refuses_appends_with_a_typed_error_and_they_resume_when_space_returns() {
    let _serial = serial();
    let Some(fs) = Tmpfs::mount("1m") else {
        eprintln!(
            "skipped: cannot mount a tmpfs here (needs root); the simulated full disk covers this"
        );
        return;
    };
    // Ballast that takes a third of the space, to give it back later.
    let ballast: PathBuf = fs.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; 320 * 1024]).unwrap();
    let dir = fs.path().join("partition-0");
    let config = LogConfig::builder()
        .segment_bytes(96 * 1024)
        .segment_index_bytes(4096)
        .build()
        .unwrap();
    let log = Log::open(&dir, config.clone()).unwrap();
    let mut acked = Vec::new();
    let mut seq = 0;
    let err = loop {
        match log.append(&batch(seq)) {
            Ok(AppendOutcome::Appended(info)) => {
                log.flush().unwrap();
                acked.push((info.first_offset, info.last_offset));
                seq += 10;
            }
            Ok(other) => panic!("{other:?}"),
            Err(e) => break e,
        }
        assert!(seq < 100_000, "the disk never filled");
    };
    match &err {
        AppendError::Io(io) => assert!(io.is_out_of_space(), "{io}"),
        other => panic!("expected an out-of-space error, got {other:?}"),
    }
    assert_eq!(err.kind(), "io");
    // Everything acknowledged is still there, and the log still serves reads.
    assert_eq!(read_all(&log), acked);
    // The same batch keeps failing while the disk is full.
    assert!(log.append(&batch(seq)).is_err());
    // Space comes back: appends resume at the next offset.
    std::fs::remove_file(&ballast).unwrap();
    let AppendOutcome::Appended(info) = log.append(&batch(seq)).unwrap() else {
        panic!()
    };
    assert_eq!(info.first_offset, acked.last().unwrap().1 + 1);
    acked.push((info.first_offset, info.last_offset));
    log.close().unwrap();
    drop(log);
    let log = Log::open(&dir, config).unwrap();
    assert_eq!(read_all(&log), acked);
    log.close().unwrap();
}

#[test]
fn a_full_tmpfs_fails_the_growth_of_a_segment_typed_and_mid_segment_appends_resume() {
    use oncelog::{FlushPolicy, Preallocation};
    let _serial = serial();
    for preallocation in [Preallocation::Reserved, Preallocation::Zeroed] {
        let Some(fs) = Tmpfs::mount("1m") else {
            eprintln!("skipped: cannot mount a tmpfs here (needs root)");
            return;
        };
        let ballast: PathBuf = fs.path().join("ballast");
        std::fs::write(&ballast, vec![1u8; 640 * 1024]).unwrap();
        let dir = fs.path().join("partition-0");
        // One segment far larger than the disk, growing 16 KiB at a time: the disk fills in
        // the middle of it, at a growth, not at a roll.
        let config = LogConfig::builder()
            .segment_bytes(64 << 20)
            .allocation_step_bytes(16 << 10)
            .segment_index_bytes(64 << 10)
            .preallocation(preallocation)
            .flush_policy(FlushPolicy::Always)
            .build()
            .unwrap();
        let log = Log::open(&dir, config.clone()).unwrap();
        let mut acked = Vec::new();
        let mut seq = 0;
        let err = loop {
            match log.append(&batch(seq)) {
                Ok(AppendOutcome::Appended(info)) => {
                    acked.push((info.first_offset, info.last_offset));
                    seq += 10;
                }
                Ok(other) => panic!("{other:?}"),
                Err(e) => break e,
            }
            assert!(seq < 100_000, "the disk never filled");
        };
        match &err {
            AppendError::Io(io) => assert!(io.is_out_of_space(), "{preallocation:?}: {io}"),
            other => panic!("{preallocation:?}: expected out of space, got {other:?}"),
        }
        assert_eq!(
            log.maintenance().segment_count(),
            1,
            "no roll: the growth failed"
        );
        assert_eq!(read_all(&log), acked);
        std::fs::remove_file(&ballast).unwrap();
        let AppendOutcome::Appended(info) = log.append(&batch(seq)).unwrap() else {
            panic!()
        };
        assert_eq!(info.first_offset, acked.last().unwrap().1 + 1);
        acked.push((info.first_offset, info.last_offset));
        log.close().unwrap();
        drop(log);
        let log = Log::open(&dir, config).unwrap();
        assert_eq!(read_all(&log), acked);
        log.close().unwrap();
    }
}
