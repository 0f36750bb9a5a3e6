//! The classic group protocol's membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) as
//! Kafka's group coordinator runs it: a group is Empty, PreparingRebalance (members rejoin),
//! CompletingRebalance (the leader computes the assignment with the client's own assignor,
//! range or roundrobin, and sends it in its SyncGroup) or Stable. The broker only relays the
//! leader's assignment. A member silent past its session timeout is removed, and a member
//! that does not rejoin within the rebalance timeout is dropped from the new generation.
//!
//! Membership survives a restart as in Kafka: the generation, the chosen protocol, the leader
//! and every member with its subscription and assignment are written to `__consumer_offsets`
//! as Kafka's group-metadata records ([`crate::group_metadata`]) when the leader's SyncGroup
//! completes a generation (durable before any member of it is answered), when a static member
//! replaces its old member id, and when a group empties. On start [`Groups::restore`] reloads
//! them: a member that heartbeats or commits with its old member id and generation carries on
//! without a rebalance, and every member's session timer starts at the load, so one that never
//! comes back is removed as usual. The coordinator queues the records ([`Groups::take_unstored`])
//! and whoever writes them ([`crate::api::CommittedOffsets::store_groups`]) reports back
//! ([`Groups::stored`]), which answers the requests that waited for them.
//!
//! Static membership (KIP-345, `group.instance.id`): a member that joins with a known instance
//! id and no member id takes over the old member id's place, assignment and leadership; the old
//! member id is then fenced (FENCED_INSTANCE_ID on its requests). In a Stable group whose chosen
//! protocol the new member's protocols do not change, there is no rebalance: the member gets the
//! current generation back and its old assignment in its SyncGroup, as Kafka's
//! `updateStaticMemberThenRebalanceOrCompleteJoin`.
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

use crate::consumer_group::{self, ConsumerGroupSettings, ConsumerGroups};
use crate::group_metadata::{GroupMetadata, MemberMetadata};

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
    /// ListGroups v5's group type: `classic`, or `consumer` for a KIP-848 group.
    pub group_type: &'static str,
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
    /// The leader must not compute an assignment (JoinGroup v9, KIP-814): a static leader that
    /// rejoined a Stable group keeps the current one.
    pub skip_assignment: bool,
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

impl Member {
    /// The member's metadata for `protocol` (empty if it has none).
    fn metadata(&self, protocol: Option<&str>) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| Some(n.as_str()) == protocol)
            .map(|(_, meta)| meta.clone())
            .unwrap_or_default()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(-1, |d| d.as_millis() as i64)
}

