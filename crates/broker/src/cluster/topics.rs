//! A topic's life in a cluster (docs/design.md, "Deleting topics and adding partitions in a
//! cluster"): the controller writes a topic's records (created, deleted, grown) to the
//! metadata log and answers once its image applied them; every node follows what its image
//! changed, opening its replicas of new partitions and removing its replicas of deleted
//! topics, and once after it starts removes the partitions on disk the image does not give
//! it (a deletion it did not finish before a crash).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kafka_protocol::ResponseError;
use oncelog_raft::{Ack, GroupId, ReplicaError};
use uuid::Uuid;

use super::{metadata_batch, metadata_group, offsets_group, Applied, Cluster, MetadataRecord};
use super::{Image, TopicImage};

/// How long a newly elected controller holds a metadata write while its image catches up
/// with the metadata log ([`Cluster::check_controller`]) before it answers NOT_CONTROLLER.
pub(super) const CONTROLLER_READY_WAIT: Duration = Duration::from_secs(5);

/// Why the controller did not write (or did not finish writing) a topic's record.
#[derive(Debug)]
pub enum WriteRefused {
    /// This node is not the controller (the controller is named if known).
    NotController(Option<i32>),
    /// A topic of the name exists (a create).
    Exists,
    /// No such topic (a deletion or growth).
    Unknown,
    /// The request breaks a rule: Kafka's error and why.
    Invalid(ResponseError, String),
    /// The metadata append failed (raft's error): retriable.
    Raft(String),
    /// The image did not apply the record in time.
    Timeout,
}

/// The topic a deletion names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deletion {
    Name(String),
    Id(Uuid),
}

impl Deletion {
    fn find<'a>(&self, image: &'a Image) -> Option<&'a TopicImage> {
        match self {
            Deletion::Name(name) => image.topic(name),
            Deletion::Id(id) => image.topic_by_id(*id),
        }
    }
}

/// How long a write waits for its record to be applied.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    /// At most this long for the append and the apply together.
    pub within: Duration,
    /// Whether to wait for the image to apply it (Kafka's DeleteTopics with a timeout of 0
    /// or less answers once the deletion is decided: here, committed).
    pub applied: bool,
}

