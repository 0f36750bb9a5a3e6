//! Walking the batches of a `.log` file: where the valid data ends and why (docs/kafka-format.md
//! §8.3). Pure over bytes; recovery, verification and the dump tool all use it.

use crate::format::{self, BatchError, BatchFrame, RecordBatch};

use super::offset_index::relative_offset;

/// Bytes after the last valid batch that must be zero for the data to count as ending cleanly
/// (the preallocated, never-written part of a segment). A torn write leaves non-zero bytes
/// right after the last whole batch; looking further would cost a read of the whole
/// preallocated file on every unclean open.
pub const ZERO_CHECK_WINDOW: usize = 1 << 20;

/// What recovery and index rebuilds need to know of each valid batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    pub position: usize,
    pub size: usize,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    /// The leader epoch stamped on it (-1 for none), from which recovery rebuilds the
    /// leader-epoch cache.
    pub partition_leader_epoch: i32,
    /// A producer's control batch (a transaction marker): a segment without one needs no
    /// `.txnindex`.
    pub is_marker: bool,
}

/// Why a batch in a segment is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchProblem {
    /// The bytes are not a valid batch.
    #[error("{0}")]
    Batch(#[from] BatchError),
    /// The batch's offsets do not start above the previous batch's.
    #[error("base offset {base_offset} does not follow the previous last offset {previous_last}")]
    OffsetNotIncreasing {
        /// The batch's base offset.
        base_offset: i64,
        /// The previous batch's last offset.
        previous_last: i64,
    },
    /// The batch's offsets are below the segment's base offset, or too far above it for a
    /// relative offset (int32) in its indexes.
    #[error("offsets {base_offset}..={last_offset} are outside the int32 range of segment {segment_base}")]
    OffsetOutOfSegment {
        /// The batch's base offset.
        base_offset: i64,
        /// The batch's last offset.
        last_offset: i64,
        /// The segment's base offset.
        segment_base: i64,
    },
    /// The batch's offsets run into the next segment's.
    #[error(
        "last offset {last_offset} is not below the next segment's base offset {next_segment_base}"
    )]
    OffsetBeyondNextSegment {
        /// The batch's last offset.
        last_offset: i64,
        /// The next segment's base offset.
        next_segment_base: i64,
    },
    /// The batch's offsets run into the next batch's, which follows the batch before it: this
    /// batch's header (base offset or last offset delta) is the damaged one.
    #[error("offsets {base_offset}..={last_offset} overlap the next batch at {next_base_offset}")]
    OffsetsOverlapNext {
        /// The batch's base offset.
        base_offset: i64,
        /// The batch's last offset.
        last_offset: i64,
        /// The next batch's base offset.
        next_base_offset: i64,
    },
    /// A gap in offsets where the log is known to be dense.
    #[error("base offset {base_offset} leaves a gap after {expected}, where the log is dense")]
    OffsetGap {
        /// The offset that should have come next.
        expected: i64,
        /// The batch's base offset.
        base_offset: i64,
    },
    /// The batches skip offsets the segment is known to hold (from the checkpoint's record or
    /// validation): a damaged header claims offsets that are not its own.
    #[error("the batches skip offset {offset}, which the segment holds (up to {next_offset})")]
    OffsetsSkipped {
        /// The first offset skipped.
        offset: i64,
        /// The last offset + 1 the segment is known to hold.
        next_offset: i64,
    },
}

impl BatchProblem {
    /// A stable snake_case name for the kind of problem.
    pub fn kind(&self) -> &'static str {
        match self {
            BatchProblem::Batch(_) => "invalid_batch",
            BatchProblem::OffsetNotIncreasing { .. } => "offset_not_increasing",
            BatchProblem::OffsetOutOfSegment { .. } => "offset_out_of_segment",
            BatchProblem::OffsetBeyondNextSegment { .. } => "offset_beyond_next_segment",
            BatchProblem::OffsetsSkipped { .. } => "offsets_skipped",
            BatchProblem::OffsetsOverlapNext { .. } => "offsets_overlap_next",
            BatchProblem::OffsetGap { .. } => "offset_gap",
        }
    }
}

