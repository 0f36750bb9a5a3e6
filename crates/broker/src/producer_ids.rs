//! Producer ids and epochs handed out by InitProducerId.
//!
//! An id must never be handed out twice, even across a crash: two producers sharing an id
//! would have each other's batches taken for duplicates or sequence gaps. So ids are reserved
//! in blocks, durably, before any id of a block is handed out (Kafka's controller does the
//! same with blocks of 1000). The file `<data>/producer-ids`:
//!
//! ```text
//! version: 0
//! reserved_up_to: 3000
//! ```
//!
//! Every id below `reserved_up_to` may have been handed out; after a restart the next id is
//! `reserved_up_to`, so at most one block is skipped per restart. The file is replaced by temp
//! file + fsync + rename + directory fsync.
//!
//! Epochs: a producer that sends InitProducerId with the id and epoch it holds gets the same id
//! with the epoch bumped (KIP-360), which fences its older epoch. The current epoch of an id is
//! the newest one handed out by this process or seen in any partition's producer state, so a
//! bump after a restart is still fenced correctly.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::files;

/// Ids reserved per write of the file.
pub const BLOCK: i64 = 1000;
const FILE_NAME: &str = "producer-ids";

#[derive(Debug, thiserror::Error)]
pub enum ProducerIdError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: not a version-0 producer-ids file: {text:?}", path.display())]
    Malformed { path: PathBuf, text: String },
    /// The epoch the producer holds is older than its current one: a zombie (Kafka's
    /// INVALID_PRODUCER_EPOCH).
    #[error("producer {producer_id}: epoch {got} is older than the current epoch {current}")]
    StaleEpoch {
        producer_id: i64,
        current: i16,
        got: i16,
    },
    #[error("producer ids are exhausted")]
    Exhausted,
}

/// An id and epoch to produce with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub epoch: i16,
}

#[derive(Debug, Clone, Copy)]
struct EpochState {
    current: i16,
    /// The epoch the last bump started from, so a retried bump (its answer was lost) gets the
    /// same answer instead of a second bump.
    bumped_from: Option<i16>,
}

#[derive(Debug)]
struct State {
    next: i64,
    reserved_up_to: i64,
    epochs: HashMap<i64, EpochState>,
}

/// The producer-id allocator of one data directory.
#[derive(Debug)]
pub struct ProducerIds {
    path: PathBuf,
    state: Mutex<State>,
}

impl ProducerIds {
    /// Loads the reservation of `dir` (none yet: ids start at 0). Blocking.
    pub fn open(dir: &Path) -> Result<ProducerIds, ProducerIdError> {
        let path = dir.join(FILE_NAME);
        let reserved_up_to = match fs::read_to_string(&path) {
            Ok(text) => parse(&text).ok_or_else(|| ProducerIdError::Malformed {
                path: path.clone(),
                text,
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(source) => return Err(ProducerIdError::Io { path, source }),
        };
        Ok(ProducerIds {
            path,
            state: Mutex::new(State {
                next: reserved_up_to,
                reserved_up_to,
                epochs: HashMap::new(),
            }),
        })
    }

    /// Answers InitProducerId. `held` is the id and epoch the producer already has, if any;
    /// `seen_epoch` tells the newest epoch the partitions saw for an id. Blocking (it may
    /// reserve a block).
    pub fn init(
        &self,
        held: Option<ProducerIdAndEpoch>,
        seen_epoch: impl Fn(i64) -> Option<i16>,
    ) -> Result<ProducerIdAndEpoch, ProducerIdError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // Only an id this broker handed out can be bumped; for any other, a producer gets a new
        // id, as Kafka answers an idempotent producer.
        let Some(held) = held.filter(|h| (0..state.next).contains(&h.producer_id)) else {
            return self.allocate(&mut state);
        };
        let remembered = state.epochs.get(&held.producer_id).copied();
        let current = remembered
            .map(|e| e.current)
            .max(seen_epoch(held.producer_id));
        let bump = match current {
            Some(current) if held.epoch < current => {
                if remembered.and_then(|e| e.bumped_from) == Some(held.epoch) {
                    return Ok(ProducerIdAndEpoch {
                        producer_id: held.producer_id,
                        epoch: current,
                    });
                }
                return Err(ProducerIdError::StaleEpoch {
                    producer_id: held.producer_id,
                    current,
                    got: held.epoch,
                });
            }
            // The epoch it holds, or a newer one we no longer remember (handed out before a
            // restart and never used to append).
            _ => held.epoch,
        };
        if bump >= i16::MAX - 1 {
            // Epochs are exhausted for this id: Kafka moves the producer to a new id.
            return self.allocate(&mut state);
        }
        let granted = ProducerIdAndEpoch {
            producer_id: held.producer_id,
            epoch: bump + 1,
        };
        state.epochs.insert(
            held.producer_id,
            EpochState {
                current: granted.epoch,
                bumped_from: Some(bump),
            },
        );
        Ok(granted)
    }

    /// A new id from `range` (a cluster node's incarnation, docs/design.md "A wiped node
    /// rejoins under its id"): the next one at or above `range.start`, reserved durably as
    /// any other; [`ProducerIdError::Exhausted`] once the range is used up. Blocking.
    pub fn allocate_in(
        &self,
        range: std::ops::Range<i64>,
    ) -> Result<ProducerIdAndEpoch, ProducerIdError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.next < range.start {
            // Nothing below the range's start is handed out from now on: the next one
            // reserves a block from it.
            state.next = range.start;
            state.reserved_up_to = state.reserved_up_to.max(range.start);
        }
        if state.next >= range.end {
            return Err(ProducerIdError::Exhausted);
        }
        self.allocate(&mut state)
    }

