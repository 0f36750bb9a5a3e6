//! The consumer group protocol of KIP-848 (`group.protocol=consumer`), as Kafka 4's group
//! coordinator runs it: members heartbeat (ConsumerGroupHeartbeat) with their subscription,
//! the broker computes the assignment with a server-side assignor, and each member is walked
//! towards its target assignment one heartbeat at a time.
//!
//! - The **group epoch** goes up whenever the membership or a subscription changes, or a
//!   subscribed topic gains partitions. The **target assignment** is recomputed for the group
//!   epoch ([`assign`], `uniform` or `range`), and its epoch is the **assignment epoch**.
//! - Each member has a **member epoch**: the target epoch it has reconciled to. A member
//!   reaches it through Kafka's `CurrentAssignmentBuilder` (`Member::reconcile`): partitions
//!   it keeps stay; partitions it must give up are revoked first (the member stays in its epoch
//!   with them "pending revocation", and gets the others only once a heartbeat no longer lists
//!   them); partitions another member still owns (assigned or pending revocation) are held
//!   back ("unreleased") until that member lets them go. So no partition is ever owned by two
//!   members at once, which is what keeps a rebalance from delivering records twice.
//! - A member leaves with epoch -1; a static member (`group.instance.id`) leaves with -2 and
//!   keeps its place (and partitions) until its session times out, so a restarted instance
//!   that rejoins with epoch 0 takes its old assignment back.
//! - A member silent for `group.consumer.session.timeout.ms` is removed; one that does not
//!   revoke within its rebalance timeout is removed too (fenced), as Kafka does.
//!
//! Consumer groups outlive a restart: every change is written to `__consumer_offsets` as Kafka's
//! own records ([`crate::consumer_group_records`]: the group epoch, each member's subscription,
//! target and current assignment, the target's epoch) before the heartbeat that reveals it is
//! answered, with tombstones for a member that leaves or expires and a group that is deleted.
//! [`ConsumerGroups::take_changes`] gives the records since the last call (the difference
//! between each changed group and what was last stored of it); [`ConsumerGroups::restore`]
//! rebuilds the groups from the latest records, every member's session timer starting at the
//! load, so a restarted broker answers its members at their epochs: no rebalance, and their
//! commits are accepted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::assignor::assign;
use crate::consumer_group_records::{CurrentAssignment, MemberRecord, RecordKey, RecordValue};

/// A change of one stored record: its key, the value stored before (`None`: none) and the
/// value to store (`None`: a tombstone).
pub type RecordChange = (RecordKey, Option<RecordValue>, Option<RecordValue>);

/// Kafka's `group.consumer.session.timeout.ms` default.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 45_000;
/// Kafka's `group.consumer.heartbeat.interval.ms` default.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 5_000;

/// Kafka's `LEAVE_GROUP_MEMBER_EPOCH` and `LEAVE_GROUP_STATIC_MEMBER_EPOCH`.
pub const LEAVE_EPOCH: i32 = -1;
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// The server-side assignors (Kafka's `group.consumer.assignors` default): the first is the
/// default.
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// Partitions by topic id.
pub type Partitions = BTreeMap<Uuid, BTreeSet<i32>>;

/// The broker settings of consumer groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerGroupSettings {
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout: Duration,
    /// `group.consumer.heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
}

impl Default for ConsumerGroupSettings {
    fn default() -> Self {
        ConsumerGroupSettings {
            session_timeout: Duration::from_millis(DEFAULT_SESSION_TIMEOUT_MS),
            heartbeat_interval: Duration::from_millis(DEFAULT_HEARTBEAT_INTERVAL_MS),
        }
    }
}

/// A topic as the assignor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
}

/// A ConsumerGroupHeartbeat's fields. `None` is "unchanged" (the request's null), as in Kafka.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub group: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns now (`None`: not sent).
    pub owned: Option<Partitions>,
    pub client_id: String,
    pub client_host: String,
    /// The request's version: from v1 the member id is the client's and never empty.
    pub version: i16,
}

/// A ConsumerGroupHeartbeat's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub error: Option<ResponseError>,
    pub message: Option<String>,
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's assigned partitions (without those pending revocation), when it must
    /// learn them: a full request, or a change.
    pub assignment: Option<Partitions>,
}

impl HeartbeatAnswer {
    fn error(error: ResponseError, message: impl Into<String>) -> HeartbeatAnswer {
        HeartbeatAnswer {
            error: Some(error),
            message: Some(message.into()),
            member_epoch: 0,
            ..HeartbeatAnswer::default()
        }
    }
}

/// Kafka's `MemberState` of the consumer protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemberState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

#[derive(Debug, Clone)]
struct Member {
    epoch: i32,
    previous_epoch: i32,
    state: MemberState,
    instance_id: Option<String>,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    rebalance_timeout: Duration,
    topic_names: Vec<String>,
    topic_regex: Option<String>,
    server_assignor: Option<String>,
    assigned: Partitions,
    pending_revocation: Partitions,
    last_seen: Instant,
    /// When the member must have revoked its pending partitions (UNREVOKED_PARTITIONS only).
    revocation_deadline: Option<Instant>,
}

