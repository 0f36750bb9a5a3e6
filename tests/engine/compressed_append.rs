//! Compressed client batches are decompressed on append and their records held to the rules of
//! uncompressed ones: good batches of every codec, ours and Kafka's, are
//! stored as sent; garbage behind a valid CRC, counts and offset deltas that disagree with the
//! records, and decompression bombs are refused with their `kind()`, and nothing is written.

use crate::common;

use common::{read_all, same_except_offset_and_epoch, small_config, T0};
use oncelog::format::batch::{rewrite_crc, set_base_offset};
use oncelog::format::compression::{compress, decompress_into};
use oncelog::format::{
    BatchBuilder, BatchError, BatchIter, Compression, Header, RecordBatch, RecordError, HEADER_SIZE,
};
use oncelog::{AppendError, AppendOutcome, Log, LogConfig};

const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kafka-broker");

/// Batch byte offsets (docs/kafka-format.md §1.1).
const OFF_BATCH_LENGTH: usize = 8;
const OFF_ATTRIBUTES_LOW: usize = 22;
const OFF_LAST_OFFSET_DELTA: usize = 23;
const OFF_MAX_TIMESTAMP: usize = 35;
const OFF_RECORDS_COUNT: usize = 57;

fn put_i32(buf: &mut [u8], at: usize, v: i32) {
    buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// `n` records with keys, 20-byte values and a header on every other one; timestamps
/// `T0, T0+1, ...`; not idempotent, so every test batch can be appended any number of times.
fn builder(codec: Compression, n: usize) -> BatchBuilder {
    let mut b = BatchBuilder::new().compression(codec);
    for i in 0..n {
        let headers = [Header {
            key: b"trace",
            value: Some(b"abc"),
        }];
        let headers: &[Header<'_>] = if i % 2 == 0 { &headers } else { &[] };
        let value = [b'a' + (i % 26) as u8; 20];
        b.append(T0 + i as i64, Some(&[b'k', i as u8]), Some(&value), headers);
    }
    b
}

/// The raw records of `n` test records, as they are before compression.
fn raw_records(n: usize) -> Vec<u8> {
    builder(Compression::None, n).build().unwrap()[HEADER_SIZE..].to_vec()
}

/// A client batch whose records field is `payload` as given, marked with `codec`, declaring
/// `count` records, with a correct batchLength and CRC: what a client would send if its
/// encoder were broken or hostile.
fn batch_with_payload(codec: Compression, count: i32, payload: &[u8]) -> Vec<u8> {
    let mut buf = BatchBuilder::new().build().unwrap();
    buf.extend_from_slice(payload);
    let batch_length = (buf.len() - 12) as i32;
    put_i32(&mut buf, OFF_BATCH_LENGTH, batch_length);
    put_i32(&mut buf, OFF_LAST_OFFSET_DELTA, count - 1);
    put_i32(&mut buf, OFF_RECORDS_COUNT, count);
    buf[OFF_ATTRIBUTES_LOW] = codec.id();
    rewrite_crc(&mut buf);
    buf
}

/// A log with some uncompressed batches in it already, so "nothing written" has something to
/// compare against.
fn log_with_data(config: LogConfig) -> (tempfile::TempDir, Log) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    for i in 0..3 {
        log.append(&common::batch(2, T0 + i, 30)).unwrap();
    }
    (dir, log)
}

/// Appends `bad` and checks it is refused with `kind` and an error that `matches`, that
/// nothing changed, and that a valid compressed batch is appended after it at the old end.
fn refused(log: &Log, bad: &[u8], what: &str, kind: &str, matches: impl Fn(&BatchError) -> bool) {
    let (end, size, segments) = (
        log.log_end_offset(),
        log.size_bytes(),
        log.maintenance().segment_count(),
    );
    let before = read_all(log, usize::MAX);
    match log.append(bad) {
        Err(AppendError::Batch(e)) if matches(&e) => {
            assert_eq!(AppendError::Batch(e).kind(), kind, "{what}");
        }
        other => panic!("{what}: unexpected {other:?}"),
    }
    assert_eq!(log.log_end_offset(), end, "{what}: log end moved");
    assert_eq!(log.size_bytes(), size, "{what}: bytes written");
    assert_eq!(
        log.maintenance().segment_count(),
        segments,
        "{what}: rolled"
    );
    assert_eq!(read_all(log, usize::MAX), before, "{what}: data changed");
    let good = builder(Compression::Zstd, 2).build().unwrap();
    match log.append(&good) {
        Ok(AppendOutcome::Appended(info)) => assert_eq!(info.first_offset, end, "{what}"),
        other => panic!("{what}: the next valid append got {other:?}"),
    }
}

fn stored_batches(log: &Log) -> Vec<Vec<u8>> {
    read_all(log, usize::MAX)
}

#[test]
fn compressed_batches_of_every_codec_are_stored_as_sent_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    let mut sent = Vec::new();
    for codec in CODECS {
        let bytes = builder(codec, 50).build().unwrap();
        log.append(&bytes).unwrap();
        sent.push(bytes);
    }
    let stored = stored_batches(&log);
    assert_eq!(stored.len(), CODECS.len());
    for ((stored, sent), codec) in stored.iter().zip(&sent).zip(CODECS) {
        assert!(same_except_offset_and_epoch(stored, sent), "{codec:?}");
        let batch = RecordBatch::parse(stored).unwrap();
        assert_eq!(batch.compression(), Some(codec));
        let records = batch.records_buf().unwrap();
        let values: Vec<_> = batch
            .iter_records(&records)
            .map(|r| r.unwrap().value.unwrap()[0])
            .collect();
        let expected: Vec<u8> = (0..50).map(|i| b'a' + (i % 26) as u8).collect();
        assert_eq!(values, expected, "{codec:?}");
    }
    assert_eq!(log.log_end_offset(), 200);
}