impl Cluster {
    /// Creates a topic on the controller with its settings `configs` (checked by the caller):
    /// appends its record to the metadata log and answers once this node's image applied it.
    pub async fn create_topic(
        &self,
        name: &str,
        replicas: Vec<Vec<i32>>,
        configs: BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<TopicImage, WriteRefused> {
        let _one = self.writing.lock().await;
        self.check_controller().await?;
        if self.image.read().topic(name).is_some() {
            return Err(WriteRefused::Exists);
        }
        let record = MetadataRecord::Topic {
            name: name.to_string(),
            id: Uuid::new_v4(),
            replicas,
            configs,
        };
        let wait = Wait {
            within: timeout,
            applied: true,
        };
        self.write(&record, wait).await?;
        match self.image.read().topic(name) {
            Some(t) => Ok(t.clone()),
            // Another record for the name came first (a create through an earlier controller).
            None => Err(WriteRefused::Exists),
        }
    }

    /// Deletes a topic on the controller: appends its deletion record and answers (with the
    /// topic as it was) once this node's image applied it, as `wait` says. Every node then
    /// removes its replicas (`Cluster::follow_image`).
    pub async fn delete_topic(
        &self,
        which: &Deletion,
        wait: Wait,
    ) -> Result<TopicImage, WriteRefused> {
        let _one = self.writing.lock().await;
        self.check_controller().await?;
        let topic = which
            .find(&self.image.read())
            .cloned()
            .ok_or(WriteRefused::Unknown)?;
        let record = MetadataRecord::DeleteTopic {
            name: topic.name.clone(),
            id: topic.id,
        };
        self.write(&record, wait).await?;
        if wait.applied && self.image.read().topic_by_id(topic.id).is_some() {
            // Not possible while this node leads and writes one record at a time; said rather
            // than answered as done.
            return Err(WriteRefused::Raft(format!(
                "topic {} is still in the image after its deletion was applied",
                topic.name
            )));
        }
        Ok(topic)
    }

    /// Topic `name` as this node's image holds it, if this node is the controller: what a
    /// change to a topic starts from, under the write lock.
    pub(super) async fn topic_on_controller(&self, name: &str) -> Result<TopicImage, WriteRefused> {
        self.check_controller().await?;
        self.image
            .read()
            .topic(name)
            .cloned()
            .ok_or(WriteRefused::Unknown)
    }

    /// Grows topic `name` on the controller: `grow` decides the new partitions' replicas from
    /// the topic as the image holds it (or refuses); with `validate_only` nothing is written.
    /// Answers the topic as grown (as it would be, when only validated).
    pub async fn add_partitions(
        &self,
        name: &str,
        grow: impl FnOnce(&TopicImage) -> Result<Vec<Vec<i32>>, (ResponseError, String)>,
        validate_only: bool,
        timeout: Duration,
    ) -> Result<TopicImage, WriteRefused> {
        let _one = self.writing.lock().await;
        let mut topic = self.topic_on_controller(name).await?;
        let added = grow(&topic).map_err(|(e, why)| WriteRefused::Invalid(e, why))?;
        let first = topic.replicas.len() as i32;
        if validate_only {
            topic.replicas.extend(added);
            return Ok(topic);
        }
        let record = MetadataRecord::AddPartitions {
            name: topic.name.clone(),
            id: topic.id,
            first,
            replicas: added,
        };
        let wait = Wait {
            within: timeout,
            applied: true,
        };
        self.write(&record, wait).await?;
        match self.image.read().topic_by_id(topic.id) {
            Some(t) if t.replicas.len() as i32 > first => Ok(t.clone()),
            _ => Err(WriteRefused::Unknown),
        }
    }

    /// Changes topic `name`'s settings on the controller: `decide` gives its whole new set of
    /// own settings from the topic as the image holds it (or refuses); with `validate_only`
    /// nothing is written. Answers once this node's image applied the record; every node then
    /// reconfigures its replicas (`Cluster::follow_image`).
    pub async fn alter_topic_configs(
        &self,
        name: &str,
        decide: impl FnOnce(&TopicImage) -> Result<BTreeMap<String, String>, (ResponseError, String)>,
        validate_only: bool,
        timeout: Duration,
    ) -> Result<(), WriteRefused> {
        let _one = self.writing.lock().await;
        let topic = self.topic_on_controller(name).await?;
        let configs = decide(&topic).map_err(|(e, why)| WriteRefused::Invalid(e, why))?;
        if validate_only {
            return Ok(());
        }
        let record = MetadataRecord::AlterConfigs {
            name: topic.name.clone(),
            id: topic.id,
            configs,
        };
        let wait = Wait {
            within: timeout,
            applied: true,
        };
        self.write(&record, wait).await?;
        match self.image.read().topic_by_id(topic.id) {
            Some(_) => Ok(()),
            None => Err(WriteRefused::Unknown),
        }
    }

    /// Whether this node is the controller, ready to decide a metadata write: it leads the
    /// metadata group, and in this term its image reached every entry its replica holds
    /// ([`Host::settled_here`]). A controller restored in its own term after a restart has a
    /// lazily written high watermark and no entry of its own to commit first, so its image
    /// may miss a topic created long before, and it answered a CreateTopics of that topic as
    /// created (`kills::a_restarted_cluster_coordinates_only_once_its_image_knows_the_topics`).
    ///
    /// A leader not ready yet holds the request for up to [`CONTROLLER_READY_WAIT`], as a
    /// KRaft controller queues writes until it has replayed its log, and answers
    /// NOT_CONTROLLER, naming no controller, only if it is still not ready then; a node that
    /// does not lead answers NOT_CONTROLLER at once, naming the leader it knows.
    ///
    /// [`Host::settled_here`]: oncelog_raft::Host::settled_here
    pub(super) async fn check_controller(&self) -> Result<(), WriteRefused> {
        let group = metadata_group();
        let deadline = tokio::time::Instant::now() + CONTROLLER_READY_WAIT;
        loop {
            let term = match self.host.status(&group) {
                Ok(s) if s.leader == Some(self.me() as u64) => s.term,
                _ => return Err(WriteRefused::NotController(self.controller())),
            };
            if self.controller_ready.load(Ordering::Acquire) == term {
                return Ok(());
            }
            let ready = match (self.host.replica(&group), self.host.settled_here(&group)) {
                (Ok(replica), Some(settled)) => self.image_reached(&replica, settled),
                _ => false,
            };
            if ready {
                self.controller_ready.store(term, Ordering::Release);
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(WriteRefused::NotController(None));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Appends `record` to the metadata log (the caller holds [`Cluster::writing`]) and waits
    /// for this node's image to apply it, as `wait` says.
    pub(super) async fn write(
        &self,
        record: &MetadataRecord,
        wait: Wait,
    ) -> Result<(), WriteRefused> {
        let metadata = self
            .host
            .replica(&metadata_group())
            .map_err(|_| WriteRefused::NotController(self.controller()))?;
        let batch = metadata_batch(record).map_err(WriteRefused::Raft)?;
        let written = async {
            let last = match metadata.append(batch).await {
                Ok(Ack::Appended { last_offset, .. }) | Ok(Ack::Duplicate { last_offset, .. }) => {
                    last_offset
                }
                Err(ReplicaError::NotLeader { leader }) => {
                    return Err(WriteRefused::NotController(leader.map(|l| l as i32)))
                }
                Err(e) => return Err(WriteRefused::Raft(e.to_string())),
            };
            if wait.applied {
                let mut applied = self.applied.subscribe();
                if applied.wait_for(|next| *next > last).await.is_err() {
                    return Err(WriteRefused::Timeout);
                }
            }
            Ok(())
        };
        tokio::time::timeout(wait.within, written)
            .await
            .unwrap_or(Err(WriteRefused::Timeout))
    }

    /// Acts on what the image changed, in offset order: opens this node's replicas of a new
    /// topic's or a growth's partitions, removes its replicas of a deleted topic's. Only once
    /// the image has applied everything the metadata replica holds (`caught_up`), so that a
    /// node replaying its log after a restart never opens a topic a later record deletes;
    /// then, once after it started, removes the partitions on disk the image does not give
    /// it.
    pub(super) async fn follow_image(&self, caught_up: bool) {
        if !caught_up {
            return;
        }
        let changes = std::mem::take(&mut *self.changes.lock());
        for (offset, change) in changes {
            match change {
                Applied::Nothing => {}
                Applied::Created(topic) => self.open_replicas(offset, &topic, 0).await,
                Applied::Grown { topic, first } => self.open_replicas(offset, &topic, first).await,
                Applied::Deleted(topic) => self.remove_replicas(&topic).await,
                Applied::Altered(topic) => self.reconfigure_replicas(&topic),
                // The image holds the new log starts: reads honour them at once, and the
                // retention job deletes the bytes below them ([`super::retention`]).
                Applied::RecordsDeleted => {}
            }
        }
        if !self.reconciled.load(Ordering::Acquire) && self.rejoin_applied() {
            self.remove_strays().await;
            self.reconciled.store(true, Ordering::Release);
        }
    }

    /// Whether a rejoining node's image reached what the other nodes held when it began (a
    /// wiped node's image knows none of its partitions before then).
    fn rejoin_applied(&self) -> bool {
        match &self.rejoining {
            Some(r) => self.image.read().next_offset >= r.record().metadata_end,
            None => true,
        }
    }

    /// Opens this node's replica of each partition of `topic` from `first` on (made by the
    /// metadata record at `offset`) it is assigned, with the topic's settings; through the
    /// rejoin steps if the record predates a rejoin. Not if the topic left the image since
    /// (a later record deleted it).
    async fn open_replicas(&self, offset: i64, topic: &TopicImage, first: usize) {
        // The settings as they are now (a later record may have changed them).
        let Some(config) = self
            .image
            .read()
            .topic_by_id(topic.id)
            .map(|t| t.config.clone())
        else {
            return;
        };
        for (p, replicas) in topic.replicas.iter().enumerate().skip(first) {
            if !replicas.contains(&self.me()) {
                continue;
            }
            let members: Vec<u64> = replicas.iter().map(|r| *r as u64).collect();
            let group = GroupId::new(topic.name.clone(), p as i32);
            let opened = match &self.rejoining {
                Some(r) if r.predates(offset) => r
                    .open(&self.host, group.clone(), &members, config.clone())
                    .await
                    .map_err(|e| e.to_string()),
                _ => self
                    .host
                    .add_group_with(group.clone(), &members, config.clone())
                    .await
                    .map_err(|e| e.to_string()),
            };
            if let Err(e) = opened {
                tracing::error!(partition = %group, error = %e, "cannot open this node's replica");
                continue;
            }
            // A partition already on disk opened with its own file's settings, which a change
            // made while this node was down has replaced: the image's, at once.
            if let Err(e) = self.host.alter_group_config(&group, config.clone()) {
                tracing::error!(partition = %group, error = %e, "cannot reconfigure this node's replica");
            }
        }
    }

    /// Gives this node's replicas of `topic`'s partitions the topic's settings as the image
    /// holds them now (the image has applied everything the metadata replica holds, so a
    /// replay after a restart lands on the newest settings, never an older one that a later
    /// record replaced): each partition's `oncelog.properties` rewritten and its log
    /// reconfigured live.
    fn reconfigure_replicas(&self, topic: &TopicImage) {
        let Some(config) = self
            .image
            .read()
            .topic_by_id(topic.id)
            .map(|t| t.config.clone())
        else {
            return;
        };
        for (p, replicas) in topic.replicas.iter().enumerate() {
            if !replicas.contains(&self.me()) {
                continue;
            }
            let group = GroupId::new(topic.name.clone(), p as i32);
            match self.host.alter_group_config(&group, config.clone()) {
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(partition = %group, error = %e, "cannot reconfigure this node's replica")
                }
            }
        }
        tracing::info!(topic = %topic.name, "topic settings changed; replicas reconfigured");
    }

    /// Stops and deletes this node's replica of each partition of the deleted `topic` (a
    /// partition on disk not hosted too: a node that was down replays the deletion).
    async fn remove_replicas(&self, topic: &TopicImage) {
        let mut removed = 0;
        for p in 0..topic.replicas.len() {
            if self
                .remove_partition(&GroupId::new(topic.name.clone(), p as i32))
                .await
            {
                removed += 1;
            }
        }
        self.remote.write().retain(|g, _| g.topic != topic.name);
        // A replay after a restart finds nothing left to remove: said only when something was.
        if removed > 0 {
            tracing::info!(topic = %topic.name, id = %topic.id, removed, "deleted topic's replicas removed");
        }
    }

    /// Whether a replica or partition directory of `group` was there to remove.
    async fn remove_partition(&self, group: &GroupId) -> bool {
        match self.host.remove_group(group).await {
            Ok(removed) => removed,
            Err(e) => {
                tracing::error!(partition = %group, error = %e, "cannot remove a replica");
                false
            }
        }
    }

    /// Removes the partitions on disk that the image gives no replica of here (a crash part
    /// way through a deletion, or a deletion this node's log holds but it never acted on):
    /// never the metadata and offsets groups'.
    async fn remove_strays(&self) {
        let on_disk = match self.host.partitions_on_disk() {
            Ok(on_disk) => on_disk,
            Err(e) => {
                tracing::error!(error = %e, "cannot list the partitions on disk");
                return;
            }
        };
        let strays: Vec<GroupId> = {
            let image = self.image.read();
            on_disk
                .into_iter()
                .filter(|g| *g != metadata_group() && *g != offsets_group())
                .filter(|g| !assigned_here(&image, g, self.me()))
                .collect()
        };
        for group in strays {
            tracing::warn!(
                partition = %group,
                "a partition on disk that the cluster image gives no replica of here: removed"
            );
            self.remove_partition(&group).await;
        }
    }
}

/// Whether the image gives node `me` a replica of `group`.
fn assigned_here(image: &Image, group: &GroupId, me: i32) -> bool {
    image
        .topic(&group.topic)
        .and_then(|t| {
            usize::try_from(group.partition)
                .ok()
                .and_then(|p| t.replicas.get(p))
        })
        .is_some_and(|r| r.contains(&me))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_kept_only_where_the_image_assigns_it() {
        let mut image = Image::default();
        let record = MetadataRecord::Topic {
            name: "t".into(),
            id: Uuid::from_u128(1),
            replicas: vec![vec![1, 2], vec![2, 3]],
            configs: BTreeMap::new(),
        };
        image
            .apply(0, &serde_json::to_vec(&record).unwrap())
            .unwrap();
        assert!(assigned_here(&image, &GroupId::new("t", 0), 1));
        assert!(!assigned_here(&image, &GroupId::new("t", 1), 1));
        assert!(!assigned_here(&image, &GroupId::new("t", 2), 2));
        assert!(!assigned_here(&image, &GroupId::new("t", -1), 2));
        assert!(!assigned_here(&image, &GroupId::new("gone", 0), 1));
    }
}