/// The offsets a batch of a segment must respect: above the previous batch's, at or above the
/// segment's base offset within its int32 range, and below the next segment's base. None of
/// them is covered by the CRC, so each is checked wherever a batch header is believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetBounds {
    pub segment_base: i64,
    /// The base offset of the next segment, if there is one.
    pub next_segment_base: Option<i64>,
    /// From this offset on the log is known to be dense (the checkpoint's `dense_from`): a
    /// batch starting past where the previous one ended, at or after it, is damage (a flipped
    /// base offset), not a gap. `None` where gaps are legal everywhere (a Kafka directory).
    pub dense_from: Option<i64>,
}

impl OffsetBounds {
    /// Checks one batch's offsets after the previous batch's last offset.
    pub fn check(
        &self,
        base_offset: i64,
        last_offset: i64,
        previous_last: Option<i64>,
    ) -> Result<(), BatchProblem> {
        if let Some(previous_last) = previous_last.filter(|&p| base_offset <= p) {
            return Err(BatchProblem::OffsetNotIncreasing {
                base_offset,
                previous_last,
            });
        }
        if base_offset < self.segment_base
            || last_offset < base_offset
            || relative_offset(self.segment_base, last_offset).is_none()
        {
            return Err(BatchProblem::OffsetOutOfSegment {
                base_offset,
                last_offset,
                segment_base: self.segment_base,
            });
        }
        if let Some(next) = self.next_segment_base.filter(|&n| last_offset >= n) {
            return Err(BatchProblem::OffsetBeyondNextSegment {
                last_offset,
                next_segment_base: next,
            });
        }
        let expected = previous_last.map_or(self.segment_base, |p| p + 1);
        if let Some(dense_from) = self.dense_from {
            if base_offset > expected && base_offset > dense_from {
                return Err(BatchProblem::OffsetGap {
                    expected,
                    base_offset,
                });
            }
        }
        Ok(())
    }
}

/// Where and why a scan stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStop {
    /// The data ends: nothing follows, or only zeros (preallocated space).
    End,
    /// The last batch runs past the end of the bytes: a torn write.
    Torn {
        position: usize,
        needed: usize,
        available: usize,
    },
    /// Bytes that are not a valid batch.
    Invalid {
        position: usize,
        problem: BatchProblem,
    },
}

