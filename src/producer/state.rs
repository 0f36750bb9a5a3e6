//! The producer-state table and its rules, as pure functions over plain data
//! (docs/design.md, "Producer state"). The log calls
//! [`ProducerStateTable::check_client`] before writing a client batch and
//! [`ProducerStateTable::record`] after, both under its append lock; replication and replay call
//! [`ProducerStateTable::record_replicated`].

use std::collections::{BTreeSet, HashMap};

use super::config::{ProducerStateConfigError, ProducerLimitPolicy, ProducerStateConfig};
use super::entry::{ProducerEntry, NO_EPOCH};
use super::error::ProducerError;
use super::txn::{CompletedTxn, Logged, Marker, EPOCH_BUMPING_TRANSACTION_VERSION};
use super::window::BatchMetadata;
use crate::format::sequence;
use crate::format::RecordBatch;

/// What the producer-state rules need of a batch: its header fields, nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
    /// lastOffsetDelta: the batch spans offsets `[first, first + offset_delta]`.
    pub offset_delta: i32,
    pub max_timestamp: i64,
    pub is_transactional: bool,
    pub is_control: bool,
}

impl IncomingBatch {
    pub fn from_batch(batch: &RecordBatch<'_>) -> IncomingBatch {
        IncomingBatch {
            producer_id: batch.producer_id(),
            epoch: batch.producer_epoch(),
            first_seq: batch.base_sequence(),
            last_seq: batch.last_sequence(),
            offset_delta: batch.last_offset_delta(),
            max_timestamp: batch.max_timestamp(),
            is_transactional: batch.is_transactional(),
            is_control: batch.is_control(),
        }
    }

    /// Whether the batch takes part in producer state (producer id ≥ 0, docs/design.md, "Producer
    /// state").
    pub fn is_idempotent(&self) -> bool {
        self.producer_id >= 0
    }
}

/// What to do with a client batch that passed the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Write it, then [`ProducerStateTable::record`] it.
    Append,
    /// A retry of a retained batch: write nothing and answer with these original offsets.
    Duplicate(BatchMetadata),
}

/// Every known idempotent producer of one partition.
///
/// Eviction bookkeeping: when a limit with [`ProducerLimitPolicy::EvictLongestIdle`] is set,
/// `idle` orders the producers *without an open transaction* by `(last_append_ms, pid)`, so the
/// victim is the first element: O(log n) per append, and a producer in a transaction can never
/// be picked. Without such a limit the set stays empty and costs nothing.
///
/// Open transactions (Kafka's `ongoingTxns`): `ongoing` orders them by `(first offset, pid)`,
/// kept in step with the entries, so the first unstable offset and the last stable offset of an
/// aborted transaction's index entry are O(log n).
#[derive(Debug, Clone)]
pub struct ProducerStateTable {
    config: ProducerStateConfig,
    /// Keyed by producer id with foldhash: several times faster than SipHash for integer
    /// keys (append path, snapshot load), and still seeded per table, so client-chosen ids
    /// cannot be aimed at one bucket.
    producers: HashMap<i64, ProducerEntry, foldhash::fast::RandomState>,
    idle: BTreeSet<(i64, i64)>,
    ongoing: BTreeSet<(i64, i64)>,
}

/// What the bookkeeping needs of an entry: its append wall clock and its open transaction.
type IdleKey = (i64, Option<i64>);

fn idle_key(e: &ProducerEntry) -> IdleKey {
    (e.last_append_ms(), e.current_txn_first_offset())
}

impl ProducerStateTable {
    pub fn new(config: ProducerStateConfig) -> Result<ProducerStateTable, ProducerStateConfigError> {
        config.validate()?;
        Ok(ProducerStateTable {
            config,
            producers: HashMap::default(),
            idle: BTreeSet::new(),
            ongoing: BTreeSet::new(),
        })
    }

