//! The codecs of compressed batches (docs/format.md, "Compression"). Everything after byte 61 of a
//! compressed batch is one stream holding the concatenated records.
//!
//! | codec  | framing                                                                        |
//! |--------|--------------------------------------------------------------------------------|
//! | gzip   | gzip stream (several members are accepted, as Java's `GZIPInputStream` does)   |
//! | snappy | xerial `SnappyOutputStream`: `82 'SNAPPY' 00`, int32 version, int32 compatible |
//! |        | version, then `[int32 BE length][raw snappy block]` chunks; or one raw block   |
//! | lz4    | LZ4 frame (magic 0x184D2204)                                                   |
//! | zstd   | zstd frame                                                                     |
//!
//! Each codec is a cargo feature of the same name (all four are default features). A batch in a
//! codec that is compiled out is refused with [`BatchError::UnsupportedCompression`], on append
//! and whenever its records are read, never misread.
//!
//! Decompression is always bounded: the output may not exceed a limit, and no codec is allowed
//! to allocate according to a size the input merely claims. A fuzzed or hostile batch of a few
//! bytes must not be able to exhaust memory.

// With a codec compiled out, the helpers only it uses are unused.
#![cfg_attr(
    not(all(
        feature = "gzip",
        feature = "snappy",
        feature = "lz4",
        feature = "zstd"
    )),
    allow(dead_code, unused_imports, unused_variables)
)]

use std::cell::Cell;
use std::io::{Read, Write};

use super::batch::Compression;
use super::error::BatchError;

/// Default cap on the decompressed records of one batch: 64 × Kafka's default batch limit of
/// 1 MiB, room for any real compression ratio at that size. The append path's limit is
/// `LogConfig::max_decompressed_bytes` (whose doc argues the figure); readers of stored
/// batches use this one.
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

/// The header `SnappyOutputStream` writes before its chunks.
pub const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_SIZE: usize = 16;
/// The chunk size of xerial's default stream, which we reuse when writing.
const XERIAL_BLOCK_SIZE: usize = 32 * 1024;
/// Largest zstd window we accept (2^26 = 64 MiB): larger windows only serve outputs beyond
/// the default limit, and the window is allocated up front from the frame header.
const ZSTD_WINDOW_LOG_MAX: u32 = 26;

/// Decompresses `data` compressed with `codec`, refusing an output above `max_bytes`.
pub fn decompress(
    codec: Compression,
    data: &[u8],
    max_bytes: usize,
) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    decompress_into(codec, data, max_bytes, &mut out)?;
    Ok(out)
}

