//! One sealed segment's files, taken at once for an upload to an object store (docs/design.md,
//! "Tiered storage"): which segments may go, and everything `LogSegmentData` carries of one.
//! Nothing here writes.

use std::path::PathBuf;
use std::sync::Arc;

use super::{EpochEntry, Log};
use crate::format;
use crate::io::{self, SmallFile};
use crate::producer::{snapshot, snapshot_files};
use crate::segment::{offset_index, time_index, Segment, SegmentView};
use crate::tier::{NotUploadable, TierError};

/// A sealed segment's files as one upload sends them. The `.log` bytes are the segment's map,
/// valid and unchanged for as long as this value lives, whatever happens to the segment.
#[derive(Debug)]
pub struct SealedSegmentFiles {
    /// The segment's base offset.
    pub base_offset: i64,
    /// The next segment's base: the segment holds offsets in `[base_offset, end_offset)`.
    pub end_offset: i64,
    /// The partition directory.
    pub dir: PathBuf,
    view: Arc<SegmentView>,
    size: usize,
    /// The `.index` file's bytes.
    pub offset_index: Vec<u8>,
    /// The `.timeindex` file's bytes.
    pub time_index: Vec<u8>,
    /// The aborted transactions the segment wrote, as `.txnindex` bytes.
    pub txn_index: Vec<u8>,
    /// The producer state at `end_offset`, as `.snapshot` bytes.
    pub producer_snapshot: Vec<u8>,
    /// The leader-epoch entries that start below `end_offset`.
    pub leader_epochs: Vec<EpochEntry>,
    /// The segment's largest batch timestamp, -1 when none.
    pub max_timestamp: i64,
    /// The header digest recorded when it was sealed, if known.
    pub header_digest: Option<u32>,
}

impl SealedSegmentFiles {
    /// The `.log` bytes: its batches.
    pub fn log(&self) -> &[u8] {
        let data = self.view.data();
        &data[..self.size.min(data.len())]
    }
}

impl Log {
    /// The segments that may be uploaded now, oldest first, as `(base, end)`: sealed, wholly
    /// durable, committed and stable, not wholly below the log start; none while the log
    /// compacts or is closed.
    pub(crate) fn uploadable_segments(&self) -> Vec<(i64, i64)> {
        let segments: Vec<(i64, Arc<Segment>)> = self
            .segments
            .read()
            .iter()
            .map(|(b, s)| (*b, Arc::clone(s)))
            .collect();
        segments
            .windows(2)
            .filter(|w| self.why_not_uploadable(&w[0].1, w[1].0).is_none())
            .map(|w| (w[0].0, w[1].0))
            .collect()
    }

    /// Every sealed segment as `(base, end, .log size)`, oldest first: `end` is the next
    /// segment's base.
    pub(crate) fn sealed_extents(&self) -> Vec<(i64, i64, u64)> {
        let segments = self.segments.read();
        let bases: Vec<(i64, u64)> = segments
            .iter()
            .map(|(b, s)| (*b, s.size() as u64))
            .collect();
        bases
            .windows(2)
            .map(|w| (w[0].0, w[1].0, w[0].1))
            .collect()
    }

    /// The end, `.log` size and header digest (which covers every batch's CRC: docs/format.md,
    /// "Checkpoint") of the sealed segment at `base`, read from memory; `None` without one, or
    /// when its digest is not known. Tiered storage's reconciliation skips the CRC of a segment
    /// whose identity it checked before and has not changed.
    pub(crate) fn sealed_log_identity(&self, base: i64) -> Option<(i64, u64, u32)> {
        let segments = self.segments.read();
        let mut from = segments.range(base..);
        match (from.next(), from.next()) {
            (Some((&b, s)), Some((&end, _))) if b == base => s
                .seal_digest()
                .map(|d| (end, s.size() as u64, d.headers)),
            _ => None,
        }
    }

    /// The end, `.log` size and `.log` CRC-32C of the sealed segment at `base`, `None` without
    /// one (tiered storage holds a remote segment to the local bytes it was uploaded from:
    /// a truncated log no longer has them). Reads the segment through its map.
    pub(crate) fn sealed_log_digest(
        &self,
        base: i64,
    ) -> Result<Option<(i64, u64, u32)>, io::IoError> {
        let (seg, end) = {
            let segments = self.segments.read();
            let mut from = segments.range(base..);
            match (from.next(), from.next()) {
                (Some((&b, s)), Some((&end, _))) if b == base => (Arc::clone(s), end),
                _ => return Ok(None),
            }
        };
        let view = seg.view()?;
        let size = seg.size();
        let data = view.data();
        let bytes = &data[..size.min(data.len())];
        Ok(Some((end, bytes.len() as u64, crc32c::crc32c(bytes))))
    }

    /// Adds the aborted transactions of the log's segments, oldest first, that overlap a fetch
    /// from `fetch_offset` bounded by `upper_bound`, until an entry says no later one can (a
    /// read_committed fetch below the log start continues here after the remote segments).
    pub(crate) fn collect_aborted_from_start(
        &self,
        fetch_offset: i64,
        upper_bound: i64,
        out: &mut Vec<crate::segment::AbortedTxn>,
    ) {
        for s in self.segments.read().values() {
            if s.txn_index().collect(fetch_offset, upper_bound, out) {
                return;
            }
        }
    }

