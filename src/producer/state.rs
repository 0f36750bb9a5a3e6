//! The producer-state table and its rules, as pure functions over plain data
//! (docs/design.md, "Producer state"). The log calls
//! [`ProducerStateTable::check_client`] before writing a client batch and
//! [`ProducerStateTable::record`] after, both under its append lock; replication and replay call
//! [`ProducerStateTable::record_replicated`].

use std::collections::{BTreeSet, HashMap};

use super::config::{ConfigError, ProducerLimitPolicy, ProducerStateConfig};
use super::entry::{ProducerEntry, NO_EPOCH};
use super::error::ProducerError;
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

/// A COMMIT or ABORT marker as the producer state sees it (its coordinator epoch comes from
/// the marker record's value, docs/format.md, "Control batches and transaction markers").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: i64,
    pub epoch: i16,
    pub coordinator_epoch: i32,
    /// The marker record's timestamp.
    pub timestamp: i64,
    /// The offset the marker was written at.
    pub offset: i64,
    pub is_abort: bool,
}

/// A transaction closed by a marker (Kafka's `CompletedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub marker_offset: i64,
    pub is_abort: bool,
}

/// Every known idempotent producer of one partition.
///
/// Eviction bookkeeping: when a limit with [`ProducerLimitPolicy::EvictLongestIdle`] is set,
/// `idle` orders the producers *without an open transaction* by `(last_append_ms, pid)`, so the
/// victim is the first element: O(log n) per append, and a producer in a transaction can never
/// be picked. Without such a limit the set stays empty and costs nothing.
#[derive(Debug, Clone)]
pub struct ProducerStateTable {
    config: ProducerStateConfig,
    /// Keyed by producer id with foldhash: several times faster than SipHash for integer
    /// keys (append path, snapshot load), and still seeded per table, so client-chosen ids
    /// cannot be aimed at one bucket.
    producers: HashMap<i64, ProducerEntry, foldhash::fast::RandomState>,
    idle: BTreeSet<(i64, i64)>,
}

/// What eviction bookkeeping needs of an entry: its append wall clock and whether a
/// transaction is open.
type IdleKey = (i64, bool);

fn idle_key(e: &ProducerEntry) -> IdleKey {
    (e.last_append_ms(), e.has_open_txn())
}

impl ProducerStateTable {
    pub fn new(config: ProducerStateConfig) -> Result<ProducerStateTable, ConfigError> {
        config.validate()?;
        Ok(ProducerStateTable {
            config,
            producers: HashMap::default(),
            idle: BTreeSet::new(),
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

    /// Records a batch without any check: replication and log replay, where the batch is
    /// already in the log and the state must follow it. Never refused, even by
    /// [`ProducerLimitPolicy::Reject`]. A control batch given here is applied as a marker that
    /// keeps the coordinator epoch; use [`Self::record_marker`] when the marker was decoded.
    pub fn record_replicated(
        &mut self,
        b: &IncomingBatch,
        first_offset: i64,
        append_wall_ms: i64,
    ) -> Option<i64> {
        if !b.is_idempotent() {
            return None;
        }
        if b.is_control {
            let coordinator_epoch = self
                .get(b.producer_id)
                .map_or(-1, |e| e.coordinator_epoch());
            self.record_marker(
                &TxnMarker {
                    producer_id: b.producer_id,
                    epoch: b.epoch,
                    coordinator_epoch,
                    timestamp: b.max_timestamp,
                    offset: first_offset,
                    is_abort: false,
                },
                append_wall_ms,
            );
            return self.enforce_limit(b.producer_id);
        }
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

    /// The checks for a COMMIT/ABORT marker from the coordinator (Kafka's rules for a control
    /// batch; docs/design.md, "Producer state").
    pub fn check_marker(&self, m: &TxnMarker) -> Result<(), ProducerError> {
        let Some(entry) = self.producers.get(&m.producer_id) else {
            return Ok(());
        };
        if m.epoch < entry.epoch() {
            return Err(ProducerError::InvalidProducerEpoch {
                producer_id: m.producer_id,
                current: entry.epoch(),
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
    /// last timestamp, and the end of the open transaction, which is returned.
    pub fn record_marker(&mut self, m: &TxnMarker, append_wall_ms: i64) -> Option<CompletedTxn> {
        if m.producer_id < 0 {
            return None;
        }
        let mut completed = None;
        self.update(m.producer_id, |entry| {
            completed = entry
                .current_txn_first_offset()
                .map(|first_offset| CompletedTxn {
                    producer_id: m.producer_id,
                    first_offset,
                    marker_offset: m.offset,
                    is_abort: m.is_abort,
                });
            entry.set_epoch(m.epoch);
            entry.set_coordinator_epoch(m.coordinator_epoch);
            entry.set_last_timestamp(m.timestamp);
            entry.set_last_append_ms(append_wall_ms);
            entry.set_txn_first_offset(None);
        });
        self.enforce_limit(m.producer_id);
        completed
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

    fn reindex(&mut self, pid: i64, before: Option<IdleKey>, after: Option<IdleKey>) {
        if !self.tracks_idle() || before == after {
            return;
        }
        if let Some((ms, false)) = before {
            self.idle.remove(&(ms, pid));
        }
        if let Some((ms, false)) = after {
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