impl Member {
    fn new(now: Instant) -> Member {
        Member {
            epoch: 0,
            previous_epoch: 0,
            state: MemberState::Stable,
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            rebalance_timeout: Duration::ZERO,
            topic_names: Vec::new(),
            topic_regex: None,
            server_assignor: None,
            assigned: Partitions::new(),
            pending_revocation: Partitions::new(),
            last_seen: now,
            revocation_deadline: None,
        }
    }

    fn set_epoch(&mut self, epoch: i32) {
        self.previous_epoch = self.epoch;
        self.epoch = epoch;
    }

    /// Whether `owned` (a heartbeat's partitions) still holds one of `revoking`; not knowing
    /// counts as holding (Kafka's `ownsRevokedPartitions`).
    fn owns_any(owned: Option<&Partitions>, revoking: &Partitions) -> bool {
        let Some(owned) = owned else { return true };
        owned.iter().any(|(topic, partitions)| {
            revoking
                .get(topic)
                .is_some_and(|r| partitions.iter().any(|p| r.contains(p)))
        })
    }

    /// Kafka's `CurrentAssignmentBuilder.build`: one step of this member towards `target` at
    /// `target_epoch`, given the partitions its heartbeat says it owns (`None`: not sent).
    /// `is_owned(t, p)`: another member has the partition, assigned or pending revocation
    /// (Kafka's `currentPartitionEpoch != -1`), so it cannot be given yet.
    fn reconcile(
        &mut self,
        target_epoch: i32,
        target: &Partitions,
        owned: Option<&Partitions>,
        is_owned: &dyn Fn(Uuid, i32) -> bool,
    ) {
        match self.state {
            MemberState::Stable if self.epoch == target_epoch => {}
            MemberState::Stable | MemberState::UnreleasedPartitions => {
                self.next_assignment(self.epoch, target_epoch, target, owned, is_owned)
            }
            MemberState::UnrevokedPartitions => {
                if Self::owns_any(owned, &self.pending_revocation) {
                    return;
                }
                // Revoked: the member moves on to the next epoch, towards the latest target.
                self.next_assignment(self.epoch + 1, target_epoch, target, owned, is_owned)
            }
        }
    }

    /// Kafka's `computeNextAssignment`.
    fn next_assignment(
        &mut self,
        member_epoch: i32,
        target_epoch: i32,
        target: &Partitions,
        owned: Option<&Partitions>,
        is_owned: &dyn Fn(Uuid, i32) -> bool,
    ) {
        let mut assigned = Partitions::new();
        let mut revoking = Partitions::new();
        let mut unreleased = false;
        let topics: BTreeSet<Uuid> = target.keys().chain(self.assigned.keys()).copied().collect();
        for topic in topics {
            let empty = BTreeSet::new();
            let wanted = target.get(&topic).unwrap_or(&empty);
            let current = self.assigned.get(&topic).unwrap_or(&empty);
            let kept: BTreeSet<i32> = current.intersection(wanted).copied().collect();
            let revoke: BTreeSet<i32> = current.difference(&kept).copied().collect();
            let mut new: BTreeSet<i32> = wanted.difference(&kept).copied().collect();
            let before = new.len();
            new.retain(|p| !is_owned(topic, *p));
            unreleased |= new.len() != before;
            let mut mine = kept;
            mine.extend(new);
            if !mine.is_empty() {
                assigned.insert(topic, mine);
            }
            if !revoke.is_empty() {
                revoking.insert(topic, revoke);
            }
        }
        if !revoking.is_empty() && Self::owns_any(owned, &revoking) {
            // Revoke first: the member keeps its epoch and gets nothing new until it has let
            // go of the partitions another member is to have.
            self.state = MemberState::UnrevokedPartitions;
            self.set_epoch(member_epoch);
            // What it keeps, without what is not released yet (added once revoked).
            for (topic, partitions) in assigned.iter_mut() {
                let current = self.assigned.get(topic).cloned().unwrap_or_default();
                partitions.retain(|p| current.contains(p));
            }
            assigned.retain(|_, p| !p.is_empty());
            self.assigned = assigned;
            self.pending_revocation = revoking;
            return;
        }
        self.state = if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
        self.set_epoch(target_epoch);
        self.assigned = assigned;
        self.pending_revocation = Partitions::new();
    }

    /// The topics this member subscribes to, among `topics`.
    fn subscribed<'a>(
        &self,
        topics: &'a [TopicInfo],
        regex: Option<&regex::Regex>,
    ) -> Vec<&'a TopicInfo> {
        topics
            .iter()
            .filter(|t| {
                self.topic_names.contains(&t.name) || regex.is_some_and(|r| r.is_match(&t.name))
            })
            .collect()
    }
}

/// Kafka's `ConsumerGroup.ConsumerGroupState` names.
fn state_name(group: &Group) -> &'static str {
    if group.members.is_empty() {
        "Empty"
    } else if group.epoch > group.assignment_epoch {
        "Assigning"
    } else if group
        .members
        .values()
        .any(|m| m.state != MemberState::Stable || m.epoch != group.assignment_epoch)
    {
        "Reconciling"
    } else {
        "Stable"
    }
}

#[derive(Debug, Default)]
struct Group {
    epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, Member>,
    target: BTreeMap<String, Partitions>,
    /// The subscribed topics as the last target assignment saw them (name → id, partitions):
    /// a topic that appears or grows bumps the group epoch.
    metadata: BTreeMap<String, (Uuid, i32)>,
    /// The assignor the last target assignment used.
    assignor: String,
    /// When the target assignment was computed (ms since the Unix epoch; 0: not known).
    assignment_timestamp_ms: i64,
}

