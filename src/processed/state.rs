//! What a processed-id store holds in memory, and its decisions as plain functions: which ids
//! are handled, which are due to be forgotten, where each source resumes. The store wraps it
//! with the log; replaying the log through [`Handled::apply`] rebuilds the same state.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

/// One handled id: when, and the offset of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub handled_at_ms: i64,
    pub offset: i64,
}

/// A source's position and the offset of the record that stored it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub position: i64,
    pub offset: i64,
}

/// The handled ids, oldest first, and the positions.
#[derive(Debug, Default)]
pub struct Handled {
    ids: HashMap<Arc<[u8]>, Entry>,
    /// Every id in the order it was handled (time order: handled-at times never go back). An
    /// entry whose id was removed, or handled again since, is skipped when met.
    order: VecDeque<(Arc<[u8]>, Entry)>,
    id_bytes: usize,
    positions: BTreeMap<String, Stored>,
    /// The newest handled-at time seen: a new one is never older, so `order` stays sorted
    /// even when the wall clock steps back.
    latest_ms: i64,
}

impl Handled {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn get(&self, id: &[u8]) -> Option<Entry> {
        self.ids.get(id).copied()
    }

    /// A handled-at time for a record made at `now_ms`: never older than the last one.
    pub fn stamp(&self, now_ms: i64) -> i64 {
        now_ms.max(self.latest_ms)
    }

    pub fn insert(&mut self, id: &[u8], entry: Entry) {
        let id: Arc<[u8]> = Arc::from(id);
        self.latest_ms = self.latest_ms.max(entry.handled_at_ms);
        if self.ids.insert(Arc::clone(&id), entry).is_none() {
            self.id_bytes += id.len();
        }
        self.order.push_back((id, entry));
    }

    pub fn remove(&mut self, id: &[u8]) -> bool {
        match self.ids.remove(id) {
            Some(_) => {
                self.id_bytes -= id.len();
                true
            }
            None => false,
        }
    }

    pub fn set_position(&mut self, source: &str, stored: Stored) {
        self.positions.insert(source.to_string(), stored);
    }

    pub fn position(&self, source: &str) -> Option<Stored> {
        self.positions.get(source).copied()
    }

    pub fn positions(&self) -> impl Iterator<Item = (&str, Stored)> {
        self.positions.iter().map(|(s, p)| (s.as_str(), *p))
    }

    /// Whether `id` counts as handled at `now_ms`: recorded, not forgotten, and younger than
    /// `max_age_ms` when there is one.
    pub fn is_handled(&self, id: &[u8], now_ms: i64, max_age_ms: Option<i64>) -> bool {
        match self.ids.get(id) {
            None => false,
            Some(e) => !expired(e.handled_at_ms, now_ms, max_age_ms),
        }
    }

    /// Removes and returns the ids to forget now: every one older than `max_age_ms`, and the
    /// oldest beyond `max_ids` once `room` more are added. Oldest first.
    pub fn forget(
        &mut self,
        now_ms: i64,
        max_age_ms: Option<i64>,
        max_ids: Option<usize>,
        room: usize,
    ) -> Vec<Arc<[u8]>> {
        let mut forgotten = Vec::new();
        while let Some((id, entry)) = self.order.front() {
            let current = self.ids.get(id) == Some(entry);
            if !current {
                self.order.pop_front();
                continue;
            }
            let too_old = expired(entry.handled_at_ms, now_ms, max_age_ms);
            let too_many = max_ids.is_some_and(|max| self.ids.len() + room > max);
            if !too_old && !too_many {
                break;
            }
            let Some((id, _)) = self.order.pop_front() else {
                break;
            };
            self.remove(&id);
            forgotten.push(id);
        }
        forgotten
    }

