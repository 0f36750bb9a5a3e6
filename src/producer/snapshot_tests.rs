use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16).unwrap_or_else(|e| panic!("bad hex in test: {e}"))
        })
        .collect()
}

/// TV7 of docs/format.md, "Test vectors".
const TV7: &str = "0001007cbbac00000002
    00000000000003e8 0000 0000002d 0000000000000029 00000004 0000018bcfe56800 ffffffff ffffffffffffffff
    00000000000007d0 0005 00000009 000000000000003c 00000009 0000018bcfe56801 00000003 0000000000000037";

const TS: i64 = 1_700_000_000_000;

fn tv7_entries() -> Vec<ProducerEntry> {
    vec![
        ProducerEntry::restore(
            1000,
            0,
            -1,
            TS,
            None,
            TS,
            vec![BatchMetadata {
                last_seq: 45,
                last_offset: 41,
                offset_delta: 4,
                timestamp: TS,
            }],
        ),
        ProducerEntry::restore(
            2000,
            5,
            3,
            TS + 1,
            Some(55),
            TS + 1,
            vec![BatchMetadata {
                last_seq: 9,
                last_offset: 60,
                offset_delta: 9,
                timestamp: TS + 1,
            }],
        ),
    ]
}

fn windowed_entries() -> Vec<ProducerEntry> {
    let batches = |n: i32| {
        (0..n)
            .map(|i| BatchMetadata {
                last_seq: crate::format::sequence::add(i32::MAX - 4, i * 2),
                last_offset: 100 + i64::from(i) * 3,
                offset_delta: 1,
                timestamp: TS + i64::from(i),
            })
            .collect::<Vec<_>>()
    };
    vec![
        ProducerEntry::restore(7, 2, 4, TS, Some(97), 123_456, batches(5)),
        ProducerEntry::restore(8, 0, -1, TS, None, 654_321, batches(1)),
        ProducerEntry::restore(9, 3, 1, TS, None, 1, vec![]),
    ]
}

#[test]
fn v1_encoding_reproduces_tv7_byte_for_byte() {
    assert_eq!(encode(&tv7_entries(), SnapshotVersion::V1, 0), hex(TV7));
}

#[test]
fn v1_tv7_decodes_to_its_entries() {
    let s = decode(&hex(TV7));
    assert_eq!(
        s,
        Ok(Snapshot {
            version: SnapshotVersion::V1,
            offset: None,
            entries: tv7_entries()
        })
    );
}

#[test]
fn empty_v1_snapshot_matches_kafkas_bytes() {
    let empty = hex("000148674bc700000000");
    assert_eq!(encode(&[], SnapshotVersion::V1, 0), empty);
    assert_eq!(
        decode(&empty),
        Ok(Snapshot {
            version: SnapshotVersion::V1,
            offset: None,
            entries: vec![]
        })
    );
}

#[test]
fn v1_keeps_only_the_newest_batch() {
    let bytes = encode(&windowed_entries(), SnapshotVersion::V1, 0);
    assert_eq!(bytes.len(), HEADER_SIZE + 3 * V1_ENTRY_SIZE);
    let entries = decode(&bytes).map(|s| s.entries).unwrap_or_default();
    let newest: Vec<Vec<i32>> = entries
        .iter()
        .map(|e| e.batches().map(|b| b.last_seq).collect())
        .collect();
    assert_eq!(newest, vec![vec![3], vec![i32::MAX - 4], vec![]]);
    assert_eq!(entries[0].current_txn_first_offset(), Some(97));
}

#[test]
fn v2_round_trips_whole_windows_and_wall_clock() {
    let entries = windowed_entries();
    let bytes = encode(&entries, SnapshotVersion::V2, 0);
    assert_eq!(
        bytes.len(),
        HEADER_SIZE + 3 * V2_ENTRY_FIXED_SIZE + 6 * V2_BATCH_SIZE
    );
    assert_eq!(&bytes[0..2], &[0, 2]);
    assert_eq!(
        decode(&bytes),
        Ok(Snapshot {
            version: SnapshotVersion::V2,
            offset: None,
            entries
        })
    );
}

