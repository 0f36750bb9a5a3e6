//! The seam between the tiering logic and an object store: six blocking calls on keys. The
//! library holds no async runtime and no network client; an implementation (the workspace's
//! `oncelog-tier` crate over `object_store`, or a test's store that fails on purpose) brings
//! its own.

use std::ops::Range;

/// An object store, as tiered storage uses it (docs/design.md, "Tiered storage").
///
/// Keys are `/`-separated ASCII paths (letters, digits, `.`, `_`, `-`), as
/// [`super::keys`] makes them. Every call blocks until the store has answered; a call that
/// returns `Ok` has happened (a `put` is durable in the store), one that returns `Err` may or
/// may not have (a timeout), which the tiering logic allows for.
pub trait RemoteStore: Send + Sync + std::fmt::Debug {
    /// Writes the object `key` whole, replacing any object of that key.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteError>;

    /// Writes the object `key` whole only if no object has that key, atomically: of two
    /// callers, at most one gets [`Created::Created`]. The manifest's conditional put.
    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<Created, RemoteError>;

    /// The whole object `key` ([`RemoteErrorKind::NotFound`] without one).
    fn get(&self, key: &str) -> Result<Vec<u8>, RemoteError>;

    /// Bytes `range` of the object `key`; a range past its end is an error.
    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Vec<u8>, RemoteError>;

    /// Every object under the folder `prefix` (keys starting with `prefix/`), at any depth,
    /// in no particular order.
    fn list(&self, prefix: &str) -> Result<Vec<RemoteObject>, RemoteError>;

    /// Removes the object `key`; a key with no object is not an error.
    fn delete(&self, key: &str) -> Result<(), RemoteError>;

    /// Drops whatever a caching store holds of `key`, whose bytes a reader found damaged, so
    /// the next read asks the store itself ([`CachedStore`](super::CachedStore)). A store
    /// that keeps nothing has nothing to do.
    fn forget(&self, key: &str) {
        let _ = key;
    }
}

/// A borrowed or shared store is a store (a broker's partitions share one, behind one cache).
macro_rules! forward_remote_store {
    ($($holder:ty),*) => {$(
        impl<T: RemoteStore + ?Sized> RemoteStore for $holder {
            fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RemoteError> {
                (**self).put(key, bytes)
            }

            fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<Created, RemoteError> {
                (**self).put_if_absent(key, bytes)
            }

            fn get(&self, key: &str) -> Result<Vec<u8>, RemoteError> {
                (**self).get(key)
            }

            fn get_range(&self, key: &str, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
                (**self).get_range(key, range)
            }

            fn list(&self, prefix: &str) -> Result<Vec<RemoteObject>, RemoteError> {
                (**self).list(prefix)
            }

            fn delete(&self, key: &str) -> Result<(), RemoteError> {
                (**self).delete(key)
            }

            fn forget(&self, key: &str) {
                (**self).forget(key)
            }
        }
    )*};
}

forward_remote_store!(&T, std::sync::Arc<T>, Box<T>);

/// What [`RemoteStore::put_if_absent`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The object was written.
    Created,
    /// An object of that key was there already; nothing was written.
    AlreadyExists,
}

/// An object a [`RemoteStore::list`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteObject {
    /// Its whole key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
}

/// What kind of failure a [`RemoteError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteErrorKind {
    /// No object has the key.
    NotFound,
    /// The store could not be reached or did not answer in time (a 5xx, a timeout, a refused
    /// connection): the call may or may not have happened, and may succeed if tried again.
    Unavailable,
    /// Anything else: refused credentials, a bad key, a range past the end, an I/O error of a
    /// local file system store.
    Other,
}

impl RemoteErrorKind {
    /// A stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            RemoteErrorKind::NotFound => "not_found",
            RemoteErrorKind::Unavailable => "unavailable",
            RemoteErrorKind::Other => "other",
        }
    }
}

/// A call to a [`RemoteStore`] that failed: which call, on which key, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} {key}: {} ({reason})", kind.name())]
#[non_exhaustive]
pub struct RemoteError {
    /// The call: `put`, `put_if_absent`, `get`, `get_range`, `list`, `delete`.
    pub op: &'static str,
    /// The key (for `list`, the prefix).
    pub key: String,
    /// What kind of failure.
    pub kind: RemoteErrorKind,
    /// The store's own words.
    pub reason: String,
}

impl RemoteError {
    /// The failure of `op` on `key`.
    pub fn new(
        op: &'static str,
        key: impl Into<String>,
        kind: RemoteErrorKind,
        reason: impl Into<String>,
    ) -> RemoteError {
        RemoteError {
            op,
            key: key.into(),
            kind,
            reason: reason.into(),
        }
    }
}
