//! A node that lost its data rejoins under its id (docs/design.md, "A wiped node rejoins under
//! its id"): it tells a lost data directory from a new cluster by the other nodes' durable
//! raft state, and opens every group it may have held before through
//! [`Host::add_group_rejoining`] with a floor from every other member's state.
//!
//! The record of a rejoin, `<data>/oncelog-node-local/rejoin.json`, written before any group
//! is opened, so that a crash in the middle resumes the rejoin instead of taking the
//! half-filled directory for one that never lost anything:
//!
//! ```json
//! {"metadata_end":42,"floors":{"__oncelog_metadata-0":{"term":7,"last_log_id":{...}}}}
//! ```
//!
//! | field | meaning |
//! | --- | --- |
//! | `metadata_end` | the greatest metadata log end offset the other nodes reported: a topic made by a record below it may have had a replica here |
//! | `floors` | by group (`topic-partition`), the [`RejoinFloor`] its replica was opened with |

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oncelog::PartitionConfig;
use oncelog_raft::network::mux::GroupState;
use oncelog_raft::{GroupId, Host, HostError, NodeId, RejoinFloor};
use serde::{Deserialize, Serialize};

use crate::files;

/// The rejoin record's file name, in the node's own directory.
pub const REJOIN_FILE: &str = "rejoin.json";

/// How long between two asks of the other members while one cannot answer.
const ASK_AGAIN: Duration = Duration::from_millis(250);
/// How often the wait is logged.
const SAY_AGAIN: Duration = Duration::from_secs(5);

/// What a rejoin recorded ([`REJOIN_FILE`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RejoinRecord {
    /// The greatest metadata log end offset the other nodes reported when the rejoin began.
    pub metadata_end: i64,
    /// The floor each group's replica was opened with, by group (`topic-partition`).
    pub floors: BTreeMap<String, RejoinFloor>,
}

/// Why the rejoin record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RejoinError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: not a rejoin record: {error}", path.display())]
    Malformed { path: PathBuf, error: String },
    #[error("partition {group}: {error}")]
    Host { group: GroupId, error: HostError },
}

/// Reads the rejoin record of the node directory `dir` (`None`: this node never rejoined).
pub fn load(dir: &Path) -> Result<Option<RejoinRecord>, RejoinError> {
    let path = dir.join(REJOIN_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(RejoinError::Io { path, source }),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| RejoinError::Malformed {
            path,
            error: e.to_string(),
        })
}

/// Replaces the rejoin record of `dir` durably (temp file, fsync, rename, directory fsync).
pub fn save(dir: &Path, record: &RejoinRecord) -> Result<(), RejoinError> {
    let path = dir.join(REJOIN_FILE);
    let bytes = serde_json::to_vec(record).map_err(|e| RejoinError::Malformed {
        path: path.clone(),
        error: e.to_string(),
    })?;
    std::fs::create_dir_all(dir)
        .and_then(|()| files::replace_atomically(&path, &bytes))
        .map_err(|source| RejoinError::Io { path, source })
}

/// What the other members' durable states of a group say to a replica that holds none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// None holds state: the group is new, formed as usual.
    New,
    /// Some hold state and every one answered: rejoin with this floor; the greatest log end
    /// offset among them.
    Rejoin(RejoinFloor, i64),
    /// Not every member answered and none that did holds state, or some hold state and not
    /// every member answered: wait (the reason).
    Wait(String),
}

/// Decides from every other member's answer (docs/design.md: a rejoin must hear from every
/// other member; a new group needs every member to say it holds nothing, since a wiped node
/// whose only witness is down cannot tell).
pub fn decide(answers: &BTreeMap<NodeId, Result<GroupState, String>>) -> Decision {
    let unknown = answers
        .iter()
        .find_map(|(node, a)| a.as_ref().err().map(|e| format!("node {node}: {e}")));
    let states: Vec<&GroupState> = answers.values().filter_map(|a| a.as_ref().ok()).collect();
    match unknown {
        Some(why) => Decision::Wait(why),
        None if states.iter().any(|s| s.holds_state()) => Decision::Rejoin(
            RejoinFloor::from_states(states.iter().copied()),
            states.iter().map(|s| s.log_end_offset).max().unwrap_or(0),
        ),
        None => Decision::New,
    }
}

