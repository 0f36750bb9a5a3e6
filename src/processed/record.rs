//! The records a [`super::ProcessedStore`] writes, and their decoding: pure functions over
//! bytes, with the layout in the table below (also in docs/format.md, "Processed-id store").
//!
//! Every record has a key; the first key byte says what the record is, so compaction (which
//! keeps the latest record per key) keeps one record per id and one per source:
//!
//! | record | key | value |
//! |---|---|---|
//! | handled | `0x01` ‖ id (1..=4096 bytes) | `0x00` (version) ‖ handled-at ms (int64 BE) ‖ effect (the rest, may be empty) |
//! | forgotten (tombstone) | `0x01` ‖ id | null |
//! | position | `0x02` ‖ source (UTF-8, 1..=255 bytes) | `0x00` (version) ‖ position (int64 BE) |
//!
//! One call of [`super::ProcessedStore::record`] is one batch: the handled record, the
//! position record, and the tombstones of ids forgotten meanwhile. A batch is written and
//! recovered whole (one CRC covers it; recovery cuts a torn batch entirely), which is what
//! makes "X handled, position P" one atomic step.

use bytes::Bytes;

/// First key byte of a handled record (and of its tombstone).
pub const HANDLED: u8 = 0x01;
/// First key byte of a position record.
pub const POSITION: u8 = 0x02;
/// The only value version written.
pub const VERSION: u8 = 0;

/// What one stored record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// `id` was handled at `handled_at_ms`; `effect` is what the application stored with it.
    Handled {
        /// The message id.
        id: Bytes,
        /// When it was handled.
        handled_at_ms: i64,
        /// The effect stored with it.
        effect: Bytes,
    },
    /// `id` is forgotten.
    Forgotten {
        /// The message id.
        id: Bytes,
    },
    /// The consumer of `source` resumes at `position`.
    Position {
        /// The source (topic and partition, say).
        source: String,
        /// The next offset to read.
        position: i64,
    },
}

/// Why a stored record is not one of the store's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecodable {
    /// No key, or an empty one.
    NoKey,
    /// The first key byte is neither 0x01 nor 0x02.
    UnknownTag(u8),
    /// A handled or position record with an empty id or source.
    EmptyName,
    /// A position record's source is not UTF-8.
    SourceNotUtf8,
    /// A position record without a value.
    NullPosition,
    /// A value shorter than its fixed part.
    ShortValue {
        /// Its length.
        len: usize,
        /// The fixed part's length.
        need: usize,
    },
    /// A value version other than 0.
    UnknownVersion(u8),
}

impl std::fmt::Display for Undecodable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Undecodable::NoKey => write!(f, "a record without a key"),
            Undecodable::UnknownTag(t) => write!(f, "unknown record tag 0x{t:02x}"),
            Undecodable::EmptyName => write!(f, "an empty id or source"),
            Undecodable::SourceNotUtf8 => write!(f, "a source that is not UTF-8"),
            Undecodable::NullPosition => write!(f, "a position record without a value"),
            Undecodable::ShortValue { len, need } => {
                write!(f, "a value of {len} bytes, at least {need} expected")
            }
            Undecodable::UnknownVersion(v) => write!(f, "value version {v}, only 0 is known"),
        }
    }
}

/// The key of `id`'s handled record and tombstone.
pub fn handled_key(id: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + id.len());
    key.push(HANDLED);
    key.extend_from_slice(id);
    key
}

/// The value of a handled record.
pub fn handled_value(handled_at_ms: i64, effect: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(9 + effect.len());
    value.push(VERSION);
    value.extend_from_slice(&handled_at_ms.to_be_bytes());
    value.extend_from_slice(effect);
    value
}

/// The key of `source`'s position record.
pub fn position_key(source: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + source.len());
    key.push(POSITION);
    key.extend_from_slice(source.as_bytes());
    key
}

/// The value of a position record.
pub fn position_value(position: i64) -> [u8; 9] {
    let mut value = [0u8; 9];
    value[0] = VERSION;
    value[1..].copy_from_slice(&position.to_be_bytes());
    value
}

