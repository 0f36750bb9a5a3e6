//! Kafka's records of a consumer-protocol group (KIP-848) in `__consumer_offsets`, as Kafka 4.4's
//! group coordinator writes them: the key's version is the record type, the key's fields are
//! classic (non-flexible) strings, every value is version 0 in the flexible encoding (compact
//! strings and arrays, tagged fields), laid out as the schemas of
//! `group-coordinator/src/main/resources/common/message/` say:
//!
//! | type | key fields          | value (version 0)                                              |
//! |------|---------------------|----------------------------------------------------------------|
//! | 3    | group               | `ConsumerGroupMetadataValue`: group epoch; tag 0 metadataHash  |
//! | 4    | group               | `ConsumerGroupPartitionMetadataValue` (read and ignored)       |
//! | 5    | group, member       | `ConsumerGroupMemberMetadataValue`: instance id, rack id,      |
//! |      |                     | client id, client host, topic names, regex, rebalance timeout, |
//! |      |                     | server assignor; tag 0 classic member metadata                 |
//! | 6    | group               | `ConsumerGroupTargetAssignmentMetadataValue`: assignment epoch;|
//! |      |                     | tag 0 assignmentTimestamp                                      |
//! | 7    | group, member       | `ConsumerGroupTargetAssignmentMemberValue`: \[topic id, \[p\]\]  |
//! | 8    | group, member       | `ConsumerGroupCurrentMemberAssignmentValue`: member epoch,     |
//! |      |                     | previous epoch, state, assigned and pending-revocation         |
//! |      |                     | \[topic id, \[p\]; tag 0 assignmentEpochs\]                    |
//!
//! A null value is a tombstone. What is written matches Kafka 4.4's bytes except for tagged
//! fields this broker has no value for, which are left out, as a field at its default is: the
//! group's `metadataHash` (Kafka's hash of the subscribed topics; 0 makes Kafka recompute it and
//! bump the epoch once) and the per-partition `assignmentEpochs`. Tagged fields read are skipped.

use uuid::Uuid;

use crate::consumer_group::Partitions;
use crate::record_codec::{reader_derefs, Input};

/// The record types (key versions) of a consumer group.
pub const GROUP_METADATA: i16 = 3;
pub const PARTITION_METADATA: i16 = 4;
pub const MEMBER_METADATA: i16 = 5;
pub const TARGET_ASSIGNMENT_METADATA: i16 = 6;
pub const TARGET_ASSIGNMENT_MEMBER: i16 = 7;
pub const CURRENT_MEMBER_ASSIGNMENT: i16 = 8;

/// The key of one record of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKey {
    /// Type 3: the group epoch.
    Group(String),
    /// Type 4: the subscribed topics' metadata (Kafka before 4.1); read, never written.
    PartitionMetadata(String),
    /// Type 5: a member's subscription and client.
    Member(String, String),
    /// Type 6: the target assignment's epoch.
    TargetAssignment(String),
    /// Type 7: a member's target assignment.
    TargetMember(String, String),
    /// Type 8: a member's epochs, state and current assignment.
    CurrentAssignment(String, String),
}

/// A member's subscription and client (type 5).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberRecord {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    /// `None` is written as Kafka does, as an empty string.
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
}

/// A member's reconciliation (type 8). `state` is Kafka's `MemberState` byte: 0 stable,
/// 1 unrevoked partitions, 2 unreleased partitions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CurrentAssignment {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: i8,
    pub assigned: Partitions,
    pub pending_revocation: Partitions,
}

/// The value of one record of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordValue {
    GroupEpoch(i32),
    /// Type 4's content is not used.
    PartitionMetadata,
    Member(MemberRecord),
    /// The assignment epoch and when it was computed (ms since the epoch, 0 if not known).
    TargetAssignment {
        epoch: i32,
        timestamp_ms: i64,
    },
    TargetMember(Partitions),
    CurrentAssignment(CurrentAssignment),
}

