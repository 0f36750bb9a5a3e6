//! Transactions at the log layer (docs/design.md, "Transactions"; docs/kafka-format.md §7): the
//! COMMIT and ABORT markers the transaction coordinator writes, the first unstable offset and
//! the last stable offset, and the `.txnindex` entry of every aborted transaction.
//!
//! Where the state lives, and why it is safe to read without the append lock:
//! - the open transactions are in the producer table (under the append lock), which also
//!   decides what a marker completes and the index entry's last stable offset;
//! - what readers need of them, the first offset of the earliest open transaction and the
//!   completed transactions whose marker the high watermark has not passed yet (Kafka's
//!   `unreplicatedTxns`, which still hold the first unstable offset back), is mirrored in
//!   [`StableOffsets`] under its own small lock. The appender updates it before it publishes
//!   the new log end, and a reader takes the high watermark inside that lock, so the last stable
//!   offset a reader computes never covers a transaction the state does not show it: a
//!   transaction's first batch is recorded before any high watermark can pass it (the high
//!   watermark only moves to a log end read under the append lock).
//!
//! An aborted transaction's index entry is written before its marker: if it cannot be
//! written, the marker is refused with nothing changed; the entry is in memory for readers
//! before the marker's offset is published.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use super::{write_error, AppendError, AppendInfo, AppendState, InFlight, Log};
use crate::format::{self, batch, ControlType, TimestampType};
use crate::producer::{CompletedTxn, Logged, Marker};

/// How a transaction ended (Kafka's `TransactionResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnResult {
    /// Its records are read by read_committed consumers.
    Commit,
    /// Its records are skipped by read_committed consumers.
    Abort,
}

impl TxnResult {
    /// The control record type that says it.
    pub fn control_type(self) -> ControlType {
        match self {
            TxnResult::Commit => ControlType::Commit,
            TxnResult::Abort => ControlType::Abort,
        }
    }
}

/// A COMMIT or ABORT marker for one partition, as the transaction coordinator's
/// WriteTxnMarkers asks a broker to write it ([`Log::append_marker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    /// The producer whose transaction ends.
    pub producer_id: i64,
    /// The producer epoch the coordinator writes the marker with.
    pub producer_epoch: i16,
    /// The coordinator's epoch: a marker from a coordinator older than the one that wrote the
    /// producer's last marker is fenced.
    pub coordinator_epoch: i32,
    /// Commit or abort.
    pub result: TxnResult,
    /// The transaction version the coordinator runs (Kafka's `transaction.version`, 0 if it
    /// sends none). From 2 on (KIP-890) the coordinator bumps the producer's epoch at every end
    /// of a transaction, so the marker's epoch must be newer than the producer's; below 2 it
    /// must not be older.
    pub transaction_version: i8,
}

impl TxnMarker {
    /// A COMMIT marker under transaction version 0.
    pub fn commit(producer_id: i64, producer_epoch: i16, coordinator_epoch: i32) -> TxnMarker {
        TxnMarker {
            producer_id,
            producer_epoch,
            coordinator_epoch,
            result: TxnResult::Commit,
            transaction_version: 0,
        }
    }

    /// An ABORT marker under transaction version 0.
    pub fn abort(producer_id: i64, producer_epoch: i16, coordinator_epoch: i32) -> TxnMarker {
        TxnMarker {
            result: TxnResult::Abort,
            ..TxnMarker::commit(producer_id, producer_epoch, coordinator_epoch)
        }
    }

    /// The same marker under another transaction version.
    pub fn with_transaction_version(self, transaction_version: i8) -> TxnMarker {
        TxnMarker {
            transaction_version,
            ..self
        }
    }

    fn check(&self) -> Result<(), AppendError> {
        let invalid = |field, value| Err(AppendError::InvalidMarker { field, value });
        if self.producer_id < 0 {
            return invalid("producer_id", self.producer_id);
        }
        if self.producer_epoch < 0 {
            return invalid("producer_epoch", i64::from(self.producer_epoch));
        }
        if self.transaction_version < 0 {
            return invalid("transaction_version", i64::from(self.transaction_version));
        }
        Ok(())
    }
}

