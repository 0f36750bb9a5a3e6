//! Object stores for the tiered-storage tests: one in memory that fails on demand (a put that
//! fails before writing, or writes and then reports failure, a get that fails), and one kept in
//! a directory of any `FileSystem`, so the simulated one models its crashes beside the log's.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oncelog::io::{FileKind, FileSystem};
use oncelog::tier::{Created, RemoteError, RemoteErrorKind, RemoteObject, RemoteStore};
use parking_lot::Mutex;

/// When an injected failure strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strike {
    /// The call fails and does nothing.
    Before,
    /// The call does its work, then reports failure (a timeout after the store had it).
    After,
}

#[derive(Debug, Clone)]
struct Fault {
    op: &'static str,
    /// The 1-based count of calls of `op` that fails.
    nth: u64,
    strike: Strike,
}

/// An object store in memory. Every call is counted by operation; [`MemStore::fail`] makes the
/// nth call of an operation fail.
#[derive(Debug, Default)]
pub struct MemStore {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
    faults: Mutex<Vec<Fault>>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    /// Makes the `nth` (1-based, counted from now) call of `op` fail, as `strike` says.
    pub fn fail(&self, op: &'static str, nth: u64, strike: Strike) {
        let done = self.calls.lock().get(op).copied().unwrap_or(0);
        self.faults.lock().push(Fault {
            op,
            nth: done + nth,
            strike,
        });
    }

    /// How many calls of `op` the store has had.
    pub fn calls(&self, op: &str) -> u64 {
        self.calls.lock().get(op).copied().unwrap_or(0)
    }

    pub fn keys(&self) -> Vec<String> {
        self.objects.lock().keys().cloned().collect()
    }

    pub fn object(&self, key: &str) -> Option<Vec<u8>> {
        self.objects.lock().get(key).cloned()
    }

    /// Writes an object behind the tiering logic's back (another writer, a hand edit).
    pub fn insert(&self, key: &str, bytes: &[u8]) {
        self.objects.lock().insert(key.to_string(), bytes.to_vec());
    }

    /// Counts the call and says whether an injected failure strikes it.
    fn strike(&self, op: &'static str) -> Option<Strike> {
        let mut calls = self.calls.lock();
        let n = calls.entry(op).or_default();
        *n += 1;
        let mut faults = self.faults.lock();
        let i = faults.iter().position(|f| f.op == op && f.nth == *n)?;
        Some(faults.remove(i).strike)
    }

    fn injected(op: &'static str, key: &str) -> RemoteError {
        RemoteError::new(
            op,
            key,
            RemoteErrorKind::Unavailable,
            "injected: 503 Slow Down",
        )
    }

    fn run<T>(
        &self,
        op: &'static str,
        key: &str,
        work: impl FnOnce(&mut BTreeMap<String, Vec<u8>>) -> Result<T, RemoteError>,
    ) -> Result<T, RemoteError> {
        match self.strike(op) {
            Some(Strike::Before) => Err(Self::injected(op, key)),
            Some(Strike::After) => {
                work(&mut self.objects.lock())?;
                Err(Self::injected(op, key))
            }
            None => work(&mut self.objects.lock()),
        }
    }
}

fn not_found(op: &'static str, key: &str) -> RemoteError {
    RemoteError::new(op, key, RemoteErrorKind::NotFound, "no such key")
}

impl RemoteStore for MemStore {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteError> {
        self.run("put", key, |m| {
            m.insert(key.to_string(), bytes.to_vec());
            Ok(())
        })
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<Created, RemoteError> {
        self.run("put_if_absent", key, |m| {
            if m.contains_key(key) {
                return Ok(Created::AlreadyExists);
            }
            m.insert(key.to_string(), bytes.to_vec());
            Ok(Created::Created)
        })
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, RemoteError> {
        self.run("get", key, |m| {
            m.get(key).cloned().ok_or_else(|| not_found("get", key))
        })
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
        self.run("get_range", key, |m| {
            let o = m.get(key).ok_or_else(|| not_found("get_range", key))?;
            o.get(range.start as usize..range.end as usize)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| {
                    RemoteError::new("get_range", key, RemoteErrorKind::Other, "past the end")
                })
        })
    }

    fn list(&self, prefix: &str) -> Result<Vec<RemoteObject>, RemoteError> {
        let folder = format!("{prefix}/");
        self.run("list", prefix, |m| {
            Ok(m.iter()
                .filter(|(k, _)| k.starts_with(&folder))
                .map(|(k, v)| RemoteObject {
                    key: k.clone(),
                    size: v.len() as u64,
                })
                .collect())
        })
    }

