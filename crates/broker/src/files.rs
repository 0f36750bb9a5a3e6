//! Small metadata files of the data directory, replaced atomically.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

/// Replaces `path` with `contents` so that a crash at any moment leaves either the old file or
/// the new one, never a mix: write a temp file, fsync it, rename it over the target, fsync the
/// directory (the rename itself is only durable once the directory is).
pub fn replace_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other(format!("{} has no parent", path.display())))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = Path::new(&tmp);
    let mut file = File::create(tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    fs::rename(tmp, path)?;
    sync_dir(dir)
}

/// Makes the entries of `dir` (files created, renamed or removed in it) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_leaves_only_the_new_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        replace_atomically(&path, b"one").unwrap();
        replace_atomically(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["state"]);
    }
}