    pub fn config(&self) -> &ProducerStateConfig {
        &self.config
    }
    pub fn len(&self) -> usize {
        self.producers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }
    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &ProducerEntry> + '_ {
        self.producers.values()
    }
    pub fn clear(&mut self) {
        self.producers.clear();
        self.idle.clear();
        self.ongoing.clear();
    }

    /// The first offset of the earliest open transaction (what the first unstable offset is
    /// made of, docs/design.md, "Transactions").
    pub fn first_ongoing_offset(&self) -> Option<i64> {
        self.ongoing.first().map(|(first, _)| *first)
    }

    /// The open transactions, `(first offset, producer id)`, earliest first.
    pub fn ongoing(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ongoing.iter().copied()
    }

    fn tracks_idle(&self) -> bool {
        self.config.max_producers.is_some()
            && self.config.limit_policy == ProducerLimitPolicy::EvictLongestIdle
    }

    /// Kafka's checks for a client data batch, in Kafka's order (docs/design.md, "Producer state").
    /// Pure: nothing changes.
    pub fn check_client(&self, b: &IncomingBatch) -> Result<Decision, ProducerError> {
        if !b.is_idempotent() {
            return Ok(Decision::Append);
        }
        let Some(entry) = self.producers.get(&b.producer_id) else {
            // An unknown producer is accepted at any sequence (KIP-360); only the limit applies.
            if let (Some(limit), ProducerLimitPolicy::Reject) =
                (self.config.max_producers, self.config.limit_policy)
            {
                if self.producers.len() >= limit {
                    return Err(ProducerError::TooManyProducers {
                        producer_id: b.producer_id,
                        limit,
                    });
                }
            }
            return Ok(Decision::Append);
        };
        check_entry(entry, b)
    }

    /// Records a client batch written at `first_offset` (after [`Self::check_client`] said
    /// [`Decision::Append`]). Returns the producer evicted to stay within `max_producers`.
    pub fn record(
        &mut self,
        b: &IncomingBatch,
        first_offset: i64,
        append_wall_ms: i64,
    ) -> Option<i64> {
        self.record_replicated(b, first_offset, append_wall_ms)
    }

    /// Records a data batch without any check: replication and log replay, where the batch is
    /// already in the log and the state must follow it. Never refused, even by
    /// [`ProducerLimitPolicy::Reject`]. A transactional batch opens its producer's transaction
    /// at `first_offset` if none is open; a non-transactional one while a transaction is open
    /// (which a client append refuses) leaves it open. Markers go through [`Self::apply`] or
    /// [`Self::record_marker`].
    pub fn record_replicated(
        &mut self,
        b: &IncomingBatch,
        first_offset: i64,
        append_wall_ms: i64,
    ) -> Option<i64> {
        if !b.is_idempotent() {
            return None;
        }
        debug_assert!(!b.is_control, "a control batch is a marker or empty: `apply` it");
        let window = self.config.window;
        self.update(b.producer_id, |entry| {
            entry.set_epoch(b.epoch);
            entry.push_batch(
                BatchMetadata {
                    last_seq: b.last_seq,
                    last_offset: first_offset.wrapping_add(i64::from(b.offset_delta)),
                    offset_delta: b.offset_delta,
                    timestamp: b.max_timestamp,
                },
                window,
            );
            entry.set_last_timestamp(b.max_timestamp);
            entry.set_last_append_ms(append_wall_ms);
            if b.is_transactional && !entry.has_open_txn() {
                entry.set_txn_first_offset(Some(first_offset));
            }
        });
        self.enforce_limit(b.producer_id)
    }

    /// Applies a batch read from the log (replay, replication) without checks, as Kafka's
    /// REPLICATION origin does: stale epochs and coordinator epochs are taken as they are.
    /// Returns the transaction a marker completed.
    pub fn apply(
        &mut self,
        logged: &Logged,
        first_offset: i64,
        append_wall_ms: i64,
    ) -> Option<CompletedTxn> {
        match logged {
            Logged::Data(b) => {
                self.record_replicated(b, first_offset, append_wall_ms);
                None
            }
            Logged::Marker(m) => self.record_marker(m, append_wall_ms),
            Logged::Empty { producer_id } => {
                // Kafka registers the producer and changes nothing else.
                self.update(*producer_id, |_| {});
                self.enforce_limit(*producer_id);
                None
            }
        }
    }

    /// The checks for a COMMIT/ABORT marker from the coordinator, under its transaction
    /// version (Kafka's `appendEndTxnMarker` for the COORDINATOR origin): the producer epoch,
    /// then the coordinator epoch. Pure: nothing changes.
    ///
    /// Epoch: below version 2 a marker with an older epoch than the producer's is fenced. From
    /// version 2 on (the coordinator bumps the epoch at every end) the marker's epoch must be
    /// newer, except for a marker with the producer's epoch when no transaction is open (or
    /// the epoch is at its maximum): that is a retry of the marker just written, which Kafka
    /// writes again. A marker for a producer the table does not know is accepted.
    pub fn check_marker(&self, m: &Marker, transaction_version: i8) -> Result<(), ProducerError> {
        let Some(entry) = self.producers.get(&m.producer_id) else {
            return Ok(());
        };
        let current = entry.epoch();
        let stale = if transaction_version >= EPOCH_BUMPING_TRANSACTION_VERSION {
            let retry = m.epoch == current && (!entry.has_open_txn() || m.epoch == i16::MAX);
            m.epoch <= current && !retry
        } else {
            m.epoch < current
        };
        if stale {
            return Err(ProducerError::InvalidProducerEpoch {
                producer_id: m.producer_id,
                current,
                got: m.epoch,
            });
        }
        if entry.coordinator_epoch() > m.coordinator_epoch {
            return Err(ProducerError::CoordinatorFenced {
                producer_id: m.producer_id,
                current: entry.coordinator_epoch(),
                got: m.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Applies a written marker: epoch (clearing the window if it changed), coordinator epoch,
    /// last timestamp, and the end of the open transaction, which is returned with the last
    /// stable offset its index entry records: the first offset of the earliest transaction of
    /// another producer still open, else the marker's offset + 1. A marker for a producer
    /// without an open transaction completes nothing (Kafka writes no index entry for it).
    pub fn record_marker(&mut self, m: &Marker, append_wall_ms: i64) -> Option<CompletedTxn> {
        if m.producer_id < 0 {
            return None;
        }
        let completed = self.completion(m);
        self.update(m.producer_id, |entry| {
            entry.set_epoch(m.epoch);
            entry.set_coordinator_epoch(m.coordinator_epoch);
            entry.set_last_timestamp(m.timestamp);
            entry.set_last_append_ms(append_wall_ms);
            entry.set_txn_first_offset(None);
        });
        self.enforce_limit(m.producer_id);
        completed
    }

    /// The transaction `m` completes, if its producer has one open, as [`Self::record_marker`]
    /// returns it. Pure.
    pub fn completion(&self, m: &Marker) -> Option<CompletedTxn> {
        let first_offset = self.get(m.producer_id)?.current_txn_first_offset()?;
        Some(CompletedTxn {
            producer_id: m.producer_id,
            first_offset,
            marker_offset: m.offset,
            is_abort: m.is_abort,
            last_stable_offset: self
                .ongoing
                .iter()
                .find(|(_, pid)| *pid != m.producer_id)
                .map_or(m.offset + 1, |(first, _)| *first),
        })
    }

    /// Forgets every producer without an open transaction whose last append (wall clock) is
    /// at least `expiration_ms` before `now_ms`. Record timestamps play no part: client clocks
    /// can be skewed (docs/design.md, "Producer state"). Returns how many were removed.
    pub fn expire(&mut self, now_ms: i64) -> usize {
        let before = self.producers.len();
        let expiration = self.config.expiration_ms;
        let tracks = self.tracks_idle();
        let idle = &mut self.idle;
        self.producers.retain(|pid, e| {
            let keep = e.has_open_txn() || now_ms.saturating_sub(e.last_append_ms()) < expiration;
            if !keep && tracks {
                idle.remove(&(e.last_append_ms(), *pid));
            }
            keep
        });
        before - self.producers.len()
    }

    /// Replaces the table's content with restored entries (a loaded snapshot). Windows longer
    /// than the configured one keep their newest batches; a repeated producer id keeps the
    /// later entry; the limit is applied as after appends.
    pub fn load(&mut self, entries: impl IntoIterator<Item = ProducerEntry>) {
        self.clear();
        let entries = entries.into_iter();
        self.producers.reserve(entries.size_hint().0);
        for mut entry in entries {
            entry.batches.truncate_to_newest(self.config.window);
            let pid = entry.producer_id();
            let after = idle_key(&entry);
            let before = self.producers.insert(pid, entry).map(|old| idle_key(&old));
            self.reindex(pid, before, Some(after));
        }
        while self.evict_one(None).is_some() {}
    }

    /// Runs `f` on the entry of `pid` (created if new) and keeps the idle index in step.
    fn update(&mut self, pid: i64, f: impl FnOnce(&mut ProducerEntry)) {
        let (before, after) = match self.producers.get_mut(&pid) {
            Some(entry) => {
                let before = idle_key(entry);
                f(entry);
                (Some(before), idle_key(entry))
            }
            None => {
                let mut entry = ProducerEntry::new(pid);
                f(&mut entry);
                let after = idle_key(&entry);
                self.producers.insert(pid, entry);
                (None, after)
            }
        };
        self.reindex(pid, before, Some(after));
    }

    /// Keeps the idle and ongoing indexes in step with an entry that changed from `before` to
    /// `after` (`None`: absent).
    fn reindex(&mut self, pid: i64, before: Option<IdleKey>, after: Option<IdleKey>) {
        if before == after {
            return;
        }
        let txn = |k: Option<IdleKey>| k.and_then(|(_, txn)| txn);
        if txn(before) != txn(after) {
            if let Some(first) = txn(before) {
                self.ongoing.remove(&(first, pid));
            }
            if let Some(first) = txn(after) {
                self.ongoing.insert((first, pid));
            }
        }
        if !self.tracks_idle() {
            return;
        }
        if let Some((ms, None)) = before {
            self.idle.remove(&(ms, pid));
        }
        if let Some((ms, None)) = after {
            self.idle.insert((ms, pid));
        }
    }

    fn enforce_limit(&mut self, just_appended: i64) -> Option<i64> {
        self.evict_one(Some(just_appended))
    }

    /// Evicts the longest-idle producer without an open transaction (other than `keep`) if the
    /// table is over its limit under [`ProducerLimitPolicy::EvictLongestIdle`].
    fn evict_one(&mut self, keep: Option<i64>) -> Option<i64> {
        let limit = self.config.max_producers?;
        if !self.tracks_idle() || self.producers.len() <= limit {
            return None;
        }
        let victim = *self.idle.iter().find(|(_, pid)| Some(*pid) != keep)?;
        self.idle.remove(&victim);
        self.producers.remove(&victim.1);
        Some(victim.1)
    }
}

/// The rules for a known producer's client data batch, in Kafka's order (its steps 1, 3,
/// 4 and 6).
fn check_entry(entry: &ProducerEntry, b: &IncomingBatch) -> Result<Decision, ProducerError> {
    let pid = b.producer_id;
    // 1. A retry of a retained batch of the same epoch: answer with the original offsets.
    if b.epoch == entry.epoch() {
        if let Some(original) = entry.find_batch(b.first_seq, b.last_seq) {
            return Ok(Decision::Duplicate(*original));
        }
    }
    // 3. A fenced (older) epoch.
    if b.epoch < entry.epoch() {
        return Err(ProducerError::InvalidProducerEpoch {
            producer_id: pid,
            current: entry.epoch(),
            got: b.epoch,
        });
    }
    // 4. Sequence: a new epoch starts at 0; the same epoch continues from the last sequence.
    //    A producer whose epoch is unknown (-1) is accepted at any sequence.
    if entry.epoch() != NO_EPOCH {
        if b.epoch != entry.epoch() {
            if b.first_seq != 0 {
                return Err(ProducerError::OutOfOrderSequence {
                    producer_id: pid,
                    expected: 0,
                    got: b.first_seq,
                });
            }
        } else if !sequence::in_sequence(entry.last_seq(), b.first_seq) {
            return Err(ProducerError::OutOfOrderSequence {
                producer_id: pid,
                expected: next_seq(entry.last_seq()),
                got: b.first_seq,
            });
        }
    }
    // 6. A transaction is open: only transactional batches may join it.
    if let Some(txn_first_offset) = entry.current_txn_first_offset() {
        if !b.is_transactional {
            return Err(ProducerError::InvalidTxnState {
                producer_id: pid,
                txn_first_offset,
            });
        }
    }
    Ok(Decision::Append)
}

/// The sequence expected after `last` (wrapping to 0 after i32::MAX).
fn next_seq(last: i32) -> i32 {
    if last == i32::MAX {
        0
    } else {
        last + 1
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