/// Compiles a subscription regex as Kafka matches it: the whole topic name (RE2 syntax, as
/// Kafka's RE2J).
fn compile(regex: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{regex})$"))
}

impl Group {
    /// The owner test of [`Member::reconcile`]: some member has the partition assigned or
    /// pending revocation (Kafka's `currentPartitionEpoch != -1`).
    fn owned_by_anyone(&self) -> impl Fn(Uuid, i32) -> bool + '_ {
        move |topic, partition| {
            self.members.values().any(|m| {
                m.assigned
                    .get(&topic)
                    .is_some_and(|p| p.contains(&partition))
                    || m.pending_revocation
                        .get(&topic)
                        .is_some_and(|p| p.contains(&partition))
            })
        }
    }

    /// Every member's subscribed topics, resolved against `topics`.
    fn subscriptions(&self, topics: &[TopicInfo]) -> BTreeMap<String, Vec<TopicInfo>> {
        self.members
            .iter()
            .map(|(id, m)| {
                let regex = m.topic_regex.as_deref().and_then(|r| compile(r).ok());
                let subscribed = m
                    .subscribed(topics, regex.as_ref())
                    .into_iter()
                    .cloned()
                    .collect();
                (id.clone(), subscribed)
            })
            .collect()
    }

    fn subscribed_metadata(&self, topics: &[TopicInfo]) -> BTreeMap<String, (Uuid, i32)> {
        self.subscriptions(topics)
            .into_values()
            .flatten()
            .map(|t| (t.name, (t.id, t.partitions)))
            .collect()
    }

    /// The assignor the members prefer: the most named, else the default (Kafka's
    /// `ConsumerGroup.preferredServerAssignor`).
    fn preferred_assignor(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = &m.server_assignor {
                *counts.entry(a.as_str()).or_default() += 1;
            }
        }
        counts
            .into_iter()
            .max_by_key(|(name, n)| (*n, std::cmp::Reverse(*name)))
            .map_or(ASSIGNORS[0], |(name, _)| name)
            .to_string()
    }

    /// Recomputes the target assignment for the group epoch.
    fn update_target(&mut self, topics: &[TopicInfo]) {
        let subscriptions = self.subscriptions(topics);
        self.assignor = self.preferred_assignor();
        self.target = assign(&self.assignor, &subscriptions, &self.target);
        self.assignment_epoch = self.epoch;
        self.assignment_timestamp_ms = crate::clock::now_ms();
    }

    /// The records that store this group as it is now (Kafka's, one per key).
    fn records(&self, name: &str) -> BTreeMap<RecordKey, RecordValue> {
        let mut out = BTreeMap::new();
        out.insert(
            RecordKey::Group(name.to_string()),
            RecordValue::GroupEpoch(self.epoch),
        );
        out.insert(
            RecordKey::TargetAssignment(name.to_string()),
            RecordValue::TargetAssignment {
                epoch: self.assignment_epoch,
                timestamp_ms: self.assignment_timestamp_ms,
            },
        );
        for (id, target) in &self.target {
            out.insert(
                RecordKey::TargetMember(name.to_string(), id.clone()),
                RecordValue::TargetMember(target.clone()),
            );
        }
        for (id, m) in &self.members {
            out.insert(
                RecordKey::Member(name.to_string(), id.clone()),
                RecordValue::Member(MemberRecord {
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topic_names: m.topic_names.clone(),
                    subscribed_topic_regex: m.topic_regex.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
                    server_assignor: m.server_assignor.clone(),
                }),
            );
            out.insert(
                RecordKey::CurrentAssignment(name.to_string(), id.clone()),
                RecordValue::CurrentAssignment(CurrentAssignment {
                    member_epoch: m.epoch,
                    previous_member_epoch: m.previous_epoch,
                    state: match m.state {
                        MemberState::Stable => 0,
                        MemberState::UnrevokedPartitions => 1,
                        MemberState::UnreleasedPartitions => 2,
                    },
                    assigned: m.assigned.clone(),
                    pending_revocation: m.pending_revocation.clone(),
                }),
            );
        }
        out
    }

    /// A group as its latest records left it (Kafka's `replay` of each, then `onLoaded`):
    /// every member's session timer starts `now`; one revoking partitions has its rebalance
    /// timeout from `now`. The subscribed topics' metadata is taken from `topics` (the
    /// broker's at the load), so a restart alone bumps no epoch.
    fn restore(
        records: &BTreeMap<RecordKey, RecordValue>,
        topics: &[TopicInfo],
        now: Instant,
    ) -> Group {
        let mut group = Group::default();
        for (key, value) in records {
            match (key, value) {
                (RecordKey::Group(_), RecordValue::GroupEpoch(e)) => group.epoch = *e,
                (
                    RecordKey::TargetAssignment(_),
                    RecordValue::TargetAssignment {
                        epoch,
                        timestamp_ms,
                    },
                ) => {
                    group.assignment_epoch = *epoch;
                    group.assignment_timestamp_ms = *timestamp_ms;
                }
                (RecordKey::TargetMember(_, id), RecordValue::TargetMember(p)) => {
                    group.target.insert(id.clone(), p.clone());
                }
                (RecordKey::Member(_, id), RecordValue::Member(r)) => {
                    let m = group
                        .members
                        .entry(id.clone())
                        .or_insert_with(|| Member::new(now));
                    m.instance_id = r.instance_id.clone();
                    m.rack_id = r.rack_id.clone();
                    m.client_id = r.client_id.clone();
                    m.client_host = r.client_host.clone();
                    m.topic_names = r.subscribed_topic_names.clone();
                    m.topic_regex = r.subscribed_topic_regex.clone();
                    m.rebalance_timeout =
                        Duration::from_millis(r.rebalance_timeout_ms.max(0) as u64);
                    m.server_assignor = r.server_assignor.clone();
                }
                (RecordKey::CurrentAssignment(_, id), RecordValue::CurrentAssignment(c)) => {
                    let m = group
                        .members
                        .entry(id.clone())
                        .or_insert_with(|| Member::new(now));
                    m.epoch = c.member_epoch;
                    m.previous_epoch = c.previous_member_epoch;
                    m.state = match c.state {
                        1 => MemberState::UnrevokedPartitions,
                        2 => MemberState::UnreleasedPartitions,
                        _ => MemberState::Stable,
                    };
                    m.assigned = c.assigned.clone();
                    m.pending_revocation = c.pending_revocation.clone();
                }
                _ => {}
            }
        }
        for m in group.members.values_mut() {
            if m.state == MemberState::UnrevokedPartitions {
                m.revocation_deadline = Some(now + m.rebalance_timeout);
            }
        }
        group.metadata = group.subscribed_metadata(topics);
        group.assignor = group.preferred_assignor();
        group
    }

    /// Removes a member; the group epoch goes up so the others share its partitions (the
    /// next heartbeat computes the new target assignment).
    fn remove(&mut self, member_id: &str) {
        if self.members.remove(member_id).is_some() {
            self.target.remove(member_id);
            self.epoch += 1;
        }
    }

    /// Kafka's `throwIfMemberEpochIsInvalid`: a greater epoch than the coordinator's is
    /// fenced; a smaller one only if it is the previous epoch with partitions the member still
    /// has (the answer with the new epoch may have been lost).
    fn check_epoch(
        member: &Member,
        received: i32,
        owned: Option<&Partitions>,
    ) -> Result<(), HeartbeatAnswer> {
        let fenced =
            || {
                Err(HeartbeatAnswer::error(
                    ResponseError::FencedMemberEpoch,
                    format!(
                    "The consumer group member has a {} member epoch ({received}) than the one \
                     known by the group coordinator ({}). The member must abandon all its \
                     partitions and rejoin.",
                    if received > member.epoch { "greater" } else { "smaller" },
                    member.epoch
                ),
                ))
            };
        if received > member.epoch {
            return fenced();
        }
        if received < member.epoch {
            let subset = owned.is_some_and(|owned| {
                owned.iter().all(|(t, ps)| {
                    member
                        .assigned
                        .get(t)
                        .is_some_and(|a| ps.iter().all(|p| a.contains(p)))
                })
            });
            if received != member.previous_epoch || !subset {
                return fenced();
            }
        }
        Ok(())
    }
}