    fn allocate(&self, state: &mut State) -> Result<ProducerIdAndEpoch, ProducerIdError> {
        if state.next >= state.reserved_up_to {
            let reserved_up_to = state
                .reserved_up_to
                .checked_add(BLOCK)
                .ok_or(ProducerIdError::Exhausted)?;
            let text = format!("version: 0\nreserved_up_to: {reserved_up_to}\n");
            files::replace_atomically(&self.path, text.as_bytes()).map_err(|source| {
                ProducerIdError::Io {
                    path: self.path.clone(),
                    source,
                }
            })?;
            state.reserved_up_to = reserved_up_to;
        }
        let producer_id = state.next;
        state.next += 1;
        state.epochs.insert(
            producer_id,
            EpochState {
                current: 0,
                bumped_from: None,
            },
        );
        Ok(ProducerIdAndEpoch {
            producer_id,
            epoch: 0,
        })
    }
}

fn parse(text: &str) -> Option<i64> {
    let mut lines = text.lines();
    if lines.next()?.trim() != "version: 0" {
        return None;
    }
    let n: i64 = lines
        .next()?
        .trim()
        .strip_prefix("reserved_up_to:")?
        .trim()
        .parse()
        .ok()?;
    (n >= 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_producer(ids: &ProducerIds) -> ProducerIdAndEpoch {
        ids.init(None, |_| None).unwrap()
    }

    #[test]
    fn ids_are_unique_across_restarts_and_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3 {
            // Each "run" is a restart (or a crash: nothing is written at shutdown).
            let ids = ProducerIds::open(dir.path()).unwrap();
            for _ in 0..(BLOCK + 10) {
                let p = new_producer(&ids);
                assert_eq!(p.epoch, 0);
                assert!(seen.insert(p.producer_id), "{} twice", p.producer_id);
            }
        }
    }

    #[test]
    fn the_block_is_reserved_before_its_first_id_is_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path()).unwrap();
        let first = new_producer(&ids);
        let text = fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(parse(&text), Some(BLOCK));
        assert!(first.producer_id < BLOCK);
        // A crash now: the next run starts past the whole reserved block.
        let ids = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(new_producer(&ids).producer_id, BLOCK);
    }

    #[test]
    fn a_known_producer_bumps_its_epoch_and_a_retried_bump_gets_the_same_answer() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path()).unwrap();
        let p = new_producer(&ids);
        let bumped = ids.init(Some(p), |_| None).unwrap();
        assert_eq!(
            bumped,
            ProducerIdAndEpoch {
                producer_id: p.producer_id,
                epoch: 1
            }
        );
        assert_eq!(ids.init(Some(p), |_| None).unwrap(), bumped, "a retry");
        let again = ids.init(Some(bumped), |_| None).unwrap();
        assert_eq!(again.epoch, 2);
        let err = ids.init(Some(p), |_| None).unwrap_err();
        assert!(matches!(
            err,
            ProducerIdError::StaleEpoch {
                current: 2,
                got: 0,
                ..
            }
        ));
    }

    #[test]
    fn after_a_restart_the_partitions_epoch_fences_a_zombie() {
        let dir = tempfile::tempdir().unwrap();
        let p = new_producer(&ProducerIds::open(dir.path()).unwrap());
        let ids = ProducerIds::open(dir.path()).unwrap();
        let zombie = ProducerIdAndEpoch {
            producer_id: p.producer_id,
            epoch: 3,
        };
        assert!(matches!(
            ids.init(Some(zombie), |_| Some(5)),
            Err(ProducerIdError::StaleEpoch { current: 5, .. })
        ));
        let holder = ProducerIdAndEpoch {
            producer_id: p.producer_id,
            epoch: 5,
        };
        assert_eq!(ids.init(Some(holder), |_| Some(5)).unwrap().epoch, 6);
    }

    #[test]
    fn an_id_this_broker_never_handed_out_gets_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path()).unwrap();
        let stranger = ProducerIdAndEpoch {
            producer_id: 123_456,
            epoch: 7,
        };
        let granted = ids.init(Some(stranger), |_| None).unwrap();
        assert_eq!((granted.producer_id, granted.epoch), (0, 0));
    }

    #[test]
    fn an_exhausted_epoch_moves_the_producer_to_a_new_id() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path()).unwrap();
        let p = new_producer(&ids);
        let old = ProducerIdAndEpoch {
            producer_id: p.producer_id,
            epoch: i16::MAX - 1,
        };
        let granted = ids.init(Some(old), |_| None).unwrap();
        assert_ne!(granted.producer_id, p.producer_id);
        assert_eq!(granted.epoch, 0);
    }

    #[test]
    fn a_range_starts_past_what_was_handed_out_and_ends_exhausted() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(ids.allocate_in(0..3).unwrap().producer_id, 0);
        // A later incarnation: from its start, reserved before it is handed out.
        let first = ids.allocate_in(5000..5002).unwrap().producer_id;
        assert_eq!(first, 5000);
        let text = fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(parse(&text), Some(5000 + BLOCK));
        assert_eq!(ids.allocate_in(5000..5002).unwrap().producer_id, 5001);
        assert!(matches!(
            ids.allocate_in(5000..5002),
            Err(ProducerIdError::Exhausted)
        ));
        // After a restart the reservation carries on inside the range.
        let ids = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(
            ids.allocate_in(5000..10_000).unwrap().producer_id,
            5000 + BLOCK
        );
    }

    #[test]
    fn a_damaged_file_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(FILE_NAME), "reserved_up_to: 5").unwrap();
        assert!(matches!(
            ProducerIds::open(dir.path()),
            Err(ProducerIdError::Malformed { .. })
        ));
    }
}