/// Asks every member of `members` but this node for its state of `group` until [`decide`]
/// says something other than wait, logging the wait every few seconds.
pub async fn hear_every_member(host: &Host, group: &GroupId, members: &[NodeId]) -> Decision {
    let mut said = None::<Instant>;
    loop {
        let mut answers = BTreeMap::new();
        for m in members.iter().filter(|m| **m != host.id()) {
            answers.insert(*m, host.peer_state(*m, group).await);
        }
        match decide(&answers) {
            Decision::Wait(why) => {
                if said.is_none_or(|t| t.elapsed() >= SAY_AGAIN) {
                    tracing::warn!(
                        partition = %group,
                        "node {} holds no raft state of {group}: waiting for every other member \
                         to answer before joining it ({why})",
                        host.id()
                    );
                    said = Some(Instant::now());
                }
                tokio::time::sleep(ASK_AGAIN).await;
            }
            decided => return decided,
        }
    }
}

/// A rejoin in progress or done: its record and where it is kept.
pub struct Rejoining {
    dir: PathBuf,
    record: parking_lot::Mutex<RejoinRecord>,
    /// One group opened at a time, so the record's writes do not cross.
    opening: tokio::sync::Mutex<()>,
}

impl Rejoining {
    /// The rejoin recorded in `dir`.
    pub fn new(dir: PathBuf, record: RejoinRecord) -> Rejoining {
        Rejoining {
            dir,
            record: parking_lot::Mutex::new(record),
            opening: Default::default(),
        }
    }

    /// The record now.
    pub fn record(&self) -> RejoinRecord {
        self.record.lock().clone()
    }

    /// Whether a topic made by the metadata record at `offset` may have had a replica here
    /// before the data was lost.
    pub fn predates(&self, offset: i64) -> bool {
        offset < self.record.lock().metadata_end
    }

    /// Opens this node's replica of `group`: rejoining with the recorded floor, or (when this
    /// replica holds no state) with a floor from every other member's state, recorded first;
    /// as a new group if no member holds state; as usual if the replica holds state and no
    /// floor (a group formed after the rejoin). A partition created here gets `config` (its
    /// topic's settings).
    pub async fn open(
        &self,
        host: &Host,
        group: GroupId,
        members: &[NodeId],
        config: PartitionConfig,
    ) -> Result<(), RejoinError> {
        let _one = self.opening.lock().await;
        let key = group.to_string();
        let host_error = |group: &GroupId| {
            let group = group.clone();
            move |error| RejoinError::Host { group, error }
        };
        let recorded = self.record.lock().floors.get(&key).copied();
        if let Some(floor) = recorded {
            return host
                .add_group_rejoining_with(group.clone(), members, floor, config.clone())
                .await
                .map_err(host_error(&group));
        }
        let empty = matches!(host.local_state(&group), Ok(s) if !s.holds_state());
        if !empty {
            return host
                .add_group_with(group.clone(), members, config.clone())
                .await
                .map_err(host_error(&group));
        }
        match hear_every_member(host, &group, members).await {
            Decision::Rejoin(floor, _) => {
                let mut record = self.record();
                record.floors.insert(key, floor);
                save(&self.dir, &record)?;
                *self.record.lock() = record;
                tracing::warn!(
                    partition = %group,
                    term = floor.term,
                    floor = ?floor.last_log_id,
                    "rejoining {group}: this node holds no raft state of it while another \
                     member does (its data was lost, or the others formed the group while it was \
                     starting); no vote below the others' last entry until caught up"
                );
                host.add_group_rejoining_with(group.clone(), members, floor, config.clone())
                    .await
                    .map_err(host_error(&group))
            }
            _ => host
                .add_group_with(group.clone(), members, config.clone())
                .await
                .map_err(host_error(&group)),
        }
    }
}

