//! Raft entries as the partition's batches (docs/design.md, "Replication on openraft"): one
//! entry is one RecordBatch v2, its term the batch's partitionLeaderEpoch. A client's batch is
//! stored as the leader's log writes it; openraft's own entries (the blank entry a new leader
//! writes, a membership change) are control batches of types Kafka does not define, which
//! consumers skip like every control batch. They are built from the entry alone, so every
//! replica writes the same bytes at the same offset.

use bytes::Bytes;
use oncelog::format::{BatchBuilder, ControlRecordKey, ControlType, RecordBatch};
use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership};

use crate::{Node, NodeId, Request, TypeConfig};

/// Control record type of a blank entry: the one a new leader appends to commit its term, and
/// the one that takes the index of a client batch the leader's log refused (a duplicate, a
/// sequence error), so that the indexes stay dense.
pub const RAFT_BLANK: i16 = 100;
/// Control record type of a membership entry; the record's value is the membership as JSON.
pub const RAFT_MEMBERSHIP: i16 = 101;

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

/// The control batch of a blank or membership entry at `offset`.
pub fn control_batch(
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
        EntryPayload::Normal(_) => return Err("a normal entry is not a control batch".into()),
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

/// The entry at `index` whose batch is `bytes` (one whole batch, as the log stores it).
pub fn from_batch(index: u64, bytes: Bytes) -> Result<Entry, String> {
    let batch = RecordBatch::parse(&bytes).map_err(|e| format!("entry {index}: {e}"))?;
    let term = u64::try_from(batch.partition_leader_epoch()).map_err(|_| {
        format!(
            "entry {index}: batch at offset {} has no leader epoch",
            batch.base_offset()
        )
    })?;
    let payload = match raft_control(&batch).map_err(|e| format!("entry {index}: {e}"))? {
        Some((RAFT_BLANK, _)) => EntryPayload::Blank,
        Some((_, value)) => EntryPayload::Membership(decode_membership(&value).map_err(|e| {
            format!(
                "entry {index}: membership at offset {}: {e}",
                batch.base_offset()
            )
        })?),
        None => EntryPayload::Normal(Request::Stored(bytes.clone())),
    };
    Ok(Entry {
        log_id: log_id(term, index),
        payload,
    })
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
    if kind != RAFT_BLANK && kind != RAFT_MEMBERSHIP {
        return Ok(None);
    }
    Ok(Some((kind, record.value.unwrap_or_default().to_vec())))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn a_membership_entry_reads_back_as_written() {
        let m = Membership::<NodeId, Node>::new(vec![BTreeSet::from([1, 2, 3])], None);
        let bytes = control_batch(42, 7, &EntryPayload::Membership(m.clone())).unwrap();
        let entry = from_batch(9, Bytes::from(bytes.clone())).unwrap();
        assert_eq!(entry.log_id, log_id(7, 9));
        assert!(matches!(entry.payload, EntryPayload::Membership(ref got) if *got == m));
        // Deterministic: another replica builds the same bytes.
        assert_eq!(
            control_batch(42, 7, &EntryPayload::Membership(m)).unwrap(),
            bytes
        );
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert_eq!(batch.base_offset(), 42);
        assert_eq!(batch.partition_leader_epoch(), 7);
        assert!(batch.is_control());
    }

    #[test]
    fn a_blank_entry_and_a_data_batch_read_back() {
        let blank = control_batch(0, 1, &EntryPayload::Blank).unwrap();
        assert!(matches!(
            from_batch(0, Bytes::from(blank)).unwrap().payload,
            EntryPayload::Blank
        ));
        let mut b = BatchBuilder::new().base_offset(5).partition_leader_epoch(2);
        b.append(1_000, Some(b"k"), Some(b"v"), &[]);
        let data = Bytes::from(b.build().unwrap());
        let e = from_batch(3, data.clone()).unwrap();
        assert_eq!(e.log_id, log_id(2, 3));
        assert!(
            matches!(e.payload, EntryPayload::Normal(Request::Stored(ref got)) if *got == data)
        );
    }

    #[test]
    fn a_batch_without_a_leader_epoch_is_not_an_entry() {
        let mut b = BatchBuilder::new().base_offset(5);
        b.append(1_000, None, Some(b"v"), &[]);
        let err = from_batch(3, Bytes::from(b.build().unwrap())).unwrap_err();
        assert!(err.contains("no leader epoch"), "{err}");
    }

    #[test]
    fn a_term_beyond_an_epoch_is_refused() {
        assert!(control_batch(0, u64::from(u32::MAX), &EntryPayload::Blank).is_err());
    }
}
