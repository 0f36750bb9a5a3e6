//! Raft entries as the partition's batches (docs/design.md, "Replication on openraft"): an
//! entry is a run of RecordBatch v2 batches that starts with a control batch of this crate
//! (its *head*), its term the batches' partitionLeaderEpoch. The clients' batches of an entry
//! follow its head (type [`RAFT_RUN`]), as the leader's log wrote them; openraft's own entries
//! (the blank entry a new leader writes, a membership change) are a head alone. Heads are
//! control batches of types Kafka does not define, which consumers skip like every control
//! batch; they are built from the entry alone, so every replica writes the same bytes at the
//! same offset. So where each entry starts is in the log itself: at each head.

use bytes::Bytes;
use oncelog::format::{BatchBuilder, BatchIter, ControlRecordKey, ControlType, RecordBatch};
use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership};

use crate::{Node, NodeId, Request, TypeConfig};

/// Control record type of a blank entry: the one a new leader appends to commit its term.
pub const RAFT_BLANK: i16 = 100;
/// Control record type of a membership entry; the record's value is the membership as JSON.
pub const RAFT_MEMBERSHIP: i16 = 101;
/// Control record type of the head of an entry of client batches: the batches after it, up
/// to the next head, are the entry's (none if the leader's log wrote none of them: each was
/// refused or a duplicate).
pub const RAFT_RUN: i16 = 102;

/// The largest control record this crate reads back (a membership of many nodes fits).
const MAX_CONTROL_BYTES: usize = 1 << 20;

/// An entry of the raft log.
pub type Entry = openraft::Entry<TypeConfig>;

/// The log id of index `index` written in `term`.
pub fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

/// The term an entry's batch carries.
pub fn epoch_of(term: u64) -> Result<i32, String> {
    i32::try_from(term).map_err(|_| format!("term {term} does not fit a partitionLeaderEpoch"))
}

/// The head of an entry at `offset`: the blank or membership entry whole, or the control batch
/// before the client batches of a normal entry.
pub fn head_batch(
    offset: i64,
    term: u64,
    payload: &EntryPayload<TypeConfig>,
) -> Result<Vec<u8>, String> {
    let (kind, value) = match payload {
        EntryPayload::Blank => (RAFT_BLANK, Vec::new()),
        EntryPayload::Membership(m) => (
            RAFT_MEMBERSHIP,
            serde_json::to_vec(m).map_err(|e| format!("membership does not encode: {e}"))?,
        ),
        EntryPayload::Normal(_) => (RAFT_RUN, Vec::new()),
    };
    let key = ControlRecordKey {
        version: 0,
        control_type: ControlType::from_id(kind),
    }
    .encode();
    let mut builder = BatchBuilder::new()
        .base_offset(offset)
        .partition_leader_epoch(epoch_of(term)?)
        .control(true)
        .max_timestamp(-1);
    // No wall-clock time: every replica must build the same bytes.
    builder.append(-1, Some(&key), Some(&value), &[]);
    builder.build().map_err(|e| e.to_string())
}

/// The entry at `index` whose batches are `bytes` (its head and the batches after it, whole,
/// as the log stores them).
pub fn from_bytes(index: u64, bytes: Bytes) -> Result<Entry, String> {
    let head = RecordBatch::parse(&bytes).map_err(|e| format!("entry {index}: {e}"))?;
    let term = u64::try_from(head.partition_leader_epoch()).map_err(|_| {
        format!(
            "entry {index}: batch at offset {} has no leader epoch",
            head.base_offset()
        )
    })?;
    let alone = |kind: &str| {
        if head.size() == bytes.len() {
            Ok(())
        } else {
            Err(format!(
                "entry {index}: a {kind} entry at offset {} followed by other batches",
                head.base_offset()
            ))
        }
    };
    let payload = match raft_control(&head).map_err(|e| format!("entry {index}: {e}"))? {
        Some((RAFT_BLANK, _)) => {
            alone("blank")?;
            EntryPayload::Blank
        }
        Some((RAFT_MEMBERSHIP, value)) => {
            alone("membership")?;
            EntryPayload::Membership(decode_membership(&value).map_err(|e| {
                format!(
                    "entry {index}: membership at offset {}: {e}",
                    head.base_offset()
                )
            })?)
        }
        Some(_) => {
            for item in BatchIter::new(&bytes) {
                let (_, b) = item.map_err(|e| format!("entry {index}: {e:?}"))?;
                if i64::from(b.partition_leader_epoch()) != i64::from(head.partition_leader_epoch())
                {
                    return Err(format!(
                        "entry {index}: the batch at offset {} has leader epoch {}, its head {}",
                        b.base_offset(),
                        b.partition_leader_epoch(),
                        head.partition_leader_epoch()
                    ));
                }
            }
            EntryPayload::Normal(Request::Stored(bytes.clone()))
        }
        None => {
            return Err(format!(
                "entry {index}: the batch at offset {} is not the head of a raft entry",
                head.base_offset()
            ))
        }
    };
    Ok(Entry {
        log_id: log_id(term, index),
        payload,
    })
}

/// The type of a batch that heads a raft entry ([`RAFT_BLANK`], [`RAFT_MEMBERSHIP`],
/// [`RAFT_RUN`]); `None` for a client batch.
pub fn head_kind(batch: &RecordBatch<'_>) -> Result<Option<i16>, String> {
    Ok(raft_control(batch)?.map(|(kind, _)| kind))
}

