//! The classic group protocol's membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) as
//! Kafka's group coordinator runs it: a group is Empty, PreparingRebalance (members rejoin),
//! CompletingRebalance (the leader computes the assignment with the client's own assignor,
//! range or roundrobin, and sends it in its SyncGroup) or Stable. The broker only relays the
//! leader's assignment. A member silent past its session timeout is removed, and a member
//! that does not rejoin within the rebalance timeout is dropped from the new generation.
//!
//! Membership is in memory, as in Kafka a restart (there: a coordinator move) makes the
//! members rejoin; what must survive, the committed offsets, is in [`crate::offsets_log`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

/// Kafka's `group.min.session.timeout.ms` and `group.max.session.timeout.ms` defaults.
pub const MIN_SESSION_TIMEOUT_MS: i32 = 6_000;
pub const MAX_SESSION_TIMEOUT_MS: i32 = 1_800_000;
/// How long the first rebalance of an empty group waits for more members (Kafka's
/// `group.initial.rebalance.delay.ms` is 3 s; shorter here, the broker is for tests).
pub const INITIAL_REBALANCE_DELAY: Duration = Duration::from_millis(1_000);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Empty,
    Preparing,
    Completing,
    Stable,
}

/// What a JoinGroup is answered.
#[derive(Debug, Clone, Default)]
pub struct Joined {
    pub error: Option<ResponseError>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Every member with its metadata for the chosen protocol: the leader's answer only.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

/// What a SyncGroup is answered.
#[derive(Debug, Clone, Default)]
pub struct Synced {
    pub error: Option<ResponseError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

#[derive(Debug)]
struct Member {
    instance_id: Option<String>,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
    last_seen: Instant,
    join: Option<oneshot::Sender<Joined>>,
    assignment: Bytes,
}

#[derive(Debug)]
struct Group {
    state: State,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// When the join phase ends even if some members did not rejoin.
    deadline: Instant,
    /// The first rebalance of an empty group waits its whole delay.
    initial: bool,
    syncs: Vec<(String, oneshot::Sender<Synced>)>,
}

impl Group {
    fn new() -> Group {
        Group {
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            deadline: Instant::now(),
            initial: false,
            syncs: Vec::new(),
        }
    }

    fn prepare_rebalance(&mut self, now: Instant) {
        if self.state == State::Preparing {
            return;
        }
        for (_, tx) in self.syncs.drain(..) {
            let _ = tx.send(Synced {
                error: Some(ResponseError::RebalanceInProgress),
                ..Synced::default()
            });
        }
        self.initial = self.state == State::Empty;
        let timeout = if self.initial {
            INITIAL_REBALANCE_DELAY
        } else {
            self.members
                .values()
                .map(|m| m.rebalance_timeout)
                .max()
                .unwrap_or_default()
        };
        self.deadline = now + timeout;
        self.state = State::Preparing;
    }

    /// Ends the join phase if every member rejoined (or the deadline passed).
    fn try_complete_join(&mut self, now: Instant) {
        if self.state != State::Preparing {
            return;
        }
        let all_in = self.members.values().all(|m| m.join.is_some());
        let due = now >= self.deadline;
        if !(due || (all_in && !self.initial)) {
            return;
        }
        self.members.retain(|_, m| m.join.is_some());
        self.generation += 1;
        if self.members.is_empty() {
            self.state = State::Empty;
            self.protocol = None;
            self.protocol_type = None;
            self.leader = None;
            return;
        }
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        let leader = self.leader.clone().expect("a member leads");
        // The first protocol of the leader's preference that every member supports (there is
        // one: a join without a common protocol is refused).
        let protocol = self.members[&leader]
            .protocols
            .iter()
            .map(|(name, _)| name.clone())
            .find(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            });
        self.protocol = protocol.clone();
        let everyone: Vec<(String, Option<String>, Bytes)> = self
            .members
            .iter()
            .map(|(id, m)| {
                let meta = m
                    .protocols
                    .iter()
                    .find(|(n, _)| Some(n) == protocol.as_ref())
                    .map(|(_, meta)| meta.clone())
                    .unwrap_or_default();
                (id.clone(), m.instance_id.clone(), meta)
            })
            .collect();
        for (id, m) in self.members.iter_mut() {
            m.last_seen = now;
            m.assignment = Bytes::new();
            let tx = m.join.take().expect("every member rejoined");
            let _ = tx.send(Joined {
                error: None,
                generation: self.generation,
                protocol_type: self.protocol_type.clone(),
                protocol_name: protocol.clone(),
                leader: leader.clone(),
                member_id: id.clone(),
                members: if *id == leader {
                    everyone.clone()
                } else {
                    Vec::new()
                },
            });
        }
        self.state = State::Completing;
        tracing::info!(
            generation = self.generation,
            members = self.members.len(),
            leader = %leader,
            "group rebalanced"
        );
    }