    fn delete(&self, key: &str) -> Result<(), RemoteError> {
        self.run("delete", key, |m| {
            m.remove(key);
            Ok(())
        })
    }
}

/// An object store kept as files under `root` of a `FileSystem`: each object a file whose path
/// is its key, written by temp file, fsync, rename, directory fsync, so a put that returned
/// survives a crash and one that did not leaves the old state (a `.tmp` at most, never listed).
/// `put_if_absent` is atomic only within one process (enough for these tests).
#[derive(Debug, Clone)]
pub struct FsStore {
    pub fs: Arc<dyn FileSystem>,
    pub root: PathBuf,
}

impl FsStore {
    fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    fn err(op: &'static str, key: &str, e: impl std::fmt::Display) -> RemoteError {
        RemoteError::new(op, key, RemoteErrorKind::Other, e.to_string())
    }

    fn walk(&self, dir: &Path, out: &mut Vec<RemoteObject>) -> std::io::Result<()> {
        for name in self.fs.list(dir)? {
            let path = dir.join(&name);
            let meta = self.fs.stat(&path)?;
            if meta.kind == FileKind::Dir {
                self.walk(&path, out)?;
            } else if !name.ends_with(".tmp") {
                let key = path
                    .strip_prefix(&self.root)
                    .map_err(std::io::Error::other)?
                    .to_string_lossy()
                    .into_owned();
                out.push(RemoteObject {
                    key,
                    size: meta.len,
                });
            }
        }
        Ok(())
    }
}

impl RemoteStore for FsStore {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteError> {
        let path = self.path(key);
        if let Some(parent) = path.parent() {
            self.fs
                .create_dir_all(parent)
                .map_err(|e| Self::err("put", key, e))?;
        }
        self.fs
            .write_atomically(&path, bytes)
            .map_err(|e| Self::err("put", key, e))
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<Created, RemoteError> {
        match self.fs.exists(&self.path(key)) {
            Ok(true) => Ok(Created::AlreadyExists),
            Ok(false) => self.put(key, bytes).map(|()| Created::Created),
            Err(e) => Err(Self::err("put_if_absent", key, e)),
        }
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, RemoteError> {
        let path = self.path(key);
        match self.fs.exists(&path) {
            Ok(false) => Err(not_found("get", key)),
            Ok(true) => self
                .fs
                .read_whole(&path)
                .map_err(|e| Self::err("get", key, e)),
            Err(e) => Err(Self::err("get", key, e)),
        }
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
        let whole = self.get(key)?;
        whole
            .get(range.start as usize..range.end as usize)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| Self::err("get_range", key, "past the end"))
    }

    fn list(&self, prefix: &str) -> Result<Vec<RemoteObject>, RemoteError> {
        let dir = self.path(prefix);
        let mut out = Vec::new();
        match self.fs.exists(&dir) {
            Ok(false) => return Ok(out),
            Ok(true) => {}
            Err(e) => return Err(Self::err("list", prefix, e)),
        }
        self.walk(&dir, &mut out)
            .map_err(|e| Self::err("list", prefix, e))?;
        Ok(out)
    }

    fn delete(&self, key: &str) -> Result<(), RemoteError> {
        let path = self.path(key);
        let gone = match self.fs.remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Self::err("delete", key, e)),
        };
        if let (true, Some(parent)) = (gone, path.parent()) {
            self.fs
                .sync_dir(parent)
                .map_err(|e| Self::err("delete", key, e))?;
        }
        Ok(())
    }
}

/// A store in which another writer acts (`other`, once) just before the first conditional put
/// goes through: the manifest generation asked for is then taken.
pub struct Racing<'a, F: Fn(&MemStore)> {
    inner: &'a MemStore,
    other: F,
    raced: std::sync::atomic::AtomicBool,
}

impl<'a, F: Fn(&MemStore)> Racing<'a, F> {
    pub fn new(inner: &'a MemStore, other: F) -> Self {
        Racing {
            inner,
            other,
            raced: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl<F: Fn(&MemStore)> std::fmt::Debug for Racing<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Racing")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<F: Fn(&MemStore) + Send + Sync> RemoteStore for Racing<'_, F> {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteError> {
        self.inner.put(key, bytes)
    }
    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<Created, RemoteError> {
        if !self.raced.swap(true, std::sync::atomic::Ordering::SeqCst) {
            (self.other)(self.inner);
        }
        self.inner.put_if_absent(key, bytes)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, RemoteError> {
        self.inner.get(key)
    }
    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
        self.inner.get_range(key, range)
    }
    fn list(&self, prefix: &str) -> Result<Vec<RemoteObject>, RemoteError> {
        self.inner.list(prefix)
    }
    fn delete(&self, key: &str) -> Result<(), RemoteError> {
        self.inner.delete(key)
    }
}
