//! Crashes and faults: power cuts on the simulated file system at every step, injected I/O errors,
//! full disks, SIGKILLed children, hostile and mutated directories.
//!
//! One test binary per concern (Cargo builds and links each binary once); each module is
//! one file of tests, named after what it covers. Run one with
//! `cargo test --test crash <module>::`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common_sim/mod.rs"]
mod common_sim;
#[path = "../common_tier/mod.rs"]
mod common_tier;

mod append_crash_sim;
mod crash_compact;
mod crash_dead_tail;
mod crash_recycle;
mod crash_rewrite;
mod fault_full_disk;
mod fault_recovery;
mod fault_snapshot_checkpoint;
mod full_disk;
mod kill_child;
mod manager_crash_sim;
mod manager_create_crash;
mod manager_kill;
mod many_partitions_kill;
mod many_partitions_sync_sim;
mod metadata_checksums;
mod mutation_sweep;
mod processed_crash_sim;
mod recovery_hostile;
mod tier_delete_crash;
mod tier_upload_crash;
mod txn_crash_sim;
mod write_group_sim;
mod written_back_sim;
