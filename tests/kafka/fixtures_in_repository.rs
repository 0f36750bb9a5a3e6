//! A fresh clone with nothing beside it passes the tests: no test, bench or source file reads
//! the fixture store outside the repository (`../shared/fixtures`); the real Kafka data lives
//! in `tests/fixtures`. (CI clones the repository beside that store, so a path into it would
//! pass there and fail for every user.)

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            // Build output, the vendored crate and the fixtures themselves are not ours to scan.
            if !["target", "vendor", "fixtures", ".git"].contains(&name.as_str()) {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") || name.ends_with(".toml") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_reads_fixtures_from_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "crates", "examples", "fuzz"] {
        if root.join(dir).is_dir() {
            sources(&root.join(dir), &mut files);
        }
    }
    assert!(files.len() > 100, "scanned {} files", files.len());
    let needle = ["shared", "fixtures"].join("/");
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| *f != Path::new(file!()) && !f.ends_with(file!()))
        .filter(|f| std::fs::read_to_string(f).is_ok_and(|s| s.contains(&needle)))
        .map(|f| f.display().to_string())
        .collect();
    assert!(offenders.is_empty(), "read {needle}: {offenders:#?}");
}
