//! Crash image construction: what a machine finds after a power cut, built from the durable
//! images plus a seeded choice of the unsynced changes (the model is in the parent module's
//! docs).

use std::collections::HashMap;
use std::path::PathBuf;

use super::{DirOp, Inode, SimFs, SplitMix64, State};

/// Page size of the crash model.
pub const PAGE: usize = 4096;

/// What a crash did (for failure messages).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrashReport {
    pub pages_lost: usize,
    pub pages_kept: usize,
    pub pages_torn: usize,
    pub pages_zeroed: usize,
    /// Files whose length became the live one (rather than the durable one).
    pub live_lengths: usize,
    pub dir_ops_kept: usize,
    pub dir_ops_lost: usize,
}

impl SimFs {
    /// Power cut: replaces the state by what a machine would find after rebooting, from the
    /// durable images plus a seeded choice of the unsynced changes (see the `sim` module
    /// docs). Every handle and map from before becomes dead. Panics if a writable map is still
    /// alive: call it only after the log using this file system was abandoned or closed.
    pub fn crash(&self, seed: u64) -> CrashReport {
        let mut rng = SplitMix64::new(seed ^ 0xC4A5_4C4A_5C4A_5000);
        let mut report = CrashReport::default();
        let mut st = self.state.lock();
        st.counters.crashes += 1;
        // What sat in the device's cache unflushed is an unsynced change like any other.
        st.written_back.clear();
        crash_dirs(&mut st, &mut rng, &mut report);
        let mut survivors: Vec<u64> = st
            .dirs
            .values()
            .flat_map(|d| d.durable.values().copied())
            .collect();
        survivors.sort_unstable();
        survivors.dedup();
        crash_files(&mut st, survivors, &mut rng, &mut report);
        st.epoch += 1;
        // The process died with the machine: its locks went with it.
        st.locks.clear();
        st.shared_locks.clear();
        report
    }
}

/// The directories after a crash: each keeps its durable entries plus a seeded prefix of its
/// pending operations; renames and removals of directories that did not survive are undone.
fn crash_dirs(st: &mut State, rng: &mut SplitMix64, report: &mut CrashReport) {
    // How much of each directory's pending operations survives: a prefix.
    let mut undo: Vec<(u64, PathBuf, DirOp)> = Vec::new();
        let state = &mut *st;
        let live = state.dirs.iter_mut().map(|(p, d)| (p.clone(), d));
        let removed = state.removed_dirs.values_mut().map(|(p, d)| (p.clone(), d));
        for (path, dir) in live.chain(removed) {
            dir.kept = rng.below(dir.pending.len() as u64 + 1) as usize;
            report.dir_ops_kept += dir.kept;
            report.dir_ops_lost += dir.pending.len() - dir.kept;
            for op in &dir.pending[dir.kept..] {
                if let DirOp::RenameDir(.., n) | DirOp::RemoveDir(_, n) = op {
                    undo.push((*n, path.clone(), op.clone()));
                }
            }
        }
        // Directory renames and removals that did not survive are undone, newest first: the
        // directory is back under its old name with its entries (a removed one was empty, but
        // the removals of its files may not have survived either).
        undo.sort_by_key(|(n, ..)| std::cmp::Reverse(*n));
        for (_, parent, op) in undo {
            match op {
                DirOp::RenameDir(from, to, _) => st.move_dir_tree(&parent.join(to), &parent.join(from)),
                DirOp::RemoveDir(name, n) => {
                    if let Some((_, dir)) = st.removed_dirs.remove(&n) {
                        st.dirs.insert(parent.join(name), dir);
                    }
                }
                _ => {}
            }
        }
        st.removed_dirs.clear();
        // Directory entries: the durable set plus the surviving prefix of the pending operations.
        for dir in st.dirs.values_mut() {
            let keep = dir.kept;
            let mut entries = std::mem::take(&mut dir.durable);
            for op in dir.pending.drain(..).take(keep) {
                match op {
                    DirOp::Link(name, id) => {
                        entries.insert(name, id);
                    }
                    DirOp::Unlink(name) => {
                        entries.remove(&name);
                    }
                    DirOp::Rename(from, to, id) => {
                        entries.remove(&from);
                        entries.insert(to, id);
                    }
                    DirOp::RenameDir(..) | DirOp::RemoveDir(..) => {}
                }
            }
            dir.kept = 0;
            dir.live = entries.clone();
            dir.durable = entries;
        }
}

/// The contents of the files that survived (`survivors`, by inode) after a crash.
fn crash_files(st: &mut State, survivors: Vec<u64>, rng: &mut SplitMix64, report: &mut CrashReport) {
        // File contents. One writeback style per crash: per page at random, or all / none /
        // an in-order prefix of the changed pages.
        let style = rng.below(4);
        let mut inodes = HashMap::new();
        for id in survivors {
            let Some(inode) = st.inodes.get(&id) else {
                continue;
            };
            let live = match inode.live_view() {
                Ok(v) => v,
                Err(e) => panic!("SimFs::crash with a live writable map: {e}"),
            };
            let image = crash_image(&live, &inode.durable, style, rng, report);
            inodes.insert(
                id,
                Inode {
                    live: image.clone(),
                    durable: image,
                    attached: None,
                    handles: 0,
                },
            );
        }
        st.inodes = inodes;
}

/// The content of one file after a crash.
fn crash_image(
    live: &[u8],
    durable: &[u8],
    style: u64,
    rng: &mut SplitMix64,
    report: &mut CrashReport,
) -> Vec<u8> {
    let span = live.len().max(durable.len());
    let mut out = durable.to_vec();
    out.resize(span, 0);
    let byte = |v: &[u8], i: usize| v.get(i).copied().unwrap_or(0);
    let changed: Vec<usize> = (0..span.div_ceil(PAGE))
        .filter(|&p| {
            let (a, b) = (p * PAGE, ((p + 1) * PAGE).min(span));
            (a..b).any(|i| byte(live, i) != byte(durable, i))
        })
        .collect();
    let prefix = rng.below(changed.len() as u64 + 1) as usize;
    for (n, &page) in changed.iter().enumerate() {
        let (a, b) = (page * PAGE, ((page + 1) * PAGE).min(span));
        // 0 lost, 1 kept, 2 torn, 3 zeroed.
        let fate = match style {
            0 => rng.below(4),
            1 => 1,
            2 => 0,
            _ if n < prefix => 1,
            _ if n == prefix => 2,
            _ => 0,
        };
        match fate {
            0 => report.pages_lost += 1,
            1 => {
                report.pages_kept += 1;
                for (i, o) in out.iter_mut().enumerate().take(b).skip(a) {
                    *o = byte(live, i);
                }
            }
            2 => {
                report.pages_torn += 1;
                let cut = a + rng.below((b - a) as u64 + 1) as usize;
                for (i, o) in out.iter_mut().enumerate().take(cut).skip(a) {
                    *o = byte(live, i);
                }
            }
            _ => {
                report.pages_zeroed += 1;
                for (i, o) in out.iter_mut().enumerate().take(b).skip(a) {
                    if byte(live, i) != byte(durable, i) {
                        *o = 0;
                    }
                }
            }
        }
    }
    let len = if live.len() != durable.len() && rng.chance(1, 2) {
        report.live_lengths += 1;
        live.len()
    } else {
        durable.len()
    };
    out.truncate(len);
    out
}
