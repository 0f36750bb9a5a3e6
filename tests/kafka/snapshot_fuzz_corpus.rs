//! Replays the snapshot decoder's fuzz corpus, and every truncation and single-byte change of
//! each seed, through the fuzz entry point: the decoder must never panic (docs/design.md, "How the
//! guarantees are tested").

use std::path::PathBuf;

use oncelog::producer::fuzz::fuzz_snapshot;

fn corpus() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/corpus/snapshot_decoder"
    ));
    let mut seeds: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            (p, bytes)
        })
        .collect();
    seeds.sort();
    seeds
}

#[test]
fn corpus_has_the_seeds_it_promises() {
    assert!(corpus().len() >= 8);
}

#[test]
fn every_corpus_seed_decodes_without_panicking() {
    for (_, bytes) in corpus() {
        fuzz_snapshot(&bytes);
    }
}

#[test]
fn every_truncation_and_byte_change_of_the_seeds_decodes_without_panicking() {
    for (_, bytes) in corpus() {
        for cut in 0..bytes.len() {
            fuzz_snapshot(&bytes[..cut]);
        }
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut changed = bytes.clone();
                changed[i] ^= flip;
                fuzz_snapshot(&changed);
            }
        }
    }
}

/// Changes past the CRC check: each byte change is resealed with a correct CRC, so the
/// structural checks see hostile counts and fields.
#[test]
fn resealed_byte_changes_reach_the_structural_checks_without_panicking() {
    for (_, bytes) in corpus().into_iter().filter(|(_, b)| b.len() >= 10) {
        for i in 6..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut changed = bytes.clone();
                changed[i] ^= flip;
                let crc = crc32c::crc32c(&changed[6..]);
                changed[2..6].copy_from_slice(&crc.to_be_bytes());
                fuzz_snapshot(&changed);
            }
        }
    }
}

#[test]
fn seeds_decode_or_fail_as_their_names_say() {
    use oncelog::producer::snapshot::{decode, SnapshotError, SnapshotVersion};
    for (path, bytes) in corpus() {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let got = decode(&bytes);
        match name.as_str() {
            "tv7_v1.snapshot" => assert_eq!(
                got.map(|s| (s.version, s.entries.len())),
                Ok((SnapshotVersion::V1, 2))
            ),
            "empty_v1.snapshot" | "v2_empty.snapshot" => {
                assert_eq!(got.map(|s| s.entries.len()), Ok(0))
            }
            "kafka_real_v1.snapshot" => assert_eq!(got.map(|s| s.entries.len()), Ok(1)),
            "v2_windows.snapshot" => {
                let windows = got.map(|s| {
                    s.entries
                        .iter()
                        .map(|e| e.batches().len())
                        .collect::<Vec<_>>()
                });
                assert_eq!(windows, Ok(vec![5, 1, 0]));
            }
            "v2_truncated.snapshot" => assert!(
                matches!(
                    got,
                    Err(SnapshotError::Truncated {
                        entry: 2,
                        position: 238,
                        ..
                    })
                ),
                "{got:?}"
            ),
            "v2_huge_batch_count.snapshot" => {
                assert!(
                    matches!(
                        got,
                        Err(SnapshotError::InvalidField {
                            field: "batch count",
                            ..
                        })
                    ),
                    "{got:?}"
                )
            }
            "v1_bad_crc.snapshot" => assert!(
                matches!(got, Err(SnapshotError::CrcMismatch { .. })),
                "{got:?}"
            ),
            _ => assert!(got.is_err(), "{name}: {got:?}"),
        }
    }
}