/// Decodes one record's key and value.
pub fn decode(key: Option<&Bytes>, value: Option<&Bytes>) -> Result<Decoded, Undecodable> {
    let key = key.filter(|k| !k.is_empty()).ok_or(Undecodable::NoKey)?;
    let name = key.slice(1..);
    match key[0] {
        HANDLED => {
            if name.is_empty() {
                return Err(Undecodable::EmptyName);
            }
            let Some(value) = value else {
                return Ok(Decoded::Forgotten { id: name });
            };
            let handled_at_ms = fixed(value, 9)?;
            Ok(Decoded::Handled {
                id: name,
                handled_at_ms,
                effect: value.slice(9..),
            })
        }
        POSITION => {
            if name.is_empty() {
                return Err(Undecodable::EmptyName);
            }
            let source = std::str::from_utf8(&name)
                .map_err(|_| Undecodable::SourceNotUtf8)?
                .to_string();
            let value = value.ok_or(Undecodable::NullPosition)?;
            let position = fixed(value, 9)?;
            Ok(Decoded::Position { source, position })
        }
        tag => Err(Undecodable::UnknownTag(tag)),
    }
}

/// The version byte and the int64 after it, of a value at least `need` bytes long.
fn fixed(value: &[u8], need: usize) -> Result<i64, Undecodable> {
    if value.len() < need {
        return Err(Undecodable::ShortValue {
            len: value.len(),
            need,
        });
    }
    if value[0] != VERSION {
        return Err(Undecodable::UnknownVersion(value[0]));
    }
    let mut n = [0u8; 8];
    n.copy_from_slice(&value[1..9]);
    Ok(i64::from_be_bytes(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(v: &[u8]) -> Bytes {
        Bytes::copy_from_slice(v)
    }

    #[test]
    fn each_record_decodes_to_what_was_encoded() {
        let key = b(&handled_key(b"order-7"));
        let value = b(&handled_value(1_700_000_000_123, b"charged 5 EUR"));
        assert_eq!(
            decode(Some(&key), Some(&value)),
            Ok(Decoded::Handled {
                id: b(b"order-7"),
                handled_at_ms: 1_700_000_000_123,
                effect: b(b"charged 5 EUR"),
            })
        );
        assert_eq!(
            decode(Some(&key), None),
            Ok(Decoded::Forgotten { id: b(b"order-7") })
        );
        let key = b(&position_key("orders-3"));
        let value = b(&position_value(42));
        assert_eq!(
            decode(Some(&key), Some(&value)),
            Ok(Decoded::Position {
                source: "orders-3".into(),
                position: 42
            })
        );
    }

    #[test]
    fn records_that_are_not_the_stores_are_named() {
        let v = b(&position_value(1));
        assert_eq!(decode(None, Some(&v)), Err(Undecodable::NoKey));
        assert_eq!(decode(Some(&b(b"")), Some(&v)), Err(Undecodable::NoKey));
        assert_eq!(
            decode(Some(&b(b"\x07x")), Some(&v)),
            Err(Undecodable::UnknownTag(7))
        );
        assert_eq!(
            decode(Some(&b(b"\x01")), Some(&v)),
            Err(Undecodable::EmptyName)
        );
        assert_eq!(
            decode(Some(&b(b"\x02\xff")), Some(&v)),
            Err(Undecodable::SourceNotUtf8)
        );
        assert_eq!(
            decode(Some(&b(b"\x02s")), None),
            Err(Undecodable::NullPosition)
        );
        assert_eq!(
            decode(Some(&b(b"\x01x")), Some(&b(b"\x00\x01"))),
            Err(Undecodable::ShortValue { len: 2, need: 9 })
        );
        let mut newer = handled_value(5, b"");
        newer[0] = 1;
        assert_eq!(
            decode(Some(&b(b"\x01x")), Some(&b(&newer))),
            Err(Undecodable::UnknownVersion(1))
        );
    }
}
