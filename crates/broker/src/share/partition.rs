//! One share-partition (KIP-932): the state a share group keeps for one topic partition, as
//! Kafka's `SharePartition` keeps it.
//!
//! - The **share-partition start offset** (SPSO): every record below it is done with
//!   (acknowledged or archived). The **end offset** (SPEO, `next_fetch`): the first record not
//!   yet handed to any member. The records between them are **in flight**, each in one of
//!   [`RecordState`]'s states with its **delivery count**.
//! - A fetch **acquires** records for one member: Available in-flight records first (lowest
//!   offset first), then new records from the end offset; each acquisition adds one to the
//!   record's delivery count and locks it for `group.share.record.lock.duration.ms`.
//! - The member **acknowledges** what it acquired: ACCEPT (Acknowledged), RELEASE (Available
//!   again, for any member), REJECT (Archived, never delivered again), or GAP for offsets the
//!   batches did not hold (Archived). An acknowledgement of a record the member does not hold
//!   is INVALID_RECORD_STATE, and nothing of that acknowledgement is applied.
//! - A lock that expires, or a member that leaves, makes its records Available again; a record
//!   whose delivery count reached `group.share.delivery.count.limit` is Archived instead (a
//!   poison record stops being redelivered).
//! - The start offset moves past every leading record that is Acknowledged or Archived.
//!
//! What outlives a restart ([`SharePartition::snapshot`], [`SharePartition::restore`]) is what
//! Kafka writes to `__share_group_state`: the start offset and the in-flight records' states and
//! delivery counts, an acquired record as Available (its lock dies with the broker).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;

/// The state of one in-flight record (Kafka's `RecordState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Available,
    Acquired,
    Acknowledged,
    Archived,
}

impl RecordState {
    /// Kafka's `RecordState.id`, as `__share_group_state`'s `DeliveryState` stores it.
    pub fn id(self) -> i8 {
        match self {
            RecordState::Available => 0,
            RecordState::Acquired => 1,
            RecordState::Acknowledged => 2,
            RecordState::Archived => 4,
        }
    }
    pub fn from_id(id: i8) -> Option<RecordState> {
        Some(match id {
            0 => RecordState::Available,
            1 => RecordState::Acquired,
            2 => RecordState::Acknowledged,
            4 => RecordState::Archived,
            _ => return None,
        })
    }
}

/// An acknowledgement type of ShareFetch and ShareAcknowledge (`AcknowledgeTypes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckType {
    /// 0: the offset is not a record (a gap in the batches); archived.
    Gap,
    /// 1: processed.
    Accept,
    /// 2: give it back, for another delivery.
    Release,
    /// 3: unprocessable; never delivered again.
    Reject,
    /// 4 (v2, KIP-1222): keep it, and restart its lock.
    Renew,
}

impl AckType {
    pub fn from_id(id: i8) -> Option<AckType> {
        Some(match id {
            0 => AckType::Gap,
            1 => AckType::Accept,
            2 => AckType::Release,
            3 => AckType::Reject,
            4 => AckType::Renew,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct InFlight {
    state: RecordState,
    delivery_count: i16,
    /// The member holding it, while Acquired.
    owner: Option<String>,
    /// When its acquisition lock expires, while Acquired.
    deadline: Option<Instant>,
}

/// Records acquired by one fetch: `(first offset, last offset, delivery count)`, consecutive
/// offsets of one delivery count merged, as ShareFetch's `AcquiredRecords` answers them.
pub type Acquired = Vec<(i64, i64, i16)>;

/// A batch of the log as a fetch found it: its first and last offset, and whether it is a
/// control batch (a transaction marker, never delivered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchedBatch {
    pub first: i64,
    pub last: i64,
    pub control: bool,
}

/// What persists of a share-partition (Kafka's `ShareSnapshot`): the start offset, the state
/// epoch, and the in-flight records as `(first, last, state, delivery count)` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub start_offset: i64,
    pub state_epoch: i32,
    pub batches: Vec<(i64, i64, RecordState, i16)>,
}

/// The limits a share-partition runs under (the group's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `group.share.record.lock.duration.ms`.
    pub lock_duration: Duration,
    /// `group.share.delivery.count.limit`.
    pub delivery_count_limit: i16,
}

/// One share group's state of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharePartition {
    start_offset: i64,
    next_fetch: i64,
    /// Bumped by every snapshot written (Kafka's state epoch).
    state_epoch: i32,
    in_flight: BTreeMap<i64, InFlight>,
    /// Offsets archived at the delivery count limit since [`SharePartition::take_exhausted`]
    /// (not persisted: for the log, as Kafka warns of a record's last delivery).
    exhausted: Vec<i64>,
}

