//! The processed-id store: the consumer's half of exactly-once (docs/exactly-once.md).
//!
//! A consumer that crashes after its side effect and before it commits its offset gets the
//! message again: Kafka promises at-least-once there, and a transaction on the broker cannot
//! cover the consumer's own database. The store closes that gap on an oncelog log: one call
//! records "message X handled, its effect E, and the consumer of source S resumes at P" as
//! one batch, which is written and recovered whole (layouts in docs/format.md, "Processed-id store"); "was X handled?" is
//! answered from memory; a restart, or a crash at any moment, leaves the store as it was after
//! some prefix of the calls that includes every one that returned.
//!
//! Forgetting, so memory and disk stay bounded, is by age ([`ProcessedConfig::forget_after_ms`],
//! the replacement for a Redis key's TTL) and by count ([`ProcessedConfig::max_ids`], oldest
//! first). A forgotten id gets a tombstone (a null value under its key), written with the next
//! record or by [`ProcessedStore::maintain`]. What removes the bytes, both run by `maintain`:
//! - retention: the store's log has `retention_ms` = `forget_after_ms`, so whole segments
//!   whose every id is forgotten (a segment's newest record is older than the age limit) are
//!   deleted, after the positions still in them are written again;
//! - key compaction: the store's log is compacted (`cleanup.policy` `compact`, or
//!   `compact,delete` with an age limit), so the cleaner keeps the latest record per key: one
//!   per live id, one per source, and drops a forgotten id's record and, after the delete
//!   horizon (`compaction.delete_retention_ms`), its tombstone. This is what bounds the disk
//!   of a store that forgets by count alone.
//!
//! One store is one directory and one writer (the log's lock): a consumer group keeps one
//! store per input partition, opened by whichever member owns the partition, so the member
//! that gets a partition after a rebalance sees what the previous owner handled.
//!
//! ```
//! use oncelog::processed::{Position, ProcessedConfig, ProcessedStore, Recorded};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! // What the Redis key's TTL was for:
//! let config = ProcessedConfig::default().with_forget_after_ms(Some(7 * 24 * 3600 * 1000));
//! let store = ProcessedStore::open(dir.path().join("orders-3"), config.clone())?;
//! // For each message polled from orders-3 (id "order-17", offset 41):
//! let at = Position { source: "orders-3", offset: 42 };
//! match store.record(b"order-17", at, b"charged 5 EUR")? {
//!     Recorded::New { .. } => { /* durable: apply the effect, then commit offset 42 */ }
//!     Recorded::AlreadyHandled { .. } => { /* a redelivery: skip it, commit offset 42 */ }
//!     other => unreachable!("an answer this consumer does not know: {other:?}"),
//! }
//! // The consumer crashes here, before its commit; it restarts, Kafka redelivers order-17:
//! drop(store);
//! let store = ProcessedStore::open(dir.path().join("orders-3"), config)?;
//! assert!(store.is_handled(b"order-17"));
//! let again = store.record(b"order-17", Position { source: "orders-3", offset: 42 }, b"")?;
//! assert!(matches!(again, Recorded::AlreadyHandled { .. }));
//! assert_eq!(store.position("orders-3"), Some(42)); // where to resume, if the commit was lost
//! # Ok(()) }
//! ```

mod error;
mod record;
mod state;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::format::{BatchBuilder, ConsumerRecordIter};
use crate::{AppendOutcome, Clock, Environment, Log, LogConfig};

pub use error::ProcessedError;
use record::Decoded;
use state::{Entry, Handled, Stored};

