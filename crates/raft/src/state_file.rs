//! `raft-state.json`: the vote and the purge point of a replica (docs/format.md,
//! "raft-state.json").
//!
//! A replica that read a wrong vote could vote twice in one term, so nothing in the file is
//! taken on trust: every field is required (no serde defaults: `{}` is not "never voted"), no
//! other field is allowed, and a CRC-32C of the rest guards the values, so a flipped bit is
//! damage, never an instruction. The file stays readable JSON:
//!
//! ```text
//! {
//!   "vote": {...} | null,          openraft's Vote
//!   "purged": {...} | null,        [`Purged`]
//!   "installing": {...} | null,    openraft's SnapshotMeta
//!   "crc32c": 2864434397           CRC-32C (Castagnoli) of the canonical rest
//! }
//! ```
//!
//! The canonical rest is the three fields serialized as compact JSON in this order
//! (`serde_json::to_vec` of [`StateFile`]): the checksum is checked against the values read,
//! so whitespace is free and any change of a value is caught. A file without `crc32c` (written
//! before it existed) is refused like any other missing field: there are no deployed replicas
//! to carry over.
//!
//! A missing file is a fresh replica (no vote, nothing purged).

use std::path::{Path, PathBuf};

use oncelog::io::FileSystem;
use openraft::{LogId, SnapshotMeta, StoredMembership, Vote};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Node, NodeId};

/// The file beside the segments that holds the vote and the purge point.
pub const STATE_FILE: &str = "raft-state.json";
/// The largest `raft-state.json` read (it holds a vote and one membership).
pub const MAX_STATE_FILE: u64 = 1 << 20;
/// The checksum's field.
pub const CHECKSUM_FIELD: &str = "crc32c";
/// The fields of the state, in the order of the canonical form.
pub const FIELDS: [&str; 3] = ["vote", "purged", "installing"];

/// What raft has forgotten: entries up to `log_id` (their batches may still be in the log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Purged {
    /// The last entry forgotten.
    pub log_id: LogId<NodeId>,
    /// The offset after its batch: where the first live entry's batch starts (in a
    /// partition set, in its first partition).
    pub end_offset: i64,
    /// The last membership at or below it.
    pub membership: StoredMembership<NodeId, Node>,
    /// In a partition set (docs/design.md, "Partition sets"), the offset after it in each of
    /// the set's other partitions, in the set's order; absent for one partition (so its file
    /// is as before sets). A set refuses a purge point whose ends do not name each of its
    /// partitions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_end_offsets: Vec<i64>,
}

impl Purged {
    /// The offset after the purge point in partition `member` of the group (0 for a group of
    /// one partition), if it names it.
    pub fn end_in(&self, member: usize) -> Option<i64> {
        match member {
            0 => Some(self.end_offset),
            m => self.more_end_offsets.get(m - 1).copied(),
        }
    }
}

/// The contents of `raft-state.json` (without its checksum).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateFile {
    /// The last vote saved.
    pub vote: Option<Vote<NodeId>>,
    /// The purge point.
    pub purged: Option<Purged>,
    /// A snapshot being installed (its image is in [`crate::store::INSTALL_FILE`]).
    pub installing: Option<SnapshotMeta<NodeId, Node>>,
}

/// A `raft-state.json` that cannot be used. The replica refuses to open with it: a vote it
/// cannot trust is no vote to act on.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// It could not be read.
    #[error("{}: {reason}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// Longer than any state file.
    #[error("{}: {len} bytes, more than a raft state file holds ({MAX_STATE_FILE})", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// Not a JSON object.
    #[error("{}: malformed: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What the parser found.
        reason: String,
    },
    /// A required field is absent.
    #[error("{}: field `{field}` is missing (every field is required)", path.display())]
    MissingField {
        /// The file.
        path: PathBuf,
        /// The field.
        field: &'static str,
    },
    /// A field the format does not have.
    #[error("{}: unknown field `{field}`", path.display())]
    UnknownField {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
    },
    /// A field whose value is not of its type.
    #[error("{}: field `{field}`: {reason}", path.display())]
    BadField {
        /// The file.
        path: PathBuf,
        /// The field.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The values are not those the checksum was computed over.
    #[error(
        "{}: checksum mismatch: `crc32c` is {stored}, the values read give {computed} (the file is damaged)",
        path.display()
    )]
    Checksum {
        /// The file.
        path: PathBuf,
        /// The `crc32c` field.
        stored: u32,
        /// The CRC-32C of the canonical form of the values read.
        computed: u32,
    },
}