impl SharePartition {
    /// A share-partition that starts at `start_offset` (the log end for
    /// `share.auto.offset.reset=latest`, Kafka's default).
    pub fn new(start_offset: i64) -> SharePartition {
        SharePartition {
            start_offset,
            next_fetch: start_offset,
            state_epoch: 0,
            in_flight: BTreeMap::new(),
            exhausted: Vec::new(),
        }
    }

    /// The share-partition as its last snapshot left it: an acquired record is Available.
    pub fn restore(snapshot: &Snapshot) -> SharePartition {
        let mut in_flight = BTreeMap::new();
        let mut next_fetch = snapshot.start_offset;
        for &(first, last, state, delivery_count) in &snapshot.batches {
            let state = match state {
                RecordState::Acquired => RecordState::Available,
                s => s,
            };
            for offset in first.max(snapshot.start_offset)..=last {
                in_flight.insert(
                    offset,
                    InFlight {
                        state,
                        delivery_count,
                        owner: None,
                        deadline: None,
                    },
                );
            }
            next_fetch = next_fetch.max(last + 1);
        }
        let mut p = SharePartition {
            start_offset: snapshot.start_offset,
            next_fetch,
            state_epoch: snapshot.state_epoch,
            in_flight,
            exhausted: Vec::new(),
        };
        p.advance_start();
        p
    }

    /// What persists now; bumps the state epoch.
    pub fn snapshot(&mut self) -> Snapshot {
        self.state_epoch += 1;
        let mut batches: Vec<(i64, i64, RecordState, i16)> = Vec::new();
        for (&offset, r) in &self.in_flight {
            let state = match r.state {
                RecordState::Acquired => RecordState::Available,
                s => s,
            };
            match batches.last_mut() {
                Some(last)
                    if last.1 + 1 == offset && last.2 == state && last.3 == r.delivery_count =>
                {
                    last.1 = offset;
                }
                _ => batches.push((offset, offset, state, r.delivery_count)),
            }
        }
        Snapshot {
            start_offset: self.start_offset,
            state_epoch: self.state_epoch,
            batches,
        }
    }

    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    /// The first offset not yet handed to any member.
    pub fn end_offset(&self) -> i64 {
        self.next_fetch
    }

    /// Where the next fetch reads the log from: the first Available in-flight record, else the
    /// end offset. `None`: nothing in flight is available and `log_end` holds nothing new.
    pub fn fetch_offset(&self, log_end: i64) -> Option<i64> {
        let available = self
            .in_flight
            .iter()
            .find(|(_, r)| r.state == RecordState::Available)
            .map(|(&o, _)| o);
        available.or((self.next_fetch < log_end).then_some(self.next_fetch))
    }

    /// In-flight records done with (Acknowledged or Archived) above the start offset: the
    /// share-partition's lag is the records from the start offset to the log end less these
    /// (KIP-1226's `deliveryCompleteCount`).
    pub fn delivery_complete_count(&self) -> i64 {
        self.in_flight
            .values()
            .filter(|r| matches!(r.state, RecordState::Acknowledged | RecordState::Archived))
            .count() as i64
    }

    /// The state and delivery count of `offset`, while in flight (for tests and describes).
    pub fn record(&self, offset: i64) -> Option<(RecordState, i16)> {
        self.in_flight
            .get(&offset)
            .map(|r| (r.state, r.delivery_count))
    }

