//! Producer sequence arithmetic: sequences live in [0, i32::MAX] and wrap to 0 (docs/format.md,
//! "Sequence numbers").

/// `base + delta` with Kafka's wrap: past i32::MAX the count continues from 0.
///
/// Java int arithmetic wraps, and corrupt headers can carry negative deltas or bases, so the
/// operations wrap here too: the same answer as Kafka, and no overflow panic on hostile input.
pub fn add(base: i32, delta: i32) -> i32 {
    if base > i32::MAX.wrapping_sub(delta) {
        delta
            .wrapping_sub(i32::MAX.wrapping_sub(base))
            .wrapping_sub(1)
    } else {
        base.wrapping_add(delta)
    }
}

/// The inverse of [`add`]: the first sequence of a batch whose last sequence is `last`.
pub fn sub(last: i32, delta: i32) -> i32 {
    if last < delta {
        i32::MAX
            .wrapping_sub(delta.wrapping_sub(last))
            .wrapping_add(1)
    } else {
        last.wrapping_sub(delta)
    }
}

/// Whether `next` directly follows `last`.
pub fn in_sequence(last: i32, next: i32) -> bool {
    next == last.wrapping_add(1) && last != i32::MAX || (next == 0 && last == i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_wraps_past_i32_max() {
        assert_eq!(add(5, 4), 9);
        assert_eq!(add(i32::MAX, 0), i32::MAX);
        assert_eq!(add(i32::MAX, 1), 0);
        assert_eq!(add(i32::MAX - 1, 3), 1);
    }

    #[test]
    fn sub_inverts_add() {
        for (base, delta) in [(0, 0), (5, 4), (i32::MAX, 1), (i32::MAX - 1, 3), (100, 99)] {
            assert_eq!(
                sub(add(base, delta), delta),
                base,
                "base {base} delta {delta}"
            );
        }
    }

    #[test]
    fn in_sequence_follows_and_wraps() {
        assert!(in_sequence(4, 5));
        assert!(!in_sequence(4, 6));
        assert!(!in_sequence(4, 4));
        assert!(in_sequence(i32::MAX, 0));
        assert!(!in_sequence(i32::MAX, i32::MIN));
    }

    #[test]
    fn corrupt_negative_deltas_do_not_overflow() {
        for (a, b) in [
            (5, -1),
            (i32::MAX, i32::MIN),
            (i32::MIN, i32::MAX),
            (-1, -1),
        ] {
            let _ = (add(a, b), sub(a, b));
        }
    }
}