/// The request checks of Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`.
fn validate(req: &Heartbeat) -> Result<(), HeartbeatAnswer> {
    let invalid = |m: &str| Err(HeartbeatAnswer::error(ResponseError::InvalidRequest, m));
    if req.group.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if req.instance_id.as_deref() == Some("") {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack_id.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    if req.version >= 1 && req.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    match req.member_epoch {
        e if e > 0 || e == LEAVE_EPOCH => {
            if req.member_id.is_empty() {
                return invalid("MemberId can't be empty.");
            }
        }
        0 => {
            if req.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if !req.owned.as_ref().is_some_and(|o| o.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            let names = req
                .subscribed_topic_names
                .as_ref()
                .is_some_and(|n| !n.is_empty());
            if !names && req.subscribed_topic_regex.is_none() {
                return invalid(if req.version >= 1 {
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                } else {
                    "SubscribedTopicNames must be set in first request."
                });
            }
        }
        STATIC_LEAVE_EPOCH => {
            if req.member_id.is_empty() {
                return invalid("MemberId can't be empty.");
            }
            if req.instance_id.is_none() {
                return invalid("InstanceId can't be null.");
            }
        }
        _ => return invalid("MemberEpoch is invalid."),
    }
    if let Some(assignor) = &req.server_assignor {
        if !ASSIGNORS.contains(&assignor.as_str()) {
            return Err(HeartbeatAnswer::error(
                ResponseError::UnsupportedAssignor,
                format!(
                    "ServerAssignor {assignor} is not supported. Supported assignors: {}.",
                    ASSIGNORS.join(", ")
                ),
            ));
        }
    }
    if let Some(regex) = &req.subscribed_topic_regex {
        if let Err(e) = compile(regex) {
            return Err(HeartbeatAnswer::error(
                ResponseError::InvalidRegularExpression,
                format!("SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}."),
            ));
        }
    }
    Ok(())
}

/// A member as ConsumerGroupDescribe answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub assignment: Partitions,
    pub target_assignment: Partitions,
}

/// A group as ConsumerGroupDescribe answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedGroup {
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<DescribedMember>,
}