    /// Acquires for `member`, from the `batches` a log read returned (in offset order), every
    /// Available in-flight record and every record past the end offset, until `max_records`
    /// are acquired: whole batches at a time (ShareFetch's batch-optimized mode, which may pass
    /// the limit to end at a batch boundary), or, `strict` (the record-limit mode of KIP-1206),
    /// never more than `max_records`. Control batches are archived as they pass. Answers the
    /// acquired runs; the batches that hold none of them need not be sent.
    ///
    /// Records delivered often are handed out sparingly, as Kafka 4.4's `SharePartition`
    /// does (`Throttle`): a batch holding an Available record delivered at least
    /// `throttle_limit` times is acquired only at the start of a fetch, and ends it; of it,
    /// half the batch is acquired, a quarter the next time, and so on, and a record on its last
    /// delivery is acquired alone. So a member that leaves, or lets its locks run out, holding
    /// a large acquisition burns the last deliveries of few records, not of a whole batch.
    pub fn acquire(
        &mut self,
        member: &str,
        batches: &[FetchedBatch],
        max_records: usize,
        strict: bool,
        limits: Limits,
        now: Instant,
    ) -> Acquired {
        let deadline = now + limits.lock_duration;
        let mut acquired: Acquired = Vec::new();
        let mut count = 0usize;
        if max_records == 0 {
            return acquired;
        }
        let throttle = Throttle::new(limits.delivery_count_limit);
        for batch in batches {
            if count >= max_records {
                break;
            }
            let throttled = throttle.holds(self, batch);
            if throttled && count > 0 {
                // Kafka hands a batch of often delivered records out first in a fetch only.
                break;
            }
            let batch_len = (batch.last - batch.first + 1) as usize;
            let mut in_batch = 0usize;
            let mut batch_limit: Option<usize> = None;
            for offset in batch.first.max(self.start_offset)..=batch.last {
                if strict && count >= max_records {
                    break;
                }
                if offset >= self.next_fetch {
                    // A record no member has seen.
                    let state = if batch.control {
                        RecordState::Archived
                    } else {
                        RecordState::Available
                    };
                    self.in_flight.insert(
                        offset,
                        InFlight {
                            state,
                            delivery_count: 0,
                            owner: None,
                            deadline: None,
                        },
                    );
                    self.next_fetch = offset + 1;
                }
                let Some(r) = self.in_flight.get_mut(&offset) else {
                    continue;
                };
                if r.state != RecordState::Available {
                    continue;
                }
                if batch.control {
                    r.state = RecordState::Archived;
                    continue;
                }
                if throttle.last_delivery(r.delivery_count) && in_batch > 0 {
                    // Its last delivery: alone, in the next fetch.
                    break;
                }
                if batch_limit.is_none() {
                    batch_limit = throttle.batch_limit(r.delivery_count, batch_len);
                }
                r.state = RecordState::Acquired;
                r.delivery_count = r.delivery_count.saturating_add(1);
                r.owner = Some(member.to_string());
                r.deadline = Some(deadline);
                count += 1;
                in_batch += 1;
                match acquired.last_mut() {
                    Some(last) if last.1 + 1 == offset && last.2 == r.delivery_count => {
                        last.1 = offset
                    }
                    _ => acquired.push((offset, offset, r.delivery_count)),
                }
                if throttle.delivered_last(r.delivery_count)
                    || batch_limit.is_some_and(|limit| in_batch >= limit)
                {
                    break;
                }
            }
            if throttled && in_batch > 0 {
                break;
            }
        }
        self.advance_start();
        acquired
    }