/// The longest message id, in bytes.
pub const MAX_ID_BYTES: usize = 4096;
/// The longest source name, in bytes.
pub const MAX_SOURCE_BYTES: usize = 255;
/// The longest effect stored with an id, in bytes.
pub const MAX_EFFECT_BYTES: usize = 256 * 1024;
/// Tombstone bytes (ids) carried by one batch, so a batch stays far below the log's
/// `max_message_bytes` (and a quarter of a segment, for logs with small segments).
const TOMBSTONE_BYTES_PER_BATCH: usize = 256 * 1024;
/// Bytes read per step when the store replays its log on open.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// Settings of a [`ProcessedStore`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProcessedConfig {
    /// Forget an id this long after it was handled (a Redis TTL). `None`: never by age.
    pub forget_after_ms: Option<i64>,
    /// Keep at most this many ids; recording one more forgets the oldest. `None`: no limit.
    pub max_ids: Option<usize>,
    /// Make every record durable (fsync) before [`ProcessedStore::record`] returns. Default
    /// true; false leaves durability to [`ProcessedStore::flush`] (a machine crash may then
    /// lose records that were answered, a process crash does not).
    pub durable: bool,
    /// The log's settings (segment sizes, recovery mode, ...). The store sets
    /// `retention_ms` (to `forget_after_ms`), `retention_bytes` (none), `cleanup_policy`
    /// (compacted) and `flush_policy` itself.
    pub log: LogConfig,
}

with_setters!(ProcessedConfig {
    with_forget_after_ms => forget_after_ms: Option<i64>,
    with_max_ids => max_ids: Option<usize>,
    with_durable => durable: bool,
    with_log => log: LogConfig,
});

impl Default for ProcessedConfig {
    fn default() -> Self {
        ProcessedConfig {
            forget_after_ms: None,
            max_ids: None,
            durable: true,
            log: LogConfig {
                segment_bytes: 8 << 20,
                segment_index_bytes: 1 << 20,
                prefault_bytes: 0,
                ..LogConfig::default()
            },
        }
    }
}

impl ProcessedConfig {
    fn validate(&self) -> Result<(), ProcessedError> {
        if let Some(ms) = self.forget_after_ms.filter(|ms| *ms <= 0) {
            return Err(ProcessedError::Config {
                field: "forget_after_ms",
                value: ms.to_string(),
                rule: "must be at least 1 (None: never)",
            });
        }
        if self.max_ids == Some(0) {
            return Err(ProcessedError::Config {
                field: "max_ids",
                value: "0".into(),
                rule: "must be at least 1 (None: no limit)",
            });
        }
        Ok(())
    }

    /// The log's configuration as the store runs it.
    pub fn log_config(&self) -> LogConfig {
        LogConfig {
            retention_ms: self.forget_after_ms,
            retention_bytes: None,
            cleanup_policy: match self.forget_after_ms {
                Some(_) => crate::CleanupPolicy::CompactDelete,
                None => crate::CleanupPolicy::Compact,
            },
            flush_policy: crate::FlushPolicy::Manual,
            ..self.log.clone()
        }
    }
}

/// Where a consumer resumes reading a source: the offset of the next message to read (a Kafka
/// committed offset: the handled message's offset + 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position<'a> {
    /// What is consumed, e.g. `orders-3` (topic and partition). 1 to 255 bytes.
    pub source: &'a str,
    /// The next offset to read, at least 0.
    pub offset: i64,
}

/// The answer to [`ProcessedStore::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Recorded {
    /// Recorded now, at this offset of the store's log (with the position after it); the
    /// caller may apply the effect.
    New {
        /// The handled record's offset.
        offset: i64,
        /// Ids forgotten to make room or by age, whose tombstones went with it.
        tombstones: usize,
    },
    /// Already handled (its record is at `offset`): nothing was written, the effect must not
    /// be applied again.
    AlreadyHandled {
        /// The offset of the record that handled it.
        offset: i64,
    },
}

/// A handled id as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandledId {
    /// The message id.
    pub id: Bytes,
    /// The offset of its record in the store's log.
    pub offset: i64,
    /// When it was recorded (the store's clock; never older than the record before it).
    pub handled_at_ms: i64,
}

/// What the store holds in memory ([`ProcessedStore::memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryReport {
    /// Ids answered as handled (some may be past their age, not yet forgotten).
    pub ids: usize,
    /// Their bytes.
    pub id_bytes: usize,
    /// Sources with a position.
    pub positions: usize,
    /// Forgotten ids whose tombstones are not written yet.
    pub pending_tombstones: usize,
    /// Everything above, with the tables' slots at their capacity: an estimate of the heap
    /// the store's state uses.
    pub bytes: usize,
}

