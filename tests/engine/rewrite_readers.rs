//! Readers while a rewrite moves files: truncation, a full truncation, retention and compaction
//! rename a segment's files (`.deleted`, `.cleaned` → `.swap` → final names) before they
//! publish the new state to readers, so a reader may still find the old segment in the log's
//! map. It must read that segment's bytes: never "no such file", and never the bytes a later
//! rename put under the same name.
//!
//! The timing is not left to luck: the log's own file system reads every offset of the log at
//! each rename, on the rewrite's thread, between the rename and the next step.

use crate::common;

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

use common::{env_with, TestClock, T0};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::{File, FileLock, FileMeta, FileSystem, OpenMode};
use oncelog::{CleanupPolicy, Log, LogConfig, ReadError};

/// A file system that reads the whole log (through `log`) after every rename.
struct ReadingFs {
    inner: Arc<dyn FileSystem>,
    log: Mutex<Weak<Log>>,
    /// What the readers saw go wrong, and how many reads they made.
    seen: Mutex<(Vec<String>, usize)>,
}

impl fmt::Debug for ReadingFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReadingFs")
    }
}

impl ReadingFs {
    fn read_everything(&self, during: &Path) {
        let Some(log) = self.log.lock().unwrap().upgrade() else {
            return;
        };
        let mut seen = self.seen.lock().unwrap();
        for at in 0..log.log_end_offset() {
            seen.1 += 1;
            match log.read(at, 1 << 12) {
                Ok(bytes) => {
                    let mut first = true;
                    for item in BatchIter::new(&bytes) {
                        match item {
                            Ok((_, b)) if !b.is_crc_valid() => seen
                                .0
                                .push(format!("{during:?}: read at {at}: a batch fails its CRC")),
                            Ok((_, b)) if first && b.last_offset() < at => seen.0.push(format!(
                                "{during:?}: read at {at} starts with a batch ending at {}",
                                b.last_offset()
                            )),
                            Ok(_) => {}
                            Err(e) => seen.0.push(format!("{during:?}: read at {at}: {e}")),
                        }
                        first = false;
                    }
                }
                Err(ReadError::OffsetOutOfRange { .. }) => {}
                Err(e) => seen.0.push(format!("{during:?}: read at {at}: {e}")),
            }
            if let Err(e) = log.offset_for_timestamp(T0 + at) {
                seen.0.push(format!("{during:?}: time lookup {at}: {e}"));
            }
        }
    }
}

impl FileSystem for ReadingFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner.exists(path)
    }
    fn stat(&self, path: &Path) -> io::Result<FileMeta> {
        self.inner.stat(path)
    }
    fn try_lock(&self, path: &Path, holder: &str) -> io::Result<FileLock> {
        self.inner.try_lock(path, holder)
    }
    fn try_lock_shared(&self, path: &Path) -> io::Result<FileLock> {
        self.inner.try_lock_shared(path)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn File>> {
        self.inner.open(path, mode)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let renamed = self.inner.rename(from, to);
        self.read_everything(from);
        renamed
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.remove_dir(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn allows_background_io(&self) -> bool {
        self.inner.allows_background_io()
    }
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(1024)
        .segment_index_bytes(4096)
        .index_interval_bytes(128)
        .cleanup_policy(CleanupPolicy::CompactDelete)
        .file_delete_delay_ms(0)
        // Every read unmaps what it mapped: the next maps the segment by name again.
        .max_mapped_segments(1)
        .build()
        .unwrap()
}

/// A log of `n` keyed records, one batch each, over many segments, closed and reopened so that
/// its sealed segments are not mapped (a reader maps them by name).
fn reopened_log(dir: &Path, n: i64) -> (Arc<Log>, Arc<ReadingFs>) {
    let fs = Arc::new(ReadingFs {
        inner: Arc::new(oncelog::io::RealFs),
        log: Mutex::new(Weak::new()),
        seen: Mutex::new((Vec::new(), 0)),
    });
    let env = || env_with(TestClock::new(T0)).with_fs(Arc::clone(&fs) as Arc<dyn FileSystem>);
    let log = Log::open_in(env(), dir, config()).unwrap();
    for i in 0..n {
        let mut b = BatchBuilder::new();
        let key = format!("key-{}", i % 7);
        b.append(T0 + i, Some(key.as_bytes()), Some(&[i as u8; 40]), &[]);
        log.append(&b.build().unwrap()).unwrap();
    }
    log.close().unwrap();
    let log = Arc::new(Log::open_in(env(), dir, config()).unwrap());
    assert!(
        log.maintenance().segment_base_offsets().len() > 5,
        "many segments"
    );
    *fs.log.lock().unwrap() = Arc::downgrade(&log);
    (log, fs)
}

/// What went wrong for the readers during `what`: the first few faults and their count.
fn faults(fs: &ReadingFs, what: &str) -> Option<String> {
    let seen = fs.seen.lock().unwrap();
    assert!(seen.1 > 0, "{what}: no read ran during a rename");
    (!seen.0.is_empty()).then(|| {
        let first: Vec<&String> = seen.0.iter().take(3).collect();
        format!("{what}: {} faults, first {first:#?}", seen.0.len())
    })
}

#[test]
fn readers_during_every_rewrite_read_the_old_bytes_or_the_new_never_a_missing_file() {
    type Rewrite = fn(&Log);
    let rewrites: [(&str, Rewrite); 5] = [
        ("truncate inside a sealed segment", |log| {
            let bases = log.maintenance().segment_base_offsets();
            log.replica().truncate_to(bases[2] + 1).unwrap();
        }),
        ("truncate at a segment's first offset", |log| {
            let bases = log.maintenance().segment_base_offsets();
            log.replica().truncate_to(bases[2]).unwrap();
        }),
        ("truncate fully", |log| {
            log.replica()
                .truncate_fully_and_start_at(log.log_end_offset() + 10)
                .unwrap();
        }),
        ("delete records and retention", |log| {
            let bases = log.maintenance().segment_base_offsets();
            log.delete_records(bases[4] + 1).unwrap();
            log.maintenance().enforce_retention(T0).unwrap();
        }),
        ("compaction", |log| {
            log.maintenance().compact(T0).unwrap();
        }),
    ];
    let mut failed = Vec::new();
    for (what, rewrite) in rewrites {
        let dir = tempfile::tempdir().unwrap();
        let (log, fs) = reopened_log(dir.path(), 120);
        rewrite(&log);
        failed.extend(faults(&fs, what));
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