    /// Applies one acknowledgement batch of `member`: `types` holds one type for the whole
    /// range or one per offset. All or nothing: any offset of the range the member does not
    /// hold (not in flight, not Acquired, or acquired by another member) refuses the whole
    /// batch with INVALID_RECORD_STATE, as Kafka's `SharePartition.acknowledge`; offsets below
    /// the start offset are skipped.
    pub fn acknowledge(
        &mut self,
        member: &str,
        first: i64,
        last: i64,
        types: &[AckType],
        limits: Limits,
        now: Instant,
    ) -> Result<(), ResponseError> {
        if first > last || types.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        let len = (last - first + 1) as usize;
        if types.len() != 1 && types.len() != len {
            return Err(ResponseError::InvalidRequest);
        }
        let type_of = |offset: i64| {
            if types.len() == 1 {
                types[0]
            } else {
                types[(offset - first) as usize]
            }
        };
        for offset in first..=last {
            // Below the start offset every record is done with: Kafka lets an acknowledgement
            // of them pass (a late duplicate changes nothing).
            if offset < self.start_offset {
                continue;
            }
            // A gap is a offset the member saw no record at; it need not be held.
            if type_of(offset) == AckType::Gap && offset < self.next_fetch {
                continue;
            }
            match self.in_flight.get(&offset) {
                Some(r)
                    if r.state == RecordState::Acquired && r.owner.as_deref() == Some(member) => {}
                _ => return Err(ResponseError::InvalidRecordState),
            }
        }
        for offset in first..=last {
            let Some(r) = self.in_flight.get_mut(&offset) else {
                continue;
            };
            match type_of(offset) {
                AckType::Accept => settle(r, RecordState::Acknowledged),
                AckType::Reject | AckType::Gap => settle(r, RecordState::Archived),
                AckType::Release => {
                    if release(r, limits.delivery_count_limit) {
                        self.exhausted.push(offset);
                    }
                }
                AckType::Renew => r.deadline = Some(now + limits.lock_duration),
            }
        }
        self.advance_start();
        Ok(())
    }

    /// Whether a record in `first..=last` is acquired by a member other than `member` (why
    /// an acknowledgement was refused, for its message).
    pub fn held_by_another(&self, member: &str, first: i64, last: i64) -> bool {
        self.in_flight
            .range(first..=last)
            .any(|(_, r)| r.state == RecordState::Acquired && r.owner.as_deref() != Some(member))
    }

    /// Releases every record `member` holds (it left the group, or closed its share session).
    /// Answers whether any was.
    pub fn release_member(&mut self, member: &str, limits: Limits) -> bool {
        let mut any = false;
        for (&offset, r) in self.in_flight.iter_mut() {
            if r.state == RecordState::Acquired && r.owner.as_deref() == Some(member) {
                if release(r, limits.delivery_count_limit) {
                    self.exhausted.push(offset);
                }
                any = true;
            }
        }
        self.advance_start();
        any
    }

    /// Ends every acquisition lock past its deadline. Answers whether any was.
    pub fn expire_locks(&mut self, limits: Limits, now: Instant) -> bool {
        let mut any = false;
        for (&offset, r) in self.in_flight.iter_mut() {
            if r.state == RecordState::Acquired && r.deadline.is_some_and(|d| d <= now) {
                if release(r, limits.delivery_count_limit) {
                    self.exhausted.push(offset);
                }
                any = true;
            }
        }
        self.advance_start();
        any
    }

    /// The offsets archived at the delivery count limit since the last call, in the order
    /// they were.
    pub fn take_exhausted(&mut self) -> Vec<i64> {
        std::mem::take(&mut self.exhausted)
    }

    /// Moves the start offset past the log start (records removed by retention are done
    /// with), as Kafka does when the log start moves.
    pub fn truncate_to(&mut self, log_start: i64) {
        if log_start > self.start_offset {
            self.in_flight.retain(|&o, _| o >= log_start);
            self.start_offset = log_start;
            self.next_fetch = self.next_fetch.max(log_start);
        }
    }

    fn advance_start(&mut self) {
        while let Some((&offset, r)) = self.in_flight.first_key_value() {
            if offset != self.start_offset
                || !matches!(r.state, RecordState::Acknowledged | RecordState::Archived)
            {
                break;
            }
            self.in_flight.remove(&offset);
            self.start_offset += 1;
        }
        if self.in_flight.is_empty() {
            self.start_offset = self.start_offset.max(self.next_fetch);
        }
    }
}

/// The delivery count from which a share-partition hands records out sparingly for a group's
/// `group.share.delivery.count.limit`: half the limit rounded up, at least 2 (Kafka 4.4's
/// `SharePartition.throttleRecordsDeliveryLimit`; 3 for the default limit of 5).
fn throttle_limit(delivery_count_limit: i16) -> i16 {
    ((delivery_count_limit as i32 + 1) / 2).max(2) as i16
}