/// What [`ProcessedStore::open`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreOpenReport {
    /// Records replayed from the log.
    pub records_replayed: u64,
    /// Ids handled and not forgotten.
    pub ids: usize,
    /// Ids forgotten at open (by age, or a lowered `max_ids`).
    pub forgotten: usize,
}

/// What [`ProcessedStore::maintain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MaintenanceReport {
    /// Ids forgotten by this call.
    pub forgotten: usize,
    /// Tombstones written (for ids forgotten by this call or before).
    pub tombstones_written: usize,
    /// Positions written again because their records were in segments retention may delete.
    pub positions_rewritten: usize,
    /// Segments retention deleted.
    pub segments_deleted: usize,
    /// Records the compaction of this call removed (superseded ids, expired tombstones, old
    /// positions); 0 when no compaction was due.
    pub records_compacted: u64,
}

struct Inner {
    handled: Handled,
    /// Forgotten ids whose tombstones are not in the log yet, oldest first.
    pending: Vec<Arc<[u8]>>,
    /// The newest timestamp written to the log (retention deletes a segment by its newest).
    last_write_ms: i64,
    closed: bool,
}

/// Records which messages a consumer handled, and where it resumes, on an oncelog log.
/// `Send + Sync`; one writer per directory.
pub struct ProcessedStore {
    log: Log,
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    config: ProcessedConfig,
    inner: Mutex<Inner>,
    report: StoreOpenReport,
}

impl std::fmt::Debug for ProcessedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessedStore")
            .field("dir", &self.dir)
            .field("ids", &self.inner.lock().handled.len())
            .finish()
    }
}

impl ProcessedStore {
    /// Opens (or creates) the store in `dir` on the real file system, replaying its log.
    pub fn open(dir: impl AsRef<Path>, config: ProcessedConfig) -> Result<Self, ProcessedError> {
        Self::open_in(Environment::default(), dir, config)
    }

