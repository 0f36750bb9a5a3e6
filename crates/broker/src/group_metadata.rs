//! Kafka's `GroupMetadataValue`, the value of a group-metadata record (key version 2,
//! `offsets_log::encode_group_key`) in `__consumer_offsets`: a classic group's generation,
//! protocol, leader and every member with its subscription and assignment. Kafka 4.4 writes
//! value version 3 (`MetadataVersion.groupMetadataValueVersion`, the newest non-flexible one);
//! versions 0 to 4 are read (4 is the flexible encoding of the same fields), as Kafka's
//! group-coordinator schema `GroupMetadataValue.json` lays them out:
//!
//! - v0: protocolType, generation, protocol (nullable), leader (nullable), members
//!   (memberId, clientId, clientHost, sessionTimeout, subscription, assignment);
//! - v1: a member's rebalanceTimeout before its sessionTimeout;
//! - v2: currentStateTimestamp after the leader;
//! - v3: a member's groupInstanceId (nullable) after its memberId;
//! - v4: the v3 fields in compact encodings, with tagged fields.

use bytes::Bytes;

use crate::record_codec::{put_string, reader_derefs, Input};

/// The value version written, as Kafka 4.4 writes it.
pub const VALUE_VERSION: i16 = 3;

/// A group as its record stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// Empty for a group whose members never chose one.
    pub protocol_type: String,
    pub generation: i32,
    /// The chosen protocol (assignor): `None` in an empty group.
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// When the group entered its current state (ms since the epoch), -1 if not known.
    pub current_state_timestamp: i64,
    pub members: Vec<MemberMetadata>,
}

/// A member as its group's record stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    /// `group.instance.id` of a static member (KIP-345).
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the chosen protocol (a consumer's subscription).
    pub subscription: Bytes,
    pub assignment: Bytes,
}

fn put_nullable(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_string(out, s),
        None => out.extend_from_slice(&(-1i16).to_be_bytes()),
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as i32).to_be_bytes());
    out.extend_from_slice(b);
}

/// The record's value, version 3.
pub fn encode_value(g: &GroupMetadata) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&VALUE_VERSION.to_be_bytes());
    put_string(&mut out, &g.protocol_type);
    out.extend_from_slice(&g.generation.to_be_bytes());
    put_nullable(&mut out, g.protocol.as_deref());
    put_nullable(&mut out, g.leader.as_deref());
    out.extend_from_slice(&g.current_state_timestamp.to_be_bytes());
    out.extend_from_slice(&(g.members.len() as i32).to_be_bytes());
    for m in &g.members {
        put_string(&mut out, &m.member_id);
        put_nullable(&mut out, m.group_instance_id.as_deref());
        put_string(&mut out, &m.client_id);
        put_string(&mut out, &m.client_host);
        out.extend_from_slice(&m.rebalance_timeout_ms.to_be_bytes());
        out.extend_from_slice(&m.session_timeout_ms.to_be_bytes());
        put_bytes(&mut out, &m.subscription);
        put_bytes(&mut out, &m.assignment);
    }
    out
}

/// Reads a value, classic or flexible (compact) encoding.
struct Reader<'a> {
    input: Input<'a>,
    flexible: bool,
}

reader_derefs!(Reader, input);

impl Reader<'_> {
    /// A length: `None` is null (-1, or 0 in the compact encoding).
    fn length(&mut self, wide: bool, what: &str) -> Result<Option<usize>, String> {
        let len = if self.flexible {
            i64::from(self.varint(what)?) - 1
        } else if wide {
            i64::from(self.i32(what)?)
        } else {
            i64::from(self.i16(what)?)
        };
        Ok(usize::try_from(len).ok())
    }
    fn nullable_string(&mut self, what: &str) -> Result<Option<String>, String> {
        let Some(len) = self.length(false, what)? else {
            return Ok(None);
        };
        self.utf8(len, what).map(Some)
    }
    fn string(&mut self, what: &str) -> Result<String, String> {
        self.nullable_string(what)?
            .ok_or_else(|| format!("{what} is null"))
    }
    fn bytes(&mut self, what: &str) -> Result<Bytes, String> {
        let len = self
            .length(true, what)?
            .ok_or_else(|| format!("{what} is null"))?;
        Ok(Bytes::copy_from_slice(self.take(len, what)?))
    }
    /// The tagged fields ending a flexible struct: none is known, all are skipped.
    fn tagged_fields(&mut self, what: &str) -> Result<(), String> {
        if !self.flexible {
            return Ok(());
        }
        for _ in 0..self.varint(what)? {
            self.varint(what)?;
            let size = self.varint(what)? as usize;
            self.take(size, what)?;
        }
        Ok(())
    }
}

