//! The classic group protocol's membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) as
//! Kafka's group coordinator runs it: a group is Empty, PreparingRebalance (members rejoin),
//! CompletingRebalance (the leader computes the assignment with the client's own assignor,
//! range or roundrobin, and sends it in its SyncGroup) or Stable. The broker only relays the
//! leader's assignment. A member silent past its session timeout is removed, and a member
//! that does not rejoin within the rebalance timeout is dropped from the new generation.
//!
//! Membership is in memory, as in Kafka a restart (there: a coordinator move) makes the
//! members rejoin; what must survive, the committed offsets, is in [`crate::offsets_log`].
//!
//! The admin APIs read and change it too ([`crate::api`]'s group admin): ListGroups and
//! DescribeGroups see each group's state, protocol and members as Kafka reports them
//! ([`Groups::list`], [`Groups::describe`]); DeleteGroups removes an empty group
//! ([`Groups::remove_if_empty`]) and OffsetDelete asks which topics its members subscribe to
//! ([`Groups::offset_delete_check`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
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

impl State {
    /// Kafka's name of the state (`ClassicGroupState.toString`), as ListGroups and
    /// DescribeGroups answer it.
    fn kafka_name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::Preparing => "PreparingRebalance",
            State::Completing => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }
}

/// Kafka's name of a group that does not exist (DescribeGroups answers it for an unknown id).
pub const DEAD: &str = "Dead";

/// The protocol type of Kafka's consumers (`ConsumerProtocol.PROTOCOL_TYPE`).
pub const CONSUMER_PROTOCOL: &str = "consumer";

/// A group as ListGroups answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    /// Kafka's state name.
    pub state: &'static str,
    /// Empty when no member ever joined (a group that only holds committed offsets).
    pub protocol_type: String,
}

/// A member as DescribeGroups answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The member's metadata for the group's protocol: only in a Stable group, as Kafka.
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// A group as DescribeGroups answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedGroup {
    pub state: &'static str,
    pub protocol_type: String,
    /// The chosen protocol (the assignor), only in a Stable group, as Kafka.
    pub protocol: String,
    pub members: Vec<DescribedMember>,
}

/// What OffsetDelete may do to a group's offsets (Kafka's `validateOffsetDelete` and
/// `isSubscribedToTopic`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetDeleteCheck {
    /// The coordinator has no such group (it may still hold committed offsets).
    Unknown,
    /// The group has members and does not use the consumer protocol: NON_EMPTY_GROUP.
    NonEmpty,
    /// The offsets of topics outside `subscribed` may go. `None`: the subscriptions are not
    /// known (a consumer-protocol metadata that does not parse), so every topic counts as
    /// subscribed, as Kafka counts them.
    Allowed {
        subscribed: Option<BTreeSet<String>>,
    },
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
    client_id: String,
    /// The address the member joined from, as Kafka writes it (`/127.0.0.1`).
    client_host: String,
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
    /// Set by the first member to join; kept when the group empties, as Kafka keeps it.
    protocol_type: Option<String>,
    protocol: Option<String>,
    /// The topics the members subscribe to, from their consumer-protocol metadata at the last
    /// join (Kafka's `computeSubscribedTopics`): `None` when not known.
    subscribed: Option<BTreeSet<String>>,
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
            subscribed: None,
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
            self.subscribed = self.compute_subscribed();
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
        self.subscribed = self.compute_subscribed();
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

    /// Kafka's `computeSubscribedTopics`: for the consumer protocol, every topic of the
    /// members' subscriptions (the version-0 prefix every subscription version starts with);
    /// `None` for another protocol or a subscription that does not parse.
    fn compute_subscribed(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL) {
            return None;
        }
        let mut topics = BTreeSet::new();
        if self.members.is_empty() {
            return Some(topics);
        }
        let protocol = self.protocol.as_ref()?;
        for m in self.members.values() {
            let (_, metadata) = m.protocols.iter().find(|(n, _)| n == protocol)?;
            topics.extend(subscription_topics(metadata)?);
        }
        Some(topics)
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

