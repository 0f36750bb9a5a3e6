//! A share group's membership (KIP-932's ShareGroupHeartbeat), as Kafka's group coordinator
//! runs it: members join with epoch 0 and their subscribed topic names (a regex subscription is
//! resolved by the client, which sends the names it matched), heartbeat with their current
//! epoch, and leave with -1. The **group epoch** goes up whenever the membership or a
//! subscription changes or a subscribed topic gains partitions; the target assignment is then
//! recomputed with Kafka's simple share assignor (here: every member gets every partition of
//! the topics it subscribes to, which a share group allows, records being handed out one by
//! one), and a member is at the group epoch as soon as it heartbeats: share groups have no
//! revocation to wait for.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::consumer_group::{Partitions, TopicInfo};

/// Kafka's `LEAVE_GROUP_MEMBER_EPOCH` of ShareGroupHeartbeat.
pub const LEAVE_EPOCH: i32 = -1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMember {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: BTreeSet<String>,
    pub assignment: Partitions,
    pub last_seen: Instant,
}

/// A share group: its epochs and members.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareGroup {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
    /// The partition counts the last assignment saw, by topic name.
    pub subscribed_partitions: BTreeMap<String, (Uuid, i32)>,
}

/// One ShareGroupHeartbeat's fields (`None`: unchanged).
#[derive(Debug, Clone, Default)]
pub struct ShareHeartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

/// Why a heartbeat is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// UNKNOWN_MEMBER_ID.
    UnknownMember,
    /// FENCED_MEMBER_EPOCH: the member sent `received`, the group knows it at `current`.
    Fenced { received: i32, current: i32 },
}

impl Refusal {
    pub fn error(self) -> ResponseError {
        match self {
            Refusal::UnknownMember => ResponseError::UnknownMemberId,
            Refusal::Fenced { .. } => ResponseError::FencedMemberEpoch,
        }
    }

    /// Kafka's message for it (`GroupMetadataManager`'s).
    pub fn message(self, group: &str, member: &str) -> String {
        match self {
            Refusal::UnknownMember => format!("Member {member} is not a member of group {group}."),
            Refusal::Fenced { received, current } => {
                format!(
                "The share group member has a {} member epoch ({received}) than the one known by \
                 the group coordinator ({current}). The member must abandon all its partitions \
                 and rejoin.",
                if received > current { "greater" } else { "smaller" }
            )
            }
        }
    }
}

/// What a heartbeat changed and answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareHeartbeatAnswer {
    pub member_epoch: i32,
    /// The member's assignment, when it must learn it (a join, or a change).
    pub assignment: Option<Partitions>,
    /// The partitions of the whole group's target assignment (for the share-partitions to
    /// initialize).
    pub assigned: BTreeSet<(Uuid, i32)>,
}

impl ShareGroup {
    /// Kafka's state name (`ShareGroup.ShareGroupState`): Empty or Stable.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    /// Handles one heartbeat (already validated as Kafka's
    /// `throwIfShareGroupHeartbeatRequestIsInvalid`), against the broker's `topics`.
    pub fn heartbeat(
        &mut self,
        hb: ShareHeartbeat,
        topics: &[TopicInfo],
        now: Instant,
    ) -> Result<ShareHeartbeatAnswer, Refusal> {
        if hb.member_epoch == LEAVE_EPOCH {
            if self.members.remove(&hb.member_id).is_none() {
                return Err(Refusal::UnknownMember);
            }
            self.group_epoch += 1;
            self.reassign(topics);
            return Ok(ShareHeartbeatAnswer {
                member_epoch: LEAVE_EPOCH,
                ..ShareHeartbeatAnswer::default()
            });
        }
        let mut changed = false;
        let joining = hb.member_epoch == 0;
        let member = match self.members.get_mut(&hb.member_id) {
            Some(m) => {
                // A rejoin (epoch 0) of a known member is accepted, as Kafka's
                // `getOrMaybeSubscribeShareGroupMember`.
                if !joining && hb.member_epoch != m.member_epoch {
                    return Err(Refusal::Fenced {
                        received: hb.member_epoch,
                        current: m.member_epoch,
                    });
                }
                m
            }
            None if joining => {
                changed = true;
                self.members
                    .entry(hb.member_id.clone())
                    .or_insert(ShareMember {
                        member_id: hb.member_id.clone(),
                        member_epoch: 0,
                        rack_id: None,
                        client_id: hb.client_id.clone(),
                        client_host: hb.client_host.clone(),
                        subscribed: BTreeSet::new(),
                        assignment: Partitions::new(),
                        last_seen: now,
                    })
            }
            None => return Err(Refusal::UnknownMember),
        };
        member.last_seen = now;
        if let Some(rack) = hb.rack_id {
            member.rack_id = Some(rack);
        }
        if let Some(names) = hb.subscribed_topic_names {
            let names: BTreeSet<String> = names.into_iter().collect();
            if names != member.subscribed {
                member.subscribed = names;
                changed = true;
            }
        }
        // A subscribed topic created, deleted or grown changes the group epoch too.
        if self.topics_changed(topics) {
            changed = true;
        }
        if changed {
            self.group_epoch += 1;
            self.reassign(topics);
        }
        let group_epoch = self.group_epoch;
        let member = self
            .members
            .get_mut(&hb.member_id)
            .expect("the member was found or added above");
        let learns = joining || member.member_epoch != group_epoch;
        member.member_epoch = group_epoch;
        let assigned = self
            .members
            .values()
            .flat_map(|m| {
                m.assignment
                    .iter()
                    .flat_map(|(id, ps)| ps.iter().map(move |p| (*id, *p)))
            })
            .collect();
        let member = &self.members[&hb.member_id];
        Ok(ShareHeartbeatAnswer {
            member_epoch: group_epoch,
            assignment: learns.then(|| member.assignment.clone()),
            assigned,
        })
    }