/// Which records a fetch returns (Kafka's `isolation.level`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum IsolationLevel {
    /// Everything below the high watermark, open and aborted transactions included.
    #[default]
    ReadUncommitted,
    /// Only below the last stable offset, with the aborted transactions to skip.
    ReadCommitted,
}

impl IsolationLevel {
    /// Kafka's name: `read_uncommitted` or `read_committed`.
    pub fn name(self) -> &'static str {
        match self {
            IsolationLevel::ReadUncommitted => "read_uncommitted",
            IsolationLevel::ReadCommitted => "read_committed",
        }
    }
}

/// What the first unstable offset is made of (docs/kafka-format.md §7.1), as plain data: the
/// earliest open transaction, and the completed transactions whose marker is not yet below the
/// high watermark, `(marker offset, first offset)` in marker order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Unstable {
    first_ongoing: Option<i64>,
    unreplicated: VecDeque<(i64, i64)>,
    /// The first offsets of `unreplicated`, counted, for their minimum.
    firsts: BTreeMap<i64, usize>,
}

impl Unstable {
    pub fn new(first_ongoing: Option<i64>, completed: &[CompletedTxn]) -> Unstable {
        let mut u = Unstable {
            first_ongoing,
            ..Unstable::default()
        };
        for c in completed {
            u.complete(c.marker_offset, c.first_offset);
        }
        u
    }

    pub fn set_first_ongoing(&mut self, first: Option<i64>) {
        self.first_ongoing = first;
    }

    /// A transaction from `first` ended with a marker at `marker` (the latest marker so far).
    pub fn complete(&mut self, marker: i64, first: i64) {
        self.unreplicated.push_back((marker, first));
        *self.firsts.entry(first).or_insert(0) += 1;
    }

    /// Forgets the completed transactions whose marker is below `high_watermark` (Kafka's
    /// `removeUnreplicatedTransactions`).
    pub fn prune(&mut self, high_watermark: i64) {
        while let Some(&(marker, first)) = self.unreplicated.front() {
            if marker >= high_watermark {
                break;
            }
            self.unreplicated.pop_front();
            if let Some(n) = self.firsts.get_mut(&first) {
                *n -= 1;
                if *n == 0 {
                    self.firsts.remove(&first);
                }
            }
        }
    }

    /// The first unstable offset: the earliest first offset of an open transaction or of one
    /// whose marker the high watermark has not passed, raised to the log start.
    pub fn first_unstable(&mut self, high_watermark: i64, log_start: i64) -> Option<i64> {
        self.prune(high_watermark);
        let unreplicated = self.firsts.keys().next().copied();
        let first = match (self.first_ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        first.map(|f| f.max(log_start))
    }

    /// Kafka's `lastStableOffset`: the first unstable offset when it is below the high
    /// watermark, else the high watermark.
    pub fn last_stable(&mut self, high_watermark: i64, log_start: i64) -> i64 {
        match self.first_unstable(high_watermark, log_start) {
            Some(f) if f < high_watermark => f,
            _ => high_watermark,
        }
    }
}

/// [`Unstable`] behind the lock readers share with the appender.
#[derive(Debug, Default)]
pub(crate) struct StableOffsets(Mutex<Unstable>);

impl StableOffsets {
    pub fn new(state: Unstable) -> StableOffsets {
        StableOffsets(Mutex::new(state))
    }

    /// Replaces the state (open, truncation).
    pub fn reset(&self, state: Unstable) {
        *self.0.lock() = state;
    }

    /// What the appender changed: the earliest open transaction, and a transaction completed.
    pub fn update(&self, first_ongoing: Option<i64>, completed: Option<&CompletedTxn>) {
        let mut u = self.0.lock();
        if let Some(c) = completed {
            u.complete(c.marker_offset, c.first_offset);
        }
        u.set_first_ongoing(first_ongoing);
    }

    /// The first unstable offset; `high_watermark` is read under the lock.
    pub fn first_unstable(&self, high_watermark: impl FnOnce() -> i64, log_start: i64) -> Option<i64> {
        let mut u = self.0.lock();
        let hw = high_watermark();
        u.first_unstable(hw, log_start)
    }