#[cfg(test)]
mod tests {
    use oncelog_raft::openraft::{CommittedLeaderId, LogId, Vote};

    use super::*;

    fn held(term: u64, last: Option<(u64, u64)>, end: i64) -> Result<GroupState, String> {
        Ok(GroupState {
            vote: Some(Vote::new(term, 1)),
            last_log_id: last.map(|(t, i)| LogId::new(CommittedLeaderId::new(t, 1), i)),
            log_end_offset: end,
        })
    }

    #[test]
    fn every_member_empty_is_a_new_group() {
        let answers = BTreeMap::from([(2, Ok(GroupState::EMPTY)), (3, Ok(GroupState::EMPTY))]);
        assert_eq!(decide(&answers), Decision::New);
    }

    #[test]
    fn a_member_that_only_formed_the_group_holds_nothing_to_learn() {
        // Forming writes the membership at (0, 0); no election, no commit happened yet.
        let formed = Ok(GroupState {
            vote: Some(Vote::new(0, 2)),
            last_log_id: Some(LogId::new(CommittedLeaderId::new(0, 0), 0)),
            log_end_offset: 1,
        });
        let answers = BTreeMap::from([(2, formed), (3, Ok(GroupState::EMPTY))]);
        assert_eq!(decide(&answers), Decision::New);
        // A candidate's vote in term 1 is an election: it may hold this node's lost vote.
        let answers = BTreeMap::from([(2, held(1, Some((0, 0)), 1)), (3, Ok(GroupState::EMPTY))]);
        assert!(matches!(decide(&answers), Decision::Rejoin(f, _) if f.term == 2));
    }

    #[test]
    fn a_member_with_state_makes_a_rejoin_above_every_term_and_log() {
        let answers = BTreeMap::from([
            (2, held(5, Some((4, 90)), 300)),
            (3, held(7, Some((3, 120)), 400)),
        ]);
        let Decision::Rejoin(floor, end) = decide(&answers) else {
            panic!("{:?}", decide(&answers));
        };
        assert_eq!(floor.term, 8, "above the greatest vote");
        assert_eq!(
            floor.last_log_id,
            Some(LogId::new(CommittedLeaderId::new(4, 1), 90)),
            "the greatest last log id: a later term beats a longer log"
        );
        assert_eq!(end, 400);
    }

    #[test]
    fn a_silent_member_makes_a_rejoin_wait_and_so_does_a_silent_one_beside_empty_ones() {
        let answers = BTreeMap::from([
            (2, held(5, Some((4, 90)), 300)),
            (3, Err("unreachable".into())),
        ]);
        assert!(matches!(decide(&answers), Decision::Wait(why) if why.contains("node 3")));
        let answers = BTreeMap::from([(2, Ok(GroupState::EMPTY)), (3, Err("unreachable".into()))]);
        assert!(
            matches!(decide(&answers), Decision::Wait(_)),
            "cannot tell a wipe"
        );
    }

    #[test]
    fn the_record_survives_a_reload_and_a_damaged_one_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        let record = RejoinRecord {
            metadata_end: 42,
            floors: BTreeMap::from([(
                "t-0".to_string(),
                RejoinFloor {
                    term: 3,
                    last_log_id: Some(LogId::new(CommittedLeaderId::new(2, 1), 17)),
                },
            )]),
        };
        save(dir.path(), &record).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(record));
        std::fs::write(dir.path().join(REJOIN_FILE), b"{\"metadata_end\":1}").unwrap();
        let err = load(dir.path()).unwrap_err();
        assert!(matches!(err, RejoinError::Malformed { .. }), "{err}");
        assert!(err.to_string().contains(REJOIN_FILE), "{err}");
    }
}
