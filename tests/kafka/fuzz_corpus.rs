//! Replays every fuzz target's committed corpus (fuzz/corpus/<target>/) through the same entry
//! function the cargo-fuzz target calls, so the normal test run keeps them passing.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        run(&bytes);
        n += 1;
    }
    assert!(n > 0, "empty corpus {}", dir.display());
}

#[test]
fn batch_decoder_corpus() {
    replay("batch_decoder", oncelog::format::fuzz::fuzz_batch);
}

#[test]
fn snapshot_decoder_corpus() {
    replay("snapshot_decoder", oncelog::producer::fuzz::fuzz_snapshot);
}

#[test]
fn index_loader_corpus() {
    replay("index_loader", oncelog::segment::fuzz::fuzz_index);
}

#[test]
fn open_dir_corpus() {
    replay("open_dir", oncelog::log::fuzz::fuzz_open_dir);
}
