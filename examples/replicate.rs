//! A leader and two followers in one process, through the faces a replication layer uses
//! (`log.replica()`): followers copy the leader's batches with their offsets, the leader
//! commits what they hold, a failover truncates the old leader's unreplicated tail by leader
//! epoch, a producer's retry after the failover is still recognised, and a replica that starts
//! late gets the producer state with the log it is handed.
//!
//! ```sh
//! cargo run --example replicate
//! ```
//!
//! The wire between them is a function call here; `crates/raft` does the same over openraft.

use oncelog::format::BatchBuilder;
use oncelog::{AppendOutcome, HighWatermarkPolicy, Log, LogConfig};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn open(dir: &std::path::Path) -> Result<Log> {
    // The replication layer, not the disk, decides what is committed.
    let config = LogConfig::builder()
        .high_watermark(HighWatermarkPolicy::SetByCaller)
        .build()?;
    Ok(Log::open(dir, config)?)
}

/// A batch of idempotent producer 42 at sequence `seq`.
fn produce(seq: i32, value: &str) -> Result<Vec<u8>> {
    let mut builder = BatchBuilder::new().producer(42, 0, seq);
    builder.append(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    Ok(builder.build()?)
}

/// A follower's fetch: the leader's batches from the follower's log end, copied with their
/// offsets, and made durable before the follower reports its end.
fn replicate(leader: &Log, follower: &Log) -> Result<i64> {
    loop {
        let end = follower.log_end_offset();
        let bytes = leader.read(end, 1 << 20)?;
        if bytes.is_empty() {
            break;
        }
        follower.replica().append(&bytes)?;
    }
    follower.flush()?;
    Ok(follower.log_end_offset())
}

/// The leader commits what every replica holds, and tells the followers.
fn commit(leader: &Log, followers: &[&Log]) -> Result<i64> {
    leader.flush()?;
    let acked = followers
        .iter()
        .map(|f| f.log_end_offset())
        .min()
        .unwrap_or(0);
    let hw = leader
        .replica()
        .set_high_watermark(acked.min(leader.log_end_offset()))?;
    for f in followers {
        f.replica().set_high_watermark(hw)?;
    }
    Ok(hw)
}

fn main() -> Result<()> {
    let dirs = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    let (a, b) = (open(dirs[0].path())?, open(dirs[1].path())?);

    // Epoch 1: `a` leads, `b` follows.
    a.replica().set_leader_epoch(1)?;
    a.append(&produce(0, "one")?)?;
    a.append(&produce(1, "two")?)?;
    replicate(&a, &b)?;
    println!("epoch 1: committed up to {}", commit(&a, &[&b])?);

    // `a` appends one more batch and dies before `b` copies it: it was never committed.
    a.append(&produce(2, "three (lost)")?)?;

    // Epoch 2: `b` leads. The producer never got an answer for sequence 2 and retries it on
    // the new leader: `b` appends it (it never had it) ...
    b.replica().set_leader_epoch(2)?;
    assert!(matches!(
        b.append(&produce(2, "three")?)?,
        AppendOutcome::Appended(_)
    ));
    // ... while a retry of sequence 1, which `b` copied, is a duplicate there.
    assert!(matches!(
        b.append(&produce(1, "two")?)?,
        AppendOutcome::Duplicate(_)
    ));

    // `a` comes back as a follower: the new leader says where epoch 1 ended there, and `a`
    // truncates its unreplicated tail to that before copying.
    let last_epoch = a.replica().leader_epoch();
    let divergence = b.replica().end_offset_for_epoch(last_epoch);
    let cut = a.replica().truncate_to(divergence.end_offset)?;
    println!(
        "a truncated to {} (epoch {} ended there on b), {} bytes of its tail removed",
        divergence.end_offset, divergence.leader_epoch, cut.bytes_removed
    );
    replicate(&b, &a)?;

    // A third replica starts late, from the leader's current end: it gets the log start and the
    // producer state as of there (the dedup window survives the handoff), then copies on.
    let c = open(dirs[2].path())?;
    let start = b.log_end_offset();
    let snapshot = b.replica().producer_snapshot_at(start)?;
    c.replica()
        .truncate_fully_and_start_with(start, &snapshot)?;
    b.append(&produce(3, "four")?)?;
    replicate(&b, &c)?;
    replicate(&b, &a)?;
    println!("epoch 2: committed up to {}", commit(&b, &[&a, &c])?);
    // Were `c` to lead, a retry of a batch written before it existed would be a duplicate.
    assert!(matches!(
        c.append(&produce(3, "four")?)?,
        AppendOutcome::Duplicate(_)
    ));

    let values = |log: &Log| -> Result<Vec<String>> {
        let mut reader = log.reader(log.log_start_offset());
        let mut out = Vec::new();
        while let Some(record) = reader.next_record()? {
            out.push(
                String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned(),
            );
        }
        Ok(out)
    };
    println!("a: {:?}", values(&a)?);
    println!("b: {:?}", values(&b)?);
    println!("c: {:?}", values(&c)?);
    assert_eq!(values(&a)?, values(&b)?);
    assert_eq!(values(&a)?, ["one", "two", "three", "four"]);
    for log in [a, b, c] {
        log.close()?;
    }
    Ok(())
}