impl ScanStop {
    pub fn is_end(&self) -> bool {
        matches!(self, ScanStop::End)
    }
    pub fn position(&self) -> Option<usize> {
        match self {
            ScanStop::End => None,
            ScanStop::Torn { position, .. } | ScanStop::Invalid { position, .. } => Some(*position),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanResult {
    /// Bytes of whole, valid batches from the start.
    pub valid_len: usize,
    pub batches: usize,
    pub last_offset: Option<i64>,
    pub max_timestamp: Option<i64>,
    pub stop: ScanStop,
}

/// Validates every batch of `bytes` (frame, CRC, codec, offsets as [`OffsetBounds`] says) and
/// calls `on_batch` for each valid one, in order.
pub fn scan(
    bytes: &[u8],
    bounds: OffsetBounds,
    previous_last_offset: Option<i64>,
    on_batch: &mut dyn FnMut(&BatchInfo),
) -> ScanResult {
    walk(bytes, bounds, previous_last_offset, true, on_batch)
}

/// Like [`scan`], but without the CRC and record checks: only frames and offsets. For bytes
/// whose content is trusted (durable and validated before) when only their layout is needed,
/// such as an index rebuild; the offsets, which no checksum covers, are checked all the same.
pub fn walk_frames(
    bytes: &[u8],
    bounds: OffsetBounds,
    previous_last_offset: Option<i64>,
    on_batch: &mut dyn FnMut(&BatchInfo),
) -> ScanResult {
    walk(bytes, bounds, previous_last_offset, false, on_batch)
}

fn walk(
    bytes: &[u8],
    bounds: OffsetBounds,
    previous_last_offset: Option<i64>,
    validate: bool,
    on_batch: &mut dyn FnMut(&BatchInfo),
) -> ScanResult {
    let mut pos = 0;
    let mut batches = 0;
    let mut last = previous_last_offset;
    // The last batch accepted, held back one step: when the batch after it does not follow it
    // but would follow the one before it, its own offsets are what a flipped bit changed (no
    // checksum covers the base offset), and it is the damage.
    let mut held: Option<(BatchInfo, Option<i64>)> = None;
    let mut max_timestamp: Option<i64> = None;
    let stop = loop {
        if pos >= bytes.len() {
            break ScanStop::End;
        }
        let rest = &bytes[pos..];
        let batch = match check_batch(rest, bounds, last, validate) {
            Ok(batch) => batch,
            Err(Halt::Invalid(BatchProblem::OffsetNotIncreasing {
                base_offset,
                previous_last,
            })) if held.is_some_and(|(h, before)| {
                base_offset > before.unwrap_or(bounds.segment_base - 1)
                    && h.position + h.size == pos
            }) =>
            {
                let (h, before) = held.take().unwrap_or_else(|| unreachable!());
                last = before;
                batches -= 1;
                pos = h.position;
                break ScanStop::Invalid {
                    position: pos,
                    problem: BatchProblem::OffsetsOverlapNext {
                        base_offset: h.base_offset,
                        last_offset: previous_last,
                        next_base_offset: base_offset,
                    },
                };
            }
            Err(stop) => break classify(rest, pos, stop),
        };
        let info = BatchInfo {
            position: pos,
            size: batch.size(),
            base_offset: batch.base_offset(),
            last_offset: batch.last_offset(),
            max_timestamp: batch.max_timestamp(),
            partition_leader_epoch: batch.partition_leader_epoch(),
            is_marker: batch.is_control() && batch.producer_id() >= 0,
        };
        if let Some((h, _)) = held.replace((info, last)) {
            on_batch(&h);
            max_timestamp = Some(max_timestamp.map_or(h.max_timestamp, |m| m.max(h.max_timestamp)));
        }
        batches += 1;
        last = Some(info.last_offset);
        pos += info.size;
    };
    if let Some((h, _)) = held {
        on_batch(&h);
        max_timestamp = Some(max_timestamp.map_or(h.max_timestamp, |m| m.max(h.max_timestamp)));
    }
    let last_offset = if batches > 0 { last } else { None };
    ScanResult {
        valid_len: pos,
        batches,
        last_offset,
        max_timestamp,
        stop,
    }
}

enum Halt {
    Incomplete { needed: usize, available: usize },
    Invalid(BatchProblem),
}

fn check_batch(
    rest: &[u8],
    bounds: OffsetBounds,
    previous_last: Option<i64>,
    validate: bool,
) -> Result<RecordBatch<'_>, Halt> {
    match format::frame(rest) {
        Ok(BatchFrame::Complete { .. }) => {}
        Ok(BatchFrame::Incomplete { needed, available }) => {
            return Err(Halt::Incomplete { needed, available })
        }
        Err(e) => return Err(Halt::Invalid(e.into())),
    }
    let batch = if validate {
        format::validate_stored_batch(rest)
    } else {
        RecordBatch::parse(rest)
    }
    .map_err(|e| Halt::Invalid(e.into()))?;
    bounds
        .check(batch.base_offset(), batch.last_offset(), previous_last)
        .map_err(Halt::Invalid)?;
    Ok(batch)
}

fn classify(rest: &[u8], position: usize, halt: Halt) -> ScanStop {
    let window = &rest[..rest.len().min(ZERO_CHECK_WINDOW)];
    if window.iter().all(|&b| b == 0) {
        return ScanStop::End;
    }
    match halt {
        Halt::Incomplete { needed, available } => ScanStop::Torn {
            position,
            needed,
            available,
        },
        Halt::Invalid(problem) => ScanStop::Invalid { position, problem },
    }
}