/// The membership a batch holds, if it is a membership entry.
pub fn membership_of(batch: &RecordBatch<'_>) -> Result<Option<Membership<NodeId, Node>>, String> {
    match raft_control(batch)? {
        Some((RAFT_MEMBERSHIP, value)) => decode_membership(&value).map(Some),
        _ => Ok(None),
    }
}

fn decode_membership(value: &[u8]) -> Result<Membership<NodeId, Node>, String> {
    serde_json::from_slice(value).map_err(|e| e.to_string())
}

/// The type and value of a raft control batch (no producer, a control record of this crate's
/// types); `None` for every other batch.
fn raft_control(batch: &RecordBatch<'_>) -> Result<Option<(i16, Vec<u8>)>, String> {
    if !batch.is_control() || batch.producer_id() >= 0 || batch.records_count() != 1 {
        return Ok(None);
    }
    let buf = batch
        .records_buf_limited(MAX_CONTROL_BYTES)
        .map_err(|e| e.to_string())?;
    let record = match batch.iter_records(&buf).next() {
        Some(r) => r.map_err(|e| e.to_string())?,
        None => return Ok(None),
    };
    let Some(key) = record.key else {
        return Ok(None);
    };
    let key = ControlRecordKey::decode(key).map_err(|e| e.to_string())?;
    let kind = key.control_type.id();
    if !matches!(kind, RAFT_BLANK | RAFT_MEMBERSHIP | RAFT_RUN) {
        return Ok(None);
    }
    Ok(Some((kind, record.value.unwrap_or_default().to_vec())))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn data_batch(offset: i64, epoch: i32) -> Vec<u8> {
        let mut b = BatchBuilder::new()
            .base_offset(offset)
            .partition_leader_epoch(epoch);
        b.append(1_000, Some(b"k"), Some(b"v"), &[]);
        b.build().unwrap()
    }

    fn run_head(offset: i64, term: u64) -> Vec<u8> {
        head_batch(
            offset,
            term,
            &EntryPayload::Normal(Request::Produce {
                batches: Vec::new(),
                notice: 0,
            }),
        )
        .unwrap()
    }

    #[test]
    fn a_membership_entry_reads_back_as_written() {
        let m = Membership::<NodeId, Node>::new(vec![BTreeSet::from([1, 2, 3])], None);
        let bytes = head_batch(42, 7, &EntryPayload::Membership(m.clone())).unwrap();
        let entry = from_bytes(9, Bytes::from(bytes.clone())).unwrap();
        assert_eq!(entry.log_id, log_id(7, 9));
        assert!(matches!(entry.payload, EntryPayload::Membership(ref got) if *got == m));
        // Deterministic: another replica builds the same bytes.
        assert_eq!(
            head_batch(42, 7, &EntryPayload::Membership(m)).unwrap(),
            bytes
        );
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert_eq!(batch.base_offset(), 42);
        assert_eq!(batch.partition_leader_epoch(), 7);
        assert!(batch.is_control());
        assert_eq!(head_kind(&batch).unwrap(), Some(RAFT_MEMBERSHIP));
    }

    #[test]
    fn a_blank_entry_and_a_run_of_batches_read_back() {
        let blank = head_batch(0, 1, &EntryPayload::Blank).unwrap();
        assert!(matches!(
            from_bytes(0, Bytes::from(blank)).unwrap().payload,
            EntryPayload::Blank
        ));
        let mut run = run_head(5, 2);
        run.extend(data_batch(6, 2));
        run.extend(data_batch(7, 2));
        let run = Bytes::from(run);
        let e = from_bytes(3, run.clone()).unwrap();
        assert_eq!(e.log_id, log_id(2, 3));
        assert!(matches!(e.payload, EntryPayload::Normal(Request::Stored(ref got)) if *got == run));
        // A head alone: every batch of the entry was refused or a duplicate.
        let alone = Bytes::from(run_head(5, 2));
        assert!(matches!(
            from_bytes(3, alone).unwrap().payload,
            EntryPayload::Normal(Request::Stored(_))
        ));
    }

    #[test]
    fn what_is_not_an_entry_is_refused() {
        // A client batch without a head before it.
        let err = from_bytes(3, Bytes::from(data_batch(5, 2))).unwrap_err();
        assert!(err.contains("not the head of a raft entry"), "{err}");
        // A blank entry with batches after it.
        let mut b = head_batch(5, 2, &EntryPayload::Blank).unwrap();
        b.extend(data_batch(6, 2));
        let err = from_bytes(3, Bytes::from(b)).unwrap_err();
        assert!(err.contains("followed by other batches"), "{err}");
        // A run whose batch carries another term than its head.
        let mut run = run_head(5, 2);
        run.extend(data_batch(6, 3));
        let err = from_bytes(3, Bytes::from(run)).unwrap_err();
        assert!(err.contains("leader epoch 3, its head 2"), "{err}");
        // A head without a leader epoch.
        let mut b = BatchBuilder::new().base_offset(5);
        b.append(1_000, None, Some(b"v"), &[]);
        let err = from_bytes(3, Bytes::from(b.build().unwrap())).unwrap_err();
        assert!(err.contains("no leader epoch"), "{err}");
    }

    #[test]
    fn a_term_beyond_an_epoch_is_refused() {
        assert!(head_batch(0, u64::from(u32::MAX), &EntryPayload::Blank).is_err());
    }
}
