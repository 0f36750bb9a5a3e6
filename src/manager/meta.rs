//! `meta.properties`: which cluster and node a log dir belongs to (Kafka's `MetaProperties`),
//! in Java's properties text.
//!
//! ```text
//! #
//! #Tue Dec 01 08:38:56 UTC 2026      <- comments
//! node.id=1                          <- version 1 (KRaft): required
//! directory.id=Dhjmbt-ohzqOo58CVuatkA <- optional: this dir's id, unique among the node's dirs
//! version=1                          <- 0 (ZooKeeper era: broker.id, optional) or 1
//! cluster.id=ezqL2uOuQlqpTUxNZatqqg  <- required in version 1
//! ```
//!
//! Ids are Kafka's `Uuid`s: 16 bytes in URL-safe base64 without padding (22 characters).

use std::collections::BTreeMap;
use std::path::Path;

use crate::io::{self, FileSystem, IoError};
use crate::log::metadata_file::{self, BadMetadataFile, Invalid, MetadataFile};

/// The file's name in a log dir.
pub const FILE_NAME: &str = "meta.properties";

/// What a log dir's `meta.properties` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    /// 0 (written by a ZooKeeper-era broker) or 1 (KRaft).
    pub version: u8,
    /// `cluster.id`: required in version 1.
    pub cluster_id: Option<String>,
    /// `node.id` (version 1, required) or `broker.id` (version 0, optional).
    pub node_id: Option<i32>,
    /// `directory.id`: this log dir's id.
    pub directory_id: Option<String>,
}

/// Parses the text; the error names the line where there is one.
pub fn decode(text: &str) -> Result<MetaProperties, Invalid> {
    let mut props: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            return Err(Invalid::at(n, format!("expected \"<key>=<value>\", found {line:?}")));
        };
        let (key, value) = (key.trim(), value.trim());
        if props.insert(key, (n, value)).is_some() {
            return Err(Invalid::at(n, format!("{key} is set twice")));
        }
    }
    let version = match props.get("version") {
        None => 0,
        Some((_, "0")) => 0,
        Some((_, "1")) => 1,
        Some((n, v)) => return Err(Invalid::at(*n, format!("unsupported version {v:?} (0 or 1)"))),
    };
    let int = |key: &str| -> Result<Option<i32>, Invalid> {
        match props.get(key) {
            None => Ok(None),
            Some((n, v)) => v
                .parse::<i32>()
                .ok()
                .filter(|id| *id >= 0)
                .map(Some)
                .ok_or_else(|| Invalid::at(*n, format!("{key} is not a node id: {v:?}"))),
        }
    };
    let node_id = if version == 0 { int("broker.id")? } else { int("node.id")? };
    let cluster_id = props.get("cluster.id").map(|(_, v)| v.to_string());
    if version == 1 {
        if node_id.is_none() {
            return Err(Invalid::on(None, "node.id is missing (required in version 1)"));
        }
        if cluster_id.is_none() {
            return Err(Invalid::on(None, "cluster.id is missing (required in version 1)"));
        }
    }
    let directory_id = match props.get("directory.id") {
        None => None,
        Some((n, v)) => {
            check_uuid(v).map_err(|reason| Invalid::at(*n, format!("directory.id {v:?}: {reason}")))?;
            Some(v.to_string())
        }
    };
    Ok(MetaProperties {
        version,
        cluster_id,
        node_id,
        directory_id,
    })
}

/// The text of `meta`, as Kafka's `PropertiesUtils.writePropertiesFile` lays it out.
pub fn encode(meta: &MetaProperties) -> String {
    let mut out = String::from("#\n#Written by oncelog\n");
    if let Some(id) = meta.node_id {
        let key = if meta.version == 0 { "broker.id" } else { "node.id" };
        out.push_str(&format!("{key}={id}\n"));
    }
    if let Some(id) = &meta.directory_id {
        out.push_str(&format!("directory.id={id}\n"));
    }
    out.push_str(&format!("version={}\n", meta.version));
    if let Some(id) = &meta.cluster_id {
        out.push_str(&format!("cluster.id={id}\n"));
    }
    out
}