#[test]
fn kafka_written_compressed_batches_are_accepted_as_client_batches() {
    // Batches a Kafka 4.4 broker stored from librdkafka and kafka-python producers, turned back
    // into what the client sent: baseOffset 0 (the CRC does not cover it). Their producer
    // sequences run on from batch to batch, so appending them in order is a valid stream.
    for codec in CODECS {
        let path = format!("{FIXTURES}/{}-0/00000000000000000000.log", codec.name());
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_config()).unwrap();
        let mut originals = Vec::new();
        for item in BatchIter::new(&data) {
            let (_, batch) = item.unwrap();
            assert_eq!(batch.compression(), Some(codec), "{path}");
            let mut client = batch.as_bytes().to_vec();
            set_base_offset(&mut client, 0);
            match log.append(&client) {
                Ok(AppendOutcome::Appended(info)) => {
                    assert_eq!(info.first_offset, batch.base_offset(), "{path}");
                    assert_eq!(info.last_offset, batch.last_offset(), "{path}");
                }
                other => panic!("{path} batch at {}: {other:?}", batch.base_offset()),
            }
            originals.push(batch.as_bytes().to_vec());
        }
        assert!(originals.len() >= 3, "{path}: few batches");
        // Kafka's maxTimestamp was right, so nothing but the offset and epoch was rewritten.
        let stored = stored_batches(&log);
        assert_eq!(stored.len(), originals.len(), "{path}");
        for (s, o) in stored.iter().zip(&originals) {
            assert!(same_except_offset_and_epoch(s, o), "{path}");
        }
    }
}

#[test]
fn a_wrong_max_timestamp_in_a_compressed_batch_is_replaced_by_the_records_max_with_a_new_crc() {
    for codec in CODECS {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_config()).unwrap();
        let records = 10;
        let true_max = T0 + records as i64 - 1;
        // A client that claims a maxTimestamp far in the future would otherwise steer the time
        // index and retention.
        let sent = builder(codec, records)
            .max_timestamp(T0 + 1_000_000)
            .build()
            .unwrap();
        log.append(&sent).unwrap();
        let stored = stored_batches(&log).pop().unwrap();
        let batch = RecordBatch::parse(&stored).unwrap();
        assert_eq!(batch.max_timestamp(), true_max, "{codec:?}");
        assert!(batch.is_crc_valid(), "{codec:?}");
        // Everything else is as the client sent it.
        assert_eq!(stored[16..17], sent[16..17]);
        assert_eq!(stored[21..OFF_MAX_TIMESTAMP], sent[21..OFF_MAX_TIMESTAMP]);
        assert_eq!(
            stored[OFF_MAX_TIMESTAMP + 8..],
            sent[OFF_MAX_TIMESTAMP + 8..]
        );
        let found = log.offset_for_timestamp(true_max).unwrap().unwrap();
        assert_eq!((found.offset, found.timestamp), (9, true_max), "{codec:?}");
        assert!(log.offset_for_timestamp(true_max + 1).unwrap().is_none());
    }
}