impl StateFileError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            StateFileError::Io { .. } => "io",
            StateFileError::TooLarge { .. } => "too_large",
            StateFileError::Malformed { .. } => "malformed",
            StateFileError::MissingField { .. } => "missing_field",
            StateFileError::UnknownField { .. } => "unknown_field",
            StateFileError::BadField { .. } => "bad_field",
            StateFileError::Checksum { .. } => "checksum",
        }
    }
}

/// The canonical form the checksum covers.
fn canonical(state: &StateFile) -> Vec<u8> {
    // Only maps with string keys and plain values: serializing cannot fail.
    serde_json::to_vec(state).unwrap_or_default()
}

#[derive(Serialize)]
struct OnDisk<'a> {
    #[serde(flatten)]
    state: &'a StateFile,
    crc32c: u32,
}

/// The file's bytes: pretty JSON, the fields in order, the checksum last.
pub fn encode(state: &StateFile) -> Result<Vec<u8>, serde_json::Error> {
    let crc32c = crc32c::crc32c(&canonical(state));
    serde_json::to_vec_pretty(&OnDisk { state, crc32c })
}

/// Reads the file's bytes (`path` names it in errors).
pub fn decode(path: &Path, bytes: &[u8]) -> Result<StateFile, StateFileError> {
    let path_buf = || path.to_path_buf();
    let value: Value = serde_json::from_slice(bytes).map_err(|e| StateFileError::Malformed {
        path: path_buf(),
        reason: e.to_string(),
    })?;
    let Value::Object(mut object) = value else {
        return Err(StateFileError::Malformed {
            path: path_buf(),
            reason: "not a JSON object".into(),
        });
    };
    if let Some(field) = object
        .keys()
        .find(|k| *k != CHECKSUM_FIELD && !FIELDS.contains(&k.as_str()))
    {
        return Err(StateFileError::UnknownField {
            path: path_buf(),
            field: field.clone(),
        });
    }
    let mut take = |field: &'static str| {
        object.remove(field).ok_or(StateFileError::MissingField {
            path: path_buf(),
            field,
        })
    };
    let values = [take(FIELDS[0])?, take(FIELDS[1])?, take(FIELDS[2])?];
    let stored = take(CHECKSUM_FIELD)?;
    let stored = stored
        .as_u64()
        .and_then(|c| u32::try_from(c).ok())
        .ok_or_else(|| StateFileError::BadField {
            path: path_buf(),
            field: CHECKSUM_FIELD,
            reason: format!("{stored} is not a 32-bit unsigned integer"),
        })?;
    let [vote, purged, installing] = values;
    let state = StateFile {
        vote: field(path, FIELDS[0], vote)?,
        purged: field(path, FIELDS[1], purged)?,
        installing: field(path, FIELDS[2], installing)?,
    };
    let computed = crc32c::crc32c(&canonical(&state));
    if computed != stored {
        return Err(StateFileError::Checksum {
            path: path_buf(),
            stored,
            computed,
        });
    }
    Ok(state)
}

fn field<T: serde::de::DeserializeOwned>(
    path: &Path,
    name: &'static str,
    value: Value,
) -> Result<T, StateFileError> {
    serde_json::from_value(value).map_err(|e| StateFileError::BadField {
        path: path.to_path_buf(),
        field: name,
        reason: e.to_string(),
    })
}

/// Reads `raft-state.json` of `dir` through `fs`; a missing file is a fresh replica's state.
pub fn read(fs: &dyn FileSystem, dir: &Path) -> Result<StateFile, StateFileError> {
    let path = dir.join(STATE_FILE);
    match fs.stat(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(StateFile::default()),
        Err(e) => {
            return Err(StateFileError::Io {
                path,
                reason: e.to_string(),
            })
        }
        Ok(meta) if meta.len > MAX_STATE_FILE => {
            return Err(StateFileError::TooLarge {
                path,
                len: meta.len,
            })
        }
        Ok(_) => {}
    }
    let bytes = fs.read_whole(&path).map_err(|e| StateFileError::Io {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    decode(&path, &bytes)
}