/// A request answered once its group's record is durable.
#[derive(Debug)]
enum Waiter {
    /// The leader's assignment for this generation: the group becomes Stable and the members'
    /// SyncGroups are answered.
    Assignment(i32),
    /// A static member that replaced its old member id in a Stable group.
    Join(oneshot::Sender<Joined>, Joined),
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
    /// Records to write, with what waits for each.
    unstored: Vec<(GroupMetadata, Option<Waiter>)>,
    /// What waits for a queued record, by its sequence number ([`Outbox`]).
    waiters: Vec<(u64, Waiter)>,
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
            unstored: Vec::new(),
            waiters: Vec::new(),
        }
    }

    /// The group as Kafka's group-metadata record stores it: each member with its metadata
    /// for the chosen protocol and its assignment.
    fn record(&self) -> GroupMetadata {
        let members = self
            .members
            .iter()
            .map(|(id, m)| MemberMetadata {
                member_id: id.clone(),
                group_instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
                session_timeout_ms: m.session_timeout.as_millis() as i32,
                subscription: m.metadata(self.protocol.as_deref()),
                assignment: m.assignment.clone(),
            })
            .collect();
        GroupMetadata {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            current_state_timestamp: now_ms(),
            members,
        }
    }

    /// The member id a static member (`group.instance.id`) has now.
    fn static_member(&self, instance_id: &str) -> Option<String> {
        self.members
            .iter()
            .find(|(_, m)| m.instance_id.as_deref() == Some(instance_id))
            .map(|(id, _)| id.clone())
    }

    /// Kafka's `ClassicGroup.validateMember`: a request naming an instance id must come from
    /// the member id that instance has now (FENCED_INSTANCE_ID otherwise, UNKNOWN_MEMBER_ID
    /// for an unknown instance); one without must name a member.
    fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ResponseError> {
        match instance_id {
            Some(instance) => match self.static_member(instance) {
                None => Err(ResponseError::UnknownMemberId),
                Some(current) if current != member_id => {
                    tracing::info!(
                        member = member_id,
                        instance,
                        current = %current,
                        "static member fenced"
                    );
                    Err(ResponseError::FencedInstanceId)
                }
                Some(_) => Ok(()),
            },
            None if self.members.contains_key(member_id) => Ok(()),
            None => Err(ResponseError::UnknownMemberId),
        }
    }

    /// The protocol the group would choose now: the first of the leader's preference that
    /// every member supports (there is one: a join without a common protocol is refused).
    fn select_protocol(&self) -> Option<String> {
        let leader = self.members.get(self.leader.as_ref()?)?;
        leader
            .protocols
            .iter()
            .map(|(name, _)| name.clone())
            .find(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    /// Every member with its metadata for `protocol`, as the leader's JoinGroup answer lists
    /// them.
    fn everyone(&self, protocol: Option<&str>) -> Vec<(String, Option<String>, Bytes)> {
        self.members
            .iter()
            .map(|(id, m)| (id.clone(), m.instance_id.clone(), m.metadata(protocol)))
            .collect()
    }

    /// What a queued record's write means for what waited for it.
    fn on_stored(&mut self, waiter: Waiter, error: Option<ResponseError>, now: Instant) {
        match waiter {
            Waiter::Assignment(generation) => {
                // A rebalance that started meanwhile answered the SyncGroups already.
                if self.state != State::Completing || self.generation != generation {
                    return;
                }
                if let Some(e) = error {
                    // Kafka's `resetAndPropagateAssignmentWithError`: nobody gets the
                    // assignment that could not be stored; the members rejoin.
                    for (_, tx) in self.syncs.drain(..) {
                        let _ = tx.send(Synced {
                            error: Some(e),
                            ..Synced::default()
                        });
                    }
                    for m in self.members.values_mut() {
                        m.assignment = Bytes::new();
                    }
                    self.prepare_rebalance(now);
                    return;
                }
                self.state = State::Stable;
                for (id, tx) in self.syncs.drain(..) {
                    let _ = tx.send(Synced {
                        error: None,
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol.clone(),
                        assignment: self.members[&id].assignment.clone(),
                    });
                }
            }
            Waiter::Join(tx, joined) => {
                let _ = tx.send(match error {
                    None => joined,
                    Some(e) => Joined {
                        error: Some(e),
                        generation: -1,
                        ..Joined::default()
                    },
                });
            }
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
            // Kafka stores the empty generation too, so a restart does not bring back the
            // members that left.
            self.unstored.push((self.record(), None));
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
        let protocol = self.select_protocol();
        self.protocol = protocol.clone();
        self.subscribed = self.compute_subscribed();
        let everyone = self.everyone(protocol.as_deref());
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
                skip_assignment: false,
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

/// The error a member's request gets for its identity (with its instance id, if static) and
/// generation, if any.
fn check_member(
    group: Option<&Group>,
    member_id: &str,
    instance_id: Option<&str>,
    generation: i32,
) -> Result<(), ResponseError> {
    let group = group.ok_or(ResponseError::UnknownMemberId)?;
    group.validate_member(member_id, instance_id)?;
    if generation != group.generation {
        return Err(ResponseError::IllegalGeneration);
    }
    Ok(())
}

/// A static member rejoined without its member id (a restarted client): the new member id
/// takes the old one's place, assignment and leadership, and the old one's requests in flight
/// are fenced (Kafka's `updateStaticMemberThenRebalanceOrCompleteJoin`). In a Stable group
/// whose chosen protocol stays the same nothing rebalances: the record with the new member id
/// is stored, then the member gets the current generation back (a v9+ leader is told to skip
/// the assignment; an older one is answered as a follower, with the old leader id, as Kafka
/// does), and its SyncGroup answers its old assignment. Otherwise the group rebalances.
fn replace_static_member(
    group: &mut Group,
    old_id: &str,
    new_id: String,
    req: JoinRequest,
    tx: oneshot::Sender<Joined>,
    now: Instant,
) {
    let mut member = group.members.remove(old_id).expect("a static member");
    tracing::info!(
        instance = req.instance_id.as_deref().unwrap_or_default(),
        old = old_id,
        new = %new_id,
        "static member replaced"
    );
    if let Some(old) = member.join.take() {
        let _ = old.send(Joined {
            error: Some(ResponseError::FencedInstanceId),
            generation: -1,
            member_id: old_id.to_string(),
            ..Joined::default()
        });
    }
    let (fenced, kept): (Vec<_>, Vec<_>) = group.syncs.drain(..).partition(|(id, _)| id == old_id);
    group.syncs = kept;
    for (_, old) in fenced {
        let _ = old.send(Synced {
            error: Some(ResponseError::FencedInstanceId),
            ..Synced::default()
        });
    }
    let old_leader = group.leader.clone();
    if group.leader.as_deref() == Some(old_id) {
        group.leader = Some(new_id.clone());
    }
    member.session_timeout = Duration::from_millis(req.session_timeout_ms as u64);
    member.rebalance_timeout = Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64);
    member.protocols = req.protocols;
    member.last_seen = now;
    group.members.insert(new_id.clone(), member);
    if group.state == State::Stable && group.select_protocol() == group.protocol {
        let is_leader = group.leader.as_deref() == Some(new_id.as_str());
        let skip = req.supports_skip_assignment && is_leader;
        let joined = Joined {
            error: None,
            generation: group.generation,
            protocol_type: group.protocol_type.clone(),
            protocol_name: group.protocol.clone(),
            leader: if req.supports_skip_assignment {
                group.leader.clone()
            } else {
                old_leader
            }
            .unwrap_or_default(),
            member_id: new_id,
            members: if skip {
                group.everyone(group.protocol.as_deref())
            } else {
                Vec::new()
            },
            skip_assignment: skip,
        };
        group
            .unstored
            .push((group.record(), Some(Waiter::Join(tx, joined))));
        return;
    }
    group.members.get_mut(&new_id).expect("inserted").join = Some(tx);
    // In CompletingRebalance the leader may already assign to the old member id: rebalance.
    group.prepare_rebalance(now);
    group.try_complete_join(now);
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
    /// The request is JoinGroup v9 or later, which can tell a leader to skip the assignment.
    pub supports_skip_assignment: bool,
}

/// Group records queued for the offsets log, in the order they were made.
#[derive(Debug, Default)]
struct Outbox {
    next_seq: u64,
    records: Vec<(u64, String, GroupMetadata)>,
}

/// A queued group record: its sequence number, the group, the value.
pub type UnstoredRecord = (u64, String, GroupMetadata);

/// Every group this broker coordinates.
#[derive(Debug, Default)]
pub struct Groups {
    groups: Mutex<HashMap<String, Group>>,
    /// Taken after `groups` when both are held.
    outbox: Mutex<Outbox>,
    /// The consumer-protocol groups (KIP-848). Taken after `groups`: a group id belongs to
    /// one protocol at a time, checked under both locks.
    consumer: Mutex<ConsumerGroups>,
}

impl Groups {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn consumer(&self) -> MutexGuard<'_, ConsumerGroups> {
        self.consumer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes every group of `other` in place of its own (a cluster node that starts or stops
    /// coordinating); the records queued and not yet written are dropped with the old groups.
    pub fn replace(&self, other: Groups) {
        let mut groups = self.lock();
        *groups = other.groups.into_inner().unwrap_or_else(|e| e.into_inner());
        *self.outbox() = other.outbox.into_inner().unwrap_or_else(|e| e.into_inner());
    }

    /// The consumer-protocol groups reloaded from the offsets log ([`ConsumerGroups::restore`]).
    /// A group id belongs to one protocol, but the log can hold both kinds for one id: an
    /// empty classic group's id taken by a consumer group leaves the classic group's last
    /// record (it goes from memory only), and an empty consumer group's id taken by a classic
    /// group is tombstoned on the next tick, after the classic join. The group that took the
    /// id is the one with members: an empty classic group gives way; an empty consumer group
    /// gives way to a classic one with members (its tombstones are written next).
    pub fn set_consumer_groups(&self, mut groups: ConsumerGroups) {
        let mut classic = self.lock();
        classic.retain(|id, g| {
            if !groups.contains(id) {
                return true;
            }
            if g.members.is_empty() {
                tracing::info!(group = %id, "empty classic group superseded by a consumer group");
                return false;
            }
            let _ = groups.remove_if_empty(id);
            true
        });
        let mut consumer = self.consumer();
        groups.settings = consumer.settings;
        *consumer = groups;
    }

    /// The consumer-group records to write for what changed since the last call
    /// ([`ConsumerGroups::take_changes`]).
    pub fn take_consumer_changes(&self) -> Vec<consumer_group::RecordChange> {
        self.consumer().take_changes()
    }

    /// The consumer-group records taken could not be written ([`ConsumerGroups::unstore`]).
    pub fn unstore_consumer_changes(&self, changes: &[consumer_group::RecordChange]) {
        self.consumer().unstore(changes);
    }

    /// Sets `group.consumer.session.timeout.ms` and `group.consumer.heartbeat.interval.ms`.
    pub fn set_consumer_settings(&self, settings: ConsumerGroupSettings) {
        self.consumer().settings = settings;
    }

    /// A ConsumerGroupHeartbeat (KIP-848). A classic group with members keeps its id: the
    /// heartbeat is GROUP_ID_NOT_FOUND ("not a consumer group"), as Kafka answers when it
    /// cannot convert the group; an empty classic group gives its id up to a joining member.
    pub fn consumer_heartbeat(
        &self,
        req: consumer_group::Heartbeat,
        topics: &[consumer_group::TopicInfo],
    ) -> consumer_group::HeartbeatAnswer {
        let mut groups = self.lock();
        if let Some(classic) = groups.get(&req.group) {
            if !classic.members.is_empty() || req.member_epoch != 0 {
                return consumer_group::HeartbeatAnswer {
                    error: Some(ResponseError::GroupIdNotFound),
                    message: Some(format!("Group {} is not a consumer group.", req.group)),
                    ..Default::default()
                };
            }
            tracing::info!(group = %req.group, "empty classic group becomes a consumer group");
            groups.remove(&req.group);
        }
        self.consumer().heartbeat(req, topics, Instant::now())
    }

    /// ConsumerGroupDescribe's view of a group: `Err(true)` if the id is a classic group's.
    pub fn consumer_describe(
        &self,
        group_id: &str,
    ) -> Result<consumer_group::DescribedGroup, bool> {
        let groups = self.lock();
        match self.consumer().describe(group_id) {
            Some(g) => Ok(g),
            None => Err(groups.contains_key(group_id)),
        }
    }

    /// Whether the id is a consumer-protocol group's (DescribeGroups does not describe it).
    pub fn is_consumer_group(&self, group_id: &str) -> bool {
        self.consumer().contains(group_id)
    }

    /// The consumer-protocol rules of an OffsetCommit (member epoch, OffsetCommit v9+):
    /// `None` if the group is not a consumer group (the classic rules apply).
    pub fn consumer_commit_check(
        &self,
        group_id: &str,
        member_id: &str,
        member_epoch: i32,
        version_ok: bool,
    ) -> Option<Option<ResponseError>> {
        let result = self
            .consumer()
            .check_commit(group_id, member_id, member_epoch, version_ok)?;
        Some(result.err())
    }

    /// The consumer-protocol rules of an OffsetFetch v9+ naming a member: `None` if the group
    /// is not a consumer group.
    pub fn consumer_fetch_check(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Option<Option<ResponseError>> {
        let result = self
            .consumer()
            .check_fetch(group_id, member_id, member_epoch)?;
        Some(result.err())
    }

    /// The groups of the offsets log's group-metadata records, as a restarted coordinator
    /// finds them: a group with members is Stable in its stored generation, with its leader,
    /// protocol and assignments; every member's session timer starts `now`.
    pub fn restore(stored: BTreeMap<String, GroupMetadata>, now: Instant) -> Groups {
        let mut groups = HashMap::new();
        for (id, g) in stored {
            let mut group = Group::new();
            group.members = g
                .members
                .into_iter()
                .map(|m| {
                    let member = Member {
                        instance_id: m.group_instance_id,
                        client_id: m.client_id,
                        client_host: m.client_host,
                        session_timeout: Duration::from_millis(m.session_timeout_ms.max(0) as u64),
                        rebalance_timeout: Duration::from_millis(
                            m.rebalance_timeout_ms.max(0) as u64
                        ),
                        // Kafka stores the metadata of the chosen protocol only.
                        protocols: g
                            .protocol
                            .iter()
                            .map(|p| (p.clone(), m.subscription.clone()))
                            .collect(),
                        last_seen: now,
                        join: None,
                        assignment: m.assignment,
                    };
                    (m.member_id, member)
                })
                .collect();
            group.state = if group.members.is_empty() {
                State::Empty
            } else {
                State::Stable
            };
            group.generation = g.generation;
            group.protocol_type = Some(g.protocol_type).filter(|t| !t.is_empty());
            group.protocol = g.protocol;
            group.leader = g.leader;
            group.subscribed = group.compute_subscribed();
            tracing::info!(
                group = %id,
                generation = group.generation,
                members = group.members.len(),
                state = group.state.kafka_name(),
                "group loaded"
            );
            groups.insert(id, group);
        }
        Groups {
            groups: Mutex::new(groups),
            outbox: Mutex::default(),
            consumer: Mutex::default(),
        }
    }

    /// Moves the group's new records to the outbox; what waits for them waits for their
    /// sequence numbers.
    fn enqueue(&self, name: &str, group: &mut Group) {
        if group.unstored.is_empty() {
            return;
        }
        let mut outbox = self.outbox();
        for (record, waiter) in group.unstored.drain(..) {
            outbox.next_seq += 1;
            let seq = outbox.next_seq;
            outbox.records.push((seq, name.to_string(), record));
            if let Some(w) = waiter {
                group.waiters.push((seq, w));
            }
        }
    }

    /// Whether group records wait to be written.
    pub fn has_unstored(&self) -> bool {
        !self.outbox().records.is_empty()
    }

    /// The group records to write, oldest first. The writer must write them in this order
    /// and then call [`Groups::stored`], holding one lock across both so writers do not
    /// reorder records.
    pub fn take_unstored(&self) -> Vec<UnstoredRecord> {
        std::mem::take(&mut self.outbox().records)
    }

    /// The records taken are durable (`error` is `None`) or could not be written: answers
    /// what waited for them.
    pub fn stored(&self, records: &[UnstoredRecord], error: Option<ResponseError>) {
        let now = Instant::now();
        let mut last: HashMap<&str, u64> = HashMap::new();
        for (seq, group, _) in records {
            let at = last.entry(group.as_str()).or_default();
            *at = (*at).max(*seq);
        }
        let mut groups = self.lock();
        for (name, seq) in last {
            let Some(group) = groups.get_mut(name) else {
                continue;
            };
            let (done, waiting): (Vec<_>, Vec<_>) =
                group.waiters.drain(..).partition(|(s, _)| *s <= seq);
            group.waiters = waiting;
            for (_, waiter) in done {
                group.on_stored(waiter, error, now);
            }
            self.enqueue(name, group);
        }
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
        let name = req.group.clone();
        let mut groups = self.lock();
        // A consumer-protocol group with members keeps its id (this broker does not mix the
        // protocols in one group); an empty one gives it up.
        if self.consumer().remove_if_empty(&name).is_err() {
            fail(tx, ResponseError::InconsistentGroupProtocol, req.member_id);
            return rx;
        }
        let group = groups.entry(name.clone()).or_insert_with(Group::new);
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
        } else if let Err(e) = group.validate_member(&req.member_id, req.instance_id.as_deref()) {
            fail(tx, e, req.member_id);
            return rx;
        }
        let member_id = if req.member_id.is_empty() {
            // Kafka's `ClassicGroup.generateMemberId`: a static member's id starts with its
            // instance id.
            let prefix = req.instance_id.as_deref().unwrap_or(&req.client_id);
            format!("{prefix}-{}", uuid::Uuid::new_v4())
        } else {
            req.member_id.clone()
        };
        let known_instance = req
            .instance_id
            .as_deref()
            .filter(|_| req.member_id.is_empty())
            .and_then(|instance| group.static_member(instance));
        if let Some(old_id) = known_instance {
            replace_static_member(group, &old_id, member_id, req, tx, now);
            self.enqueue(&name, group);
            return rx;
        }
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
        self.enqueue(&name, group);
        rx
    }

    /// A member's SyncGroup: the leader brings the assignment, every member gets its part
    /// once the group's record with it is durable (the caller has the queued record written,
    /// see [`Groups::take_unstored`]).
    pub fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
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
        if let Err(e) = check_member(group.as_deref(), member_id, instance_id, generation) {
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
                let storing = group
                    .waiters
                    .iter()
                    .any(|(_, w)| matches!(w, Waiter::Assignment(g) if *g == generation));
                if group.leader.as_deref() == Some(member_id) && !storing {
                    let mut by_member: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for (id, m) in group.members.iter_mut() {
                        m.assignment = by_member.remove(id).unwrap_or_default();
                    }
                    // Stable, and every SyncGroup answered, once the record is durable
                    // (`Group::on_stored`).
                    let record = group.record();
                    group
                        .unstored
                        .push((record, Some(Waiter::Assignment(generation))));
                    self.enqueue(group_id, group);
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
        instance_id: Option<&str>,
        generation: i32,
    ) -> Option<ResponseError> {
        let mut groups = self.lock();
        let group = groups.get_mut(group_id);
        if let Err(e) = check_member(group.as_deref(), member_id, instance_id, generation) {
            return Some(e);
        }
        let group = group.expect("checked");
        group.members.get_mut(member_id).expect("checked").last_seen = Instant::now();
        (group.state == State::Preparing).then_some(ResponseError::RebalanceInProgress)
    }

    /// A member leaves; the others rebalance. The error is per member. From LeaveGroup v3 a
    /// member is named by its member id, its instance id, or both (Kafka's
    /// `classicGroupLeave`): an instance id alone removes whichever member id it has now (an
    /// admin's `removeMembersFromConsumerGroup`), both must match (FENCED_INSTANCE_ID).
    pub fn leave(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Option<ResponseError> {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(group_id) else {
            return Some(ResponseError::UnknownMemberId);
        };
        let member_id = match instance_id {
            Some(instance) if member_id.is_empty() => match group.static_member(instance) {
                Some(id) => id,
                None => return Some(ResponseError::UnknownMemberId),
            },
            _ => member_id.to_string(),
        };
        if let Err(e) = group.validate_member(&member_id, instance_id) {
            return Some(e);
        }
        tracing::info!(group = group_id, member = %member_id, "member left");
        group.remove_member(&member_id, Instant::now());
        self.enqueue(group_id, group);
        None
    }

    /// Whether a transactional commit (TxnOffsetCommit v3+) from this member and generation may
    /// be stored: `-1` is a consumer outside any group (`assign()`), allowed while the group has
    /// no members. A consumer-protocol group checks the member epoch instead
    /// ([`ConsumerGroups::check_txn_commit`]).
    pub fn check_commit(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
    ) -> Option<ResponseError> {
        if let Some(result) = self
            .consumer()
            .check_txn_commit(group_id, member_id, generation)
        {
            return result.err();
        }
        self.check_member_commit(group_id, member_id, None, generation)
    }

    /// [`Groups::check_commit`] of a member that names its instance id (OffsetCommit v7+): a
    /// fenced static member's commit is refused (FENCED_INSTANCE_ID).
    pub fn check_member_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Option<ResponseError> {
        let mut groups = self.lock();
        let group = groups.get_mut(group_id);
        if generation < 0 {
            let busy = group.is_some_and(|g| !g.members.is_empty());
            return busy.then_some(ResponseError::UnknownMemberId);
        }
        if let Err(e) = check_member(group.as_deref(), member_id, instance_id, generation) {
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
                group_type: "classic",
            })
            .collect();
        listed.extend(
            self.consumer()
                .list()
                .into_iter()
                .map(|(group_id, state)| ListedGroup {
                    group_id,
                    state,
                    protocol_type: CONSUMER_PROTOCOL.to_string(),
                    group_type: "consumer",
                }),
        );
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
        if self.consumer().remove_if_empty(group_id)? {
            tracing::info!(group = group_id, "consumer group deleted");
            return Ok(true);
        }
        match groups.get(group_id) {
            None => Ok(false),
            Some(g) if g.state != State::Empty => Err(ResponseError::NonEmptyGroup),
            Some(_) => {
                groups.remove(group_id);
                // A queued record of the group must not outlive its tombstone.
                self.outbox().records.retain(|(_, g, _)| g != group_id);
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
        if let Some(subscribed) = self.consumer().subscribed_topics(group_id) {
            // Kafka's `ConsumerGroup.validateOffsetDelete`: allowed, except for the offsets
            // of subscribed topics.
            return OffsetDeleteCheck::Allowed {
                subscribed: Some(subscribed),
            };
        }
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
            self.enqueue(name, group);
        }
        self.consumer().tick(now);
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
            supports_skip_assignment: false,
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
            supports_skip_assignment: false,
        })
    }

    /// Reports every queued record as written, as the offsets log's writer does.
    fn store(groups: &Groups) {
        let records = groups.take_unstored();
        groups.stored(&records, None);
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
        assert_eq!(groups.leave("g", &a.member_id, None), None);
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
            None,
            1,
            vec![(a.member_id.clone(), Bytes::new())],
        );
        store(&groups);
        assert_eq!(synced.try_recv().unwrap().error, None);
        assert_eq!(groups.check_commit("g", &a.member_id, 1), None, "stable");

        // A second member joins: the group prepares a rebalance and waits for the first to
        // rejoin. The first still owns its partitions and commits what it processed.
        let b = join(&groups, "");
        assert_eq!(
            groups.heartbeat("g", &a.member_id, None, 1),
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
        let mut synced = groups.sync("g", &leader.member_id, None, 2, assignments);
        store(&groups);
        assert_eq!(synced.try_recv().unwrap().error, None);
        assert_eq!(
            groups.check_commit("g", &b2.member_id, 2),
            None,
            "stable again"
        );
    }
}