/// Every consumer-protocol group of this broker. Held under the classic coordinator's lock
/// ([`crate::coordinator::Groups`]), so a group id is one protocol's or the other's.
#[derive(Debug, Default)]
pub struct ConsumerGroups {
    groups: HashMap<String, Group>,
    pub settings: ConsumerGroupSettings,
    /// The records last handed out for writing, by group: what the log holds (or will hold
    /// once the write in progress is durable).
    stored: HashMap<String, BTreeMap<RecordKey, RecordValue>>,
    /// The groups changed since their records were last taken.
    dirty: BTreeSet<String>,
}

impl ConsumerGroups {
    /// The groups of the latest consumer-group records of the offsets log (tombstones
    /// applied), as a restarted coordinator finds them (`Group::restore`).
    pub fn restore(
        records: BTreeMap<RecordKey, RecordValue>,
        topics: &[TopicInfo],
        now: Instant,
    ) -> ConsumerGroups {
        let mut stored: HashMap<String, BTreeMap<RecordKey, RecordValue>> = HashMap::new();
        for (key, value) in records {
            // Kafka's pre-4.1 subscription metadata is not kept: its first change after the
            // load leaves it in the log, where compaction keeps it harmlessly.
            if !matches!(key, RecordKey::PartitionMetadata(_)) {
                stored
                    .entry(key.group().to_string())
                    .or_default()
                    .insert(key, value);
            }
        }
        let groups = stored
            .iter()
            .map(|(name, records)| {
                let g = Group::restore(records, topics, now);
                tracing::info!(
                    group = %name,
                    epoch = g.epoch,
                    members = g.members.len(),
                    "consumer group loaded"
                );
                (name.clone(), g)
            })
            .collect();
        ConsumerGroups {
            groups,
            settings: ConsumerGroupSettings::default(),
            stored,
            dirty: BTreeSet::new(),
        }
    }

    /// The records to write for what changed since the last call, in Kafka's order (a
    /// member's tombstones before its group's, new values after), and takes them as stored.
    /// If their write fails, [`ConsumerGroups::unstore`] puts them back.
    pub fn take_changes(&mut self) -> Vec<RecordChange> {
        let mut changes: Vec<RecordChange> = Vec::new();
        for name in std::mem::take(&mut self.dirty) {
            let now = self
                .groups
                .get(&name)
                .map(|g| g.records(&name))
                .unwrap_or_default();
            let before = self.stored.remove(&name).unwrap_or_default();
            for (key, old) in &before {
                if !now.contains_key(key) {
                    changes.push((key.clone(), Some(old.clone()), None));
                }
            }
            for (key, new) in &now {
                let old = before.get(key);
                if old != Some(new) {
                    changes.push((key.clone(), old.cloned(), Some(new.clone())));
                }
            }
            if !now.is_empty() {
                self.stored.insert(name, now);
            }
        }
        changes.sort_by_key(|(key, _, new)| key.write_rank(new.is_none()));
        changes
    }

    /// The records of [`ConsumerGroups::take_changes`] could not be written: they count as
    /// not stored again, so the next call hands them out again.
    pub fn unstore(&mut self, changes: &[RecordChange]) {
        for (key, old, _) in changes {
            let group = key.group().to_string();
            let records = self.stored.entry(group.clone()).or_default();
            match old {
                Some(old) => records.insert(key.clone(), old.clone()),
                None => records.remove(key),
            };
            self.dirty.insert(group);
        }
    }

