//! A bounded read cache in front of a [`RemoteStore`] (docs/design.md, "Tiered storage",
//! "The read cache"): whole objects of `get` and fixed blocks of `get_range`, least recently
//! used first out, within a byte budget.
//!
//! Caching is safe because tiering never changes an object once written: every upload
//! attempt puts its objects under a key of their own (the [`UploadId`](super::UploadId) in the
//! key), and a manifest generation is created once, with a put-if-absent. What a reader takes
//! from the cache it checks as it would the store's answer (an index's size and CRC-32C
//! against the manifest, each batch's CRC). A `put`, `put_if_absent` or `delete` through
//! the cache drops what it holds of that key; a failure is never cached.
//!
//! Lists are the exception to "never changes": a list of a folder is kept for a short time
//! ([`CachedStore::with_list_ttl`], 1 s by default), so a consumer reading remote segments
//! does not list the partition's manifests once per fetch. A `put`, `put_if_absent` or
//! `delete` through the cache drops every list of a folder holding its key, so this process
//! always lists what it wrote; what another process wrote is seen within the time to live.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::store::{Created, RemoteError, RemoteErrorKind, RemoteObject, RemoteStore};

/// The block size of cached ranges: `get_range` is served in aligned blocks of this many
/// bytes (the tiering reads ask whole blocks, so a consumer's next fetch finds the block its
/// last one fetched).
pub const CACHE_BLOCK_BYTES: u64 = 256 << 10;

/// How long a list is kept by default ([`CachedStore::with_list_ttl`]).
pub const DEFAULT_LIST_TTL: Duration = Duration::from_secs(1);

/// A [`RemoteStore`] that keeps what it read, up to a byte budget (see the module docs).
///
/// ```
/// # use oncelog::tier::{CachedStore, RemoteStore};
/// # fn wrap(store: impl RemoteStore) -> impl RemoteStore {
/// CachedStore::new(store, 256 << 20) // at most 256 MiB of fetched objects and blocks
/// # }
/// ```
#[derive(Debug)]
pub struct CachedStore<S> {
    inner: S,
    budget: u64,
    held: Mutex<Held>,
    /// Folder to when it was listed and what was found.
    lists: Mutex<HashMap<String, (Instant, Vec<RemoteObject>)>>,
    list_ttl: Duration,
    /// Writes through the cache so far: a list that saw this count change while it ran may
    /// predate a write, and is not kept.
    writes: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    evicted: AtomicU64,
}

/// What a [`CachedStore`] holds and has done, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Bytes held now.
    pub bytes: u64,
    /// Objects and blocks held now.
    pub entries: u64,
    /// Whole objects and blocks served from the cache.
    pub hits: u64,
    /// Whole objects and blocks fetched from the store.
    pub misses: u64,
    /// Entries dropped to stay within the budget.
    pub evicted: u64,
}

/// A whole object (`block: None`) or one block of one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Slot {
    key: String,
    block: Option<u64>,
}

#[derive(Debug)]
struct Entry {
    bytes: bytes::Bytes,
    used: u64,
}

#[derive(Debug, Default)]
struct Held {
    entries: HashMap<Slot, Entry>,
    /// Last use (a counter) to slot: the oldest first.
    by_use: BTreeMap<u64, Slot>,
    bytes: u64,
    clock: u64,
}

impl Held {
    fn touch(&mut self, slot: &Slot) -> Option<bytes::Bytes> {
        self.clock += 1;
        let clock = self.clock;
        let entry = self.entries.get_mut(slot)?;
        self.by_use.remove(&entry.used);
        entry.used = clock;
        self.by_use.insert(clock, slot.clone());
        Some(entry.bytes.clone())
    }

    fn remove(&mut self, slot: &Slot) {
        if let Some(e) = self.entries.remove(slot) {
            self.by_use.remove(&e.used);
            self.bytes -= e.bytes.len() as u64;
        }
    }

    /// Keeps `bytes` under `slot`, dropping the least recently used until the budget holds
    /// them; returns how many were dropped.
    fn insert(&mut self, slot: Slot, bytes: bytes::Bytes, budget: u64) -> u64 {
        self.remove(&slot);
        let size = bytes.len() as u64;
        let mut dropped = 0;
        while self.bytes + size > budget {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some(e) = self.entries.remove(&oldest) {
                self.bytes -= e.bytes.len() as u64;
                dropped += 1;
            }
        }
        self.clock += 1;
        self.by_use.insert(self.clock, slot.clone());
        self.entries.insert(
            slot,
            Entry {
                bytes,
                used: self.clock,
            },
        );
        self.bytes += size;
        dropped
    }