    /// Opens the store with an explicit file system and clock (tests use simulated ones).
    pub fn open_in(
        env: Environment,
        dir: impl AsRef<Path>,
        config: ProcessedConfig,
    ) -> Result<Self, ProcessedError> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let clock = Arc::clone(&env.clock);
        let log = Log::open_in(env, &dir, config.log_config())?;
        // What recovery kept of an unflushed tail is part of the store from now on: make it
        // durable, so the high watermark (what a fetch reads up to) covers it.
        log.flush()?;
        let mut handled = Handled::default();
        let mut replayed = 0u64;
        let mut last_write_ms = i64::MIN;
        let mut offset = log.log_start_offset();
        loop {
            let fetched = log.fetch(offset, REPLAY_READ_BYTES)?;
            if fetched.bytes.is_empty() {
                break;
            }
            for r in fetched.records() {
                let r = r.map_err(|error| ProcessedError::Unreadable {
                    dir: dir.clone(),
                    offset,
                    error,
                })?;
                last_write_ms = last_write_ms.max(r.timestamp);
                let decoded =
                    record::decode(r.key.as_ref(), r.value.as_ref()).map_err(|problem| {
                        ProcessedError::ForeignRecord {
                            dir: dir.clone(),
                            offset: r.offset,
                            problem,
                        }
                    })?;
                replayed += 1;
                apply(&mut handled, decoded, r.offset);
            }
            offset = fetched.next_offset;
        }
        let now = clock.now_ms();
        let pending = handled.forget(now, config.forget_after_ms, config.max_ids, 0);
        let report = StoreOpenReport {
            records_replayed: replayed,
            ids: handled.len(),
            forgotten: pending.len(),
        };
        Ok(ProcessedStore {
            log,
            dir,
            clock,
            config,
            inner: Mutex::new(Inner {
                handled,
                pending,
                last_write_ms,
                closed: false,
            }),
            report,
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the open replayed and found.
    pub fn open_report(&self) -> StoreOpenReport {
        self.report
    }

    /// Whether `id` was handled (and is not forgotten): from memory, no I/O.
    pub fn is_handled(&self, id: &[u8]) -> bool {
        let now = self.clock.now_ms();
        self.inner
            .lock()
            .handled
            .is_handled(id, now, self.config.forget_after_ms)
    }

    /// The handled id's record, if it is handled.
    pub fn handled(&self, id: &[u8]) -> Option<HandledId> {
        let now = self.clock.now_ms();
        let inner = self.inner.lock();
        if !inner
            .handled
            .is_handled(id, now, self.config.forget_after_ms)
        {
            return None;
        }
        inner.handled.get(id).map(|e| HandledId {
            id: Bytes::copy_from_slice(id),
            offset: e.offset,
            handled_at_ms: e.handled_at_ms,
        })
    }

    /// Every handled id, oldest first.
    pub fn handled_ids(&self) -> Vec<HandledId> {
        let now = self.clock.now_ms();
        let inner = self.inner.lock();
        inner
            .handled
            .iter()
            .filter(|(id, _)| {
                inner
                    .handled
                    .is_handled(id, now, self.config.forget_after_ms)
            })
            .map(|(id, e)| HandledId {
                id: Bytes::copy_from_slice(id),
                offset: e.offset,
                handled_at_ms: e.handled_at_ms,
            })
            .collect()
    }

    /// Where the consumer of `source` resumes, as last recorded.
    pub fn position(&self, source: &str) -> Option<i64> {
        self.inner
            .lock()
            .handled
            .position(source)
            .map(|s| s.position)
    }

    /// Every source's position, by source.
    pub fn positions(&self) -> Vec<(String, i64)> {
        self.inner
            .lock()
            .handled
            .positions()
            .map(|(s, p)| (s.to_string(), p.position))
            .collect()
    }

    /// The effect stored with a handled id (read from the log: the outbox of the consumer's
    /// side effects), or `None` if the id is not handled.
    pub fn effect(&self, id: &[u8]) -> Result<Option<Bytes>, ProcessedError> {
        let Some(h) = self.handled(id) else {
            return Ok(None);
        };
        let fetched = self.log.fetch(h.offset, 1)?;
        for r in ConsumerRecordIter::new(fetched.bytes, h.offset) {
            let r = r.map_err(|error| ProcessedError::Unreadable {
                dir: self.dir.clone(),
                offset: h.offset,
                error,
            })?;
            if r.offset != h.offset {
                continue;
            }
            return match record::decode(r.key.as_ref(), r.value.as_ref()) {
                Ok(Decoded::Handled { effect, .. }) => Ok(Some(effect)),
                Ok(_) => Ok(None),
                Err(problem) => Err(ProcessedError::ForeignRecord {
                    dir: self.dir.clone(),
                    offset: r.offset,
                    problem,
                }),
            };
        }
        Ok(None)
    }

    /// Records that `id` was handled with `effect`, and that the consumer of
    /// `position.source` resumes at `position.offset`, in one atomic append (with the
    /// tombstones of ids forgotten meanwhile). Durable before it returns unless
    /// [`ProcessedConfig::durable`] is off.
    ///
    /// An id already handled is answered [`Recorded::AlreadyHandled`] and nothing is written.
    /// On an error nothing may be assumed about this call's record: reopen the store to know
    /// (a failed flush leaves the log read-only).
    pub fn record(
        &self,
        id: &[u8],
        position: Position<'_>,
        effect: &[u8],
    ) -> Result<Recorded, ProcessedError> {
        check_id(id)?;
        check_source(position.source)?;
        if position.offset < 0 {
            return Err(ProcessedError::InvalidPosition {
                source_name: position.source.to_string(),
                position: position.offset,
            });
        }
        if effect.len() > MAX_EFFECT_BYTES {
            return Err(ProcessedError::EffectTooLarge {
                len: effect.len(),
                max: MAX_EFFECT_BYTES,
            });
        }
        let mut inner = self.inner.lock();
        if inner.closed {
            return Err(ProcessedError::Closed);
        }
        let now = self.clock.now_ms();
        let max_age = self.config.forget_after_ms;
        if inner.handled.is_handled(id, now, max_age) {
            let offset = inner.handled.get(id).map_or(-1, |e| e.offset);
            return Ok(Recorded::AlreadyHandled { offset });
        }
        let forgotten = inner.handled.forget(now, max_age, self.config.max_ids, 1);
        inner.pending.extend(forgotten);
        // The id handled again after it was forgotten: its tombstone, if not written yet, must
        // not be (it would follow the new record in the log and erase it on replay; the new
        // record supersedes the old one under compaction anyway).
        inner.pending.retain(|p| &p[..] != id);
        let stamp = inner.handled.stamp(now);
        let mut b = BatchBuilder::new();
        b.append(
            stamp,
            Some(&record::handled_key(id)),
            Some(&record::handled_value(stamp, effect)),
            &[],
        );
        b.append(
            stamp,
            Some(&record::position_key(position.source)),
            Some(&record::position_value(position.offset)),
            &[],
        );
        let tombstones = add_tombstones(&mut b, stamp, &inner.pending, self.tombstone_budget());
        let first = self.append(&b)?;
        inner.last_write_ms = stamp;
        inner.pending.drain(..tombstones);
        let entry = Entry {
            handled_at_ms: stamp,
            offset: first,
        };
        inner.handled.insert(id, entry);
        inner.handled.set_position(
            position.source,
            Stored {
                position: position.offset,
                offset: first + 1,
            },
        );
        Ok(Recorded::New {
            offset: first,
            tombstones,
        })
    }

    /// Forgets the ids past their age, writes every pending tombstone, writes the positions
    /// again whose records are in sealed segments, and lets retention delete the segments
    /// whose ids are all forgotten. Call it now and then (every minute, say); nothing else
    /// needs it to be called.
    pub fn maintain(&self) -> Result<MaintenanceReport, ProcessedError> {
        let mut inner = self.inner.lock();
        if inner.closed {
            return Err(ProcessedError::Closed);
        }
        let now = self.clock.now_ms();
        let mut report = MaintenanceReport::default();
        let forgotten =
            inner
                .handled
                .forget(now, self.config.forget_after_ms, self.config.max_ids, 0);
        report.forgotten = forgotten.len();
        inner.pending.extend(forgotten);
        let stamp = inner.handled.stamp(now);
        while !inner.pending.is_empty() {
            let mut b = BatchBuilder::new();
            let n = add_tombstones(&mut b, stamp, &inner.pending, self.tombstone_budget());
            self.append(&b)?;
            inner.last_write_ms = stamp;
            inner.pending.drain(..n);
            report.tombstones_written += n;
        }
        // Retention deletes whole segments whose newest record is past the age limit (the
        // active one too, once it is all old): a position stored only in one would go with
        // it, so it is written again, with a fresh timestamp, into the active segment first.
        let active_base = self
            .log
            .maintenance()
            .segment_base_offsets()
            .last()
            .copied()
            .unwrap_or(0);
        let active_old = self
            .config
            .forget_after_ms
            .is_some_and(|age| inner.last_write_ms <= now.saturating_sub(age));
        let stale: Vec<(String, i64)> = inner
            .handled
            .positions()
            .filter(|(_, s)| active_old || s.offset < active_base)
            .map(|(src, s)| (src.to_string(), s.position))
            .collect();
        if !stale.is_empty() {
            let mut b = BatchBuilder::new();
            for (source, position) in &stale {
                b.append(
                    stamp,
                    Some(&record::position_key(source)),
                    Some(&record::position_value(*position)),
                    &[],
                );
            }
            let first = self.append(&b)?;
            inner.last_write_ms = stamp;
            for (i, (source, position)) in stale.iter().enumerate() {
                inner.handled.set_position(
                    source,
                    Stored {
                        position: *position,
                        offset: first + i as i64,
                    },
                );
            }
            report.positions_rewritten = stale.len();
        }
        if self.config.forget_after_ms.is_some() {
            report.segments_deleted = self.log.maintenance().enforce_retention(now)?.deleted.len();
        }
        if self.log.maintenance().cleanable(now).due {
            report.records_compacted = self.log.maintenance().compact(now)?.records_removed;
        }
        inner.handled.compact_order();
        Ok(report)
    }

    /// What the store holds in memory.
    pub fn memory(&self) -> MemoryReport {
        let inner = self.inner.lock();
        let pending_bytes: usize = inner
            .pending
            .iter()
            .map(|id| id.len() + 2 * std::mem::size_of::<usize>())
            .sum::<usize>()
            + inner.pending.capacity() * std::mem::size_of::<Arc<[u8]>>();
        MemoryReport {
            ids: inner.handled.len(),
            id_bytes: inner.handled.id_bytes(),
            positions: inner.handled.position_count(),
            pending_tombstones: inner.pending.len(),
            bytes: inner.handled.memory_bytes() + pending_bytes,
        }
    }

    /// Bytes of the store's log on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.log.size_bytes()
    }

    /// Makes every record durable (only needed with [`ProcessedConfig::durable`] off).
    pub fn flush(&self) -> Result<(), ProcessedError> {
        Ok(self.log.flush()?)
    }

    /// Flushes and closes the log; the store answers [`ProcessedError::Closed`] after.
    pub fn close(&self) -> Result<(), ProcessedError> {
        let mut inner = self.inner.lock();
        inner.closed = true;
        Ok(self.log.close()?)
    }

    fn tombstone_budget(&self) -> usize {
        TOMBSTONE_BYTES_PER_BATCH.min(self.config.log.segment_bytes / 4)
    }

    /// Appends one batch; returns its first offset once durable (when configured so).
    fn append(&self, b: &BatchBuilder) -> Result<i64, ProcessedError> {
        let bytes = b
            .build()
            .map_err(|e| ProcessedError::Log(crate::Error::Append(crate::AppendError::Batch(e))))?;
        let first = match self.log.append(&bytes)? {
            AppendOutcome::Appended(info) => info.first_offset,
            // A batch without a producer id is never taken for a retry.
            AppendOutcome::Duplicate(d) => d.first_offset,
        };
        if self.config.durable {
            self.log.flush()?;
        }
        Ok(first)
    }

    /// Drops the store as a crash would: nothing is flushed (tests).
    #[cfg(feature = "internals")]
    pub fn abandon(self) {
        self.log.abandon();
    }
}

fn apply(handled: &mut Handled, decoded: Decoded, offset: i64) {
    match decoded {
        Decoded::Handled {
            id, handled_at_ms, ..
        } => {
            handled.remove(&id);
            handled.insert(
                &id,
                Entry {
                    handled_at_ms,
                    offset,
                },
            );
        }
        Decoded::Forgotten { id } => {
            handled.remove(&id);
        }
        Decoded::Position { source, position } => {
            handled.set_position(&source, Stored { position, offset });
        }
    }
}

/// Adds tombstones for the first pending ids, up to the per-batch budget; returns how many.
fn add_tombstones(b: &mut BatchBuilder, stamp: i64, pending: &[Arc<[u8]>], budget: usize) -> usize {
    let mut bytes = 0;
    let mut n = 0;
    for id in pending {
        // A tombstone costs its key and about 8 bytes of record framing.
        let cost = id.len() + 9;
        if n > 0 && bytes + cost > budget {
            break;
        }
        b.append(stamp, Some(&record::handled_key(id)), None, &[]);
        bytes += cost;
        n += 1;
    }
    n
}

fn check_id(id: &[u8]) -> Result<(), ProcessedError> {
    let rule = if id.is_empty() {
        "must not be empty"
    } else if id.len() > MAX_ID_BYTES {
        "must be at most 4096 bytes"
    } else {
        return Ok(());
    };
    Err(ProcessedError::InvalidId {
        len: id.len(),
        rule,
    })
}

fn check_source(source: &str) -> Result<(), ProcessedError> {
    let rule = if source.is_empty() {
        "must not be empty"
    } else if source.len() > MAX_SOURCE_BYTES {
        "must be at most 255 bytes"
    } else {
        return Ok(());
    };
    Err(ProcessedError::InvalidSource {
        source_name: source.to_string(),
        rule,
    })
}
