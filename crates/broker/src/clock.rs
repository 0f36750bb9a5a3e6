//! The wall clock, as the broker stamps what it stores and answers.

/// Milliseconds since the Unix epoch by the wall clock (0 for a clock set before it).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