/// As [`decompress`], into `out` (cleared first), so a caller that decompresses batch after
/// batch can keep one buffer. Never grows `out` beyond about twice `max_bytes`, whatever the
/// input claims: the output is produced incrementally and stops one byte past the limit.
pub fn decompress_into(
    codec: Compression,
    data: &[u8],
    max_bytes: usize,
    out: &mut Vec<u8>,
) -> Result<(), BatchError> {
    out.clear();
    match codec {
        Compression::None => {
            if data.len() > max_bytes {
                return Err(BatchError::DecompressedTooLarge {
                    codec,
                    limit: max_bytes,
                });
            }
            out.extend_from_slice(data);
            Ok(())
        }
        // The `bufread` decoder reads the slice in place (`&[u8]` is a `BufRead`); the `read`
        // one would copy it through a 32 KiB buffer of its own first.
        #[cfg(feature = "gzip")]
        Compression::Gzip => read_bounded(
            codec,
            flate2::bufread::MultiGzDecoder::new(data),
            max_bytes,
            out,
        ),
        #[cfg(feature = "snappy")]
        Compression::Snappy => decompress_snappy(data, max_bytes, out),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => {
            let mut rest = data;
            read_bounded(
                codec,
                lz4_flex::frame::FrameDecoder::new(&mut rest),
                max_bytes,
                out,
            )?;
            // The decoder stops at the end of the first frame, as Kafka's does; bytes after it
            // are refused, not ignored, since the LZ4 frame format lets other readers take them
            // as a further frame, and then they would see records Kafka's reader does not.
            if rest.is_empty() {
                Ok(())
            } else {
                Err(decompression_error(
                    codec,
                    format_args!("{} bytes after the end of the LZ4 frame", rest.len()),
                ))
            }
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => with_zstd_context(|context| {
            let decoder = zstd::stream::read::Decoder::with_context(data, context);
            read_bounded(codec, decoder, max_bytes, out)
        }),
        #[allow(unreachable_patterns)]
        _ => Err(BatchError::UnsupportedCompression { codec }),
    }
}

/// Whether this build can decompress and compress `codec` (its cargo feature is on).
pub fn is_supported(codec: Compression) -> bool {
    match codec {
        Compression::None => true,
        Compression::Gzip => cfg!(feature = "gzip"),
        Compression::Snappy => cfg!(feature = "snappy"),
        Compression::Lz4 => cfg!(feature = "lz4"),
        Compression::Zstd => cfg!(feature = "zstd"),
    }
}

#[cfg(feature = "zstd")]
/// Largest zstd context a thread keeps between batches: its window buffers grow to the
/// largest window it decoded, and a rare large frame should not pin that memory to the thread.
const ZSTD_CONTEXT_RETAIN_BYTES: usize = 8 << 20;

#[cfg(feature = "zstd")]
thread_local! {
    /// A zstd decompression context per thread, reset for each frame. Creating one per batch
    /// (allocating and initialising its tables and window) cost more than decompressing a
    /// 100-record batch: 16 µs against 6.6 µs reused (docs/performance.md).
    static ZSTD_CONTEXT: Cell<Option<zstd::zstd_safe::DCtx<'static>>> = const { Cell::new(None) };
}

#[cfg(feature = "zstd")]
/// Runs `f` with this thread's zstd context (created on first use, with the window bound).
fn with_zstd_context(
    f: impl FnOnce(&mut zstd::zstd_safe::DCtx<'static>) -> Result<(), BatchError>,
) -> Result<(), BatchError> {
    let codec = Compression::Zstd;
    ZSTD_CONTEXT.with(|cell| {
        // Taken out, not borrowed, so no path can find the cell in use.
        let mut context = match cell.take() {
            Some(context) => context,
            None => {
                let mut context = zstd::zstd_safe::DCtx::try_create().ok_or_else(|| {
                    decompression_error(codec, "cannot allocate a decompression context")
                })?;
                // Kept across the per-frame session resets of `Decoder::with_context`.
                context
                    .set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(
                        ZSTD_WINDOW_LOG_MAX,
                    ))
                    .map_err(|code| {
                        decompression_error(codec, zstd::zstd_safe::get_error_name(code))
                    })?;
                context
            }
        };
        let result = f(&mut context);
        if context.sizeof() <= ZSTD_CONTEXT_RETAIN_BYTES {
            cell.set(Some(context));
        }
        result
    })
}

/// Compresses `data` with `codec`, in the framing Kafka's Java client writes.
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, BatchError> {
    let fail = |e: std::io::Error| BatchError::CompressionFailed {
        codec,
        message: e.to_string(),
    };
    match codec {
        Compression::None => Ok(data.to_vec()),
        #[cfg(feature = "gzip")]
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(data).map_err(fail)?;
            enc.finish().map_err(fail)
        }
        #[cfg(feature = "snappy")]
        Compression::Snappy => compress_snappy_xerial(data),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => {
            // Kafka writes 64 KiB blocks (docs/format.md, "Compression").
            let info =
                lz4_flex::frame::FrameInfo::new().block_size(lz4_flex::frame::BlockSize::Max64KB);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            enc.write_all(data).map_err(fail)?;
            enc.finish().map_err(|e| BatchError::CompressionFailed {
                codec,
                message: e.to_string(),
            })
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => zstd::bulk::compress(data, 3).map_err(fail),
        #[allow(unreachable_patterns)]
        _ => Err(BatchError::UnsupportedCompression { codec }),
    }
}

fn decompression_error(codec: Compression, e: impl std::fmt::Display) -> BatchError {
    BatchError::Decompression {
        codec,
        message: e.to_string(),
    }
}

/// Reads a decoder to its end into `out`, but never more than `max_bytes` + 1 bytes: one byte
/// beyond the limit is enough to know the limit is broken.
fn read_bounded(
    codec: Compression,
    reader: impl Read,
    max_bytes: usize,
    out: &mut Vec<u8>,
) -> Result<(), BatchError> {
    let cap = (max_bytes as u64).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(out)
        .map_err(|e| decompression_error(codec, e))?;
    if out.len() > max_bytes {
        return Err(BatchError::DecompressedTooLarge {
            codec,
            limit: max_bytes,
        });
    }
    Ok(())
}

#[cfg(feature = "snappy")]
/// Appends one raw snappy block to `out`, checking its claimed size against the limit before
/// allocating for it.
fn append_snappy_block(
    block: &[u8],
    out: &mut Vec<u8>,
    max_bytes: usize,
) -> Result<(), BatchError> {
    let codec = Compression::Snappy;
    let len = snap::raw::decompress_len(block).map_err(|e| decompression_error(codec, e))?;
    if out.len().saturating_add(len) > max_bytes {
        return Err(BatchError::DecompressedTooLarge {
            codec,
            limit: max_bytes,
        });
    }
    let start = out.len();
    out.resize(start + len, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| decompression_error(codec, e))?;
    out.truncate(start + written);
    Ok(())
}

#[cfg(feature = "snappy")]
/// Snappy as Kafka's Java client writes it (xerial framing), or a single raw block when the
/// xerial magic is absent (some clients, e.g. kafka-python and aiokafka, write that).
fn decompress_snappy(data: &[u8], max_bytes: usize, out: &mut Vec<u8>) -> Result<(), BatchError> {
    let codec = Compression::Snappy;
    if !data.starts_with(&XERIAL_MAGIC) {
        return append_snappy_block(data, out, max_bytes);
    }
    let mut rest = data
        .get(XERIAL_HEADER_SIZE..)
        .ok_or_else(|| BatchError::Decompression {
            codec,
            message: format!(
                "xerial header needs {XERIAL_HEADER_SIZE} bytes, got {}",
                data.len()
            ),
        })?;
    while !rest.is_empty() {
        let Some(len_bytes) = rest.get(..4) else {
            return Err(BatchError::Decompression {
                codec,
                message: format!("xerial chunk length cut after {} bytes", rest.len()),
            });
        };
        let len = i32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let block = usize::try_from(len)
            .ok()
            .and_then(|len| rest.get(4..4 + len))
            .ok_or_else(|| BatchError::Decompression {
                codec,
                message: format!("xerial chunk of {len} bytes, {} available", rest.len() - 4),
            })?;
        append_snappy_block(block, out, max_bytes)?;
        rest = &rest[4 + block.len()..];
    }
    Ok(())
}

#[cfg(feature = "snappy")]
fn compress_snappy_xerial(data: &[u8]) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::with_capacity(XERIAL_HEADER_SIZE + data.len() / 2 + 32);
    out.extend_from_slice(&XERIAL_MAGIC);
    // Version 1, minimum compatible version 1: what SnappyOutputStream writes.
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for chunk in data.chunks(XERIAL_BLOCK_SIZE) {
        let block = encoder
            .compress_vec(chunk)
            .map_err(|e| BatchError::CompressionFailed {
                codec: Compression::Snappy,
                message: e.to_string(),
            })?;
        out.extend_from_slice(&(block.len() as i32).to_be_bytes());
        out.extend_from_slice(&block);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codecs this build has.
    fn codecs() -> impl Iterator<Item = Compression> {
        ALL.into_iter().filter(|&codec| is_supported(codec))
    }

    #[test]
    fn support_follows_the_features() {
        let features = [
            true,
            cfg!(feature = "gzip"),
            cfg!(feature = "snappy"),
            cfg!(feature = "lz4"),
            cfg!(feature = "zstd"),
        ];
        for (codec, on) in ALL.into_iter().zip(features) {
            assert_eq!(is_supported(codec), on, "{codec:?}");
        }
    }

    /// Run with `cargo test --lib --no-default-features compression`: every codec compiled out
    /// is refused, both ways, with its own error (never a decompression error that would call
    /// the batch corrupt).
    #[test]
    fn a_compiled_out_codec_is_refused_as_unsupported() {
        for codec in ALL.into_iter().filter(|&codec| !is_supported(codec)) {
            assert_eq!(
                decompress(codec, b"any bytes", 1 << 10),
                Err(BatchError::UnsupportedCompression { codec })
            );
            assert_eq!(
                compress(codec, b"records"),
                Err(BatchError::UnsupportedCompression { codec })
            );
        }
    }

    fn sample() -> Vec<u8> {
        (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect()
    }

    #[test]
    fn every_codec_round_trips() {
        let data = sample();
        for codec in codecs() {
            let packed = compress(codec, &data).unwrap();
            assert_eq!(
                decompress(codec, &packed, data.len()).unwrap(),
                data,
                "{codec:?}"
            );
        }
    }

    #[test]
    fn output_beyond_the_limit_is_refused_for_every_codec() {
        let data = vec![0u8; 1 << 20];
        for codec in codecs() {
            let packed = compress(codec, &data).unwrap();
            assert_eq!(
                decompress(codec, &packed, 1000),
                Err(BatchError::DecompressedTooLarge { codec, limit: 1000 }),
                "{codec:?}"
            );
        }
    }

    #[test]
    #[cfg(feature = "snappy")]
    fn snappy_writes_the_xerial_framing() {
        let packed = compress(Compression::Snappy, b"hello").unwrap();
        assert!(packed.starts_with(&XERIAL_MAGIC));
        assert_eq!(&packed[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
    }

    #[test]
    #[cfg(feature = "snappy")]
    fn snappy_raw_block_without_xerial_magic_is_accepted() {
        let block = snap::raw::Encoder::new()
            .compress_vec(b"raw block records")
            .unwrap();
        assert_eq!(
            decompress(Compression::Snappy, &block, 1 << 10).unwrap(),
            b"raw block records"
        );
    }

    #[test]
    #[cfg(feature = "snappy")]
    fn snappy_chunk_longer_than_the_stream_is_refused() {
        let mut packed = compress(Compression::Snappy, b"hello hello").unwrap();
        packed[16..20].copy_from_slice(&1000i32.to_be_bytes());
        assert!(matches!(
            decompress(Compression::Snappy, &packed, 1 << 10),
            Err(BatchError::Decompression {
                codec: Compression::Snappy,
                ..
            })
        ));
    }

    #[test]
    #[cfg(feature = "snappy")]
    fn snappy_block_claiming_a_huge_output_is_refused_before_allocating() {
        // A raw block whose varint preamble claims ~4 GiB.
        let block = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(decompress(Compression::Snappy, &block, 1 << 20).is_err());
    }

    /// A zstd frame that declares a window of 2^27 bytes, above what we accept.
    #[cfg(feature = "zstd")]
    fn zstd_frame_with_a_large_window() -> Vec<u8> {
        use zstd::zstd_safe::CParameter;
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        enc.set_parameter(CParameter::WindowLog(27)).unwrap();
        enc.include_contentsize(false).unwrap();
        enc.write_all(&sample()).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    #[cfg(feature = "zstd")]
    fn zstd_window_bound_holds_on_every_use_of_the_reused_context() {
        let small = compress(Compression::Zstd, b"a small frame").unwrap();
        let large = zstd_frame_with_a_large_window();
        for _ in 0..2 {
            assert_eq!(
                decompress(Compression::Zstd, &small, 1 << 20).unwrap(),
                b"a small frame"
            );
            assert!(matches!(
                decompress(Compression::Zstd, &large, 64 << 20),
                Err(BatchError::Decompression {
                    codec: Compression::Zstd,
                    ..
                })
            ));
        }
    }

    #[test]
    #[cfg(feature = "zstd")]
    fn a_zstd_frame_cut_short_does_not_affect_the_next() {
        let data = sample();
        let packed = compress(Compression::Zstd, &data).unwrap();
        assert!(decompress(Compression::Zstd, &packed[..packed.len() / 2], 1 << 20).is_err());
        assert_eq!(
            decompress(Compression::Zstd, &packed, data.len()).unwrap(),
            data
        );
    }

    #[test]
    #[cfg(feature = "lz4")]
    fn bytes_after_an_lz4_frame_are_refused() {
        let mut packed = compress(Compression::Lz4, b"records").unwrap();
        assert_eq!(
            decompress(Compression::Lz4, &packed, 100).unwrap(),
            b"records"
        );
        let frame = packed.clone();
        packed.extend_from_slice(&frame);
        assert_eq!(
            decompress(Compression::Lz4, &packed, 100),
            Err(BatchError::Decompression {
                codec: Compression::Lz4,
                message: format!("{} bytes after the end of the LZ4 frame", frame.len()),
            })
        );
    }

    #[test]
    fn decompress_into_replaces_what_the_buffer_held() {
        let mut out = b"left over from an earlier batch".to_vec();
        for codec in codecs() {
            decompress_into(codec, &compress(codec, b"new").unwrap(), 100, &mut out).unwrap();
            assert_eq!(out, b"new", "{codec:?}");
        }
    }

    #[test]
    fn garbage_is_a_decompression_error_for_every_codec() {
        let garbage = [0x13u8, 0x37, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x01];
        for codec in codecs().skip(1) {
            assert!(
                matches!(
                    decompress(codec, &garbage, 1 << 20),
                    Err(BatchError::Decompression { .. })
                ),
                "{codec:?}"
            );
        }
    }
}
