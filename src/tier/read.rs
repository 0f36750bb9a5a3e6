//! Reads below the local log start (docs/design.md, "Tiered storage"): the segment that holds
//! the offset is found in the manifest, its offset index (one `get`, checked against the
//! manifest) gives the byte position, and the `.log` is read by range from there: whole
//! batches, each CRC-checked, as a local read returns them.

use bytes::Bytes;

use super::cache::CACHE_BLOCK_BYTES;
use super::error::TierError;
use super::keys::SegmentObject;
use super::manifest::{Manifest, ObjectDigest, RemoteSegment};
use super::store::RemoteStore;
use super::upload::read_manifest;
use crate::format;
use crate::log::Log;
use crate::segment::offset_index;

/// Bytes fetched per range request at least (and at most, unless one batch is larger).
const MIN_WINDOW: u64 = 64 << 10;
const MAX_WINDOW: u64 = 8 << 20;

/// Whole batches from the one holding `offset`, up to `max_bytes` (at least one whole batch),
/// as [`Log::read`] returns them: from the log when `offset` is at or above its log start,
/// else from the object store's segment that holds it (within that one segment).
pub fn read(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
    offset: i64,
    max_bytes: usize,
) -> Result<Bytes, TierError> {
    let log_start_offset = log.log_start_offset();
    if offset >= log_start_offset {
        return log
            .read(offset, max_bytes)
            .map_err(|error| TierError::LocalRead { offset, error });
    }
    let manifest = read_manifest(store, partition)?;
    let segments = readable(manifest.as_ref(), offset, log_start_offset)?;
    let at = holding(segments, offset, log_start_offset)?;
    read_remote(store, partition, &segments[at], offset, max_bytes)
}

/// The partition's log start offset across tiers (Kafka's `logStartOffset`): the manifest's
/// log start when its segments reach the log's start, else the log's
/// ([`Manifest::partition_log_start`]). Reads the manifest from the store.
pub fn log_start_offset(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
) -> Result<i64, TierError> {
    let local = log.log_start_offset();
    Ok(read_manifest(store, partition)?.map_or(local, |m| m.partition_log_start(local)))
}

/// Finishes a DeleteRecords that a crash (or a failure) cut between its manifest and the
/// log's own step, raising the local log start to the manifest's, and answers the partition's
/// log start offset ([`log_start_offset`]). Cheap (one manifest read): run it when a tiered
/// partition opens, before it serves reads. [`super::reconcile`] does it too.
pub fn settle_log_start(
    log: &Log,
    store: &dyn RemoteStore,
    partition: &str,
) -> Result<i64, TierError> {
    let local = log.log_start_offset();
    let Some(m) = read_manifest(store, partition)? else {
        return Ok(local);
    };
    super::reconcile::raise_local_start(log, &m)?;
    Ok(m.partition_log_start(log.log_start_offset()))
}

/// The manifest's segments, for a read at `offset` below the local log start; an offset below
/// the partition's log start (a DeleteRecords raised it) is [`TierError::BelowLogStart`].
pub(super) fn readable(
    manifest: Option<&Manifest>,
    offset: i64,
    log_start_offset: i64,
) -> Result<&[RemoteSegment], TierError> {
    let Some(m) = manifest else {
        return Ok(&[]);
    };
    if offset < m.log_start_offset {
        return Err(TierError::BelowLogStart {
            offset,
            log_start_offset: m.partition_log_start(log_start_offset),
        });
    }
    Ok(&m.segments)
}

/// The index of the remote segment holding `offset` (below the local `log_start_offset`), or
/// why there is none.
pub(super) fn holding(
    segments: &[RemoteSegment],
    offset: i64,
    log_start_offset: i64,
) -> Result<usize, TierError> {
    segments
        .iter()
        .position(|s| s.base_offset <= offset && offset < s.end_offset)
        .ok_or_else(|| TierError::NotRemote {
            offset,
            log_start_offset,
            remote: segments
                .first()
                .zip(segments.last())
                .map(|(a, b)| (a.base_offset, b.end_offset)),
        })
}

/// Whole batches of the remote `segment` from the one holding `offset`, up to `max_bytes` (at
/// least one whole batch).
pub fn read_remote(
    store: &dyn RemoteStore,
    partition: &str,
    segment: &RemoteSegment,
    offset: i64,
    max_bytes: usize,
) -> Result<Bytes, TierError> {
    read_segment(store, partition, segment, offset, max_bytes).map(|r| r.bytes)
}

/// What a read of one remote segment returned, and where from.
pub(crate) struct RemoteRead {
    pub bytes: Bytes,
    /// The byte position of the first batch returned in the segment's `.log`.
    pub position: u64,
    /// One past the last offset returned (`offset` when nothing was).
    pub next_offset: i64,
    /// The segment's offset index, as fetched and checked.
    pub index: Vec<u8>,
}

