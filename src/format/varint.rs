//! Kafka's zigzag varints (docs/format.md, "Record").
//!
//! ZigZag maps signed to unsigned (`(n << 1) ^ (n >> 31)`, `>> 63` for varlong) so small
//! negative numbers stay short, then unsigned LEB128 writes 7 bits per byte, lowest group first,
//! with the high bit meaning "more bytes follow". A varint may use at most 5 bytes and a varlong
//! at most 10; anything longer is corrupt, which bounds the work a hostile record can cause.

/// Longest encoding of an int32.
pub const MAX_VARINT_BYTES: usize = 5;
/// Longest encoding of an int64.
pub const MAX_VARLONG_BYTES: usize = 10;

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VarintError {
    /// The buffer ended while the high bit still announced another byte.
    #[error("varint truncated")]
    Truncated,
    /// More than `max_bytes` bytes carried the continuation bit.
    #[error("varint longer than {max_bytes} bytes")]
    TooLong { max_bytes: usize },
}

impl VarintError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            VarintError::Truncated => "truncated",
            VarintError::TooLong { .. } => "too_long",
        }
    }
}

/// Reads an unsigned LEB128 value of at most `max_bytes` bytes. Bits beyond 64 in the last
/// allowed byte are dropped, as Kafka's `ByteUtils` does; only the byte count is policed.
#[inline]
fn decode_unsigned(buf: &[u8], max_bytes: usize) -> Result<(u64, usize), VarintError> {
    let mut value: u64 = 0;
    for i in 0..max_bytes {
        let Some(&byte) = buf.get(i) else {
            return Err(VarintError::Truncated);
        };
        // i ≤ 9, so the shift is at most 63 and never overflows the shift amount.
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(VarintError::TooLong { max_bytes })
}

/// Decodes a zigzag varint (int32) at the start of `buf`: the value and the bytes it used.
#[inline]
pub fn decode_varint(buf: &[u8]) -> Result<(i32, usize), VarintError> {
    let (raw, used) = decode_unsigned(buf, MAX_VARINT_BYTES)?;
    // The fifth byte may carry bits above 32; Kafka ignores them (int arithmetic), so do we.
    let raw = raw as u32;
    Ok((((raw >> 1) as i32) ^ -((raw & 1) as i32), used))
}

/// Decodes a zigzag varlong (int64) at the start of `buf`: the value and the bytes it used.
#[inline]
pub fn decode_varlong(buf: &[u8]) -> Result<(i64, usize), VarintError> {
    let (raw, used) = decode_unsigned(buf, MAX_VARLONG_BYTES)?;
    Ok((((raw >> 1) as i64) ^ -((raw & 1) as i64), used))
}

#[inline]
fn zigzag32(value: i32) -> u64 {
    u64::from(((value << 1) ^ (value >> 31)) as u32)
}

#[inline]
fn zigzag64(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

#[inline]
fn encode_unsigned(mut raw: u64, out: &mut Vec<u8>) {
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

#[inline]
fn unsigned_size(raw: u64) -> usize {
    // Bits needed, rounded up to 7-bit groups; zero still takes one byte.
    let bits = 64 - raw.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// Appends the zigzag varint encoding of `value`.
#[inline]
pub fn encode_varint(value: i32, out: &mut Vec<u8>) {
    encode_unsigned(zigzag32(value), out);
}

/// Appends the zigzag varlong encoding of `value`.
#[inline]
pub fn encode_varlong(value: i64, out: &mut Vec<u8>) {
    encode_unsigned(zigzag64(value), out);
}

/// Bytes [`encode_varint`] writes for `value`.
#[inline]
pub fn varint_size(value: i32) -> usize {
    unsigned_size(zigzag32(value))
}

/// Bytes [`encode_varlong`] writes for `value`.
#[inline]
pub fn varlong_size(value: i64) -> usize {
    unsigned_size(zigzag64(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TV4 of docs/format.md, "Test vectors".
    const TV4: &[(i32, &str)] = &[
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
        (-300, "d704"),
        (i32::MAX, "feffffff0f"),
        (i32::MIN, "ffffffff0f"),
    ];

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn varints_encode_as_in_tv4() {
        for &(value, expected) in TV4 {
            let mut out = Vec::new();
            encode_varint(value, &mut out);
            assert_eq!(hex(&out), expected, "value {value}");
            assert_eq!(varint_size(value), out.len(), "size of {value}");
        }
    }

    #[test]
    fn varints_decode_as_in_tv4() {
        for &(value, encoded) in TV4 {
            let bytes: Vec<u8> = (0..encoded.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&encoded[i..i + 2], 16).unwrap())
                .collect();
            assert_eq!(
                decode_varint(&bytes),
                Ok((value, bytes.len())),
                "encoding {encoded}"
            );
            // A varlong of the same small magnitude has the same encoding.
            assert_eq!(decode_varlong(&bytes), Ok((i64::from(value), bytes.len())));
        }
    }

    #[test]
    fn varlong_extremes_round_trip_in_ten_bytes() {
        for value in [i64::MIN, i64::MAX, -282_609, 0, 1 << 40] {
            let mut out = Vec::new();
            encode_varlong(value, &mut out);
            assert!(out.len() <= MAX_VARLONG_BYTES);
            assert_eq!(varlong_size(value), out.len());
            assert_eq!(decode_varlong(&out), Ok((value, out.len())));
        }
    }

    #[test]
    fn decoding_stops_after_the_last_byte_of_the_value() {
        assert_eq!(decode_varint(&[0xd8, 0x04, 0xff, 0xff]), Ok((300, 2)));
    }

    #[test]
    fn six_byte_varint_is_too_long() {
        let bytes = [0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(
            decode_varint(&bytes),
            Err(VarintError::TooLong { max_bytes: 5 })
        );
    }

    #[test]
    fn eleven_byte_varlong_is_too_long() {
        let bytes = [0xff; 11];
        assert_eq!(
            decode_varlong(&bytes),
            Err(VarintError::TooLong { max_bytes: 10 })
        );
    }

    #[test]
    fn varint_cut_mid_value_is_truncated() {
        assert_eq!(decode_varint(&[0x80, 0x80]), Err(VarintError::Truncated));
        assert_eq!(decode_varint(&[]), Err(VarintError::Truncated));
        assert_eq!(decode_varlong(&[0xff]), Err(VarintError::Truncated));
    }
}
