//! Fuzz entry: opening a directory of arbitrary files. Whatever the bytes, `Log::open` answers
//! with a log or a typed error, never a panic, and an opened log reads, appends and closes.

use super::{Log, LogConfig, RecoveryMode};
use crate::format::BatchBuilder;

/// File names a fuzz input can create (in the first byte of each file record).
const NAMES: [&str; 10] = [
    "00000000000000000000.log",
    "00000000000000000000.index",
    "00000000000000000000.timeindex",
    "00000000000000000007.log",
    "00000000000000000007.index",
    "00000000000000000007.timeindex",
    "00000000000000000000.snapshot",
    "00000000000000000007.snapshot",
    "oncelog.checkpoint",
    "00000000000000000007.log.swap",
];

/// Interprets `data` as a list of files (`[name index u8][length u16 BE][bytes]`), writes them
/// into a fresh directory, and opens it under every recovery mode.
#[doc(hidden)]
pub fn fuzz_open_dir(data: &[u8]) {
    let Ok(dir) = tempfile::tempdir() else { return };
    let mut rest = data;
    while rest.len() >= 3 {
        let name = NAMES[rest[0] as usize % NAMES.len()];
        let len = (u16::from_be_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
        if std::fs::write(dir.path().join(name), &rest[3..3 + len]).is_err() {
            return;
        }
        rest = &rest[3 + len..];
    }
    for mode in [
        RecoveryMode::AbsoluteConsistency,
        RecoveryMode::TolerateTailCorruption,
        RecoveryMode::TolerateAnyCorruption,
    ] {
        let config = LogConfig {
            segment_bytes: 64 * 1024,
            segment_index_bytes: 1024,
            recovery_mode: mode,
            ..LogConfig::default()
        };
        let Ok(log) = Log::open(dir.path(), config) else {
            continue;
        };
        let mut next = log.log_start_offset();
        while next < log.log_end_offset() {
            match log.read(next, 1 << 16) {
                Ok(bytes) if !bytes.is_empty() => {
                    let last = crate::format::BatchIter::new(&bytes)
                        .filter_map(Result::ok)
                        .last()
                        .map(|(_, b)| b.last_offset());
                    match last {
                        Some(l) if l >= next => next = l + 1,
                        _ => break,
                    }
                }
                _ => break,
            }
        }
        let mut b = BatchBuilder::new().producer(3, 0, 0);
        b.append(0, None, Some(b"fuzz"), &[]);
        if let Ok(batch) = b.build() {
            let _ = log.append(&batch);
        }
        let _ = log.close();
    }
}
