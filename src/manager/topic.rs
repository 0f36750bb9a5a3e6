//! Topic names and partition directory names, by Kafka's rules (`Topic.validate`,
//! `LocalLog.parseTopicPartitionName`).
//!
//! | directory name | what it is |
//! |---|---|
//! | `<topic>-<n>` | partition `n` of `topic` |
//! | `<topic>-<n>.<id>-delete` | a deleted partition waiting for its removal (`id`: 32 hex digits) |
//! | `<topic>-<n>.<id>-future`, `-stray` | Kafka's moved and stray partitions: left alone |
//! | `__cluster_metadata-0` | Kafka's KRaft metadata log: never opened |

use std::fmt;

/// The longest topic name Kafka accepts.
pub const MAX_TOPIC_LENGTH: usize = 249;

/// The suffix of a partition directory waiting for its removal.
pub const DELETE_SUFFIX: &str = "-delete";
const FUTURE_SUFFIX: &str = "-future";
const STRAY_SUFFIX: &str = "-stray";
/// Kafka's KRaft metadata log, which lives in a log dir but is not a partition of the data.
const METADATA_TOPIC: &str = "__cluster_metadata";

/// One partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The topic's name (valid by [`validate_topic`]).
    pub topic: String,
    /// The partition number, from 0.
    pub partition: i32,
}

impl TopicPartition {
    /// The partition `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// Its directory's name in a log dir: `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// The name its directory is renamed to when it is deleted: `<topic>-<n>.<id>-delete`,
    /// the topic cut so the name stays within 255 bytes (Kafka's `logDeleteDirName`).
    pub fn delete_dir_name(&self, unique_id: &str) -> String {
        let suffix = format!("-{}.{unique_id}{DELETE_SUFFIX}", self.partition);
        let keep = self.topic.len().min(255usize.saturating_sub(suffix.len()));
        format!("{}{suffix}", &self.topic[..keep])
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Why a topic name is refused (Kafka's `InvalidTopicException` reasons).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopicError {
    /// The empty string.
    #[error("the empty string is not a topic name")]
    Empty,
    /// `.` or `..`, which name directories.
    #[error("{0:?} is not a topic name")]
    Reserved(&'static str),
    /// Longer than [`MAX_TOPIC_LENGTH`].
    #[error("{len} characters, more than the {MAX_TOPIC_LENGTH} a topic name may have")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// A character other than ASCII letters, digits, `.`, `_` and `-`.
    #[error("character {found:?} at byte {position}: a topic name holds only ASCII letters, digits, '.', '_' and '-'")]
    IllegalCharacter {
        /// The character.
        found: char,
        /// Its byte position in the name.
        position: usize,
    },
}

impl TopicError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            TopicError::Empty => "empty",
            TopicError::Reserved(_) => "reserved",
            TopicError::TooLong { .. } => "too_long",
            TopicError::IllegalCharacter { .. } => "illegal_character",
        }
    }
}

/// Kafka's topic-name rules: 1 to 249 characters of `[a-zA-Z0-9._-]`, neither `.` nor `..`.
pub fn validate_topic(name: &str) -> Result<(), TopicError> {
    if name.is_empty() {
        return Err(TopicError::Empty);
    }
    if name == "." || name == ".." {
        return Err(TopicError::Reserved(if name == "." { "." } else { ".." }));
    }
    // Kafka counts UTF-16 units; every legal name is ASCII, so an illegal character is found
    // first in any name that is long only in those units.
    if let Some((position, found)) = name
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(TopicError::IllegalCharacter { found, position });
    }
    if name.len() > MAX_TOPIC_LENGTH {
        return Err(TopicError::TooLong { len: name.len() });
    }
    Ok(())
}

/// Kafka's collision rule: topics whose names differ only by `.` against `_` would share
/// their metric names, so one is refused while the other exists.
pub fn collides(a: &str, b: &str) -> bool {
    a != b && a.len() == b.len() && a.replace('.', "_") == b.replace('.', "_")
}

/// What a directory inside a log dir is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirEntry {
    /// A partition's directory.
    Partition(TopicPartition),
    /// A deleted partition's directory, waiting for its removal.
    Deleted(TopicPartition),
    /// Not data this manager opens: Kafka's metadata log, a `-future` or `-stray` partition,
    /// or a directory not named like a partition (with why).
    Other(String),
}