/// The topics of a consumer-protocol subscription (`ConsumerProtocolSubscription`, read as
/// version 0: a version, an array of topic names and the user data), or `None` if it does not
/// parse.
pub fn subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    fn take<'a>(input: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if input.len() < n {
            return None;
        }
        let (head, rest) = input.split_at(n);
        *input = rest;
        Some(head)
    }
    let mut input = metadata;
    let version = i16::from_be_bytes(take(&mut input, 2)?.try_into().ok()?);
    if version < 0 {
        return None;
    }
    let count = i32::from_be_bytes(take(&mut input, 4)?.try_into().ok()?);
    let mut topics = Vec::new();
    for _ in 0..count.max(0) {
        let len = i16::from_be_bytes(take(&mut input, 2)?.try_into().ok()?);
        let bytes = take(&mut input, usize::try_from(len).ok()?)?;
        topics.push(String::from_utf8(bytes.to_vec()).ok()?);
    }
    // The user data (nullable bytes) ends the version-0 prefix: Kafka reads it too.
    let user_data = i32::from_be_bytes(take(&mut input, 4)?.try_into().ok()?);
    if user_data >= 0 {
        take(&mut input, usize::try_from(user_data).ok()?)?;
    }
    Some(topics)
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
    /// The member's address as Kafka writes it (`/127.0.0.1`), for DescribeGroups.
    pub client_host: String,
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
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
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

    /// Every group the coordinator knows, in id order.
    pub fn list(&self) -> Vec<ListedGroup> {
        let groups = self.lock();
        let mut listed: Vec<ListedGroup> = groups
            .iter()
            .map(|(id, g)| ListedGroup {
                group_id: id.clone(),
                state: g.state.kafka_name(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
            })
            .collect();
        listed.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        listed
    }

    /// A group as Kafka's DescribeGroups describes it (`GroupMetadataManager.describeGroups`):
    /// in a Stable group each member with its metadata for the chosen protocol and its
    /// assignment; otherwise without the protocol and the metadata. `None`: not known here.
    pub fn describe(&self, group_id: &str) -> Option<DescribedGroup> {
        let groups = self.lock();
        let group = groups.get(group_id)?;
        let stable = group.state == State::Stable;
        let protocol = group.protocol.clone().filter(|_| stable);
        let members = group
            .members
            .iter()
            .map(|(id, m)| DescribedMember {
                member_id: id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: protocol
                    .as_ref()
                    .and_then(|p| m.protocols.iter().find(|(n, _)| n == p))
                    .map(|(_, meta)| meta.clone())
                    .unwrap_or_default(),
                assignment: m.assignment.clone(),
            })
            .collect();
        Some(DescribedGroup {
            state: group.state.kafka_name(),
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol: protocol.unwrap_or_default(),
            members,
        })
    }

    /// DeleteGroups' check and removal (Kafka's `validateDeleteGroup`): a group with members
    /// (any state but Empty) is refused with NON_EMPTY_GROUP and kept; an Empty one is
    /// removed. Answers whether the coordinator knew the group.
    pub fn remove_if_empty(&self, group_id: &str) -> Result<bool, ResponseError> {
        let mut groups = self.lock();
        match groups.get(group_id) {
            None => Ok(false),
            Some(g) if g.state != State::Empty => Err(ResponseError::NonEmptyGroup),
            Some(_) => {
                groups.remove(group_id);
                tracing::info!(group = group_id, "group deleted");
                Ok(true)
            }
        }
    }

    /// OffsetDelete's check of the group (Kafka's `validateOffsetDelete`): a group with members
    /// may lose the offsets of topics none of them subscribes to, and only if it uses the
    /// consumer protocol (whose subscriptions the coordinator can read).
    pub fn offset_delete_check(&self, group_id: &str) -> OffsetDeleteCheck {
        let groups = self.lock();
        let Some(group) = groups.get(group_id) else {
            return OffsetDeleteCheck::Unknown;
        };
        let consumer = group.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL);
        if group.state != State::Empty && !consumer {
            return OffsetDeleteCheck::NonEmpty;
        }
        let subscribed = match &group.subscribed {
            Some(topics) => Some(topics.clone()),
            // Kafka's `isSubscribedToTopic`: unknown subscriptions count as every topic for
            // the consumer protocol, and as none otherwise.
            None if consumer => None,
            None => Some(BTreeSet::new()),
        };
        OffsetDeleteCheck::Allowed { subscribed }
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

    fn request(group: &str, member_id: &str) -> JoinRequest {
        JoinRequest {
            group: group.into(),
            member_id: member_id.into(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: MIN_SESSION_TIMEOUT_MS,
            rebalance_timeout_ms: 60_000,
            protocol_type: CONSUMER_PROTOCOL.into(),
            protocols: vec![("range".into(), Bytes::new())],
        }
    }

    fn join(groups: &Groups, member_id: &str) -> oneshot::Receiver<Joined> {
        groups.join(JoinRequest {
            group: "g".into(),
            member_id: member_id.into(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
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
    fn subscriptions_are_read_as_kafka_reads_them_and_damage_is_unknown() {
        // Version 0 of ConsumerProtocolSubscription: version, topics, user data.
        let v0 = b"\x00\x00\x00\x00\x00\x02\x00\x01t\x00\x02uu\xff\xff\xff\xff";
        assert_eq!(
            subscription_topics(v0),
            Some(vec!["t".to_string(), "uu".to_string()])
        );
        // A later version is read through its version-0 prefix.
        let mut v3 = v0.to_vec();
        v3[1] = 3;
        v3.extend_from_slice(b"more fields");
        assert_eq!(subscription_topics(&v3).map(|t| t.len()), Some(2));
        // Every truncation of it, a negative version and a string past the end: unknown.
        for end in 0..v0.len() {
            assert_eq!(subscription_topics(&v0[..end]), None, "cut at {end}");
        }
        assert_eq!(subscription_topics(b"\xff\xff\x00\x00\x00\x00"), None);
        assert_eq!(
            subscription_topics(b"\x00\x00\x00\x00\x00\x01\x00\x09t"),
            None
        );
    }

    #[test]
    fn offset_delete_sees_the_subscriptions_of_the_last_join() {
        let groups = Groups::default();
        assert_eq!(groups.offset_delete_check("g"), OffsetDeleteCheck::Unknown);
        let rx = groups.join(JoinRequest {
            protocols: vec![(
                "range".into(),
                Bytes::from_static(b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"),
            )],
            ..request("g", "")
        });
        let a = joined(&groups, rx);
        assert_eq!(
            groups.offset_delete_check("g"),
            OffsetDeleteCheck::Allowed {
                subscribed: Some(["t".to_string()].into())
            }
        );
        assert_eq!(
            groups.remove_if_empty("g"),
            Err(ResponseError::NonEmptyGroup)
        );
        assert_eq!(groups.leave("g", &a.member_id), None);
        assert_eq!(
            groups.offset_delete_check("g"),
            OffsetDeleteCheck::Allowed {
                subscribed: Some(BTreeSet::new())
            },
            "an empty group subscribes to nothing"
        );
        assert_eq!(groups.remove_if_empty("g"), Ok(true));
        assert_eq!(groups.remove_if_empty("g"), Ok(false));
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