    fn remove_member(&mut self, id: &str, now: Instant) {
        if self.members.remove(id).is_none() {
            return;
        }
        self.syncs.retain(|(m, _)| m != id);
        match self.state {
            State::Stable | State::Completing => self.prepare_rebalance(now),
            _ => {}
        }
        if self.members.is_empty() {
            // Nobody left to wait for: the join phase ends at once.
            self.initial = false;
        }
        self.try_complete_join(now);
    }
}

/// The error a member's request gets for its identity and generation, if any.
fn check_member(
    group: Option<&Group>,
    member_id: &str,
    generation: i32,
) -> Result<(), ResponseError> {
    let group = group.ok_or(ResponseError::UnknownMemberId)?;
    if !group.members.contains_key(member_id) {
        return Err(ResponseError::UnknownMemberId);
    }
    if generation != group.generation {
        return Err(ResponseError::IllegalGeneration);
    }
    Ok(())
}

/// A JoinGroup's fields that matter here.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
}

/// Every group this broker coordinates.
#[derive(Debug, Default)]
pub struct Groups {
    groups: Mutex<HashMap<String, Group>>,
}

impl Groups {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins (or rejoins) a member; the answer comes when the join phase ends.
    pub fn join(&self, req: JoinRequest) -> oneshot::Receiver<Joined> {
        let (tx, rx) = oneshot::channel();
        let fail = |tx: oneshot::Sender<Joined>, error, member_id: String| {
            let _ = tx.send(Joined {
                error: Some(error),
                generation: -1,
                member_id,
                ..Joined::default()
            });
        };
        if !(MIN_SESSION_TIMEOUT_MS..=MAX_SESSION_TIMEOUT_MS).contains(&req.session_timeout_ms) {
            fail(tx, ResponseError::InvalidSessionTimeout, req.member_id);
            return rx;
        }
        if req.protocol_type.is_empty() || req.protocols.is_empty() {
            fail(tx, ResponseError::InconsistentGroupProtocol, req.member_id);
            return rx;
        }
        let now = Instant::now();
        let mut groups = self.lock();
        let group = groups.entry(req.group.clone()).or_insert_with(Group::new);
        if req.member_id.is_empty() {
            if group.state != State::Empty
                && (group.protocol_type.as_deref() != Some(&req.protocol_type)
                    || !group.members.values().all(|m| {
                        m.protocols
                            .iter()
                            .any(|(n, _)| req.protocols.iter().any(|(r, _)| r == n))
                    }))
            {
                fail(tx, ResponseError::InconsistentGroupProtocol, String::new());
                return rx;
            }
        } else if !group.members.contains_key(&req.member_id) {
            fail(tx, ResponseError::UnknownMemberId, req.member_id);
            return rx;
        }
        let member_id = if req.member_id.is_empty() {
            format!("{}-{}", req.client_id, uuid::Uuid::new_v4())
        } else {
            req.member_id.clone()
        };
        if group.members.is_empty() {
            group.protocol_type = Some(req.protocol_type.clone());
        }
        let member = group
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member {
                instance_id: req.instance_id.clone(),
                session_timeout: Duration::ZERO,
                rebalance_timeout: Duration::ZERO,
                protocols: Vec::new(),
                last_seen: now,
                join: None,
                assignment: Bytes::new(),
            });
        member.session_timeout = Duration::from_millis(req.session_timeout_ms as u64);
        member.rebalance_timeout = Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64);
        member.protocols = req.protocols;
        member.last_seen = now;
        if let Some(old) = member.join.replace(tx) {
            // The same member joined twice: the older request is superseded.
            let _ = old.send(Joined {
                error: Some(ResponseError::UnknownMemberId),
                generation: -1,
                ..Joined::default()
            });
        }
        // Any join outside the join phase starts one: a new member, or one that was told to
        // rejoin (REBALANCE_IN_PROGRESS) or whose subscription changed.
        group.prepare_rebalance(now);
        group.try_complete_join(now);
        rx
    }

    /// A member's SyncGroup: the leader brings the assignment, every member gets its part.
    pub fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> oneshot::Receiver<Synced> {
        let (tx, rx) = oneshot::channel();
        let now = Instant::now();
        let mut groups = self.lock();
        let group = groups.get_mut(group_id);
        let error = |e| Synced {
            error: Some(e),
            ..Synced::default()
        };
        if let Err(e) = check_member(group.as_deref(), member_id, generation) {
            let _ = tx.send(error(e));
            return rx;
        }
        let group = group.expect("checked");
        group.members.get_mut(member_id).expect("checked").last_seen = now;
        match group.state {
            State::Preparing | State::Empty => {
                let _ = tx.send(error(ResponseError::RebalanceInProgress));
            }
            State::Stable => {
                let _ = tx.send(Synced {
                    error: None,
                    protocol_type: group.protocol_type.clone(),
                    protocol_name: group.protocol.clone(),
                    assignment: group.members[member_id].assignment.clone(),
                });
            }
            State::Completing => {
                group.syncs.push((member_id.to_string(), tx));
                if group.leader.as_deref() == Some(member_id) {
                    let mut by_member: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for (id, m) in group.members.iter_mut() {
                        m.assignment = by_member.remove(id).unwrap_or_default();
                    }
                    group.state = State::Stable;
                    for (id, tx) in group.syncs.drain(..) {
                        let _ = tx.send(Synced {
                            error: None,
                            protocol_type: group.protocol_type.clone(),
                            protocol_name: group.protocol.clone(),
                            assignment: group.members[&id].assignment.clone(),
                        });
                    }
                }
            }
        }
        rx
    }

    /// A member's heartbeat: NONE, or what it must do (rejoin, or join anew).
    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
    ) -> Option<ResponseError> {
        let mut groups = self.lock();
        let group = groups.get_mut(group_id);
        if let Err(e) = check_member(group.as_deref(), member_id, generation) {
            return Some(e);
        }
        let group = group.expect("checked");
        group.members.get_mut(member_id).expect("checked").last_seen = Instant::now();
        (group.state == State::Preparing).then_some(ResponseError::RebalanceInProgress)
    }

    /// A member leaves; the others rebalance. The error is per member.
    pub fn leave(&self, group_id: &str, member_id: &str) -> Option<ResponseError> {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(group_id) else {
            return Some(ResponseError::UnknownMemberId);
        };
        if !group.members.contains_key(member_id) {
            return Some(ResponseError::UnknownMemberId);
        }
        tracing::info!(group = group_id, member = member_id, "member left");
        group.remove_member(member_id, Instant::now());
        None
    }

    /// Whether a commit from this member and generation may be stored: `-1` is a consumer
    /// outside any group (`assign()`), allowed while the group has no members.
    pub fn check_commit(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
    ) -> Option<ResponseError> {
        let mut groups = self.lock();
        let group = groups.get_mut(group_id);
        if generation < 0 {
            let busy = group.is_some_and(|g| !g.members.is_empty());
            return busy.then_some(ResponseError::UnknownMemberId);
        }
        if let Err(e) = check_member(group.as_deref(), member_id, generation) {
            return Some(e);
        }
        let group = group.expect("checked");
        group.members.get_mut(member_id).expect("checked").last_seen = Instant::now();
        // Kafka's rule (GroupCoordinator.doCommitOffsets): a member of the current generation
        // may commit while the group prepares a rebalance (Java consumers commit what they
        // processed just before they rejoin; refusing it hands those offsets to the next owner,
        // which processes them again). Only between the join and the leader's assignment is a
        // commit refused, as the generation it names is already the new one.
        match group.state {
            State::Completing => Some(ResponseError::RebalanceInProgress),
            _ => None,
        }
    }

    /// Expires silent members and ends join phases past their deadline. Called every tick.
    pub fn tick(&self) {
        let now = Instant::now();
        let mut groups = self.lock();
        for (name, group) in groups.iter_mut() {
            let expired: Vec<String> = group
                .members
                .iter()
                .filter(|(_, m)| m.join.is_none() && now - m.last_seen > m.session_timeout)
                .map(|(id, _)| id.clone())
                .collect();
            for id in expired {
                tracing::info!(group = %name, member = %id, "session expired; member removed");
                group.remove_member(&id, now);
            }
            group.try_complete_join(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(groups: &Groups, member_id: &str) -> oneshot::Receiver<Joined> {
        groups.join(JoinRequest {
            group: "g".into(),
            member_id: member_id.into(),
            instance_id: None,
            client_id: "c".into(),
            session_timeout_ms: MIN_SESSION_TIMEOUT_MS,
            rebalance_timeout_ms: 60_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::new())],
        })
    }

    /// Ticks the coordinator until the join phase answers (the first one waits its delay).
    fn joined(groups: &Groups, mut rx: oneshot::Receiver<Joined>) -> Joined {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match rx.try_recv() {
                Ok(j) => return j,
                Err(oneshot::error::TryRecvError::Empty) if Instant::now() < deadline => {
                    groups.tick();
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("no join answer: {e:?}"),
            }
        }
    }

    #[test]
    fn a_commit_of_the_current_generation_is_accepted_while_the_group_prepares_a_rebalance() {
        let groups = Groups::default();
        let a = joined(&groups, join(&groups, ""));
        assert_eq!((a.error, a.generation), (None, 1));
        let mut synced = groups.sync(
            "g",
            &a.member_id,
            1,
            vec![(a.member_id.clone(), Bytes::new())],
        );
        assert_eq!(synced.try_recv().unwrap().error, None);
        assert_eq!(groups.check_commit("g", &a.member_id, 1), None, "stable");

        // A second member joins: the group prepares a rebalance and waits for the first to
        // rejoin. The first still owns its partitions and commits what it processed.
        let b = join(&groups, "");
        assert_eq!(
            groups.heartbeat("g", &a.member_id, 1),
            Some(ResponseError::RebalanceInProgress)
        );
        assert_eq!(groups.check_commit("g", &a.member_id, 1), None, "preparing");

        // Both have joined generation 2; until the leader's assignment a commit is refused.
        let a_again = join(&groups, &a.member_id);
        let (a2, b2) = (joined(&groups, a_again), joined(&groups, b));
        assert_eq!((a2.generation, b2.generation), (2, 2));
        assert_eq!(
            groups.check_commit("g", &a.member_id, 2),
            Some(ResponseError::RebalanceInProgress),
            "completing"
        );
        assert_eq!(
            groups.check_commit("g", &a.member_id, 1),
            Some(ResponseError::IllegalGeneration),
            "an old generation"
        );
        let leader = if a2.leader == a2.member_id { &a2 } else { &b2 };
        let assignments = vec![
            (a2.member_id.clone(), Bytes::new()),
            (b2.member_id.clone(), Bytes::new()),
        ];
        let mut synced = groups.sync("g", &leader.member_id, 2, assignments);
        assert_eq!(synced.try_recv().unwrap().error, None);
        assert_eq!(
            groups.check_commit("g", &b2.member_id, 2),
            None,
            "stable again"
        );
    }
}
