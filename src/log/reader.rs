//! A cursor over a log's records: where a consumer of one partition is, fetch after fetch
//! ([`Log::reader`]).

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use super::txn::IsolationLevel;
use super::{FetchResult, Log, ReadError, WaitOutcome};
use crate::format::{ConsumerRecord, ConsumerRecordIter};

/// The default byte limit of one fetch a [`LogReader`] makes.
pub const DEFAULT_READER_FETCH_BYTES: usize = 1 << 20;

/// A cursor over a log's records, from [`Log::reader`]: it keeps the offset to read next and
/// fetches on from there, so a consumer of the partition need not track `next_offset` itself.
/// It yields what a fetch would: records below the high watermark (read_uncommitted, the
/// default) or below the last stable offset with aborted transactions skipped
/// ([`LogReader::isolation`]). Past that it yields nothing until the bound moves;
/// [`LogReader::wait`] and [`LogReader::next_record_timeout`] block until it does.
///
/// It holds no lock and no file between calls: a retention or truncation that removes its
/// position makes the next call [`ReadError::OffsetOutOfRange`], and [`LogReader::seek`]
/// moves it on.
#[derive(Debug)]
pub struct LogReader<'a> {
    log: &'a Log,
    position: i64,
    isolation: IsolationLevel,
    max_bytes: usize,
    /// The records of the last fetch not yet handed out.
    pending: Option<Pending>,
}

/// What a fetch returned and [`LogReader::next_record`] has not handed out yet.
#[derive(Debug)]
struct Pending {
    records: ConsumerRecordIter,
    /// Where the fetch ended: one past its last batch.
    next_offset: i64,
    /// The fetch's bound (its high watermark, or its last stable offset under
    /// read_committed): a batch may hold records past it, which are not handed out yet.
    bound: i64,
}

impl Log {
    /// A cursor that reads this log from `offset` on, record by record or fetch by fetch, and
    /// can wait for more (see [`LogReader`]).
    pub fn reader(&self, offset: i64) -> LogReader<'_> {
        LogReader {
            log: self,
            position: offset,
            isolation: IsolationLevel::ReadUncommitted,
            max_bytes: DEFAULT_READER_FETCH_BYTES,
            pending: None,
        }
    }
}

impl<'a> LogReader<'a> {
    /// Reads under `isolation` (read_uncommitted by default).
    pub fn isolation(mut self, isolation: IsolationLevel) -> LogReader<'a> {
        self.isolation = isolation;
        self
    }

    /// The byte limit of each fetch it makes (1 MiB by default; a fetch returns at least one
    /// whole batch whatever the limit).
    pub fn max_bytes(mut self, max_bytes: usize) -> LogReader<'a> {
        self.max_bytes = max_bytes;
        self
    }

    /// The offset it reads next: one past the last record it handed out, or past the last
    /// batch of the last fetch [`LogReader::next_fetch`] returned.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// Moves the cursor to `offset`, dropping what it had fetched and not handed out.
    pub fn seek(&mut self, offset: i64) {
        self.position = offset;
        self.pending = None;
    }

    /// The next whole batches from its position, as [`Log::fetch_isolated`] answers them, and
    /// moves past them; `None` when nothing at its position is readable yet. Records of an
    /// earlier fetch not yet handed out by [`LogReader::next_record`] are dropped: the fetch
    /// starts at the first of them.
    pub fn next_fetch(&mut self) -> Result<Option<FetchResult>, ReadError> {
        self.pending = None;
        let Some(fetched) = self.fetch()? else {
            return Ok(None);
        };
        self.position = fetched.next_offset;
        Ok(Some(fetched))
    }

    /// The next record, as an application receives it (control batches and, under
    /// read_committed, aborted records skipped); `None` when nothing at its position is
    /// readable yet. Does not block.
    pub fn next_record(&mut self) -> Result<Option<ConsumerRecord>, ReadError> {
        loop {
            if let Some(pending) = self.pending.as_mut() {
                match pending.records.next() {
                    Some(Ok(record)) if record.offset < pending.bound => {
                        self.position = record.offset + 1;
                        return Ok(Some(record));
                    }
                    Some(Ok(record)) => {
                        // Past the bound (a batch that ends above it): not committed yet.
                        self.position = record.offset;
                        self.pending = None;
                        return Ok(None);
                    }
                    Some(Err(source)) => {
                        let offset = self.position;
                        self.pending = None;
                        return Err(ReadError::BadRecords { offset, source });
                    }
                    None => {
                        // Control batches and aborted records hold offsets too.
                        self.position = self.position.max(pending.next_offset);
                        self.pending = None;
                    }
                }
            }
            let Some(fetched) = self.fetch()? else {
                return Ok(None);
            };
            let bound = match self.isolation {
                IsolationLevel::ReadUncommitted => fetched.high_watermark,
                IsolationLevel::ReadCommitted => fetched.last_stable_offset,
            };
            self.pending = Some(Pending {
                records: fetched.records(),
                next_offset: fetched.next_offset,
                bound,
            });
        }
    }

    /// A fetch from its position; `None` when nothing there is readable yet.
    fn fetch(&self) -> Result<Option<FetchResult>, ReadError> {
        let fetched = self
            .log
            .fetch_isolated(self.position, self.max_bytes, self.isolation)?;
        Ok((!fetched.bytes.is_empty()).then_some(fetched))
    }

    /// [`LogReader::next_record`], waiting up to `timeout` for one when none is readable yet.
    /// `None` when the timeout passed first or the log was closed.
    pub fn next_record_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<ConsumerRecord>, ReadError> {
        if let Some(record) = self.next_record()? {
            return Ok(Some(record));
        }
        match self.wait(timeout) {
            WaitOutcome::Ready { .. } => self.next_record(),
            WaitOutcome::TimedOut { .. } | WaitOutcome::Closed => Ok(None),
        }
    }

    /// Blocks until the offset at its position is readable under its isolation level (below
    /// the high watermark, or the last stable offset), the log is closed, or `timeout`
    /// passes. Appends, flushes that move the high watermark and
    /// [`ReplicaLog::set_high_watermark`](super::ReplicaLog::set_high_watermark) wake it; there
    /// is no polling.
    pub fn wait(&self, timeout: Duration) -> WaitOutcome {
        let (log, position, isolation) = (self.log, self.position, self.isolation);
        log.wait_until(timeout, || {
            // Pairs with the fence before a waiter count is read where a bound moves.
            fence(Ordering::SeqCst);
            let bound = match isolation {
                IsolationLevel::ReadUncommitted => log.high_watermark(),
                IsolationLevel::ReadCommitted => log.last_stable_offset(),
            };
            bound > position
        })
    }
}