    fn forget_key(&mut self, key: &str) {
        let slots: Vec<Slot> = self
            .entries
            .keys()
            .filter(|s| s.key == key)
            .cloned()
            .collect();
        for s in &slots {
            self.remove(s);
        }
    }
}

impl<S: RemoteStore> CachedStore<S> {
    /// `inner` with a cache of at most `budget_bytes` (0 caches nothing). An object or
    /// block larger than an eighth of the budget is passed through uncached, so one large
    /// read does not empty the cache.
    pub fn new(inner: S, budget_bytes: u64) -> CachedStore<S> {
        CachedStore {
            inner,
            budget: budget_bytes,
            held: Mutex::new(Held::default()),
            lists: Mutex::new(HashMap::new()),
            list_ttl: DEFAULT_LIST_TTL,
            writes: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    /// Keeps each list of a folder for `ttl` (zero: lists are never kept). Lists of what was
    /// written through this cache are dropped at the write whatever the time to live.
    pub fn with_list_ttl(mut self, ttl: Duration) -> CachedStore<S> {
        self.list_ttl = ttl;
        self
    }

    /// Drops every list of a folder that holds `key`.
    fn forget_lists_holding(&self, key: &str) {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.lists
            .lock()
            .retain(|folder, _| !key.starts_with(&format!("{folder}/")));
    }

    /// The store behind the cache.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// What the cache holds and has done.
    pub fn stats(&self) -> CacheStats {
        let held = self.held.lock();
        CacheStats {
            bytes: held.bytes,
            entries: held.entries.len() as u64,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Relaxed),
        }
    }

    fn cacheable(&self, size: u64) -> bool {
        size > 0 && size <= self.budget / 8
    }

    /// The bytes held under `slot` if at least `need` of them are.
    fn lookup(&self, slot: &Slot, need: u64) -> Option<bytes::Bytes> {
        let got = self
            .held
            .lock()
            .touch(slot)
            .filter(|b| b.len() as u64 >= need);
        match got {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        got
    }

    fn keep(&self, slot: Slot, bytes: bytes::Bytes) {
        if self.cacheable(bytes.len() as u64) {
            let dropped = self.held.lock().insert(slot, bytes, self.budget);
            self.evicted.fetch_add(dropped, Ordering::Relaxed);
        }
    }
}

impl<S: RemoteStore> RemoteStore for CachedStore<S> {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteError> {
        self.held.lock().forget_key(key);
        let put = self.inner.put(key, bytes);
        // After the write (failed or not: it may have happened), so no list taken during it
        // is kept.
        self.forget_lists_holding(key);
        put
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<Created, RemoteError> {
        self.held.lock().forget_key(key);
        let put = self.inner.put_if_absent(key, bytes);
        self.forget_lists_holding(key);
        put
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, RemoteError> {
        let slot = Slot {
            key: key.to_owned(),
            block: None,
        };
        if let Some(b) = self.lookup(&slot, 0) {
            return Ok(b.to_vec());
        }
        let got = self.inner.get(key)?;
        self.keep(slot, bytes::Bytes::copy_from_slice(&got));
        Ok(got)
    }

    /// Served block by block: each block of `CACHE_BLOCK_BYTES` the range touches comes from
    /// the cache when it holds enough of it, and the blocks it lacks are fetched in one
    /// `get_range` (the last one only as far as the range goes: the object's length is not
    /// known here).
    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
        if range.start >= range.end || !self.cacheable(CACHE_BLOCK_BYTES) {
            return self.inner.get_range(key, range);
        }
        let (first, last) = (
            range.start / CACHE_BLOCK_BYTES,
            (range.end - 1) / CACHE_BLOCK_BYTES,
        );
        // Each block's bytes from its start, as far as the range needs them.
        let mut blocks: Vec<Option<bytes::Bytes>> = Vec::new();
        for k in first..=last {
            let need = range.end.min((k + 1) * CACHE_BLOCK_BYTES) - k * CACHE_BLOCK_BYTES;
            let slot = Slot {
                key: key.to_owned(),
                block: Some(k),
            };
            blocks.push(self.lookup(&slot, need));
        }
        if let (Some(lo), Some(hi)) = (
            blocks.iter().position(Option::is_none),
            blocks.iter().rposition(Option::is_none),
        ) {
            let from = (first + lo as u64) * CACHE_BLOCK_BYTES;
            let to = range.end.min((first + hi as u64 + 1) * CACHE_BLOCK_BYTES);
            let fetched = bytes::Bytes::from(self.inner.get_range(key, from..to)?);
            if fetched.len() as u64 != to - from {
                let reason = format!(
                    "asked bytes {from}..{to}, got {} bytes (past the object's end)",
                    fetched.len()
                );
                return Err(RemoteError::new(
                    "get_range",
                    key,
                    RemoteErrorKind::Other,
                    reason,
                ));
            }
            for (i, block) in blocks.iter_mut().enumerate().take(hi + 1).skip(lo) {
                let k = first + i as u64;
                let at = (k * CACHE_BLOCK_BYTES - from) as usize;
                let end = ((k + 1) * CACHE_BLOCK_BYTES).min(to) - from;
                let bytes = fetched.slice(at..end as usize);
                let slot = Slot {
                    key: key.to_owned(),
                    block: Some(k),
                };
                self.keep(slot, bytes.clone());
                *block = Some(bytes);
            }
        }
        let mut out = Vec::with_capacity((range.end - range.start) as usize);
        // Every block is held or was just fetched.
        for (block, k) in blocks.iter().flatten().zip(first..) {
            let base = k * CACHE_BLOCK_BYTES;
            let from = range.start.max(base) - base;
            let to = range.end.min(base + CACHE_BLOCK_BYTES) - base;
            out.extend_from_slice(&block[from as usize..to as usize]);
        }
        Ok(out)
    }

    fn list(&self, prefix: &str) -> Result<Vec<RemoteObject>, RemoteError> {
        if let Some((at, found)) = self.lists.lock().get(prefix) {
            if at.elapsed() < self.list_ttl {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(found.clone());
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let (listed_at, writes) = (Instant::now(), self.writes.load(Ordering::SeqCst));
        let found = self.inner.list(prefix)?;
        if !self.list_ttl.is_zero() {
            let mut lists = self.lists.lock();
            // Under the lock that writes' invalidations take: no write ended since the list
            // began, or it is not kept.
            if self.writes.load(Ordering::SeqCst) == writes {
                lists.insert(prefix.to_owned(), (listed_at, found.clone()));
            }
        }
        Ok(found)
    }

    fn delete(&self, key: &str) -> Result<(), RemoteError> {
        self.held.lock().forget_key(key);
        let deleted = self.inner.delete(key);
        self.forget_lists_holding(key);
        deleted
    }

    fn forget(&self, key: &str) {
        self.held.lock().forget_key(key);
        self.inner.forget(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A store of one object that counts the bytes it serves.
    #[derive(Debug, Default)]
    struct Counting {
        objects: Mutex<HashMap<String, Vec<u8>>>,
        served: AtomicUsize,
        calls: AtomicUsize,
        lists: AtomicUsize,
    }

    impl RemoteStore for Counting {
        fn put(&self, k: &str, b: &[u8]) -> Result<(), RemoteError> {
            self.objects.lock().insert(k.into(), b.to_vec());
            Ok(())
        }
        fn put_if_absent(&self, k: &str, b: &[u8]) -> Result<Created, RemoteError> {
            self.put(k, b).map(|()| Created::Created)
        }
        fn get(&self, k: &str) -> Result<Vec<u8>, RemoteError> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let got = self.objects.lock().get(k).cloned();
            let got =
                got.ok_or_else(|| RemoteError::new("get", k, RemoteErrorKind::NotFound, "none"))?;
            self.served.fetch_add(got.len(), Ordering::Relaxed);
            Ok(got)
        }
        fn get_range(&self, k: &str, r: Range<u64>) -> Result<Vec<u8>, RemoteError> {
            let all = self.get(k)?;
            self.served.fetch_sub(all.len(), Ordering::Relaxed);
            if r.end as usize > all.len() {
                return Err(RemoteError::new(
                    "get_range",
                    k,
                    RemoteErrorKind::Other,
                    "past the end",
                ));
            }
            self.served
                .fetch_add((r.end - r.start) as usize, Ordering::Relaxed);
            Ok(all[r.start as usize..r.end as usize].to_vec())
        }
        fn list(&self, prefix: &str) -> Result<Vec<RemoteObject>, RemoteError> {
            self.lists.fetch_add(1, Ordering::Relaxed);
            let objects = self.objects.lock();
            Ok(objects
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("{prefix}/")))
                .map(|(k, v)| RemoteObject {
                    key: k.clone(),
                    size: v.len() as u64,
                })
                .collect())
        }
        fn delete(&self, k: &str) -> Result<(), RemoteError> {
            self.objects.lock().remove(k);
            Ok(())
        }
    }

    fn object(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn every_range_reads_what_the_store_holds() {
        let len = 3 * CACHE_BLOCK_BYTES as usize + 1000;
        let bytes = object(len);
        let store = CachedStore::new(Counting::default(), 64 << 20);
        store.put("a/b", &bytes).unwrap();
        let b = CACHE_BLOCK_BYTES;
        let ranges = [
            0..10,
            5..b + 3,
            b - 1..b + 1,
            0..len as u64,
            2 * b..3 * b,
            3 * b..len as u64,
            len as u64 - 1..len as u64,
            7..7 + 2 * b,
        ];
        // Twice: cold, then from the cache.
        for _ in 0..2 {
            for r in ranges.iter().cloned() {
                let got = store.get_range("a/b", r.clone()).unwrap();
                assert_eq!(got, &bytes[r.start as usize..r.end as usize], "{r:?}");
            }
        }
        assert!(store.get_range("a/b", 0..len as u64 + 1).is_err());
        assert_eq!(store.get("a/b").unwrap(), bytes);
    }

    #[test]
    fn a_second_read_is_served_from_the_cache() {
        let bytes = object(4 * CACHE_BLOCK_BYTES as usize);
        let store = CachedStore::new(Counting::default(), 64 << 20);
        store.put("k", &bytes).unwrap();
        let r = 100..2 * CACHE_BLOCK_BYTES + 5;
        store.get_range("k", r.clone()).unwrap();
        let served = store.inner().served.load(Ordering::Relaxed);
        assert_eq!(served as u64, r.end, "fetched from the first block's start");
        store.get_range("k", r.clone()).unwrap();
        store.get_range("k", 3..CACHE_BLOCK_BYTES).unwrap();
        assert_eq!(store.inner().served.load(Ordering::Relaxed), served);
        // The block only partly held is fetched again, and whole this time.
        store
            .get_range("k", 2 * CACHE_BLOCK_BYTES..3 * CACHE_BLOCK_BYTES)
            .unwrap();
        assert_eq!(
            store.inner().served.load(Ordering::Relaxed) as u64,
            served as u64 + CACHE_BLOCK_BYTES
        );
        let stats = store.stats();
        assert!(stats.hits >= 3 && stats.misses >= 3, "{stats:?}");
    }

    #[test]
    fn a_put_or_delete_drops_what_is_held_of_its_key() {
        let store = CachedStore::new(Counting::default(), 64 << 20);
        store.put("k", b"one").unwrap();
        assert_eq!(store.get("k").unwrap(), b"one");
        store.put("k", b"two").unwrap();
        assert_eq!(store.get("k").unwrap(), b"two");
        store.delete("k").unwrap();
        assert_eq!(store.get("k").unwrap_err().kind, RemoteErrorKind::NotFound);
        // A failure is not cached.
        store.put("k", b"three").unwrap();
        assert_eq!(store.get("k").unwrap(), b"three");
        assert_eq!(store.stats().entries, 1);
    }

    #[test]
    fn the_budget_holds_and_the_least_recently_used_goes_first() {
        let budget = 16 * CACHE_BLOCK_BYTES;
        let store = CachedStore::new(Counting::default(), budget);
        let bytes = object(40 * CACHE_BLOCK_BYTES as usize);
        store.put("k", &bytes).unwrap();
        let block = |k: u64| k * CACHE_BLOCK_BYTES..(k + 1) * CACHE_BLOCK_BYTES;
        for k in 0..40 {
            store.get_range("k", block(k)).unwrap();
            if k >= 1 {
                store.get_range("k", block(0)).unwrap(); // block 0 stays in use
            }
            assert!(store.stats().bytes <= budget);
        }
        let calls = store.inner().calls.load(Ordering::Relaxed);
        store.get_range("k", block(0)).unwrap();
        store.get_range("k", block(39)).unwrap();
        assert_eq!(store.inner().calls.load(Ordering::Relaxed), calls);
        store.get_range("k", block(1)).unwrap();
        assert_eq!(store.inner().calls.load(Ordering::Relaxed), calls + 1);
        assert!(store.stats().evicted > 0);
        // An object over an eighth of the budget passes through.
        store
            .put("big", &object(3 * CACHE_BLOCK_BYTES as usize))
            .unwrap();
        store.get("big").unwrap();
        assert!(store.stats().bytes <= budget);
        let before = store.inner().calls.load(Ordering::Relaxed);
        store.get("big").unwrap();
        assert_eq!(store.inner().calls.load(Ordering::Relaxed), before + 1);
    }

    #[test]
    fn a_zero_budget_caches_nothing() {
        let store = CachedStore::new(Counting::default(), 0);
        store.put("k", &object(1000)).unwrap();
        store.get_range("k", 0..10).unwrap();
        store.get("k").unwrap();
        store.get("k").unwrap();
        assert_eq!(store.stats().entries, 0);
        assert_eq!(store.inner().calls.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_list_is_kept_for_its_time_to_live_and_dropped_by_a_write_through_the_cache() {
        let store = CachedStore::new(Counting::default(), 64 << 20)
            .with_list_ttl(Duration::from_millis(200));
        store.put("p/a", b"1").unwrap();
        let keys = |s: &CachedStore<Counting>| -> Vec<String> {
            let mut k: Vec<String> = s.list("p").unwrap().into_iter().map(|o| o.key).collect();
            k.sort();
            k
        };
        assert_eq!(keys(&store), ["p/a"]);
        assert_eq!(keys(&store), ["p/a"]);
        assert_eq!(
            store.inner().lists.load(Ordering::Relaxed),
            1,
            "the second was kept"
        );
        // Written through the cache: seen at once.
        store.put("p/b", b"2").unwrap();
        assert_eq!(keys(&store), ["p/a", "p/b"]);
        store.delete("p/a").unwrap();
        assert_eq!(keys(&store), ["p/b"]);
        store.put_if_absent("p/deeper/c", b"3").unwrap();
        assert_eq!(keys(&store), ["p/b", "p/deeper/c"]);
        // Another folder's write leaves the list alone.
        let lists = store.inner().lists.load(Ordering::Relaxed);
        store.put("q/x", b"4").unwrap();
        keys(&store);
        assert_eq!(store.inner().lists.load(Ordering::Relaxed), lists);
        // Written behind the cache's back (another process): seen once the list expires.
        store.inner().put("p/e", b"5").unwrap();
        assert_eq!(keys(&store), ["p/b", "p/deeper/c"]);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(keys(&store), ["p/b", "p/deeper/c", "p/e"]);
        // A zero time to live keeps nothing.
        let fresh = CachedStore::new(Counting::default(), 64 << 20).with_list_ttl(Duration::ZERO);
        fresh.put("p/a", b"1").unwrap();
        keys(&fresh);
        fresh.inner().put("p/b", b"2").unwrap();
        assert_eq!(keys(&fresh), ["p/a", "p/b"]);
    }

    #[test]
    fn a_list_that_ran_across_a_write_is_not_kept() {
        /// A store whose list, while `gate` is up, lets a write through the cache happen
        /// between its listing and its answer.
        #[derive(Debug)]
        struct Slow {
            inner: Counting,
            gate: std::sync::atomic::AtomicBool,
            listed: std::sync::Barrier,
            written: std::sync::Barrier,
        }
        impl RemoteStore for Slow {
            fn put(&self, k: &str, b: &[u8]) -> Result<(), RemoteError> {
                self.inner.put(k, b)
            }
            fn put_if_absent(&self, k: &str, b: &[u8]) -> Result<Created, RemoteError> {
                self.inner.put_if_absent(k, b)
            }
            fn get(&self, k: &str) -> Result<Vec<u8>, RemoteError> {
                self.inner.get(k)
            }
            fn get_range(&self, k: &str, r: Range<u64>) -> Result<Vec<u8>, RemoteError> {
                self.inner.get_range(k, r)
            }
            fn list(&self, p: &str) -> Result<Vec<RemoteObject>, RemoteError> {
                let found = self.inner.list(p);
                if self.gate.load(Ordering::SeqCst) {
                    self.listed.wait();
                    self.written.wait();
                }
                found
            }
            fn delete(&self, k: &str) -> Result<(), RemoteError> {
                self.inner.delete(k)
            }
        }
        let slow = Slow {
            inner: Counting::default(),
            gate: true.into(),
            listed: std::sync::Barrier::new(2),
            written: std::sync::Barrier::new(2),
        };
        let store = std::sync::Arc::new(CachedStore::new(slow, 64 << 20));
        let lister = {
            let store = std::sync::Arc::clone(&store);
            std::thread::spawn(move || store.list("p").unwrap().len())
        };
        store.inner().listed.wait();
        store.put("p/new", b"1").unwrap();
        store.inner().written.wait();
        assert_eq!(lister.join().unwrap(), 0, "listed before the write");
        // The list that predates the write was not kept: the next asks the store.
        store.inner().gate.store(false, Ordering::SeqCst);
        assert_eq!(store.list("p").unwrap().len(), 1);
        assert_eq!(store.inner().inner.lists.load(Ordering::Relaxed), 2);
    }
}
