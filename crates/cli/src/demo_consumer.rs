//! `oncelog demo --consumer`: the consumer's half of exactly-once, told step by step
//! (docs/exactly-once.md).
//!
//! A topic partition (an oncelog log) holds orders. A consumer applies each order's side effect
//! and records it in a processed-id store (`oncelog::processed`: the id, the effect and the
//! consumer's next position in one atomic append), then commits its offset, as a Kafka consumer
//! with manual commits does. The consumer is a child process, killed with SIGKILL after the
//! side effect of one order and before its offset commit: the window in which a plain consumer
//! processes a message twice. On restart it resumes from the committed offset, so that order
//! is delivered again; the store answers that it was already handled, and its effect is not
//! applied a second time. Every answer is checked, and the demo exits 1 at the first one that
//! differs.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args;
use oncelog::format::BatchBuilder;
use oncelog::processed::{Position, ProcessedConfig, ProcessedStore, Recorded};
use oncelog::{Log, LogConfig};

use crate::output::Out;
use crate::{CliError, Status};

/// The child process of step 2 (not for direct use).
#[derive(Debug, Args)]
pub struct DemoConsumerChildArgs {
    dir: PathBuf,
    /// Stop (and wait to be killed) after applying this many orders, before committing the
    /// last one's offset.
    apply: usize,
}

const ORDERS: i64 = 6;
/// Orders the first consumer applies; it is killed before committing the last one's offset.
const FIRST_RUN: usize = 3;
const SOURCE: &str = "orders-0";
const TS: i64 = 1_700_000_000_000;

fn topic_dir(dir: &Path) -> PathBuf {
    dir.join(SOURCE)
}

fn store_dir(dir: &Path) -> PathBuf {
    dir.join("consumer-store")
}

/// The consumer group's committed offset (what Kafka's OffsetCommit keeps), as a file.
fn committed_path(dir: &Path) -> PathBuf {
    dir.join("committed-offset")
}

fn small() -> Result<LogConfig, CliError> {
    Ok(LogConfig::builder()
        .segment_bytes(1 << 20)
        .segment_index_bytes(64 << 10)
        .build()?)
}

fn store_config() -> Result<ProcessedConfig, CliError> {
    Ok(ProcessedConfig::default().with_log(small()?))
}

fn unexpected(what: impl std::fmt::Display) -> CliError {
    CliError(format!("UNEXPECTED: {what}"))
}

