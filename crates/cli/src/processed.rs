//! `oncelog processed`: a processed-id store (`oncelog::processed`) for programs in other
//! languages. `serve` answers one JSON request per line on stdin with one JSON line on stdout
//! (the consumers of the broker's exactly-once test are Python); `dump` prints what a store
//! holds.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use oncelog::processed::{Position, ProcessedConfig, ProcessedStore, Recorded};
use serde_json::{json, Value};

use crate::{CliError, Status};

#[derive(Debug, clap::Args)]
pub struct ProcessedArgs {
    #[command(subcommand)]
    pub op: Op,
}

#[derive(Debug, clap::Subcommand)]
pub enum Op {
    /// Serve the store in DIR: one JSON request per line on stdin, one JSON answer per line
    ///
    /// First line out: {"ready":true,"ids":N,"positions":{...}} or {"error":KIND,...} (exit 1,
    /// e.g. `locked` while another process has the store). Requests:
    /// {"op":"record","id":ID,"source":S,"offset":P,"effect":E} answers {"new":true,"offset":O}
    /// (recorded and durable: apply the effect) or {"new":false,"offset":O} (already handled);
    /// {"op":"handled","id":ID} answers {"handled":B}; {"op":"position","source":S} answers
    /// {"position":P|null}. A refused request answers {"error":KIND,"message":M}. End of
    /// input closes the store.
    Serve {
        dir: PathBuf,
        /// Forget ids this long after they were handled.
        #[arg(long)]
        forget_after_ms: Option<i64>,
        /// Keep at most this many ids.
        #[arg(long)]
        max_ids: Option<usize>,
    },
    /// Print every handled id with its effect, then every position, one JSON object per line
    Dump { dir: PathBuf },
}

pub fn run(args: &ProcessedArgs) -> Result<Status, CliError> {
    match &args.op {
        Op::Serve {
            dir,
            forget_after_ms,
            max_ids,
        } => serve(dir, *forget_after_ms, *max_ids),
        Op::Dump { dir } => dump(dir),
    }
}

fn emit(out: &mut impl Write, v: &Value) -> Result<(), CliError> {
    writeln!(out, "{v}")?;
    out.flush()?;
    Ok(())
}

fn error(e: &oncelog::processed::ProcessedError) -> Value {
    json!({"error": e.kind(), "message": e.to_string()})
}

fn serve(
    dir: &PathBuf,
    forget_after_ms: Option<i64>,
    max_ids: Option<usize>,
) -> Result<Status, CliError> {
    let mut out = std::io::stdout().lock();
    let config = ProcessedConfig::default()
        .with_forget_after_ms(forget_after_ms)
        .with_max_ids(max_ids);
    let store = match ProcessedStore::open(dir, config) {
        Ok(s) => s,
        Err(e) => {
            emit(&mut out, &error(&e))?;
            return Ok(Status::Failed);
        }
    };
    let positions: serde_json::Map<String, Value> = store
        .positions()
        .into_iter()
        .map(|(s, p)| (s, json!(p)))
        .collect();
    emit(
        &mut out,
        &json!({"ready": true, "ids": store.memory().ids, "positions": positions}),
    )?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = match serde_json::from_str::<Value>(&line) {
            Err(e) => json!({"error": "bad_request", "message": e.to_string()}),
            Ok(req) => answer(&store, &req),
        };
        emit(&mut out, &answer)?;
    }
    store.close()?;
    Ok(Status::Ok)
}

fn answer(store: &ProcessedStore, req: &Value) -> Value {
    let text = |field: &str| req[field].as_str().unwrap_or_default().to_string();
    match req["op"].as_str() {
        Some("record") => {
            let Some(offset) = req["offset"].as_i64() else {
                return json!({"error": "bad_request", "message": "record needs an integer offset"});
            };
            let source = text("source");
            let position = Position {
                source: &source,
                offset,
            };
            match store.record(text("id").as_bytes(), position, text("effect").as_bytes()) {
                Ok(Recorded::New { offset, .. }) => json!({"new": true, "offset": offset}),
                Ok(Recorded::AlreadyHandled { offset }) => json!({"new": false, "offset": offset}),
                Ok(other) => json!({"error": "unknown_outcome", "message": format!("{other:?}")}),
                Err(e) => error(&e),
            }
        }
        Some("handled") => json!({"handled": store.is_handled(text("id").as_bytes())}),
        Some("position") => json!({"position": store.position(&text("source"))}),
        other => json!({"error": "bad_request", "message": format!("unknown op {other:?}")}),
    }
}

fn dump(dir: &PathBuf) -> Result<Status, CliError> {
    crate::require_dir(dir)?;
    let store = ProcessedStore::open(dir, ProcessedConfig::default())?;
    let mut out = std::io::stdout().lock();
    for h in store.handled_ids() {
        let effect = store.effect(&h.id)?.unwrap_or_default();
        emit(
            &mut out,
            &json!({
                "id": String::from_utf8_lossy(&h.id),
                "offset": h.offset,
                "handled_at_ms": h.handled_at_ms,
                "effect": String::from_utf8_lossy(&effect),
            }),
        )?;
    }
    for (source, position) in store.positions() {
        emit(&mut out, &json!({"source": source, "position": position}))?;
    }
    store.close()?;
    Ok(Status::Ok)
}
