//! Index search, as Kafka does it (docs/format.md, "Offset index").

/// Bytes of the index tail that lookups prefer (Kafka's "warm section"), so that searches near
/// the end, the common case, touch only pages that are already resident.
const WARM_BYTES: usize = 8192;

/// The largest slot in `[0, entries)` whose key is ≤ `target`, or `None` if every key is
/// larger. Keys must be non-decreasing.
pub fn largest_lower_bound(
    entries: usize,
    entry_size: usize,
    key_at: impl Fn(usize) -> i64,
    target: i64,
) -> Option<usize> {
    if entries == 0 {
        return None;
    }
    let warm = WARM_BYTES / entry_size;
    let first_hot = entries.saturating_sub(1 + warm);
    if key_at(first_hot) < target {
        return Some(bisect(first_hot, entries - 1, &key_at, target));
    }
    if key_at(0) > target {
        return None;
    }
    Some(bisect(0, first_hot, &key_at, target))
}

/// Kafka's bisection: `mid = (lo + hi + 1) / 2`, returns the largest slot with key ≤ target,
/// given key(lo) ≤ target.
fn bisect(mut lo: usize, mut hi: usize, key_at: &impl Fn(usize) -> i64, target: i64) -> usize {
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        let found = key_at(mid);
        if found == target {
            return mid;
        } else if found < target {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(keys: &[i64], target: i64, entry_size: usize) -> Option<usize> {
        largest_lower_bound(keys.len(), entry_size, |i| keys[i], target)
    }

    #[test]
    fn finds_the_largest_key_not_above_target() {
        let keys = [10, 20, 30, 40];
        assert_eq!(search(&keys, 5, 8), None);
        assert_eq!(search(&keys, 10, 8), Some(0));
        assert_eq!(search(&keys, 25, 8), Some(1));
        assert_eq!(search(&keys, 40, 8), Some(3));
        assert_eq!(search(&keys, 99, 8), Some(3));
        assert_eq!(search(&[], 1, 8), None);
    }

    #[test]
    fn warm_and_cold_sections_agree_with_a_linear_scan() {
        // 3000 entries of 8 bytes: the warm section is the last 1024 + 1.
        let keys: Vec<i64> = (0..3000).map(|i| i * 3 + 7).collect();
        for target in (0..9100).step_by(7) {
            let expected = keys.iter().rposition(|&k| k <= target);
            assert_eq!(search(&keys, target, 8), expected, "target {target}");
        }
    }

    #[test]
    fn equal_keys_in_a_time_index_return_a_slot_with_that_key() {
        let keys = [5, 5, 5, 9];
        assert_eq!(search(&keys, 5, 12).map(|i| keys[i]), Some(5));
    }
}