pub(crate) fn read_segment(
    store: &dyn RemoteStore,
    partition: &str,
    segment: &RemoteSegment,
    offset: i64,
    max_bytes: usize,
) -> Result<RemoteRead, TierError> {
    let base = segment.base_offset;
    let key = |o: SegmentObject| o.key(partition, base, segment.end_offset, segment.upload_id);
    let index = get_checked(store, partition, segment, SegmentObject::OffsetIndex)?;
    let log_size = segment.object(SegmentObject::Log).size;
    // The last entry at or below the offset: its batch ends at or before it.
    let start = offset_index::decode(&index, base)
        .take_while(|e| e.offset <= offset)
        .last()
        .map_or(0, |e| u64::from(e.position));
    let mut reader = RangeReader::new(store, key(SegmentObject::Log), log_size, max_bytes);
    let mut out: Vec<u8> = Vec::new();
    let (mut first_at, mut next_offset) = (None, offset);
    let mut at = start;
    while at < log_size {
        let (bytes, last) = reader.batch(at, base, segment.end_offset)?;
        let size = bytes.len() as u64;
        if last >= offset {
            if !out.is_empty() && out.len() as u64 + size > max_bytes as u64 {
                break;
            }
            out.extend_from_slice(bytes);
            first_at.get_or_insert(at);
            next_offset = last + 1;
            if out.len() >= max_bytes {
                break;
            }
        }
        at += size;
    }
    Ok(RemoteRead {
        bytes: Bytes::from(out),
        position: first_at.unwrap_or(start),
        next_offset,
        index,
    })
}

/// The object `which` of the remote segment `s`, held to the size and CRC-32C the manifest
/// records: anything else is [`TierError::RemoteCorrupt`].
pub(super) fn get_checked(
    store: &dyn RemoteStore,
    partition: &str,
    s: &RemoteSegment,
    which: SegmentObject,
) -> Result<Vec<u8>, TierError> {
    let key = which.key(partition, s.base_offset, s.end_offset, s.upload_id);
    let bytes = store.get(&key).map_err(|error| TierError::Remote {
        step: format!("get {} of segment {}", which.name(), s.base_offset),
        error,
    })?;
    let (found, want) = (ObjectDigest::of(&bytes), s.object(which));
    if found != want {
        store.forget(&key);
        return Err(TierError::RemoteCorrupt {
            key,
            position: None,
            reason: format!(
                "{} bytes with CRC-32C {:08x}, but the manifest names {} bytes with {:08x}",
                found.size, found.crc32c, want.size, want.crc32c
            ),
        });
    }
    Ok(bytes)
}

/// Ranges of one object, fetched a window at a time.
pub(super) struct RangeReader<'a> {
    store: &'a dyn RemoteStore,
    key: String,
    size: u64,
    window: u64,
    buf: Vec<u8>,
    buf_start: u64,
}

impl<'a> RangeReader<'a> {
    /// A reader of the object `key` of `size` bytes, fetching at least `wanted` bytes (within
    /// 64 KiB to 8 MiB) per request.
    pub(super) fn new(
        store: &'a dyn RemoteStore,
        key: String,
        size: u64,
        wanted: usize,
    ) -> RangeReader<'a> {
        RangeReader {
            store,
            key,
            size,
            window: (wanted as u64).clamp(MIN_WINDOW, MAX_WINDOW),
            buf: Vec::new(),
            buf_start: 0,
        }
    }

    /// The whole batch at byte `at`, its CRC checked and its last offset (returned with it)
    /// inside `[base, end)`.
    pub(super) fn batch(
        &mut self,
        at: u64,
        base: i64,
        end: i64,
    ) -> Result<(&[u8], i64), TierError> {
        let header = self.bytes(at, format::HEADER_SIZE as u64)?;
        let length = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
        let size = 12 + u64::try_from(length).unwrap_or(0);
        if size < format::HEADER_SIZE as u64 {
            return Err(self.corrupt(at, format!("batchLength {length}: not a batch")));
        }
        let key = self.key.clone();
        let store = self.store;
        let corrupt = |reason: String| {
            store.forget(&key);
            TierError::RemoteCorrupt {
                key,
                position: Some(at),
                reason,
            }
        };
        let bytes = self.bytes(at, size)?;
        let last = match format::validate_stored_batch(bytes) {
            Ok(batch) => batch.last_offset(),
            Err(e) => return Err(corrupt(e.to_string())),
        };
        if !(base..end).contains(&last) {
            return Err(corrupt(format!(
                "a batch ending at offset {last} in a segment of offsets [{base}, {end})"
            )));
        }
        Ok((bytes, last))
    }

    /// The object's bytes at `at` are damaged: forgotten by a caching store, and the error.
    fn corrupt(&self, at: u64, reason: String) -> TierError {
        self.store.forget(&self.key);
        TierError::RemoteCorrupt {
            key: self.key.clone(),
            position: Some(at),
            reason,
        }
    }

    /// Bytes `[at, at + len)` of the object.
    fn bytes(&mut self, at: u64, len: u64) -> Result<&[u8], TierError> {
        if at + len > self.size {
            let reason = format!(
                "{len} bytes needed at byte {at}, past the object's {} bytes",
                self.size
            );
            return Err(self.corrupt(at, reason));
        }
        let held = self.buf_start + self.buf.len() as u64;
        if at < self.buf_start || at + len > held {
            // Up to a block boundary of the read cache, so the block a cached store keeps is
            // whole and the next read finds it (`CachedStore`).
            let end = (at + len.max(self.window))
                .next_multiple_of(CACHE_BLOCK_BYTES)
                .min(self.size);
            self.buf =
                self.store
                    .get_range(&self.key, at..end)
                    .map_err(|error| TierError::Remote {
                        step: format!("get_range {at}..{end} of {}", self.key),
                        error,
                    })?;
            self.buf_start = at;
            if self.buf.len() as u64 != end - at {
                let reason = format!("asked {} bytes, got {}", end - at, self.buf.len());
                return Err(self.corrupt(at, reason));
            }
        }
        let from = (at - self.buf_start) as usize;
        Ok(&self.buf[from..from + len as usize])
    }
}