    /// Every handled id with its entry, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Entry)> {
        self.order
            .iter()
            .filter(|(id, e)| self.ids.get(id) == Some(e))
            .map(|(id, e)| (&id[..], *e))
    }

    /// Bytes held: the ids, the map and queue slots (at their capacity), the positions.
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        // Each id is one allocation shared by the map and the queue: its bytes plus the two
        // reference counts.
        let ids = self.id_bytes + self.ids.len() * 2 * size_of::<usize>();
        // A hashbrown slot is the pair plus one control byte.
        let map = self.ids.capacity() * (size_of::<(Arc<[u8]>, Entry)>() + 1);
        let queue = self.order.capacity() * size_of::<(Arc<[u8]>, Entry)>();
        let positions: usize = self
            .positions
            .keys()
            .map(|s| s.len() + size_of::<(String, Stored)>() + 2 * size_of::<usize>())
            .sum();
        ids + map + queue + positions
    }

    pub fn id_bytes(&self) -> usize {
        self.id_bytes
    }

    pub fn position_count(&self) -> usize {
        self.positions.len()
    }

    /// Shrinks the queue when stale entries dominate it (ids forgotten out of order).
    pub fn compact_order(&mut self) {
        if self.order.len() > 2 * self.ids.len() + 64 {
            let ids = &self.ids;
            self.order.retain(|(id, e)| ids.get(id) == Some(e));
            self.order.shrink_to_fit();
        }
    }
}

fn expired(handled_at_ms: i64, now_ms: i64, max_age_ms: Option<i64>) -> bool {
    max_age_ms.is_some_and(|age| handled_at_ms <= now_ms.saturating_sub(age))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(handled_at_ms: i64, offset: i64) -> Entry {
        Entry {
            handled_at_ms,
            offset,
        }
    }

    #[test]
    fn an_id_is_handled_until_it_is_older_than_the_age_limit() {
        let mut h = Handled::default();
        h.insert(b"a", e(1_000, 0));
        assert!(h.is_handled(b"a", 1_000, None));
        assert!(h.is_handled(b"a", 30_999, Some(30_000)));
        assert!(
            !h.is_handled(b"a", 31_000, Some(30_000)),
            "30 s later: forgotten"
        );
        assert!(!h.is_handled(b"b", 1_000, None));
    }

    #[test]
    fn forgetting_takes_the_oldest_first_by_age_and_by_count() {
        let mut h = Handled::default();
        for (i, id) in [b"a", b"b", b"c", b"d"].iter().enumerate() {
            h.insert(*id, e(1_000 * i as i64, i as i64));
        }
        let gone = h.forget(2_500, Some(1_000), None, 0);
        assert_eq!(gone, vec![Arc::from(&b"a"[..]), Arc::from(&b"b"[..])]);
        // Two left; room for one more under a limit of two forgets the oldest.
        let gone = h.forget(2_500, None, Some(2), 1);
        assert_eq!(gone, vec![Arc::from(&b"c"[..])]);
        assert_eq!(
            h.iter().map(|(id, _)| id.to_vec()).collect::<Vec<_>>(),
            [b"d"]
        );
        assert_eq!(h.id_bytes(), 1);
    }

    #[test]
    fn an_id_removed_and_handled_again_is_forgotten_by_its_new_time() {
        let mut h = Handled::default();
        h.insert(b"a", e(0, 0));
        h.insert(b"b", e(10, 1));
        assert!(h.remove(b"a"));
        h.insert(b"a", e(20, 2));
        assert_eq!(h.forget(25, Some(10), None, 0), vec![Arc::from(&b"b"[..])]);
        assert!(h.is_handled(b"a", 25, Some(10)));
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn stamps_never_go_back() {
        let mut h = Handled::default();
        h.insert(b"a", e(h.stamp(500), 0));
        assert_eq!(h.stamp(100), 500, "the clock stepped back");
        assert_eq!(h.stamp(900), 900);
    }

    #[test]
    fn memory_grows_with_the_ids_and_is_given_back_when_they_go() {
        let mut h = Handled::default();
        let empty = h.memory_bytes();
        for i in 0..1000 {
            h.insert(format!("id-{i:04}").as_bytes(), e(i, i));
        }
        let full = h.memory_bytes();
        assert!(full > empty + 1000 * 7, "{full}");
        h.forget(2000, Some(1), None, 0);
        h.compact_order();
        assert_eq!(h.len(), 0);
        assert!(h.memory_bytes() < full);
    }
}