/// Kafka 4.4's throttled delivery of records delivered often (`SharePartition.acquire`,
/// `shouldThrottleRecordsDelivery`, `acquireSubsetBatchRecords`), for one acquisition. With
/// `limit` the delivery count limit and `from` its [`throttle_limit`]:
///
/// - a batch that holds an Available record delivered `from` times or more is *throttled*: it
///   is acquired only if nothing was acquired before it in the fetch, and nothing after it is;
/// - of such a batch, at the first record delivered `d >= from` times, at most
///   `max(1, batch length >> (d - from + 1))` records are acquired (half the batch on the
///   `from + 1`th delivery, a quarter on the next, ...);
/// - a record on its last delivery (delivered `limit - 1` times, `limit > 2`) is acquired
///   alone: not after other records of its batch, and nothing after it.
///
/// Kafka counts the length of its in-flight batch; here the log batch the record is in, which
/// is what Kafka's in-flight batches are cut from.
#[derive(Debug, Clone, Copy)]
struct Throttle {
    limit: i16,
    from: i16,
}

impl Throttle {
    fn new(limit: i16) -> Throttle {
        Throttle {
            limit,
            from: throttle_limit(limit),
        }
    }

    /// Whether `batch` holds an Available record of `p` delivered `from` times or more.
    fn holds(&self, p: &SharePartition, batch: &FetchedBatch) -> bool {
        let first = batch.first.max(p.start_offset);
        first <= batch.last
            && p.in_flight
                .range(first..=batch.last)
                .any(|(_, r)| r.state == RecordState::Available && r.delivery_count >= self.from)
    }

    /// Whether a record delivered `delivery_count` times is on its last delivery, to be
    /// acquired alone.
    fn last_delivery(&self, delivery_count: i16) -> bool {
        self.limit > 2 && delivery_count == self.limit - 1
    }

    /// Whether a record now delivered `delivery_count` times just had its last delivery, which
    /// ends its batch.
    fn delivered_last(&self, delivery_count: i16) -> bool {
        self.limit > 2 && delivery_count == self.limit
    }

    /// How many records of a batch of `batch_len` records to acquire, when its first
    /// Available record was delivered `delivery_count` times: `None`, no bound.
    fn batch_limit(&self, delivery_count: i16, batch_len: usize) -> Option<usize> {
        if delivery_count < self.from {
            return None;
        }
        let shift = (delivery_count - self.from + 1) as u32;
        Some(batch_len.checked_shr(shift).unwrap_or(0).max(1))
    }
}

fn settle(r: &mut InFlight, state: RecordState) {
    r.state = state;
    r.owner = None;
    r.deadline = None;
}