    /// Why the segment `seg`, followed by a segment at `end`, may not be uploaded now.
    fn why_not_uploadable(&self, seg: &Segment, end: i64) -> Option<NotUploadable> {
        if self.is_closed() {
            return Some(NotUploadable::Closed);
        }
        if self.config().cleanup_policy.compacts() {
            return Some(NotUploadable::Compacted);
        }
        let recovery_point = self.recovery_point();
        // A sealed segment stays pinned until the flush that syncs it and its indexes.
        if end > recovery_point || !seg.is_unpinned() {
            return Some(NotUploadable::NotDurable { recovery_point });
        }
        let high_watermark = self.high_watermark();
        if end > high_watermark {
            return Some(NotUploadable::AboveHighWatermark { high_watermark });
        }
        let last_stable_offset = self.last_stable_offset();
        if end > last_stable_offset {
            return Some(NotUploadable::Unstable { last_stable_offset });
        }
        let log_start_offset = self.log_start_offset();
        if end <= log_start_offset {
            return Some(NotUploadable::BelowLogStart { log_start_offset });
        }
        None
    }

    /// Takes the files of the sealed segment at `base` for an upload, if it may be uploaded
    /// now ([`Self::uploadable_segments`]).
    pub(crate) fn sealed_segment_files(&self, base: i64) -> Result<SealedSegmentFiles, TierError> {
        let not = |reason| TierError::NotUploadable {
            segment: base,
            reason,
        };
        let (seg, end) = {
            let segments = self.segments.read();
            let mut from = segments.range(base..);
            match (from.next(), from.next()) {
                (Some((&b, s)), Some((&end, _))) if b == base => (Arc::clone(s), end),
                (Some((&b, _)), None) if b == base => return Err(not(NotUploadable::Active)),
                _ => return Err(not(NotUploadable::NoSuchSegment)),
            }
        };
        if let Some(reason) = self.why_not_uploadable(&seg, end) {
            return Err(not(reason));
        }
        let local = |error| TierError::LocalFile {
            segment: base,
            error,
        };
        let view = seg.view().map_err(local)?;
        let size = seg.size();
        let log_len = size as u64;
        let fs = self.env.fs.as_ref();
        let whole = |path: PathBuf, entry: usize| -> Result<Vec<u8>, TierError> {
            // The most an index of this segment can hold: an entry per batch.
            let max = (log_len / format::HEADER_SIZE as u64 + 1) * entry as u64;
            match io::read_small_file(fs, &path, max).map_err(local)? {
                SmallFile::Bytes(b) => Ok(b),
                other => Err(TierError::LocalFileUnusable {
                    segment: base,
                    path,
                    reason: unusable(&other, max),
                }),
            }
        };
        let offset_index = whole(seg.index_path(), offset_index::ENTRY_SIZE)?;
        let time_index = whole(seg.time_index_path(), time_index::ENTRY_SIZE)?;
        let txn_index: Vec<u8> = seg
            .txn_index()
            .entries()
            .iter()
            .flat_map(|e| e.encode())
            .collect();
        let producer_snapshot = self.snapshot_at_end(base, end)?;
        let leader_epochs = self
            .leader_epochs()
            .into_iter()
            .filter(|e| e.start_offset < end)
            .collect();
        Ok(SealedSegmentFiles {
            base_offset: base,
            end_offset: end,
            dir: self.dir.clone(),
            view,
            size,
            offset_index,
            time_index,
            txn_index,
            producer_snapshot,
            leader_epochs,
            max_timestamp: seg.max_timestamp(),
            header_digest: seg.seal_digest().map(|d| d.headers),
        })
    }

    /// The producer state at `end`: the snapshot the roll to the next segment wrote, if it is
    /// still there and passes its checks, else rebuilt as a replica's handoff rebuilds it.
    fn snapshot_at_end(&self, base: i64, end: i64) -> Result<Vec<u8>, TierError> {
        let path = snapshot_files::path(&self.dir, end);
        let read = io::read_small_file(self.env.fs.as_ref(), &path, snapshot_files::MAX_FILE_BYTES);
        if let Ok(SmallFile::Bytes(bytes)) = read {
            if snapshot::decode(&bytes).and_then(|s| s.check_at(end)).is_ok() {
                return Ok(bytes);
            }
        }
        self.producer_snapshot_at(end)
            .map_err(|error| TierError::ProducerState {
                segment: base,
                offset: end,
                error,
            })
    }
}

fn unusable(found: &SmallFile, max: u64) -> String {
    match found {
        SmallFile::Missing => "missing".into(),
        SmallFile::NotAFile(kind) => format!("a {kind}, not a regular file"),
        SmallFile::TooLarge(len) => {
            format!("{len} bytes, more than an index of its segment can hold ({max})")
        }
        SmallFile::Bytes(_) => "read".into(),
    }
}