    pub fn contains(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// Whether the group has members (a group of this protocol that the other may not take).
    pub fn has_members(&self, group: &str) -> bool {
        self.groups
            .get(group)
            .is_some_and(|g| !g.members.is_empty())
    }

    /// Removes an empty group: a classic group takes its id, or DeleteGroups. Answers
    /// NON_EMPTY_GROUP for a group with members; `Ok(false)` if unknown.
    pub fn remove_if_empty(&mut self, group: &str) -> Result<bool, ResponseError> {
        match self.groups.get(group) {
            None => Ok(false),
            Some(g) if !g.members.is_empty() => Err(ResponseError::NonEmptyGroup),
            Some(_) => {
                self.groups.remove(group);
                self.dirty.insert(group.to_string());
                Ok(true)
            }
        }
    }

    /// The ids and state names of every group.
    pub fn list(&self) -> Vec<(String, &'static str)> {
        self.groups
            .iter()
            .map(|(id, g)| (id.clone(), state_name(g)))
            .collect()
    }

    /// The topics the group's members subscribe to (OffsetDelete keeps their offsets).
    pub fn subscribed_topics(&self, group: &str) -> Option<BTreeSet<String>> {
        let g = self.groups.get(group)?;
        Some(g.metadata.keys().cloned().collect())
    }

    pub fn describe(&self, group: &str) -> Option<DescribedGroup> {
        let g = self.groups.get(group)?;
        let members = g
            .members
            .iter()
            .map(|(id, m)| DescribedMember {
                member_id: id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                member_epoch: m.epoch,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_topic_names: m.topic_names.clone(),
                subscribed_topic_regex: m.topic_regex.clone(),
                assignment: m.assigned.clone(),
                target_assignment: g.target.get(id).cloned().unwrap_or_default(),
            })
            .collect();
        Some(DescribedGroup {
            state: state_name(g),
            group_epoch: g.epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: if g.assignor.is_empty() {
                ASSIGNORS[0].to_string()
            } else {
                g.assignor.clone()
            },
            members,
        })
    }

    /// Kafka's `ConsumerGroup.validateOffsetCommit`: a member commits in its current epoch
    /// (STALE_MEMBER_EPOCH for any other), with
    /// OffsetCommit v9+ unless the commit is transactional; a commit outside the group (epoch
    /// -1) only while it has no members. `None`: the group is not a consumer group.
    pub fn check_commit(
        &mut self,
        group: &str,
        member_id: &str,
        member_epoch: i32,
        version_ok: bool,
    ) -> Option<Result<(), ResponseError>> {
        let g = self.groups.get_mut(group)?;
        if member_epoch < 0 && g.members.is_empty() {
            return Some(Ok(()));
        }
        let Some(member) = g.members.get_mut(member_id) else {
            return Some(Err(ResponseError::UnknownMemberId));
        };
        if !version_ok {
            return Some(Err(ResponseError::UnsupportedVersion));
        }
        Some(epoch_check(member_epoch, member.epoch))
    }

    /// Kafka's `ConsumerGroup.validateTransactionalOffsetCommit` (TxnOffsetCommit v3+,
    /// KIP-447): a producer that sends no group metadata (epoch -1, no member id) may commit;
    /// otherwise the member and its epoch must be current. `None`: not a consumer group.
    pub fn check_txn_commit(
        &self,
        group: &str,
        member_id: &str,
        member_epoch: i32,
    ) -> Option<Result<(), ResponseError>> {
        let g = self.groups.get(group)?;
        if member_epoch < 0 && member_id.is_empty() {
            return Some(Ok(()));
        }
        let Some(member) = g.members.get(member_id) else {
            return Some(Err(ResponseError::UnknownMemberId));
        };
        Some(epoch_check(member_epoch, member.epoch))
    }

    /// Kafka's `ConsumerGroup.validateOffsetFetch`: a fetch naming no member is an admin's;
    /// otherwise the member's epoch must be current. `None`: not a consumer group.
    pub fn check_fetch(
        &self,
        group: &str,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Option<Result<(), ResponseError>> {
        let g = self.groups.get(group)?;
        if member_id.is_none() && member_epoch < 0 {
            return Some(Ok(()));
        }
        let Some(member) = g.members.get(member_id.unwrap_or_default()) else {
            return Some(Err(ResponseError::UnknownMemberId));
        };
        Some(epoch_check(member_epoch, member.epoch))
    }

    /// Expires silent members and members that did not revoke in time.
    pub fn tick(&mut self, now: Instant) {
        let session = self.settings.session_timeout;
        for (name, g) in self.groups.iter_mut() {
            let gone: Vec<(String, &'static str)> = g
                .members
                .iter()
                .filter_map(|(id, m)| {
                    if now.saturating_duration_since(m.last_seen) > session {
                        Some((id.clone(), "session expired"))
                    } else if m.revocation_deadline.is_some_and(|d| now > d) {
                        Some((id.clone(), "did not revoke within its rebalance timeout"))
                    } else {
                        None
                    }
                })
                .collect();
            for (id, why) in gone {
                tracing::info!(group = %name, member = %id, why, "consumer group member removed");
                g.remove(&id);
                self.dirty.insert(name.clone());
            }
        }
    }

    /// One ConsumerGroupHeartbeat. `topics` is every topic of the broker now.
    pub fn heartbeat(
        &mut self,
        req: Heartbeat,
        topics: &[TopicInfo],
        now: Instant,
    ) -> HeartbeatAnswer {
        if let Err(answer) = validate(&req) {
            return answer;
        }
        // Whatever the heartbeat changes is written before it is answered.
        self.dirty.insert(req.group.clone());
        let interval = self.settings.heartbeat_interval.as_millis() as i32;
        if req.member_epoch == LEAVE_EPOCH || req.member_epoch == STATIC_LEAVE_EPOCH {
            return self.leave(&req, interval);
        }
        let member_id = if req.member_id.is_empty() {
            Uuid::new_v4().to_string()
        } else {
            req.member_id.clone()
        };
        if req.member_epoch != 0 && !self.groups.contains_key(&req.group) {
            // A deleted group: UNKNOWN_MEMBER_ID makes the client rejoin (Kafka's
            // GROUP_ID_NOT_FOUND would be fatal to it).
            return HeartbeatAnswer::error(
                ResponseError::UnknownMemberId,
                format!("Member {member_id} is not a member of group {}.", req.group),
            );
        }
        let group = self.groups.entry(req.group.clone()).or_default();
        let (mut member, new) = match member_for(group, &req, &member_id, now) {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        let before = member.clone();
        if let Some(i) = &req.instance_id {
            member.instance_id = Some(i.clone());
        }
        if let Some(r) = &req.rack_id {
            member.rack_id = Some(r.clone());
        }
        if req.rebalance_timeout_ms >= 0 {
            member.rebalance_timeout = Duration::from_millis(req.rebalance_timeout_ms as u64);
        }
        if let Some(a) = &req.server_assignor {
            member.server_assignor = Some(a.clone());
        }
        if let Some(names) = &req.subscribed_topic_names {
            member.topic_names = names.clone();
        }
        if let Some(regex) = &req.subscribed_topic_regex {
            // An empty regex clears it (Kafka's `maybeUpdateSubscribedTopicRegex`).
            member.topic_regex = Some(regex.clone()).filter(|r| !r.is_empty());
        }
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        member.last_seen = now;
        let resubscribed = new
            || member.topic_names != before.topic_names
            || member.topic_regex != before.topic_regex
            || member.server_assignor != before.server_assignor;
        group.members.insert(member_id.clone(), member);
        let metadata = group.subscribed_metadata(topics);
        if resubscribed || metadata != group.metadata {
            group.epoch += 1;
            group.metadata = metadata;
            tracing::info!(group = %req.group, epoch = group.epoch, "consumer group epoch bumped");
        }
        if group.epoch > group.assignment_epoch {
            group.update_target(topics);
        }
        // Reconcile the member towards its target.
        let target = group.target.get(&member_id).cloned().unwrap_or_default();
        let target_epoch = group.assignment_epoch;
        let mut member = group.members.remove(&member_id).expect("inserted");
        if !(member.state == MemberState::Stable && member.epoch == target_epoch) {
            let is_owned = group.owned_by_anyone();
            member.reconcile(target_epoch, &target, req.owned.as_ref(), &is_owned);
        }
        member.revocation_deadline = match member.state {
            MemberState::UnrevokedPartitions => Some(
                member
                    .revocation_deadline
                    .filter(|_| before.state == MemberState::UnrevokedPartitions)
                    .unwrap_or(now + member.rebalance_timeout),
            ),
            _ => None,
        };
        let full = req.member_epoch == 0
            || (req.rebalance_timeout_ms != -1
                && req.subscribed_topic_names.is_some()
                && req.owned.is_some());
        let assignment =
            (full || member.assigned != before.assigned).then(|| member.assigned.clone());
        let answer = HeartbeatAnswer {
            error: None,
            message: None,
            member_id: Some(member_id.clone()),
            member_epoch: member.epoch,
            heartbeat_interval_ms: interval,
            assignment,
        };
        group.members.insert(member_id, member);
        answer
    }

    /// A leave: epoch -1 removes the member; -2 keeps a static member's place until its
    /// session expires (Kafka's `consumerGroupLeave` and `consumerGroupStaticMemberGroupLeave`).
    fn leave(&mut self, req: &Heartbeat, interval: i32) -> HeartbeatAnswer {
        let Some(group) = self.groups.get_mut(&req.group) else {
            return HeartbeatAnswer::error(
                ResponseError::GroupIdNotFound,
                format!("Group {} not found.", req.group),
            );
        };
        let member_id = match &req.instance_id {
            None => {
                if !group.members.contains_key(&req.member_id) {
                    return HeartbeatAnswer::error(
                        ResponseError::UnknownMemberId,
                        format!(
                            "Member {} is not a member of group {}.",
                            req.member_id, req.group
                        ),
                    );
                }
                req.member_id.clone()
            }
            Some(instance) => match static_member(group, instance) {
                None => {
                    return HeartbeatAnswer::error(
                        ResponseError::UnknownMemberId,
                        format!("Instance id {instance} is unknown."),
                    )
                }
                Some(id) if id != req.member_id => {
                    return HeartbeatAnswer::error(
                        ResponseError::FencedInstanceId,
                        format!(
                        "Static member {} with instance id {instance} was fenced by member {id}.",
                        req.member_id
                    ),
                    )
                }
                Some(id) => id,
            },
        };
        if req.member_epoch == STATIC_LEAVE_EPOCH {
            let m = group.members.get_mut(&member_id).expect("found");
            m.epoch = STATIC_LEAVE_EPOCH;
            tracing::info!(group = %req.group, member = %member_id, "static member left temporarily");
        } else {
            tracing::info!(group = %req.group, member = %member_id, "consumer group member left");
            group.remove(&member_id);
        }
        HeartbeatAnswer {
            member_id: Some(member_id),
            member_epoch: req.member_epoch,
            heartbeat_interval_ms: interval,
            ..HeartbeatAnswer::default()
        }
    }
}

/// A commit's or fetch's member epoch must be the member's: Kafka 4.4 answers any other, older
/// or newer, with STALE_MEMBER_EPOCH (observed against it: a newer one is not "fenced" here,
/// unlike in a heartbeat).
fn epoch_check(received: i32, expected: i32) -> Result<(), ResponseError> {
    if received == expected {
        Ok(())
    } else {
        Err(ResponseError::StaleMemberEpoch)
    }
}

fn static_member(group: &Group, instance: &str) -> Option<String> {
    group
        .members
        .iter()
        .find(|(_, m)| m.instance_id.as_deref() == Some(instance))
        .map(|(id, _)| id.clone())
}

/// The member a heartbeat speaks for (Kafka's `getOrMaybeSubscribe{Dynamic,Static}Member`),
/// checked: a new one (epoch 0), a static member's replacement, or an existing one with a
/// valid epoch; and whether it is new to the group.
fn member_for(
    group: &mut Group,
    req: &Heartbeat,
    member_id: &str,
    now: Instant,
) -> Result<(Member, bool), HeartbeatAnswer> {
    let unknown = || {
        HeartbeatAnswer::error(
            ResponseError::UnknownMemberId,
            format!("Member {member_id} is not a member of group {}.", req.group),
        )
    };
    match (&req.instance_id, req.member_epoch) {
        (Some(instance), 0) => match static_member(group, instance) {
            None => Ok((Member::new(now), true)),
            Some(old) if old == member_id => Ok((rejoined(group, member_id, now), false)),
            Some(old) => {
                let previous = &group.members[&old];
                if previous.epoch != STATIC_LEAVE_EPOCH {
                    return Err(HeartbeatAnswer::error(
                        ResponseError::UnreleasedInstanceId,
                        format!(
                            "Static member {old} with instance id {instance} is not released yet \
                             (it did not leave with epoch -2)."
                        ),
                    ));
                }
                // The new member id takes the old one's place and partitions, from epoch 0.
                let mut member = group.members.remove(&old).expect("found");
                member.epoch = 0;
                member.previous_epoch = 0;
                if let Some(target) = group.target.remove(&old) {
                    group.target.insert(member_id.to_string(), target);
                }
                tracing::info!(group = %req.group, old = %old, new = member_id, instance, "static member replaced");
                Ok((member, false))
            }
        },
        (None, 0) => Ok(match group.members.contains_key(member_id) {
            true => (rejoined(group, member_id, now), false),
            false => (Member::new(now), true),
        }),
        (Some(instance), epoch) => match static_member(group, instance) {
            None => Err(unknown()),
            Some(id) if id != member_id => Err(HeartbeatAnswer::error(
                ResponseError::FencedInstanceId,
                format!("Static member {member_id} with instance id {instance} was fenced by member {id}."),
            )),
            Some(_) => {
                let m = &group.members[member_id];
                Group::check_epoch(m, epoch, req.owned.as_ref())?;
                Ok((m.clone(), false))
            }
        },
        (None, epoch) => {
            let m = group.members.get(member_id).ok_or_else(unknown)?;
            Group::check_epoch(m, epoch, req.owned.as_ref())?;
            Ok((m.clone(), false))
        }
    }
}

/// A known member that joins again with epoch 0 (it was fenced, or restarted keeping its id):
/// it has given up every partition (a join lists none), so it starts over from epoch 0 and is
/// reconciled to its target as a new member would be.
fn rejoined(group: &mut Group, member_id: &str, now: Instant) -> Member {
    let mut member = group.members.remove(member_id).expect("known");
    member.epoch = 0;
    member.previous_epoch = 0;
    member.state = MemberState::Stable;
    member.assigned = Partitions::new();
    member.pending_revocation = Partitions::new();
    member.revocation_deadline = None;
    member.last_seen = now;
    member
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_are_checked_against_the_member_epoch() {
        let mut groups = ConsumerGroups::default();
        let topics = [TopicInfo {
            name: "t".into(),
            id: Uuid::from_u128(1),
            partitions: 1,
        }];
        let joined = groups.heartbeat(
            Heartbeat {
                group: "g".into(),
                member_id: "m".into(),
                rebalance_timeout_ms: 1_000,
                subscribed_topic_names: Some(vec!["t".into()]),
                owned: Some(Partitions::new()),
                version: 1,
                ..Heartbeat::default()
            },
            &topics,
            Instant::now(),
        );
        assert_eq!((joined.error, joined.member_epoch), (None, 1));
        assert_eq!(groups.check_commit("other", "m", 1, true), None);
        assert_eq!(groups.check_commit("g", "m", 1, true), Some(Ok(())));
        assert_eq!(
            groups.check_commit("g", "m", 1, false),
            Some(Err(ResponseError::UnsupportedVersion))
        );
        assert_eq!(
            groups.check_commit("g", "m", 2, true),
            Some(Err(ResponseError::StaleMemberEpoch))
        );
        // A transactional producer without group metadata may commit; with it, it is checked.
        assert_eq!(groups.check_txn_commit("g", "", -1), Some(Ok(())));
        assert_eq!(groups.check_txn_commit("g", "m", 1), Some(Ok(())));
        assert_eq!(
            groups.check_txn_commit("g", "m", 0),
            Some(Err(ResponseError::StaleMemberEpoch))
        );
        assert_eq!(
            groups.check_txn_commit("g", "x", 1),
            Some(Err(ResponseError::UnknownMemberId))
        );
    }

    #[test]
    fn a_member_does_not_get_a_partition_its_owner_has_not_revoked() {
        let t = Uuid::from_u128(1);
        let mut m = Member::new(Instant::now());
        let target: Partitions = [(t, BTreeSet::from([0, 1]))].into();
        m.reconcile(1, &target, Some(&Partitions::new()), &|_, p| p == 1);
        assert_eq!(m.state, MemberState::UnreleasedPartitions);
        assert_eq!((m.epoch, m.assigned[&t].len()), (1, 1));
        m.reconcile(1, &target, None, &|_, _| false);
        assert_eq!((m.state, m.assigned[&t].len()), (MemberState::Stable, 2));
        // A new target without partition 0: revoke first, keep the epoch.
        let smaller: Partitions = [(t, BTreeSet::from([1, 2]))].into();
        m.reconcile(2, &smaller, Some(&m.assigned.clone()), &|_, _| false);
        assert_eq!(m.state, MemberState::UnrevokedPartitions);
        assert_eq!((m.epoch, m.assigned[&t].clone()), (1, BTreeSet::from([1])));
        assert_eq!(m.pending_revocation[&t], BTreeSet::from([0]));
        // Once its heartbeat no longer lists 0, it moves to epoch 2 and gets 2.
        let owned: Partitions = [(t, BTreeSet::from([1]))].into();
        m.reconcile(2, &smaller, Some(&owned), &|_, _| false);
        assert_eq!((m.state, m.epoch), (MemberState::Stable, 2));
        assert_eq!(m.assigned[&t], BTreeSet::from([1, 2]));
    }
}
