//! The log the tiered-storage tests upload: several sealed segments of plain batches, an
//! idempotent producer's and an aborted transaction (so one segment has a `.txnindex`).

use std::path::Path;

use crate::common::T0;
use oncelog::format::BatchBuilder;
use oncelog::{Log, LogConfig, TxnMarker};

/// Four records of 200 bytes from producer `pid` at sequence `seq`.
pub fn producer_batch(pid: i64, seq: i32, transactional: bool, ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new()
        .producer(pid, 0, seq)
        .transactional(transactional);
    for i in 0..4 {
        b.append(ts + i, Some(b"k"), Some(&[b'x'; 200][..]), &[]);
    }
    b.build().unwrap()
}

/// The log in `dir`, all flushed; with `epochs`, its batches are written under leader epochs
/// 3 and then 4.
pub fn filled_log(dir: &Path, config: LogConfig, epochs: bool) -> Log {
    let log = Log::open(dir, config).unwrap();
    if epochs {
        log.replica().set_leader_epoch(3).unwrap();
    }
    let mut seq = 0;
    for i in 0..40 {
        log.append(&producer_batch(7, seq, false, T0 + i * 10))
            .unwrap();
        seq += 4;
        if i == 12 {
            log.append(&producer_batch(9, 0, true, T0 + i * 10))
                .unwrap();
            log.append_marker(&TxnMarker::abort(9, 0, 0)).unwrap();
        }
        if epochs && i == 20 {
            log.replica().set_leader_epoch(4).unwrap();
        }
    }
    log.flush().unwrap();
    log
}