#[test]
fn garbage_payloads_behind_a_valid_crc_are_corrupt_batch() {
    let (_dir, log) = log_with_data(small_config());
    let garbage: Vec<u8> = (0..400u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    for codec in CODECS {
        let what = format!("{codec:?} garbage");
        refused(
            &log,
            &batch_with_payload(codec, 5, &garbage),
            &what,
            "corrupt_batch",
            |e| matches!(e, BatchError::Decompression { codec: c, .. } if *c == codec),
        );

        // A real stream of this codec, cut short.
        let packed = compress(codec, &raw_records(30)).unwrap();
        let what = format!("{codec:?} truncated stream");
        refused(
            &log,
            &batch_with_payload(codec, 30, &packed[..packed.len() * 2 / 3]),
            &what,
            "corrupt_batch",
            |e| matches!(e, BatchError::Decompression { .. }),
        );

        // A well-formed stream whose content is not records.
        let what = format!("{codec:?} stream of garbage");
        refused(
            &log,
            &batch_with_payload(codec, 5, &compress(codec, &garbage).unwrap()),
            &what,
            "corrupt_batch",
            |e| matches!(e, BatchError::InvalidRecord { index: 0, .. }),
        );
    }
}

#[test]
fn compressed_counts_that_disagree_with_the_records_are_refused_as_for_uncompressed_batches() {
    let (_dir, log) = log_with_data(small_config());
    let records = raw_records(4);
    // The rule the compressed cases follow: the uncompressed one.
    refused(
        &log,
        &batch_with_payload(Compression::None, 9, &records),
        "uncompressed count 9 for 4 records",
        "corrupt_batch",
        |e| {
            matches!(
                e,
                BatchError::InvalidRecord {
                    index: 4,
                    reason: RecordError::Truncated,
                    ..
                }
            )
        },
    );

    for codec in CODECS {
        let packed = compress(codec, &records).unwrap();
        // More records declared than the stream holds: Kafka's "premature EOF".
        let what = format!("{codec:?} count 9 for 4 records");
        refused(
            &log,
            &batch_with_payload(codec, 9, &packed),
            &what,
            "corrupt_batch",
            |e| {
                matches!(
                    e,
                    BatchError::InvalidRecord {
                        index: 4,
                        reason: RecordError::Truncated,
                        ..
                    }
                )
            },
        );
        // Fewer declared than the stream holds: Kafka's "records still remaining".
        let what = format!("{codec:?} count 3 for 4 records");
        refused(
            &log,
            &batch_with_payload(codec, 3, &packed),
            &what,
            "corrupt_batch",
            |e| {
                matches!(
                    e,
                    BatchError::RecordsTrailing {
                        records_count: 3,
                        ..
                    }
                )
            },
        );
    }
}

#[test]
fn wrong_offset_deltas_inside_a_compressed_stream_are_refused() {
    let (_dir, log) = log_with_data(small_config());
    let mut records = raw_records(3);
    // Every field of the first record is a one-byte varint except its 20-byte value and a
    // 10-byte header: find the second record from the first one's length prefix.
    let second = 1 + records[0] as usize / 2;
    // length, attributes, timestampDelta, then offsetDelta.
    assert_eq!(
        records[second + 3],
        2,
        "second record's offsetDelta is zigzag(1)"
    );
    records[second + 3] = 6; // zigzag(3): offsets 0, 3, 2
    for codec in CODECS {
        let what = format!("{codec:?} offsets 0, 3, 2");
        refused(
            &log,
            &batch_with_payload(codec, 3, &compress(codec, &records).unwrap()),
            &what,
            "corrupt_batch",
            |e| {
                matches!(
                    e,
                    BatchError::InvalidRecord {
                        index: 1,
                        reason: RecordError::OffsetDelta {
                            expected: 1,
                            got: 3
                        },
                        ..
                    }
                )
            },
        );
    }
}

/// A gzip stream of `mib` MiB of zeros, built without ever holding them: deflate restarts
/// after a full flush, so each MiB compresses to the same bytes, which are repeated; the
/// trailer's CRC is combined arithmetically. About 1 KB per MiB.
fn gzip_of_zeros(mib: u32) -> Vec<u8> {
    let chunk = vec![0u8; 1 << 20];
    let mut deflate = flate2::Compress::new(flate2::Compression::best(), false);
    let (mut first, mut block) = (Vec::with_capacity(4096), Vec::with_capacity(4096));
    for out in [&mut first, &mut block] {
        deflate
            .compress_vec(&chunk, out, flate2::FlushCompress::Full)
            .unwrap();
    }
    assert_eq!(first, block, "a full flush makes each MiB compress alike");
    let mut last = Vec::with_capacity(64);
    deflate
        .compress_vec(&[], &mut last, flate2::FlushCompress::Finish)
        .unwrap();
    let (mut one, mut all) = (flate2::Crc::new(), flate2::Crc::new());
    one.update(&chunk);
    // ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL=0 OS=unknown
    let mut gz = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    for _ in 0..mib {
        gz.extend_from_slice(&block);
        all.combine(&one);
    }
    gz.extend_from_slice(&last);
    gz.extend_from_slice(&all.sum().to_le_bytes());
    gz.extend_from_slice(&(u64::from(mib) << 20).to_le_bytes()[..4]); // ISIZE, mod 2^32
    gz
}

#[test]
fn the_gzip_bomb_builder_makes_a_valid_stream_of_zeros() {
    // Checked on 3 MiB, so the 1 GiB bomb below is known to be what it claims.
    let small = gzip_of_zeros(3);
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&small[..]), &mut out).unwrap();
    assert_eq!(out.len(), 3 << 20);
    assert!(out.iter().all(|&b| b == 0));
}