#[test]
fn v2_layout_matches_the_documented_table() {
    let e = ProducerEntry::restore(
        0x0102030405060708,
        0x0a0b,
        0x0c0d0e0f,
        0x1112131415161718,
        Some(0x2122232425262728),
        0x3132333435363738,
        vec![BatchMetadata {
            last_seq: 0x41424344,
            last_offset: 0x5152535455565758,
            offset_delta: 0x61626364,
            timestamp: 0x7172737475767778,
        }],
    );
    let bytes = encode([&e], SnapshotVersion::V2, 0);
    let expected = hex("00000000000000000001
         0102030405060708 0a0b 0c0d0e0f 1112131415161718 2122232425262728 3132333435363738 00000001
         41424344 5152535455565758 61626364 7172737475767778");
    assert_eq!(&bytes[6..], &expected[6..]);
    assert_eq!(&bytes[0..2], &[0, 2]);
}

#[test]
fn short_file_is_too_short() {
    assert_eq!(
        decode(&[0, 1, 0]),
        Err(SnapshotError::TooShort { len: 3, min: 10 })
    );
}

#[test]
fn unknown_version_is_unsupported() {
    let mut bytes = encode(&[], SnapshotVersion::V2, 0);
    bytes[1] = 4;
    assert_eq!(
        decode(&bytes),
        Err(SnapshotError::UnsupportedVersion { version: 4 })
    );
}

#[test]
fn version_3_keeps_the_offset_it_was_taken_at() {
    let entries = windowed_entries();
    let bytes = encode(&entries, SnapshotVersion::V3, 5_000);
    assert_eq!(
        bytes.len(),
        encode(&entries, SnapshotVersion::V2, 0).len() + 8
    );
    let s = decode(&bytes).unwrap();
    assert_eq!(s.version, SnapshotVersion::V3);
    assert_eq!(s.offset, Some(5_000));
    assert_eq!(s.entries, entries);
    assert_eq!(s.check_at(5_000), Ok(()));
    // A copy renamed to another offset is caught by its header.
    assert_eq!(
        s.check_at(6_000),
        Err(SnapshotError::OffsetMismatch {
            header: 5_000,
            name: 6_000
        })
    );
}

#[test]
fn a_snapshot_knowing_offsets_at_or_above_its_name_fails_its_check() {
    let entries = windowed_entries();
    let newest = entries
        .iter()
        .flat_map(|e| e.batches().map(|b| b.last_offset))
        .max()
        .unwrap();
    let s = decode(&encode(&entries, SnapshotVersion::V2, 0)).unwrap();
    assert_eq!(s.check_at(newest + 1), Ok(()));
    assert!(matches!(
        s.check_at(newest),
        Err(SnapshotError::EntryBeyondOffset { offset, snapshot_offset, .. })
            if offset == newest && snapshot_offset == newest
    ));
    let v1 = decode(&encode(&entries, SnapshotVersion::V1, 0)).unwrap();
    assert!(v1.check_at(newest).is_err());
}

#[test]
fn flipped_bit_is_a_crc_mismatch() {
    let mut bytes = hex(TV7);
    bytes[20] ^= 1;
    assert!(matches!(
        decode(&bytes),
        Err(SnapshotError::CrcMismatch {
            stored: 0x007cbbac,
            ..
        })
    ));
}

#[test]
fn snapshot_error_kinds_are_stable_names() {
    let mut flipped = hex(TV7);
    flipped[20] ^= 1;
    let mut version_9 = encode(&[], SnapshotVersion::V2, 0);
    version_9[1] = 9;
    let kinds = [&[0, 1, 0][..], &version_9, &flipped].map(|b| decode(b).map_err(|e| e.kind()));
    assert_eq!(
        kinds,
        [
            Err("too_short"),
            Err("unsupported_version"),
            Err("crc_mismatch")
        ]
    );
}

/// Re-seals `bytes` with a correct CRC so structural checks are reached.
fn reseal(mut bytes: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&bytes[6..]);
    bytes[2..6].copy_from_slice(&crc.to_be_bytes());
    bytes
}

#[test]
fn truncated_file_names_the_entry_and_position() {
    let bytes = encode(&windowed_entries(), SnapshotVersion::V2, 0);
    let cut = reseal(bytes[..HEADER_SIZE + V2_ENTRY_FIXED_SIZE + 5 * V2_BATCH_SIZE + 10].to_vec());
    assert_eq!(
        decode(&cut),
        Err(SnapshotError::Truncated {
            entry: 1,
            position: 172,
            needed: 32,
            len: 182
        })
    );
    let cut_v1 = reseal(hex(TV7)[..60].to_vec());
    assert_eq!(
        decode(&cut_v1),
        Err(SnapshotError::Truncated {
            entry: 1,
            position: 56,
            needed: 42,
            len: 60
        })
    );
}

#[test]
fn trailing_bytes_are_a_count_mismatch() {
    let mut bytes = hex(TV7);
    bytes.extend_from_slice(&[0; 4]);
    assert_eq!(
        decode(&reseal(bytes)),
        Err(SnapshotError::CountMismatch {
            declared: 2,
            position: 102,
            len: 106
        })
    );
}

#[test]
fn negative_entry_count_is_invalid() {
    let mut bytes = encode(&[], SnapshotVersion::V2, 0);
    bytes[6..10].copy_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(
        decode(&reseal(bytes)),
        Err(SnapshotError::InvalidCount { count: -1 })
    );
}

#[test]
fn huge_entry_count_fails_without_allocating_for_it() {
    let mut bytes = encode(&[], SnapshotVersion::V2, 0);
    bytes[6..10].copy_from_slice(&i32::MAX.to_be_bytes());
    assert!(matches!(
        decode(&reseal(bytes)),
        Err(SnapshotError::Truncated { entry: 0, .. })
    ));
}

#[test]
fn batch_count_beyond_the_bound_or_negative_is_an_invalid_field() {
    for bad in [-1i32, MAX_WINDOW as i32 + 1, i32::MAX] {
        let mut bytes = encode(&windowed_entries()[2..], SnapshotVersion::V2, 0);
        bytes[48..52].copy_from_slice(&bad.to_be_bytes());
        assert_eq!(
            decode(&reseal(bytes)),
            Err(SnapshotError::InvalidField {
                entry: 0,
                position: 48,
                field: "batch count",
                value: i64::from(bad)
            })
        );
    }
}

#[test]
fn negative_offset_delta_is_an_invalid_field() {
    let mut bytes = encode(&windowed_entries()[1..2], SnapshotVersion::V2, 0);
    bytes[64..68].copy_from_slice(&(-5i32).to_be_bytes());
    assert_eq!(
        decode(&reseal(bytes)),
        Err(SnapshotError::InvalidField {
            entry: 0,
            position: 64,
            field: "offset delta",
            value: -5
        })
    );
}

#[test]
fn v1_entry_without_a_batch_restores_an_empty_window() {
    let e = ProducerEntry::restore(5, 1, 2, TS, None, TS, vec![]);
    let bytes = encode([&e], SnapshotVersion::V1, 0);
    assert_eq!(
        &bytes[20..36],
        &hex("ffffffff ffffffffffffffff 00000000")[..]
    );
    assert_eq!(decode(&bytes).map(|s| s.entries), Ok(vec![e]));
}