impl RecordKey {
    pub fn group(&self) -> &str {
        match self {
            RecordKey::Group(g)
            | RecordKey::PartitionMetadata(g)
            | RecordKey::TargetAssignment(g)
            | RecordKey::Member(g, _)
            | RecordKey::TargetMember(g, _)
            | RecordKey::CurrentAssignment(g, _) => g,
        }
    }

    fn record_type(&self) -> i16 {
        match self {
            RecordKey::Group(_) => GROUP_METADATA,
            RecordKey::PartitionMetadata(_) => PARTITION_METADATA,
            RecordKey::Member(..) => MEMBER_METADATA,
            RecordKey::TargetAssignment(_) => TARGET_ASSIGNMENT_METADATA,
            RecordKey::TargetMember(..) => TARGET_ASSIGNMENT_MEMBER,
            RecordKey::CurrentAssignment(..) => CURRENT_MEMBER_ASSIGNMENT,
        }
    }

    /// Where the record goes in a batch, as Kafka orders them: a member's tombstones from its
    /// assignment up to its subscription, then the group's (Kafka's replay refuses a member's
    /// tombstone while its assignment is there); new values from the subscription down to
    /// the current assignment, the group epoch before the target.
    pub fn write_rank(&self, tombstone: bool) -> u8 {
        match (tombstone, self) {
            (true, RecordKey::CurrentAssignment(..)) => 0,
            (true, RecordKey::TargetMember(..)) => 1,
            (true, RecordKey::TargetAssignment(_)) => 2,
            (true, RecordKey::Member(..)) => 3,
            (true, RecordKey::PartitionMetadata(_)) => 4,
            (true, RecordKey::Group(_)) => 5,
            (false, RecordKey::Member(..)) => 6,
            (false, RecordKey::Group(_)) => 7,
            (false, RecordKey::PartitionMetadata(_)) => 8,
            (false, RecordKey::TargetMember(..)) => 9,
            (false, RecordKey::TargetAssignment(_)) => 10,
            (false, RecordKey::CurrentAssignment(..)) => 11,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48);
        out.extend_from_slice(&self.record_type().to_be_bytes());
        let (group, member) = match self {
            RecordKey::Group(g)
            | RecordKey::PartitionMetadata(g)
            | RecordKey::TargetAssignment(g) => (g, None),
            RecordKey::Member(g, m)
            | RecordKey::TargetMember(g, m)
            | RecordKey::CurrentAssignment(g, m) => (g, Some(m)),
        };
        for s in std::iter::once(group).chain(member) {
            out.extend_from_slice(&(s.len() as i16).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        out
    }

    /// Decodes a key: `Ok(None)` if its type is not a consumer group's (3 to 8).
    pub fn decode(key: &[u8]) -> Result<Option<RecordKey>, String> {
        let mut r = Reader(Input(key));
        let record_type = r.i16("the key version")?;
        let key = match record_type {
            GROUP_METADATA => RecordKey::Group(r.string("the group")?),
            PARTITION_METADATA => RecordKey::PartitionMetadata(r.string("the group")?),
            TARGET_ASSIGNMENT_METADATA => RecordKey::TargetAssignment(r.string("the group")?),
            MEMBER_METADATA | TARGET_ASSIGNMENT_MEMBER | CURRENT_MEMBER_ASSIGNMENT => {
                let group = r.string("the group")?;
                let member = r.string("the member id")?;
                match record_type {
                    MEMBER_METADATA => RecordKey::Member(group, member),
                    TARGET_ASSIGNMENT_MEMBER => RecordKey::TargetMember(group, member),
                    _ => RecordKey::CurrentAssignment(group, member),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(key))
    }
}

impl RecordValue {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0, 0];
        match self {
            RecordValue::GroupEpoch(epoch) => {
                out.extend_from_slice(&epoch.to_be_bytes());
                out.push(0);
            }
            RecordValue::PartitionMetadata => {
                // Never written; an empty topic list if it were.
                out.extend_from_slice(&[1, 0]);
            }
            RecordValue::Member(m) => {
                put_nullable(&mut out, m.instance_id.as_deref());
                put_nullable(&mut out, m.rack_id.as_deref());
                put_nullable(&mut out, Some(&m.client_id));
                put_nullable(&mut out, Some(&m.client_host));
                put_varint(&mut out, m.subscribed_topic_names.len() as u32 + 1);
                for name in &m.subscribed_topic_names {
                    put_nullable(&mut out, Some(name));
                }
                put_nullable(
                    &mut out,
                    Some(m.subscribed_topic_regex.as_deref().unwrap_or("")),
                );
                out.extend_from_slice(&m.rebalance_timeout_ms.to_be_bytes());
                put_nullable(&mut out, m.server_assignor.as_deref());
                // Tag 0, ClassicMemberMetadata, null: Kafka 4.4 writes it so (1 byte, 0).
                out.extend_from_slice(&[1, 0, 1, 0]);
            }
            RecordValue::TargetAssignment {
                epoch,
                timestamp_ms,
            } => {
                out.extend_from_slice(&epoch.to_be_bytes());
                if *timestamp_ms == 0 {
                    out.push(0);
                } else {
                    out.extend_from_slice(&[1, 0, 8]);
                    out.extend_from_slice(&timestamp_ms.to_be_bytes());
                }
            }
            RecordValue::TargetMember(partitions) => {
                put_partitions(&mut out, partitions);
                out.push(0);
            }
            RecordValue::CurrentAssignment(c) => {
                out.extend_from_slice(&c.member_epoch.to_be_bytes());
                out.extend_from_slice(&c.previous_member_epoch.to_be_bytes());
                out.push(c.state as u8);
                put_partitions(&mut out, &c.assigned);
                put_partitions(&mut out, &c.pending_revocation);
                out.push(0);
            }
        }
        out
    }

    /// Decodes the value of a record with `key` (value version 0).
    pub fn decode(key: &RecordKey, value: &[u8]) -> Result<RecordValue, String> {
        let mut r = Reader(Input(value));
        let version = r.i16("the value version")?;
        if version != 0 {
            return Err(format!(
                "consumer group record type {} value version {version}, 0 is known",
                key.record_type()
            ));
        }
        let value = match key {
            RecordKey::Group(_) => {
                let epoch = r.i32("the group epoch")?;
                r.tagged_fields("the group's tagged fields")?;
                RecordValue::GroupEpoch(epoch)
            }
            RecordKey::PartitionMetadata(_) => RecordValue::PartitionMetadata,
            RecordKey::Member(..) => {
                let instance_id = r.nullable_string("the instance id")?;
                let rack_id = r.nullable_string("the rack id")?;
                let client_id = r.compact_string("the client id")?;
                let client_host = r.compact_string("the client host")?;
                let count = r.array_length("the subscribed topics")?;
                let mut subscribed_topic_names = Vec::with_capacity(count.min(1024));
                for _ in 0..count {
                    subscribed_topic_names.push(r.compact_string("a subscribed topic")?);
                }
                let subscribed_topic_regex = r
                    .nullable_string("the subscribed regex")?
                    .filter(|s| !s.is_empty());
                let rebalance_timeout_ms = r.i32("the rebalance timeout")?;
                let server_assignor = r.nullable_string("the server assignor")?;
                r.tagged_fields("the member's tagged fields")?;
                RecordValue::Member(MemberRecord {
                    instance_id,
                    rack_id,
                    client_id,
                    client_host,
                    subscribed_topic_names,
                    subscribed_topic_regex,
                    rebalance_timeout_ms,
                    server_assignor,
                })
            }
            RecordKey::TargetAssignment(_) => {
                let epoch = r.i32("the assignment epoch")?;
                let mut timestamp_ms = 0;
                r.tagged(|tag, field| {
                    if tag == 0 && field.len() == 8 {
                        timestamp_ms = i64::from_be_bytes(field.try_into().expect("8 bytes"));
                    }
                })?;
                RecordValue::TargetAssignment {
                    epoch,
                    timestamp_ms,
                }
            }
            RecordKey::TargetMember(..) => {
                let partitions = r.partitions("the target assignment")?;
                r.tagged_fields("the target's tagged fields")?;
                RecordValue::TargetMember(partitions)
            }
            RecordKey::CurrentAssignment(..) => {
                let member_epoch = r.i32("the member epoch")?;
                let previous_member_epoch = r.i32("the previous member epoch")?;
                let state = r.take(1, "the member state")?[0] as i8;
                let assigned = r.partitions("the assigned partitions")?;
                let pending_revocation = r.partitions("the partitions pending revocation")?;
                r.tagged_fields("the assignment's tagged fields")?;
                RecordValue::CurrentAssignment(CurrentAssignment {
                    member_epoch,
                    previous_member_epoch,
                    state,
                    assigned,
                    pending_revocation,
                })
            }
        };
        if !r.is_empty() {
            return Err(format!(
                "{} bytes after a consumer group record of type {}",
                r.len(),
                key.record_type()
            ));
        }
        Ok(value)
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A compact (nullable) string: length + 1 as an unsigned varint, 0 for null.
fn put_nullable(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            put_varint(out, s.len() as u32 + 1);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// A compact array of `TopicPartitions` (topic id, compact int32 array, no tagged field).
fn put_partitions(out: &mut Vec<u8>, partitions: &Partitions) {
    put_varint(out, partitions.len() as u32 + 1);
    for (topic, ps) in partitions {
        out.extend_from_slice(topic.as_bytes());
        put_varint(out, ps.len() as u32 + 1);
        for p in ps {
            out.extend_from_slice(&p.to_be_bytes());
        }
        out.push(0);
    }
}

struct Reader<'a>(Input<'a>);

reader_derefs!(Reader, 0);

impl Reader<'_> {
    /// A classic (non-flexible) string, as the keys hold.
    fn string(&mut self, what: &str) -> Result<String, String> {
        let len = self.i16(what)?;
        let len = usize::try_from(len).map_err(|_| format!("{what} is null"))?;
        self.utf8(len, what)
    }
    fn nullable_string(&mut self, what: &str) -> Result<Option<String>, String> {
        let Some(len) = (self.varint(what)? as usize).checked_sub(1) else {
            return Ok(None);
        };
        self.utf8(len, what).map(Some)
    }
    fn compact_string(&mut self, what: &str) -> Result<String, String> {
        self.nullable_string(what)?
            .ok_or_else(|| format!("{what} is null"))
    }
    fn array_length(&mut self, what: &str) -> Result<usize, String> {
        (self.varint(what)? as usize)
            .checked_sub(1)
            .ok_or_else(|| format!("{what} is null"))
    }
    fn partitions(&mut self, what: &str) -> Result<Partitions, String> {
        let mut out = Partitions::new();
        for _ in 0..self.array_length(what)? {
            let id = Uuid::from_slice(self.take(16, what)?).map_err(|e| format!("{what}: {e}"))?;
            let set = out.entry(id).or_default();
            for _ in 0..self.array_length(what)? {
                set.insert(self.i32(what)?);
            }
            self.tagged_fields(what)?;
        }
        Ok(out)
    }
    fn tagged(&mut self, mut field: impl FnMut(u32, &[u8])) -> Result<(), String> {
        let what = "a tagged field";
        for _ in 0..self.varint(what)? {
            let tag = self.varint(what)?;
            let size = self.varint(what)? as usize;
            field(tag, self.take(size, what)?);
        }
        Ok(())
    }
    /// Tagged fields this broker does not use: skipped.
    fn tagged_fields(&mut self, what: &str) -> Result<(), String> {
        self.tagged(|_, _| {}).map_err(|e| format!("{what}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn hex(t: &str) -> Vec<u8> {
        (0..t.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn every_record_reads_back_as_written_and_every_truncation_is_refused() {
        let t = Uuid::from_u128(7);
        let records = [
            (RecordKey::Group("g".into()), RecordValue::GroupEpoch(4)),
            (
                RecordKey::Member("g".into(), "m".into()),
                RecordValue::Member(MemberRecord {
                    instance_id: Some("i".into()),
                    rack_id: None,
                    client_id: "c".into(),
                    client_host: "/h".into(),
                    subscribed_topic_names: vec!["a".into(), "b".into()],
                    subscribed_topic_regex: Some("x.*".into()),
                    rebalance_timeout_ms: 1000,
                    server_assignor: Some("range".into()),
                }),
            ),
            (
                RecordKey::TargetAssignment("g".into()),
                RecordValue::TargetAssignment {
                    epoch: 4,
                    timestamp_ms: 1_700_000_000_000,
                },
            ),
            (
                RecordKey::TargetMember("g".into(), "m".into()),
                RecordValue::TargetMember([(t, BTreeSet::from([0, 2]))].into()),
            ),
            (
                RecordKey::CurrentAssignment("g".into(), "m".into()),
                RecordValue::CurrentAssignment(CurrentAssignment {
                    member_epoch: 4,
                    previous_member_epoch: 3,
                    state: 1,
                    assigned: [(t, BTreeSet::from([0]))].into(),
                    pending_revocation: [(t, BTreeSet::from([1]))].into(),
                }),
            ),
        ];
        for (key, value) in records {
            let kb = key.encode();
            assert_eq!(RecordKey::decode(&kb).unwrap(), Some(key.clone()));
            let vb = value.encode();
            assert_eq!(RecordValue::decode(&key, &vb).unwrap(), value);
            for end in 0..vb.len() {
                assert!(
                    RecordValue::decode(&key, &vb[..end]).is_err(),
                    "{key:?} cut at {end}"
                );
            }
        }
        assert_eq!(RecordKey::decode(&[0, 1, 0, 0]).unwrap(), None);
    }

    /// Records from a Kafka 4.4.0 broker's `__consumer_offsets-0` after a VerifiableConsumer
    /// run with `--group-protocol consumer` (group cg1, topic cgt of 3 partitions, a static
    /// member `inst-a` and a dynamic one that joined and left).
    #[test]
    fn kafka_4_4s_records_decode_and_are_written_byte_for_byte() {
        let topic = Uuid::from_slice(&hex("a84358d6c7294510a769efd686aab8a7")).unwrap();
        let member = "zb9t3t_xQlmq2mY4NWRDTQ";
        let member_key = hex("0005000363673100167a62397433745f78516c6d71326d59344e5752445451");
        assert_eq!(
            RecordKey::decode(&member_key).unwrap(),
            Some(RecordKey::Member("cg1".into(), member.into()))
        );
        assert_eq!(
            RecordKey::Member("cg1".into(), member.into()).encode(),
            member_key
        );
        // Exact: the member's subscription (regex written as "", classic metadata tag 0).
        let subscription = hex(
            "000007696e73742d610014636f6e73756d65722d6367312d696e73742d610b2f3132372e302e302e310204636774010004\
             93e00001000100",
        );
        let value = RecordValue::Member(MemberRecord {
            instance_id: Some("inst-a".into()),
            rack_id: None,
            client_id: "consumer-cg1-inst-a".into(),
            client_host: "/127.0.0.1".into(),
            subscribed_topic_names: vec!["cgt".into()],
            subscribed_topic_regex: None,
            rebalance_timeout_ms: 300_000,
            server_assignor: None,
        });
        let key = RecordKey::Member("cg1".into(), member.into());
        assert_eq!(RecordValue::decode(&key, &subscription).unwrap(), value);
        assert_eq!(value.encode(), subscription);
        // Exact: a target assignment of partitions 0 to 2.
        let key = RecordKey::TargetMember("cg1".into(), member.into());
        let target = hex("000002a84358d6c7294510a769efd686aab8a7040000000000000001000000020000");
        let value = RecordValue::TargetMember([(topic, BTreeSet::from([0, 1, 2]))].into());
        assert_eq!(RecordValue::decode(&key, &target).unwrap(), value);
        assert_eq!(value.encode(), target);
        // Exact: an empty group's epoch and target epoch (no hash, no timestamp).
        let key = RecordKey::Group("cg1".into());
        assert_eq!(key.encode(), hex("00030003636731"));
        assert_eq!(
            RecordValue::decode(&key, &hex("00000000000500")).unwrap(),
            RecordValue::GroupEpoch(5)
        );
        assert_eq!(RecordValue::GroupEpoch(5).encode(), hex("00000000000500"));
        let key = RecordKey::TargetAssignment("cg1".into());
        assert_eq!(key.encode(), hex("00060003636731"));
        let no_time = RecordValue::TargetAssignment {
            epoch: 5,
            timestamp_ms: 0,
        };
        assert_eq!(
            RecordValue::decode(&key, &hex("00000000000500")).unwrap(),
            no_time
        );
        assert_eq!(no_time.encode(), hex("00000000000500"));
        // Exact: a target epoch with its timestamp (tag 0).
        let timed = hex("000000000002010008000001a24a0ca1b1");
        let value = RecordValue::TargetAssignment {
            epoch: 2,
            timestamp_ms: 0x01a2_4a0c_a1b1,
        };
        assert_eq!(RecordValue::decode(&key, &timed).unwrap(), value);
        assert_eq!(value.encode(), timed);
        // The group epoch with Kafka's metadataHash (tag 0): read, the hash skipped.
        let key = RecordKey::Group("cg1".into());
        let hashed = hex("000000000002010008c217206638b591f7");
        assert_eq!(
            RecordValue::decode(&key, &hashed).unwrap(),
            RecordValue::GroupEpoch(2)
        );
        // Exact: a member in UNRELEASED_PARTITIONS with nothing assigned yet.
        let key = RecordKey::CurrentAssignment("cg1".into(), "eJnaaD45Q5advkYRsnJSsQ".into());
        let unreleased = hex("0000000000030000000002010100");
        let value = RecordValue::CurrentAssignment(CurrentAssignment {
            member_epoch: 3,
            previous_member_epoch: 0,
            state: 2,
            ..CurrentAssignment::default()
        });
        assert_eq!(RecordValue::decode(&key, &unreleased).unwrap(), value);
        assert_eq!(value.encode(), unreleased);
        // A member revoking partition 2 while it keeps 0 and 1, with Kafka's per-partition
        // assignment epochs (tag 0 of each topic): read, the epochs skipped; written without.
        let key = RecordKey::CurrentAssignment("cg1".into(), member.into());
        let revoking = hex(
            "000000000002000000020102a84358d6c7294510a769efd686aab8a703000000000000000101000903000000020000\
             000202a84358d6c7294510a769efd686aab8a70200000002010005020000000200",
        );
        let value = RecordValue::CurrentAssignment(CurrentAssignment {
            member_epoch: 2,
            previous_member_epoch: 2,
            state: 1,
            assigned: [(topic, BTreeSet::from([0, 1]))].into(),
            pending_revocation: [(topic, BTreeSet::from([2]))].into(),
        });
        assert_eq!(RecordValue::decode(&key, &revoking).unwrap(), value);
        let without_epochs = hex(
            "000000000002000000020102a84358d6c7294510a769efd686aab8a70300000000000000010002a84358d6c7294510\
             a769efd686aab8a702000000020000",
        );
        assert_eq!(value.encode(), without_epochs);
        // A static member that left with epoch -2.
        let left = hex(
            "0000fffffffe000000030002a84358d6c7294510a769efd686aab8a70400000000000000010000000201000d04\
             0000000000000000000000000100",
        );
        let RecordValue::CurrentAssignment(c) = RecordValue::decode(&key, &left).unwrap() else {
            panic!("not a current assignment");
        };
        assert_eq!((c.member_epoch, c.previous_member_epoch), (-2, 3));
        assert_eq!(c.assigned[&topic], BTreeSet::from([0, 1, 2]));
    }
}