#[test]
fn a_one_gib_gzip_bomb_is_refused_as_too_large_without_being_inflated() {
    let bomb = gzip_of_zeros(1024);
    assert!(bomb.len() < 1_100_000, "{} bytes", bomb.len());
    // Big enough for the bomb's ~1 MB on the wire, so it is the decompressed size that stops
    // it; the decompression limit kept at its minimum, one batch, so the test stays cheap.
    let limit = 2 << 20;
    let config = small_config()
        .into_builder()
        .max_message_bytes(limit)
        .max_decompressed_bytes(limit)
        .build()
        .unwrap();
    let (_dir, log) = log_with_data(config);
    let batch = batch_with_payload(Compression::Gzip, 1, &bomb);
    refused(&log, &batch, "1 GiB gzip bomb", "batch_too_large", |e| {
        *e == BatchError::DecompressedTooLarge {
            codec: Compression::Gzip,
            limit,
        }
    });
    // Inflating stops one byte past the limit: the output never grew anywhere near 1 GiB.
    let mut out = Vec::new();
    assert!(decompress_into(Compression::Gzip, &bomb, limit, &mut out).is_err());
    assert!(out.capacity() <= 2 * (limit + 1), "{}", out.capacity());
}

#[test]
fn records_beyond_the_decompression_limit_are_batch_too_large_for_every_codec() {
    let config = small_config()
        .into_builder()
        .max_message_bytes(16 << 10)
        .max_decompressed_bytes(64 << 10)
        .build()
        .unwrap();
    let (_dir, log) = log_with_data(config);
    for codec in CODECS {
        // 100 records of 1000 zero bytes: ~100 KB of records, under 16 KB compressed.
        let mut b = BatchBuilder::new().compression(codec);
        for _ in 0..100 {
            b.append(T0, None, Some(&[0; 1000]), &[]);
        }
        let bytes = b.build().unwrap();
        assert!(bytes.len() < 16 << 10, "{codec:?}: {} bytes", bytes.len());
        let what = format!("{codec:?} 100 KB of records");
        refused(&log, &bytes, &what, "batch_too_large", |e| {
            *e == BatchError::DecompressedTooLarge {
                codec,
                limit: 64 << 10,
            }
        });
    }
}