/// Decodes a record's value, versions 0 to 4.
pub fn decode_value(value: &[u8]) -> Result<GroupMetadata, String> {
    let mut r = Reader {
        input: Input(value),
        flexible: false,
    };
    let version = r.i16("the value version")?;
    if !(0..=4).contains(&version) {
        return Err(format!(
            "group metadata value version {version}, 0 to 4 are known"
        ));
    }
    r.flexible = version >= 4;
    let protocol_type = r.string("the protocol type")?;
    let generation = r.i32("the generation")?;
    let protocol = r.nullable_string("the protocol")?;
    let leader = r.nullable_string("the leader")?;
    let current_state_timestamp = if version >= 2 {
        r.i64("the current state timestamp")?
    } else {
        -1
    };
    let count = r
        .length(true, "the member count")?
        .ok_or("the members are null")?;
    let mut members = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let member_id = r.string("a member id")?;
        let group_instance_id = if version >= 3 {
            r.nullable_string("a group instance id")?
        } else {
            None
        };
        let client_id = r.string("a client id")?;
        let client_host = r.string("a client host")?;
        let rebalance_timeout = (version >= 1)
            .then(|| r.i32("a rebalance timeout"))
            .transpose()?;
        let session_timeout_ms = r.i32("a session timeout")?;
        let subscription = r.bytes("a subscription")?;
        let assignment = r.bytes("an assignment")?;
        r.tagged_fields("a member's tagged fields")?;
        members.push(MemberMetadata {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            // Version 0 has none: Kafka takes the session timeout.
            rebalance_timeout_ms: rebalance_timeout.unwrap_or(session_timeout_ms),
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    r.tagged_fields("the tagged fields")?;
    Ok(GroupMetadata {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp,
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GroupMetadata {
        GroupMetadata {
            protocol_type: "consumer".into(),
            generation: 7,
            protocol: Some("range".into()),
            leader: Some("c-1".into()),
            current_state_timestamp: 1_700_000_000_000,
            members: vec![MemberMetadata {
                member_id: "c-1".into(),
                group_instance_id: Some("i".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 60_000,
                session_timeout_ms: 10_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"as"),
            }],
        }
    }

    #[test]
    fn version_3_reads_back_as_written_and_every_truncation_is_refused() {
        let g = sample();
        let bytes = encode_value(&g);
        assert_eq!(&bytes[..2], &[0, 3]);
        assert_eq!(decode_value(&bytes).unwrap(), g);
        for end in 0..bytes.len() {
            assert!(decode_value(&bytes[..end]).is_err(), "cut at {end}");
        }
        let mut v9 = bytes.clone();
        v9[1] = 9;
        assert!(decode_value(&v9).unwrap_err().contains("version 9"));
    }

    #[test]
    fn the_flexible_version_4_reads_the_same_fields() {
        // protocolType "consumer", generation 7, protocol "range", leader "c-1", timestamp,
        // one member, with a tagged field at the end of the member and none at the end.
        let mut v4 = vec![0, 4, 9];
        v4.extend_from_slice(b"consumer");
        v4.extend_from_slice(&7i32.to_be_bytes());
        v4.push(6);
        v4.extend_from_slice(b"range");
        v4.push(4);
        v4.extend_from_slice(b"c-1");
        v4.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        v4.push(2); // one member
        v4.push(4);
        v4.extend_from_slice(b"c-1");
        v4.push(2);
        v4.extend_from_slice(b"i");
        v4.push(2);
        v4.extend_from_slice(b"c");
        v4.push(11);
        v4.extend_from_slice(b"/127.0.0.1");
        v4.extend_from_slice(&60_000i32.to_be_bytes());
        v4.extend_from_slice(&10_000i32.to_be_bytes());
        v4.push(4);
        v4.extend_from_slice(b"sub");
        v4.push(3);
        v4.extend_from_slice(b"as");
        v4.extend_from_slice(&[1, 5, 2, 0xaa, 0xbb]); // one unknown tagged field
        v4.push(0);
        assert_eq!(decode_value(&v4).unwrap(), sample());
    }

    #[test]
    fn version_0_takes_the_session_timeout_as_the_rebalance_timeout() {
        let mut v0 = vec![0, 0];
        put_string(&mut v0, "consumer");
        v0.extend_from_slice(&1i32.to_be_bytes());
        put_nullable(&mut v0, None);
        put_nullable(&mut v0, None);
        v0.extend_from_slice(&1i32.to_be_bytes());
        put_string(&mut v0, "m");
        put_string(&mut v0, "c");
        put_string(&mut v0, "/h");
        v0.extend_from_slice(&10_000i32.to_be_bytes());
        put_bytes(&mut v0, b"");
        put_bytes(&mut v0, b"");
        let g = decode_value(&v0).unwrap();
        assert_eq!(g.current_state_timestamp, -1);
        assert_eq!(g.members[0].rebalance_timeout_ms, 10_000);
        assert_eq!(g.members[0].group_instance_id, None);
    }
}