/// Reads `dir`'s `meta.properties`: `Ok(Ok(None))` if there is none.
pub fn read(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<Result<Option<MetaProperties>, BadMetadataFile>, IoError> {
    // Java writes properties in ISO-8859-1 with escapes; Kafka's keys and ids are ASCII.
    metadata_file::read(fs, &dir.join(FILE_NAME), MetadataFile::MetaProperties, decode)
}

/// Parses the bytes of a `meta.properties` read from `path` (which errors name).
pub fn decode_file(path: &Path, bytes: &[u8]) -> Result<MetaProperties, BadMetadataFile> {
    metadata_file::decode_bytes(path, bytes, MetadataFile::MetaProperties, decode)
}

/// A refusal of the `meta.properties` of the log dir `dir`: one that does not belong with the
/// others, or with the configuration.
pub fn mismatch(dir: &Path, reason: String) -> BadMetadataFile {
    BadMetadataFile::new(MetadataFile::MetaProperties, dir.join(FILE_NAME), None, reason)
}

/// Writes `dir`'s `meta.properties` atomically.
pub fn write(fs: &dyn FileSystem, dir: &Path, meta: &MetaProperties) -> Result<(), IoError> {
    io::write_file_atomically(fs, &dir.join(FILE_NAME), encode(meta).as_bytes())
}

/// Kafka's `Uuid.fromString`: 22 characters of URL-safe base64 holding 16 bytes, and not one
/// of the reserved ids (all zeros, `...AQ` = 1, and the other ids below 100 Kafka keeps).
pub fn check_uuid(text: &str) -> Result<(), String> {
    let bytes = base64url_decode(text).ok_or("not URL-safe base64")?;
    if bytes.len() != 16 || text.len() != 22 {
        return Err(format!("{} bytes, a Uuid has 16", bytes.len()));
    }
    let value = u128::from_be_bytes(bytes.try_into().map_err(|_| "not 16 bytes")?);
    if value < 100 {
        return Err("a reserved id".into());
    }
    Ok(())
}

/// A new random Kafka `Uuid` (URL-safe base64, 22 characters).
pub fn new_uuid() -> String {
    loop {
        let bytes = super::random_bytes();
        if u128::from_be_bytes(bytes) >= 100 {
            return base64url_encode(&bytes);
        }
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn base64url_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for c in text.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        bits = bits << 6 | v;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    // Unused low bits must be zero, as Java's decoder requires.
    (bits == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kafka_4_4s_and_a_zookeeper_eras_files() {
        let kraft = "#\n#Tue Dec 01 08:38:56 UTC 2026\nnode.id=1\ndirectory.id=Dhjmbt-ohzqOo58CVuatkA\n\
                     version=1\ncluster.id=ezqL2uOuQlqpTUxNZatqqg\n";
        assert_eq!(
            decode(kraft),
            Ok(MetaProperties {
                version: 1,
                cluster_id: Some("ezqL2uOuQlqpTUxNZatqqg".into()),
                node_id: Some(1),
                directory_id: Some("Dhjmbt-ohzqOo58CVuatkA".into()),
            })
        );
        let zk = "#\n#Wed Apr 09 17:09:23 UTC 2025\nbroker.id=1001\nversion=0\ncluster.id=F8kBSwSuSge6VehGPmqMIw\n";
        let m = decode(zk).unwrap();
        // Kafka reads any string as a cluster id, the empty one too (a real dir has it).
        let empty = decode("cluster.id=\ndirectory.id=gIODMx0B20PHQLXVLoRD7w\nnode.id=1\nversion=1\n");
        assert_eq!(empty.unwrap().cluster_id.as_deref(), Some(""));
        assert_eq!((m.version, m.node_id), (0, Some(1001)));
        assert_eq!(decode(&encode(&m)), Ok(m));
    }

    #[test]
    fn every_malformed_form_is_refused() {
        for (text, line) in [
            ("version=2\n", Some(1)),
            ("version=1\ncluster.id=x\n", None),
            ("version=1\nnode.id=1\n", None),
            ("version=1\nnode.id=one\ncluster.id=x\n", Some(2)),
            ("version=1\nnode.id=-1\ncluster.id=x\n", Some(2)),
            ("version=0\nbroker.id=x\n", Some(2)),
            ("just words\n", Some(1)),
            ("version=1\nversion=1\n", Some(2)),
            ("version=1\nnode.id=1\ncluster.id=x\ndirectory.id=nope\n", Some(4)),
            ("version=1\nnode.id=1\ncluster.id=x\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAA\n", Some(4)),
        ] {
            match decode(text) {
                Ok(m) => panic!("accepted {text:?} as {m:?}"),
                Err(e) => assert_eq!(e.line, line, "{text:?}: {}", e.reason),
            }
        }
    }

    #[test]
    fn new_ids_are_valid_and_round_trip() {
        for _ in 0..100 {
            let id = new_uuid();
            assert_eq!(id.len(), 22);
            check_uuid(&id).unwrap();
            assert_eq!(base64url_encode(&base64url_decode(&id).unwrap()), id);
        }
        assert_eq!(check_uuid("Dhjmbt-ohzqOo58CVuatkA"), Ok(()));
        assert!(check_uuid("AAAAAAAAAAAAAAAAAAAAAQ").is_err(), "Uuid.ONE_UUID is reserved");
    }
}
