//! Fuzz entry point for the snapshot decoder (docs/design.md, "How the guarantees are tested"):
//! used by the cargo-fuzz target and by the corpus replay test, so the corpus is exercised by every
//! `cargo test`.

use super::snapshot::{decode, encode};

/// Decodes arbitrary bytes; must never panic. A snapshot that decodes must re-encode to the
/// same bytes (its version, entry order and fields are all kept), which catches a decoder that
/// accepts what it misreads.
#[doc(hidden)]
pub fn fuzz_snapshot(data: &[u8]) {
    if let Ok(s) = decode(data) {
        let again = encode(&s.entries, s.version, s.offset.unwrap_or(0));
        assert_eq!(
            again.len(),
            data.len(),
            "a decoded snapshot re-encodes to its length"
        );
        // Bytes may differ only where decoding normalises: a negative txn offset other than -1
        // (v1/v2) or v1 batch fields of an entry without a batch (lastOffset < 0).
        let reparsed = decode(&again).map(|t| t.entries);
        assert_eq!(
            reparsed.as_ref().ok(),
            Some(&s.entries),
            "re-encoding is stable"
        );
    }
}