fn committed(dir: &Path) -> Result<i64, CliError> {
    match std::fs::read_to_string(committed_path(dir)) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| unexpected(format!("committed offset file holds {text:?}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Commits `offset` durably: a temporary file, fsync, rename.
fn commit(dir: &Path, offset: i64) -> Result<(), CliError> {
    let tmp = dir.join("committed-offset.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    std::io::Write::write_all(&mut f, offset.to_string().as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, committed_path(dir))?;
    Ok(())
}

/// What one pass of the consumer did with one delivered order.
enum Handled {
    Applied { id: String, offset: i64 },
    Skipped { id: String, offset: i64, first: i64 },
}

/// Consumes from the committed offset: for each order, the side effect and its record in the
/// store (one atomic append), then the offset commit. Stops after `apply` orders were applied
/// (`None`: at the end), before committing the last one.
fn consume(
    dir: &Path,
    apply: Option<usize>,
    mut each: impl FnMut(&Handled) -> Result<(), CliError>,
) -> Result<ProcessedStore, CliError> {
    let topic = Log::open(topic_dir(dir), small()?)?;
    let store = ProcessedStore::open(store_dir(dir), store_config()?)?;
    let mut next = committed(dir)?;
    let mut applied = 0;
    while next < topic.log_end_offset() {
        let fetched = topic.fetch(next, 64 << 10)?;
        for record in fetched.records() {
            let record = record?;
            let offset = record.offset;
            let id =
                String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned();
            let effect = format!("shipped {id}");
            let position = Position {
                source: SOURCE,
                offset: offset + 1,
            };
            let handled = match store.record(id.as_bytes(), position, effect.as_bytes())? {
                Recorded::New { .. } => Handled::Applied { id, offset },
                Recorded::AlreadyHandled { offset: first, .. } => {
                    Handled::Skipped { id, offset, first }
                }
                other => return Err(unexpected(format!("{other:?}"))),
            };
            each(&handled)?;
            if let Handled::Applied { .. } = handled {
                applied += 1;
                if apply == Some(applied) {
                    topic.close()?;
                    return Ok(store);
                }
            }
            commit(dir, offset + 1)?;
            next = offset + 1;
        }
        next = next.max(fetched.next_offset);
    }
    topic.close()?;
    Ok(store)
}

pub fn run(dir: &Path) -> Result<Status, CliError> {
    let mut out = Out::stdout();
    let mut say = |text: String| -> Result<(), CliError> {
        out.line(&text)?;
        out.flush()?;
        Ok(())
    };
    say(format!(
        "oncelog demo --consumer: a consumer killed between its side effect and its offset \
         commit, in {}",
        dir.display()
    ))?;

    say(format!(
        "step 1: a producer writes {ORDERS} orders to partition {SOURCE}"
    ))?;
    let topic = Log::open(topic_dir(dir), small()?)?;
    for i in 0..ORDERS {
        let mut b = BatchBuilder::new();
        b.append(TS + i, None, Some(format!("order-{i}").as_bytes()), &[]);
        topic.append(&b.build()?)?;
    }
    topic.close()?;

    say(format!(
        "step 2: a consumer process applies each order, records it in its processed-id store \
         (id, effect and next position in one atomic append), then commits its offset; it is \
         killed with SIGKILL after the side effect of order-{} and before that commit",
        FIRST_RUN - 1
    ))?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("demo-consumer-child")
        .arg(dir)
        .arg(FIRST_RUN.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let pid = child.id();
    let lines = read_until_waiting(&mut child);
    child.kill()?;
    let status = child.wait()?;
    for line in lines? {
        say(format!("  [pid {pid}] {line}"))?;
    }
    if !killed(&status) {
        return Err(unexpected(format!("the consumer was not killed: {status}")));
    }
    say(format!("  [pid {pid}] killed by SIGKILL"))?;
    let at = committed(dir)?;
    say(format!(
        "  the committed offset is {at}: order-{at} was applied but its offset never committed"
    ))?;
    if at != FIRST_RUN as i64 - 1 {
        return Err(unexpected(format!(
            "committed offset {at}, expected {}",
            FIRST_RUN - 1
        )));
    }

    say(format!(
        "step 3: the consumer restarts from the committed offset {at}: order-{at} is delivered \
         again"
    ))?;
    let mut skipped = 0;
    let store = consume(dir, None, |h| {
        match h {
            Handled::Applied { id, offset } => {
                say(format!("  offset {offset}: {id} applied and recorded"))?
            }
            Handled::Skipped { id, offset, first } => {
                skipped += 1;
                say(format!(
                    "  offset {offset}: {id} already handled (recorded at store offset \
                         {first}): its effect is not applied again"
                ))?
            }
        }
        Ok(())
    })?;
    if skipped != 1 {
        return Err(unexpected(format!(
            "{skipped} redelivered orders skipped, expected 1"
        )));
    }

    say("step 4: the effects, from the store: every order exactly once".to_string())?;
    let mut effects = Vec::new();
    for h in store.handled_ids() {
        let effect = store.effect(&h.id)?.unwrap_or_default();
        effects.push(String::from_utf8_lossy(&effect).into_owned());
    }
    for e in &effects {
        say(format!("  {e}"))?;
    }
    let expected: Vec<String> = (0..ORDERS).map(|i| format!("shipped order-{i}")).collect();
    if effects != expected {
        return Err(unexpected(format!(
            "effects {effects:?}, expected {expected:?}"
        )));
    }
    store.close()?;
    say("demo passed: the redelivered order was recognised and applied once".to_string())?;
    Ok(Status::Ok)
}

/// The child's lines up to `WAITING` (it has applied its orders and stopped before a commit).
fn read_until_waiting(child: &mut std::process::Child) -> Result<Vec<String>, CliError> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| CliError("the consumer has no stdout".into()))?;
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if line == "WAITING" {
            return Ok(lines);
        }
        lines.push(line);
    }
    Err(unexpected("the consumer exited before it stopped"))
}

#[cfg(unix)]
fn killed(status: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(9)
}

#[cfg(not(unix))]
fn killed(_status: &std::process::ExitStatus) -> bool {
    true
}

pub fn run_child(args: &DemoConsumerChildArgs) -> Result<Status, CliError> {
    let mut out = Out::stdout();
    let mut last = None;
    let store = consume(&args.dir, Some(args.apply), |h| {
        match h {
            Handled::Applied { id, offset } => {
                last = Some(*offset);
                out.line(&format!("offset {offset}: {id} applied and recorded"))?;
            }
            Handled::Skipped { id, offset, .. } => {
                out.line(&format!("offset {offset}: {id} already handled"))?;
            }
        }
        out.flush()?;
        Ok(())
    })?;
    if let Some(offset) = last {
        out.line(&format!(
            "offset {offset}: side effect done; the offset commit has not happened yet"
        ))?;
    }
    out.line("WAITING")?;
    out.flush()?;
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    // `exit` runs no destructors: the store is left unclosed, as a crash would leave it.
    let _unclosed = store;
    std::process::exit(2);
}
