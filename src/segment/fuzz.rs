//! Fuzz entry for the segment-level decoders: index files, time-index files, `.txnindex`
//! files and the log scan.

use super::{offset_index, scan, time_index, txn_index};
use crate::format::batch::be_i64;

/// Runs every index and segment decoder on arbitrary bytes; must never panic. The first 8
/// bytes (if present) choose the base offset, the rest is the file content.
#[doc(hidden)]
pub fn fuzz_index(data: &[u8]) {
    let (base, body) = if data.len() >= 8 {
        (be_i64(data, 0) >> 8, &data[8..])
    } else {
        (0, data)
    };
    let _ = offset_index::check(body, base, body.len());
    let _ = offset_index::decode(body, base).count();
    let _ = time_index::check(body, base, base.saturating_add(i32::MAX as i64));
    let _ = time_index::decode(body, base).count();
    let _ = txn_index::decode(body).count();
    if let Ok(entries) = txn_index::check(body, base, base.saturating_add(i32::MAX as i64)) {
        let mut out = Vec::new();
        for e in entries.iter().take(64) {
            txn_index::collect_aborted(&entries, e.first_offset, e.last_stable_offset, &mut out);
        }
    }
    let mut batches = 0;
    let _ = scan::scan(
        body,
        scan::OffsetBounds {
            segment_base: base,
            next_segment_base: None,
            dense_from: None,
        },
        None,
        &mut |_| batches += 1,
    );
    // The index search over whatever keys the bytes hold (sorted, as an index keeps them).
    let mut keys: Vec<i64> = offset_index::decode(body, base).map(|e| e.offset).collect();
    keys.sort_unstable();
    for target in [i64::MIN, base, base + 1, i64::MAX] {
        if let Some(slot) = super::search::largest_lower_bound(keys.len(), 8, |i| keys[i], target) {
            assert!(keys[slot] <= target);
        }
    }
}