    /// Removes the members silent for longer than `session_timeout`; answers their ids.
    pub fn expire(
        &mut self,
        now: Instant,
        session_timeout: std::time::Duration,
        topics: &[TopicInfo],
    ) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| now.duration_since(m.last_seen) > session_timeout)
            .map(|m| m.member_id.clone())
            .collect();
        if !gone.is_empty() {
            for id in &gone {
                self.members.remove(id);
            }
            self.group_epoch += 1;
            self.reassign(topics);
        }
        gone
    }

    fn subscribed_topics(&self) -> BTreeSet<String> {
        self.members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect()
    }

    fn topics_changed(&self, topics: &[TopicInfo]) -> bool {
        let now: BTreeMap<String, (Uuid, i32)> = current(&self.subscribed_topics(), topics);
        now != self.subscribed_partitions
    }

    /// The simple assignor, as this broker runs it: each member gets every partition of every
    /// topic it subscribes to that exists.
    fn reassign(&mut self, topics: &[TopicInfo]) {
        self.subscribed_partitions = current(&self.subscribed_topics(), topics);
        self.assign_members();
        self.assignment_epoch = self.group_epoch;
    }

    /// Every member's assignment from its subscription and the partition counts the group
    /// last saw (`subscribed_partitions`): what a restored group's members hold at their
    /// epochs.
    pub fn assign_members(&mut self) {
        for m in self.members.values_mut() {
            m.assignment = m
                .subscribed
                .iter()
                .filter_map(|name| self.subscribed_partitions.get(name))
                .filter(|(_, n)| *n > 0)
                .map(|&(id, n)| (id, (0..n).collect()))
                .collect();
        }
    }
}

fn current(names: &BTreeSet<String>, topics: &[TopicInfo]) -> BTreeMap<String, (Uuid, i32)> {
    topics
        .iter()
        .filter(|t| names.contains(&t.name))
        .map(|t| (t.name.clone(), (t.id, t.partitions)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, partitions: i32) -> TopicInfo {
        TopicInfo {
            name: name.into(),
            id: Uuid::from_u128(name.len() as u128),
            partitions,
        }
    }

    fn join(id: &str, names: &[&str]) -> ShareHeartbeat {
        ShareHeartbeat {
            member_id: id.into(),
            member_epoch: 0,
            subscribed_topic_names: Some(names.iter().map(|s| s.to_string()).collect()),
            ..ShareHeartbeat::default()
        }
    }

    #[test]
    fn every_member_gets_every_partition_of_its_topics() {
        let topics = [topic("t", 3)];
        let mut g = ShareGroup::default();
        let now = Instant::now();
        let a = g.heartbeat(join("a", &["t"]), &topics, now).unwrap();
        assert_eq!(a.member_epoch, 1);
        let b = g.heartbeat(join("b", &["t"]), &topics, now).unwrap();
        assert_eq!(b.member_epoch, 2);
        let id = topics[0].id;
        assert_eq!(b.assignment.unwrap()[&id].len(), 3);
        assert_eq!(g.members["a"].assignment[&id].len(), 3);
    }

    #[test]
    fn a_stale_epoch_is_fenced_and_an_unknown_member_refused() {
        let topics = [topic("t", 1)];
        let mut g = ShareGroup::default();
        let now = Instant::now();
        g.heartbeat(join("a", &["t"]), &topics, now).unwrap();
        let stale = ShareHeartbeat {
            member_id: "a".into(),
            member_epoch: 7,
            ..ShareHeartbeat::default()
        };
        assert_eq!(
            g.heartbeat(stale, &topics, now),
            Err(Refusal::Fenced {
                received: 7,
                current: 1
            })
        );
        let unknown = ShareHeartbeat {
            member_id: "x".into(),
            member_epoch: 1,
            ..ShareHeartbeat::default()
        };
        assert_eq!(
            g.heartbeat(unknown, &topics, now),
            Err(Refusal::UnknownMember)
        );
    }
}