/// Classifies a directory of a log dir by its name (Kafka's `parseTopicPartitionName`).
pub fn parse_dir_name(name: &str) -> DirEntry {
    let other = |why: &str| DirEntry::Other(why.to_string());
    let (stem, deleted) = match suffixed(name, DELETE_SUFFIX) {
        Some(stem) => (stem, true),
        None if suffixed(name, FUTURE_SUFFIX).is_some() => {
            return other("a partition being moved (-future)")
        }
        None if suffixed(name, STRAY_SUFFIX).is_some() => return other("a stray partition (-stray)"),
        None if name.ends_with(DELETE_SUFFIX) => {
            return other("not of the form <topic>-<partition>.<id>-delete")
        }
        None => (name, false),
    };
    let Some((topic, number)) = stem.rsplit_once('-') else {
        return other("not of the form <topic>-<partition>");
    };
    let partition = match number.parse::<i32>() {
        Ok(p) if p >= 0 && !number.starts_with('+') => p,
        _ => return other("not of the form <topic>-<partition>"),
    };
    if topic.is_empty() {
        return other("not of the form <topic>-<partition>");
    }
    if topic == METADATA_TOPIC {
        return other("Kafka's metadata log");
    }
    let tp = TopicPartition::new(topic, partition);
    if deleted {
        // A topic cut to fit the name is still the partition's: it only waits for removal.
        return DirEntry::Deleted(tp);
    }
    if validate_topic(topic).is_err() {
        return other("its topic is not a valid topic name");
    }
    DirEntry::Partition(tp)
}

/// `<stem>.<id><suffix>` → `<stem>`, where the id holds no whitespace (Kafka's pattern).
fn suffixed<'a>(name: &'a str, suffix: &str) -> Option<&'a str> {
    let rest = name.strip_suffix(suffix)?;
    let (stem, id) = rest.rsplit_once('.')?;
    (!id.is_empty() && !id.contains(char::is_whitespace) && stem.contains('-')).then_some(stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_legal_names_are_accepted() {
        for name in ["a", "orders", "__consumer_offsets", "a.b_c-d", "A9", &"x".repeat(249)] {
            assert_eq!(validate_topic(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn every_refused_name_says_why() {
        assert_eq!(validate_topic(""), Err(TopicError::Empty));
        assert_eq!(validate_topic("."), Err(TopicError::Reserved(".")));
        assert_eq!(validate_topic(".."), Err(TopicError::Reserved("..")));
        assert_eq!(
            validate_topic(&"x".repeat(250)),
            Err(TopicError::TooLong { len: 250 })
        );
        for (name, found, position) in [
            ("a b", ' ', 1),
            ("a/b", '/', 1),
            ("é", 'é', 0),
            ("t\n", '\n', 1),
            ("x:y", ':', 1),
        ] {
            assert_eq!(
                validate_topic(name),
                Err(TopicError::IllegalCharacter { found, position }),
                "{name:?}"
            );
        }
        assert_eq!(TopicError::Empty.kind(), "empty");
    }

    #[test]
    fn dots_and_underscores_collide() {
        assert!(collides("a.b", "a_b"));
        assert!(!collides("a.b", "a.b"));
        assert!(!collides("a.b", "a-b"));
    }

    #[test]
    fn directory_names_parse_as_kafka_parses_them() {
        let tp = |t: &str, p| TopicPartition::new(t, p);
        assert_eq!(parse_dir_name("orders-0"), DirEntry::Partition(tp("orders", 0)));
        assert_eq!(parse_dir_name("harness-0-12"), DirEntry::Partition(tp("harness-0", 12)));
        assert_eq!(parse_dir_name("orders--1"), DirEntry::Partition(tp("orders-", 1)));
        assert_eq!(
            parse_dir_name("orders-3.0123456789abcdef0123456789abcdef-delete"),
            DirEntry::Deleted(tp("orders", 3))
        );
        for name in [
            "lost+found",
            "orders",
            "orders-x",
            "-0",
            "__cluster_metadata-0",
            "orders-0.abc-future",
            "orders-0.abc-stray",
            "orders-0-delete",
        ] {
            assert!(matches!(parse_dir_name(name), DirEntry::Other(_)), "{name}");
        }
    }

    #[test]
    fn a_delete_name_fits_in_255_bytes_and_parses_back() {
        let id = "0123456789abcdef0123456789abcdef";
        let long = TopicPartition::new("t".repeat(249), 7);
        let name = long.delete_dir_name(id);
        assert!(name.len() <= 255, "{}", name.len());
        match parse_dir_name(&name) {
            DirEntry::Deleted(tp) => assert_eq!(tp.partition, 7),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            TopicPartition::new("a", 1).delete_dir_name(id),
            format!("a-1.{id}-delete")
        );
    }
}