    /// The last stable offset; `high_watermark` is read under the lock.
    pub fn last_stable(&self, high_watermark: impl FnOnce() -> i64, log_start: i64) -> i64 {
        let mut u = self.0.lock();
        let hw = high_watermark();
        u.last_stable(hw, log_start)
    }
}

impl Log {
    /// Writes a COMMIT or ABORT marker (Kafka's WriteTxnMarkers for this partition): a control
    /// batch of one record, 78 bytes exactly as Kafka's coordinator has it written (attributes
    /// 0x30, no sequence, key `(0, type)`, value `(0, coordinator epoch)`, the append time as
    /// its timestamp), at the next offset. It ends the producer's open transaction; an aborted
    /// one gets its `.txnindex` entry in the active segment. A marker for a producer with no
    /// open transaction (or unknown) is written and completes nothing, as Kafka does.
    ///
    /// Refused, with nothing written: a stale producer epoch
    /// ([`crate::producer::ProducerError::InvalidProducerEpoch`], by the rule of the marker's
    /// transaction version), a coordinator epoch older than the one of the producer's last
    /// marker ([`crate::producer::ProducerError::CoordinatorFenced`]), a marker that names no
    /// producer ([`AppendError::InvalidMarker`]), and whatever refuses any append (a closed or
    /// read-only log, a full disk at a roll).
    pub fn append_marker(&self, marker: &TxnMarker) -> Result<AppendInfo, AppendError> {
        let outcome = self.append_marker_inner(marker);
        self.metrics.refused_if(&outcome);
        outcome
    }

    fn append_marker_inner(&self, marker: &TxnMarker) -> Result<AppendInfo, AppendError> {
        marker.check()?;
        let in_flight = InFlight::enter(&self.appends_in_flight);
        let now = self.env.clock.now_ms();
        let mut st = self.append.lock();
        self.check_writable(&st)?;
        let offset = self.log_end_offset.load(Ordering::Relaxed);
        let m = Marker {
            producer_id: marker.producer_id,
            epoch: marker.producer_epoch,
            coordinator_epoch: marker.coordinator_epoch,
            timestamp: now,
            offset,
            is_abort: marker.result == TxnResult::Abort,
        };
        st.producers
            .check_marker(&m, marker.transaction_version)?;
        // The clean checkpoint a clean open kept gives way before the first byte is written.
        self.mark_unclean(&mut st)?;
        let size = MARKER_SIZE;
        self.maybe_roll(&mut st, size, now, offset, now)?;
        self.make_room(&mut st, size)?;
        self.maybe_snapshot(&mut st, offset)?;
        let leader_epoch = st.leader_epoch;
        self.note_batch_epoch(&mut st, leader_epoch, offset);
        let bytes = format::end_txn_marker(
            offset,
            leader_epoch,
            m.producer_id,
            m.epoch,
            now,
            marker.result.control_type(),
            m.coordinator_epoch,
        );
        debug_assert_eq!(bytes.len(), size);
        let completed = st.producers.completion(&m);
        let wrote_entry = self.write_aborted_entry(&mut st, completed.as_ref())?;
        let (segment_base_offset, position) =
            self.write_marker(&mut st, &bytes, offset, now, wrote_entry)?;
        let completed = st
            .producers
            .apply(&Logged::Marker(m), offset, size, now);
        self.note_transactions(&mut st, completed.as_ref());
        self.publish_log_end(offset + 1);
        self.metrics.appended(1, size);
        self.prefault_ahead(&mut st);
        st.unflushed_messages += 1;
        let flush = self.flush_due(&st);
        drop(st);
        drop(in_flight);
        if flush {
            self.flush_to(offset + 1)
                .map_err(super::flush_to_append_error)?;
        }
        Ok(AppendInfo {
            first_offset: offset,
            last_offset: offset,
            segment_base_offset,
            position,
            append_time_ms: now,
        })
    }

