use std::io;
use std::path::{Path, PathBuf};

/// A failed file-system operation, with what was being done and to which file.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {source}", path.display())]
pub struct IoError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl IoError {
    pub fn new(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> IoError {
        IoError { op, path: path.into(), source }
    }
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }
    /// Whether the disk (or quota) is full.
    pub fn is_out_of_space(&self) -> bool {
        matches!(self.source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
            || self.source.kind() == io::ErrorKind::StorageFull
    }
}

/// Adds the operation and path to an `io::Result`.
pub trait IoResultExt<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T, IoError>;
}

impl<T> IoResultExt<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T, IoError> {
        self.map_err(|e| IoError::new(op, path, e))
    }
}