/// An acquired record given back: Available for another delivery, or Archived once it was
/// delivered `limit` times. Answers whether it was archived so.
fn release(r: &mut InFlight, limit: i16) -> bool {
    let exhausted = r.delivery_count >= limit;
    let state = if exhausted {
        RecordState::Archived
    } else {
        RecordState::Available
    };
    settle(r, state);
    exhausted
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        lock_duration: Duration::from_secs(30),
        delivery_count_limit: 2,
    };

    fn batch(first: i64, last: i64) -> FetchedBatch {
        FetchedBatch {
            first,
            last,
            control: false,
        }
    }

    #[test]
    fn acquired_records_are_not_acquired_twice() {
        let mut p = SharePartition::new(0);
        let now = Instant::now();
        assert_eq!(
            p.acquire("a", &[batch(0, 4)], 100, false, LIMITS, now),
            vec![(0, 4, 1)]
        );
        assert_eq!(
            p.acquire("b", &[batch(0, 4)], 100, false, LIMITS, now),
            vec![]
        );
        assert_eq!(p.fetch_offset(5), None);
    }

    #[test]
    fn accepted_records_move_the_start_offset() {
        let mut p = SharePartition::new(10);
        let now = Instant::now();
        p.acquire("a", &[batch(10, 14)], 100, false, LIMITS, now);
        p.acknowledge("a", 10, 11, &[AckType::Accept], LIMITS, now)
            .unwrap();
        assert_eq!(p.start_offset(), 12);
        p.acknowledge("a", 13, 14, &[AckType::Reject], LIMITS, now)
            .unwrap();
        assert_eq!(p.start_offset(), 12);
        assert_eq!(p.record(13), Some((RecordState::Archived, 1)));
        p.acknowledge("a", 12, 12, &[AckType::Accept], LIMITS, now)
            .unwrap();
        assert_eq!(p.start_offset(), 15);
    }

    #[test]
    fn another_members_records_cannot_be_acknowledged() {
        let mut p = SharePartition::new(0);
        let now = Instant::now();
        p.acquire("a", &[batch(0, 1)], 100, false, LIMITS, now);
        assert_eq!(
            p.acknowledge("b", 0, 1, &[AckType::Accept], LIMITS, now),
            Err(ResponseError::InvalidRecordState)
        );
        assert_eq!(
            p.acknowledge("a", 0, 2, &[AckType::Accept], LIMITS, now),
            Err(ResponseError::InvalidRecordState)
        );
        assert_eq!(p.record(0), Some((RecordState::Acquired, 1)));
    }

    #[test]
    fn released_records_are_redelivered_until_the_delivery_limit() {
        let mut p = SharePartition::new(0);
        let now = Instant::now();
        p.acquire("a", &[batch(0, 0)], 100, false, LIMITS, now);
        p.acknowledge("a", 0, 0, &[AckType::Release], LIMITS, now)
            .unwrap();
        assert_eq!(p.fetch_offset(1), Some(0));
        assert_eq!(
            p.acquire("b", &[batch(0, 0)], 100, false, LIMITS, now),
            vec![(0, 0, 2)]
        );
        p.acknowledge("b", 0, 0, &[AckType::Release], LIMITS, now)
            .unwrap();
        // Delivered twice, the limit: archived, and the start offset moves past it.
        assert_eq!(p.start_offset(), 1);
        assert_eq!(p.fetch_offset(1), None);
    }

    #[test]
    fn expired_locks_make_records_available() {
        let mut p = SharePartition::new(0);
        let now = Instant::now();
        p.acquire("a", &[batch(0, 2)], 100, false, LIMITS, now);
        assert!(!p.expire_locks(LIMITS, now + Duration::from_secs(29)));
        assert!(p.expire_locks(LIMITS, now + Duration::from_secs(30)));
        assert_eq!(p.record(1), Some((RecordState::Available, 1)));
        assert_eq!(
            p.acknowledge("a", 0, 2, &[AckType::Accept], LIMITS, now),
            Err(ResponseError::InvalidRecordState)
        );
    }

    #[test]
    fn max_records_stops_at_a_batch_boundary() {
        let mut p = SharePartition::new(0);
        let got = p.acquire(
            "a",
            &[batch(0, 2), batch(3, 5)],
            2,
            false,
            LIMITS,
            Instant::now(),
        );
        assert_eq!(got, vec![(0, 2, 1)]);
        assert_eq!(p.end_offset(), 3);
    }

    #[test]
    fn the_record_limit_mode_splits_a_batch() {
        let mut p = SharePartition::new(0);
        let now = Instant::now();
        let got = p.acquire("a", &[batch(0, 4)], 2, true, LIMITS, now);
        assert_eq!(got, vec![(0, 1, 1)]);
        assert_eq!(p.end_offset(), 2);
        assert_eq!(p.fetch_offset(5), Some(2));
        let rest = p.acquire("b", &[batch(0, 4)], 10, true, LIMITS, now);
        assert_eq!(rest, vec![(2, 4, 1)]);
    }

    #[test]
    fn control_batches_are_archived_not_delivered() {
        let mut p = SharePartition::new(0);
        let control = FetchedBatch {
            first: 2,
            last: 2,
            control: true,
        };
        let got = p.acquire(
            "a",
            &[batch(0, 1), control],
            100,
            false,
            LIMITS,
            Instant::now(),
        );
        assert_eq!(got, vec![(0, 1, 1)]);
        assert_eq!(p.record(2), Some((RecordState::Archived, 0)));
    }

    /// Kafka's default `group.share.delivery.count.limit`: throttled from the 4th delivery.
    const KAFKA_LIMITS: Limits = Limits {
        lock_duration: Duration::from_secs(30),
        delivery_count_limit: 5,
    };

    #[test]
    fn the_throttle_starts_at_half_the_delivery_limit() {
        assert_eq!(throttle_limit(5), 3);
        assert_eq!(throttle_limit(6), 3);
        assert_eq!(throttle_limit(10), 5);
        assert_eq!(throttle_limit(2), 2);
        assert_eq!(throttle_limit(1), 2);
    }

    /// Delivers `0..=7` three times, each member leaving with the whole batch.
    fn delivered_three_times(p: &mut SharePartition, now: Instant) {
        for (round, member) in ["m1", "m2", "m3"].into_iter().enumerate() {
            assert_eq!(
                p.acquire(member, &[batch(0, 7)], 500, false, KAFKA_LIMITS, now),
                vec![(0, 7, round as i16 + 1)]
            );
            assert!(p.release_member(member, KAFKA_LIMITS));
        }
    }

    #[test]
    fn records_delivered_often_are_acquired_half_a_batch_at_a_time() {
        let mut p = SharePartition::new(0);
        let now = Instant::now();
        delivered_three_times(&mut p, now);
        // The 4th delivery: half the batch, and nothing after it in the same fetch.
        let batches = [batch(0, 7), batch(8, 9)];
        assert_eq!(
            p.acquire("m4", &batches, 500, false, KAFKA_LIMITS, now),
            vec![(0, 3, 4)]
        );
        assert_eq!(
            p.acquire("m4", &batches, 500, false, KAFKA_LIMITS, now),
            vec![(4, 7, 4)]
        );
        assert_eq!(
            p.acquire("m4", &batches, 500, false, KAFKA_LIMITS, now),
            vec![(8, 9, 1)]
        );
        assert!(p.release_member("m4", KAFKA_LIMITS));
        // A throttled batch waits for a fetch of its own: not after fresh records.
        assert_eq!(
            p.acquire(
                "m5",
                &[batch(8, 9), batch(0, 7)],
                500,
                false,
                KAFKA_LIMITS,
                now
            ),
            vec![(8, 9, 2)]
        );
    }

    #[test]
    fn a_record_on_its_last_delivery_is_acquired_alone() {
        let mut p = SharePartition::new(0);
        let now = Instant::now();
        delivered_three_times(&mut p, now);
        p.acquire("m4", &[batch(0, 7)], 500, false, KAFKA_LIMITS, now);
        p.acquire("m4", &[batch(0, 7)], 500, false, KAFKA_LIMITS, now);
        assert!(p.release_member("m4", KAFKA_LIMITS));
        assert_eq!(p.record(7), Some((RecordState::Available, 4)));
        for offset in 0..3 {
            assert_eq!(
                p.acquire("m5", &[batch(0, 7)], 500, false, KAFKA_LIMITS, now),
                vec![(offset, offset, 5)]
            );
        }
        // Released on its last delivery (acknowledged, or by a member leaving): archived.
        // Accepted: done with. The rest of the batch is still delivered, one at a time.
        p.acknowledge("m5", 0, 0, &[AckType::Accept], KAFKA_LIMITS, now)
            .unwrap();
        p.acknowledge("m5", 1, 1, &[AckType::Release], KAFKA_LIMITS, now)
            .unwrap();
        assert!(p.release_member("m5", KAFKA_LIMITS));
        assert_eq!(p.take_exhausted(), vec![1, 2]);
        assert_eq!(p.take_exhausted(), Vec::<i64>::new());
        assert_eq!(p.start_offset(), 3);
        assert_eq!(p.record(3), Some((RecordState::Available, 4)));
        assert_eq!(
            p.acquire("m6", &[batch(0, 7)], 500, false, KAFKA_LIMITS, now),
            vec![(3, 3, 5)]
        );
    }

    #[test]
    fn a_snapshot_restores_acquired_records_as_available() {
        let mut p = SharePartition::new(0);
        let now = Instant::now();
        p.acquire("a", &[batch(0, 3)], 100, false, LIMITS, now);
        p.acknowledge("a", 0, 1, &[AckType::Accept], LIMITS, now)
            .unwrap();
        let snapshot = p.snapshot();
        assert_eq!(snapshot.start_offset, 2);
        assert_eq!(snapshot.batches, vec![(2, 3, RecordState::Available, 1)]);
        let q = SharePartition::restore(&snapshot);
        assert_eq!(q.start_offset(), 2);
        assert_eq!(q.end_offset(), 4);
        assert_eq!(q.record(3), Some((RecordState::Available, 1)));
    }
}
