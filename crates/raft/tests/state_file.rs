//! `raft-state.json` is never read as anything but what was written: `{}`,
//! a missing field, a value of the wrong type, an unknown field, or any single flipped bit is
//! a typed error naming the file (and the field), never a default, so a replica cannot forget
//! its vote and vote twice in a term.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use oncelog_raft::state_file::{
    decode, encode, Purged, StateFile, StateFileError, FIELDS, STATE_FILE,
};
use oncelog_raft::Node;
use openraft::{CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership, Vote};

fn path() -> &'static Path {
    Path::new("/p/topic-0/raft-state.json")
}

fn membership() -> StoredMembership<u64, Node> {
    let nodes: BTreeMap<u64, Node> = (1..=3)
        .map(|i| (i, Node::new(format!("127.0.0.1:90{i}0"))))
        .collect();
    let voters = BTreeSet::from([1, 2, 3]);
    StoredMembership::new(
        Some(LogId::new(CommittedLeaderId::new(2, 1), 7)),
        Membership::new(vec![voters], nodes),
    )
}

/// A state with every field set.
fn full() -> StateFile {
    let mut vote = Vote::new(5, 2);
    vote.commit();
    StateFile {
        vote: Some(vote),
        purged: Some(Purged {
            log_id: LogId::new(CommittedLeaderId::new(4, 2), 40),
            end_offset: 1234,
            membership: membership(),
            more_end_offsets: Vec::new(),
        }),
        installing: Some(SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(5, 2), 60)),
            last_membership: membership(),
            snapshot_id: "5-2-60".into(),
        }),
    }
}

fn assert_names_file(e: &StateFileError) {
    assert!(e.to_string().contains(STATE_FILE), "{e}");
}

/// [`full`] for a partition set of three partitions.
fn full_set() -> StateFile {
    let mut state = full();
    if let Some(p) = state.purged.as_mut() {
        p.more_end_offsets = vec![7, 0];
    }
    state
}

#[test]
fn a_written_state_reads_back_as_written() {
    for state in [StateFile::default(), full(), full_set()] {
        let bytes = encode(&state).unwrap();
        assert_eq!(decode(path(), &bytes).unwrap(), state);
        // Readable JSON, the checksum a field of it.
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains("\"crc32c\""), "{text}");
        assert!(text.contains("\"vote\""), "{text}");
    }
}

#[test]
fn an_empty_object_is_refused_not_read_as_a_fresh_replica() {
    let e = decode(path(), b"{}").unwrap_err();
    assert!(
        matches!(e, StateFileError::MissingField { field: "vote", .. }),
        "{e:?}"
    );
    assert_names_file(&e);
}

#[test]
fn each_missing_field_is_named() {
    let value: serde_json::Value = serde_json::from_slice(&encode(&full()).unwrap()).unwrap();
    for field in FIELDS.iter().copied().chain(["crc32c"]) {
        let mut v = value.clone();
        v.as_object_mut().unwrap().remove(field);
        let e = decode(path(), &serde_json::to_vec(&v).unwrap()).unwrap_err();
        match &e {
            StateFileError::MissingField { field: f, .. } => assert_eq!(*f, field),
            other => panic!("{field}: {other:?}"),
        }
        assert_names_file(&e);
        assert!(e.to_string().contains(field), "{e}");
    }
}

#[test]
fn each_field_of_the_wrong_type_is_named() {
    let value: serde_json::Value = serde_json::from_slice(&encode(&full()).unwrap()).unwrap();
    let wrong = [
        serde_json::json!("text"),
        serde_json::json!(-1),
        serde_json::json!(1.5),
        serde_json::json!({"x": 1}),
        serde_json::json!([1, 2]),
        serde_json::json!(true),
    ];
    for field in FIELDS.iter().copied().chain(["crc32c"]) {
        for w in &wrong {
            let mut v = value.clone();
            v.as_object_mut().unwrap().insert(field.into(), w.clone());
            let e = decode(path(), &serde_json::to_vec(&v).unwrap()).unwrap_err();
            match &e {
                StateFileError::BadField { field: f, .. } => assert_eq!(*f, field, "{w}"),
                other => panic!("{field} = {w}: {other:?}"),
            }
            assert_names_file(&e);
        }
    }
    // A null where a value is required (the checksum).
    let mut v = value.clone();
    v.as_object_mut()
        .unwrap()
        .insert("crc32c".into(), serde_json::Value::Null);
    assert!(matches!(
        decode(path(), &serde_json::to_vec(&v).unwrap()),
        Err(StateFileError::BadField { .. })
    ));
}

#[test]
fn an_unknown_field_or_a_file_without_a_checksum_is_refused() {
    let mut v: serde_json::Value = serde_json::from_slice(&encode(&full()).unwrap()).unwrap();
    v.as_object_mut()
        .unwrap()
        .insert("voted_for".into(), serde_json::json!(3));
    assert!(matches!(
        decode(path(), &serde_json::to_vec(&v).unwrap()),
        Err(StateFileError::UnknownField { ref field, .. }) if field == "voted_for"
    ));
    // The format before the checksum: the state alone.
    let old = serde_json::to_vec_pretty(&full()).unwrap();
    assert!(matches!(
        decode(path(), &old),
        Err(StateFileError::MissingField {
            field: "crc32c",
            ..
        })
    ));
    for bad in [&b""[..], b"null", b"[]", b"7", b"{\"vote\": 7"] {
        let e = decode(path(), bad).unwrap_err();
        assert!(matches!(e, StateFileError::Malformed { .. }), "{e:?}");
        assert_names_file(&e);
    }
}

#[test]
fn a_changed_value_with_the_old_checksum_is_damage() {
    let mut v: serde_json::Value = serde_json::from_slice(&encode(&full()).unwrap()).unwrap();
    // An older term: what a replica that forgot its vote would act on.
    v["vote"]["leader_id"]["term"] = serde_json::json!(4);
    assert!(matches!(
        decode(path(), &serde_json::to_vec(&v).unwrap()),
        Err(StateFileError::Checksum { .. })
    ));
}

/// Every single-bit flip of a written file, with every field set and with none: an error,
/// never a state.
#[test]
fn every_flipped_bit_is_an_error() {
    for state in [StateFile::default(), full()] {
        let bytes = encode(&state).unwrap();
        let mut flips = 0;
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                match decode(path(), &b) {
                    Err(e) => assert_names_file(&e),
                    Ok(read) => panic!(
                        "byte {i} bit {bit} flipped ({:?}) was read as {read:?}",
                        b[i] as char
                    ),
                }
                flips += 1;
            }
        }
        assert_eq!(flips, bytes.len() * 8);
    }
}

#[test]
fn a_replica_does_not_open_on_an_empty_state_file() {
    use oncelog_raft::store::Partition;
    let open = |dir: &Path| {
        let log = oncelog::Log::open(dir, oncelog::LogConfig::default()).unwrap();
        Partition::open(log, std::sync::Arc::new(oncelog::io::RealFs))
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(STATE_FILE);
    let voted = StateFile {
        vote: Some(Vote::new(5, 2)),
        ..StateFile::default()
    };
    std::fs::write(&file, encode(&voted).unwrap()).unwrap();
    drop(open(dir.path()).unwrap());
    std::fs::write(&file, b"{}").unwrap();
    match open(dir.path()) {
        Err(e) => {
            assert!(e.contains(STATE_FILE), "{e}");
            assert!(e.contains("`vote`"), "{e}");
        }
        Ok(_) => panic!("an empty raft-state.json was read as a fresh replica's"),
    }
}
