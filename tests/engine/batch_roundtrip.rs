//! Property tests: random records built by `BatchBuilder` validate, iterate back to the same
//! records, and any single flipped byte under the CRC is caught.

use oncelog::format::validate::{validate_client_batch, validate_stored_batch};
use oncelog::format::{
    BatchBuilder, BatchError, Compression, Header, RecordBatch, DEFAULT_MAX_DECOMPRESSED_BYTES,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct TestRecord {
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn test_record() -> impl Strategy<Value = TestRecord> {
    (
        // Wide enough for negative deltas, small enough that deltas never wrap.
        -(1i64 << 50)..(1i64 << 50),
        proptest::option::of(bytes(40)),
        proptest::option::of(bytes(200)),
        proptest::collection::vec((bytes(12), proptest::option::of(bytes(20))), 0..4),
    )
        .prop_map(|(timestamp, key, value, headers)| TestRecord {
            timestamp,
            key,
            value,
            headers,
        })
}

fn codec() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Gzip),
        Just(Compression::Snappy),
        Just(Compression::Lz4),
        Just(Compression::Zstd),
    ]
}

fn build(records: &[TestRecord], codec: Compression, producer_id: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new()
        .compression(codec)
        .producer(producer_id, 3, 17);
    for r in records {
        let headers: Vec<Header<'_>> = r
            .headers
            .iter()
            .map(|(k, v)| Header {
                key: k,
                value: v.as_deref(),
            })
            .collect();
        b.append(r.timestamp, r.key.as_deref(), r.value.as_deref(), &headers);
    }
    b.build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn built_batches_validate_and_iterate_back_to_their_records(
        records in proptest::collection::vec(test_record(), 1..12),
        codec in codec(),
        producer_id in -1i64..1000,
    ) {
        let bytes = build(&records, codec, producer_id);
        let summary = validate_client_batch(&bytes, usize::MAX, DEFAULT_MAX_DECOMPRESSED_BYTES).unwrap();
        prop_assert_eq!(summary.records_count as usize, records.len());
        prop_assert_eq!(summary.compression, codec);
        let max = records.iter().map(|r| r.timestamp).max().unwrap();
        prop_assert_eq!(summary.max_timestamp, max);

        let batch = validate_stored_batch(&bytes).unwrap();
        let buf = batch.records_buf().unwrap();
        let mut n = 0;
        for (i, (got, want)) in batch.iter_records(&buf).zip(&records).enumerate() {
            let got = got.unwrap();
            prop_assert_eq!(got.offset_delta as usize, i);
            prop_assert_eq!(got.timestamp, want.timestamp);
            prop_assert_eq!(got.key, want.key.as_deref());
            prop_assert_eq!(got.value, want.value.as_deref());
            let headers: Vec<_> = got.headers().map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec))).collect();
            prop_assert_eq!(&headers, &want.headers);
            n += 1;
        }
        prop_assert_eq!(n, records.len());
        prop_assert_eq!(batch.iter_records(&buf).count(), records.len(), "no trailing error");
    }

    #[test]
    fn flipping_any_byte_under_the_crc_is_caught(
        records in proptest::collection::vec(test_record(), 1..4),
        codec in codec(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let mut bytes = build(&records, codec, 5);
        // The CRC covers byte 21 (attributes) to the end (docs/format.md, "RecordBatch v2 header").
        let i = 21 + at.index(bytes.len() - 21);
        bytes[i] ^= flip;
        let stored = validate_stored_batch(&bytes);
        prop_assert!(matches!(stored, Err(BatchError::CrcMismatch { .. })), "byte {}: {:?}", i, stored);
        let client = validate_client_batch(&bytes, usize::MAX, DEFAULT_MAX_DECOMPRESSED_BYTES);
        prop_assert!(matches!(client, Err(BatchError::CrcMismatch { .. })), "byte {}: {:?}", i, client);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(data in bytes(300)) {
        oncelog::format::fuzz::fuzz_batch(&data);
    }

    #[test]
    fn corrupted_batches_never_panic_the_decoders(
        records in proptest::collection::vec(test_record(), 1..4),
        codec in codec(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = build(&records, codec, 5);
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        // With a fixed CRC the corruption reaches the record decoders too.
        if bytes.len() >= 61 {
            oncelog::format::batch::rewrite_crc(&mut bytes);
        }
        oncelog::format::fuzz::fuzz_batch(&bytes);
        let _ = RecordBatch::parse(&bytes);
    }
}