    /// Writes a marker's bytes to the active segment; returns its base offset and the marker's
    /// position. A failure after its `.txnindex` entry was written (`wrote_entry`) leaves the
    /// log read-only.
    fn write_marker(
        &self,
        st: &mut AppendState,
        bytes: &[u8],
        offset: i64,
        now: i64,
        wrote_entry: bool,
    ) -> Result<(i64, u32), AppendError> {
        let log_append_time = self.config().message_timestamp_type == TimestampType::LogAppendTime;
        let writer = st.active.as_mut().ok_or(AppendError::Closed)?;
        let segment_base_offset = writer.base_offset();
        let written = writer.append(bytes, offset, now, |dst| {
            if log_append_time {
                batch::stamp_log_append_time(dst, now);
            }
        });
        let position = match written {
            Ok(p) => p,
            Err(error) => {
                let error = write_error(writer.segment(), error);
                if !wrote_entry {
                    return Err(AppendError::Io(error));
                }
                // The index names a marker that is not there: nothing more may be written (the
                // next open rebuilds the index of the unclean active segment).
                let cause = std::sync::Arc::new(error);
                st.failure = Some(std::sync::Arc::clone(&cause));
                return Err(AppendError::ReadOnly { cause });
            }
        };
        Ok((segment_base_offset, position))
    }

    /// Appends the `.txnindex` entry of a transaction a marker about to be written aborts, to
    /// the active segment's index (docs/kafka-format.md §2.1 step 5). Returns whether it wrote one.
    pub(super) fn write_aborted_entry(
        &self,
        st: &mut AppendState,
        completed: Option<&CompletedTxn>,
    ) -> Result<bool, AppendError> {
        let Some(c) = completed.filter(|c| c.is_abort) else {
            return Ok(false);
        };
        let writer = st.active.as_ref().ok_or(AppendError::Closed)?;
        let created = writer
            .segment()
            .txn_index()
            .append(self.env.fs.as_ref(), c.aborted_entry())?;
        // A new file's directory entry is made durable by the next flush, with the segment's.
        st.dir_dirty |= created;
        Ok(true)
    }

    /// Brings what readers see of the open transactions up to date with the producer table,
    /// before the log end that shows the change is published.
    pub(super) fn note_transactions(&self, st: &mut AppendState, completed: Option<&CompletedTxn>) {
        let first = st.producers.table().first_ongoing_offset();
        if completed.is_none() && first == st.first_ongoing {
            return;
        }
        self.txn.update(first, completed);
        st.first_ongoing = first;
    }

    /// The first offset of the earliest transaction still unstable (open, or completed by a
    /// marker the high watermark has not passed), at or above the log start; `None` when there
    /// is none (docs/kafka-format.md §7.1).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.txn
            .first_unstable(|| self.high_watermark(), self.log_start_offset())
    }

    /// The last stable offset: the first unstable offset, or the high watermark if that is
    /// lower or there is none. A read_committed fetch returns records below it only
    /// (docs/kafka-format.md §7.1, §7.4).
    pub fn last_stable_offset(&self) -> i64 {
        self.txn
            .last_stable(|| self.high_watermark(), self.log_start_offset())
    }
}

