use std::io;
use std::path::{Path, PathBuf};

/// A failed file-system operation, with what was being done and to which file.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {source}", path.display())]
#[non_exhaustive]
pub struct IoError {
    /// What was being done: `"open"`, `"fsync"`, `"rename"`, ...
    pub op: &'static str,
    /// The file (or directory) it was done to.
    pub path: PathBuf,
    /// The operating system's error.
    #[source]
    pub source: io::Error,
}

impl IoError {
    /// The failure of `op` on `path`.
    pub fn new(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> IoError {
        IoError {
            op,
            path: path.into(),
            source,
        }
    }
    /// The operating system's classification of the failure.
    pub fn io_kind(&self) -> io::ErrorKind {
        self.source.kind()
    }
    /// A stable snake_case name for the kind of failure: `out_of_space`, `not_found`,
    /// `permission_denied`, `already_exists`, `read_only_filesystem`, or `io` for the rest
    /// (the OS error itself is in [`IoError::source`]).
    pub fn kind(&self) -> &'static str {
        if self.is_out_of_space() {
            return "out_of_space";
        }
        if self.source.raw_os_error() == Some(libc::EROFS) {
            return "read_only_filesystem";
        }
        match self.source.kind() {
            io::ErrorKind::NotFound => "not_found",
            io::ErrorKind::PermissionDenied => "permission_denied",
            io::ErrorKind::AlreadyExists => "already_exists",
            _ => "io",
        }
    }
    /// Whether the disk (or quota) is full.
    pub fn is_out_of_space(&self) -> bool {
        matches!(
            self.source.raw_os_error(),
            Some(libc::ENOSPC) | Some(libc::EDQUOT)
        ) || self.source.kind() == io::ErrorKind::StorageFull
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(source: io::Error) -> &'static str {
        IoError::new("write", "/x", source).kind()
    }

    #[test]
    fn kinds_name_the_failures_an_operator_acts_on() {
        assert_eq!(
            kind_of(io::Error::from_raw_os_error(libc::ENOSPC)),
            "out_of_space"
        );
        assert_eq!(
            kind_of(io::Error::from_raw_os_error(libc::EDQUOT)),
            "out_of_space"
        );
        assert_eq!(
            kind_of(io::Error::from_raw_os_error(libc::EROFS)),
            "read_only_filesystem"
        );
        assert_eq!(kind_of(io::ErrorKind::NotFound.into()), "not_found");
        assert_eq!(
            kind_of(io::ErrorKind::PermissionDenied.into()),
            "permission_denied"
        );
        assert_eq!(kind_of(io::Error::from_raw_os_error(libc::EIO)), "io");
        assert_eq!(
            IoError::new("read", "/x", io::ErrorKind::NotFound.into()).io_kind(),
            io::ErrorKind::NotFound
        );
    }
}