/// Bytes of a marker batch: the 61-byte header and its one 17-byte record.
const MARKER_SIZE: usize = 78;

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(first: i64, marker: i64) -> CompletedTxn {
        CompletedTxn {
            producer_id: 1,
            first_offset: first,
            marker_offset: marker,
            is_abort: false,
            last_stable_offset: marker + 1,
        }
    }

    #[test]
    fn the_lso_is_the_earliest_open_transaction_below_the_high_watermark() {
        let mut u = Unstable::new(Some(40), &[]);
        assert_eq!(u.last_stable(100, 0), 40);
        assert_eq!(u.last_stable(30, 0), 30, "never above the high watermark");
        u.set_first_ongoing(None);
        assert_eq!(u.last_stable(100, 0), 100);
        assert_eq!(u.first_unstable(100, 0), None);
    }

    #[test]
    fn a_completed_transaction_holds_the_lso_until_the_high_watermark_passes_its_marker() {
        // Kafka's unreplicatedTxns: the marker at 50 is not committed while HW <= 50.
        let mut u = Unstable::new(None, &[completed(40, 50)]);
        assert_eq!(u.last_stable(45, 0), 40);
        assert_eq!(u.last_stable(50, 0), 40);
        assert_eq!(u.first_unstable(50, 0), Some(40));
        assert_eq!(u.last_stable(51, 0), 51, "passed: forgotten");
        assert_eq!(u.last_stable(50, 0), 50, "and not brought back");
    }

    #[test]
    fn the_earliest_of_open_and_unreplicated_counts() {
        let mut u = Unstable::new(Some(60), &[completed(30, 55), completed(20, 58)]);
        assert_eq!(u.first_unstable(0, 0), Some(20));
        assert_eq!(u.first_unstable(56, 0), Some(20));
        assert_eq!(u.first_unstable(59, 0), Some(60));
        u.complete(70, 65);
        u.set_first_ongoing(None);
        assert_eq!(u.first_unstable(59, 0), Some(65));
    }

    #[test]
    fn a_first_unstable_offset_below_the_log_start_is_raised_to_it() {
        let mut u = Unstable::new(Some(10), &[]);
        assert_eq!(u.first_unstable(100, 25), Some(25));
        assert_eq!(u.last_stable(100, 25), 25);
    }

    #[test]
    fn equal_first_offsets_are_counted_not_merged() {
        let mut u = Unstable::new(None, &[completed(10, 20), completed(10, 30)]);
        assert_eq!(u.first_unstable(25, 0), Some(10), "the second still holds it");
        assert_eq!(u.first_unstable(31, 0), None);
    }

    #[test]
    fn the_producer_table_is_read_whole_in_producer_id_order() {
        use crate::format::BatchBuilder;
        use crate::producer::ProducerEntry;
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path(), crate::LogConfig::default()).expect("open");
        assert!(log.producers().is_empty());
        let batch = |pid: i64, epoch: i16, seq: i32, txn: bool, ts: i64| {
            let mut b = BatchBuilder::new()
                .producer(pid, epoch, seq)
                .transactional(txn);
            b.append(ts, None, Some(b"v"), &[]);
            b.append(ts + 5, None, Some(b"v"), &[]);
            b.build().expect("build")
        };
        log.append(&batch(9, 2, 0, false, 1_000)).expect("append");
        log.append(&batch(4, 0, 0, true, 2_000)).expect("append");
        log.append(&batch(4, 0, 2, true, 3_000)).expect("append");
        let all = log.producers();
        let ids: Vec<i64> = all.iter().map(ProducerEntry::producer_id).collect();
        assert_eq!(ids, [4, 9]);
        let (txn, plain) = (&all[0], &all[1]);
        assert_eq!((txn.epoch(), txn.last_seq(), txn.last_timestamp()), (0, 3, 3_005));
        assert_eq!(txn.current_txn_first_offset(), Some(2), "opened by its first batch");
        assert_eq!(txn.coordinator_epoch(), -1, "no marker yet");
        assert_eq!((plain.epoch(), plain.last_seq()), (2, 1));
        assert_eq!(plain.current_txn_first_offset(), None);
        log.append_marker(&TxnMarker::abort(4, 0, 7)).expect("marker");
        let after = log.producers();
        assert_eq!(after[0].current_txn_first_offset(), None, "ended by the marker");
        assert_eq!(after[0].coordinator_epoch(), 7);
        assert_eq!(after.len(), 2, "a marker adds no producer");
    }

    #[test]
    fn markers_with_bad_fields_are_refused_by_name() {
        let bad = |m: TxnMarker| match m.check() {
            Err(AppendError::InvalidMarker { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(bad(TxnMarker::commit(-1, 0, 0)), "producer_id");
        assert_eq!(bad(TxnMarker::abort(1, -1, 0)), "producer_epoch");
        assert_eq!(
            bad(TxnMarker::commit(1, 0, 0).with_transaction_version(-1)),
            "transaction_version"
        );
        assert!(TxnMarker::abort(1, 0, -1).check().is_ok());
    }
}
