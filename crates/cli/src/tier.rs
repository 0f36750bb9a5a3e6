//! `oncelog tier status DIR (--store ROOT | --store-url URL) --prefix PREFIX`: where a tiered
//! partition's segments are, local, remote or both, from its directory and the manifest in an
//! object store: one kept on the local file system (`oncelog-tier`'s
//! `ObjectStoreRemote::local`) or one named by a URL (`s3://`, `gs://`, `az://`, `file://`, as
//! `oncelog-broker --tier-url` takes it; docs/design.md, "Tiered storage"). Read-only: it
//! opens no log and writes nothing, in the directory or the store.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use oncelog::files::{parse_file_name, LOG_EXT};
use oncelog::tier::{self, Manifest, SegmentObject, TierError};
use oncelog_tier::ObjectStoreRemote;
use serde::Serialize;

use crate::output::Out;
use crate::{plural, CliError, Status};

#[derive(Debug, Args)]
pub struct TierArgs {
    #[command(subcommand)]
    pub op: Op,
}

#[derive(Debug, clap::Subcommand)]
pub enum Op {
    /// Where each segment of a tiered partition is: local, remote or both
    ///
    /// Lists the segments of DIR (one `.log` each) against the manifest under PREFIX in the
    /// object store kept in the directory ROOT, or named by URL. A local sealed segment the
    /// manifest names with other offsets or another size is DIFFERS: exit 1, as for a manifest
    /// that cannot be used. Exits 2 when DIR or ROOT cannot be read, or the store cannot be
    /// set up or reached. One line per segment, or one JSON object with --json.
    Status {
        /// The partition directory.
        dir: PathBuf,
        /// The object store's root directory (a local file system store).
        #[arg(
            long,
            required_unless_present = "store_url",
            conflicts_with = "store_url"
        )]
        store: Option<PathBuf>,
        /// The object store as a URL (`s3://BUCKET/PATH`, `gs://`, `az://`, `file:///DIR`),
        /// credentials from the environment (`AWS_ACCESS_KEY_ID`, ...).
        #[arg(long, value_name = "URL")]
        store_url: Option<String>,
        /// One setting of the --store-url store, `KEY=VALUE`, repeated (`endpoint`, `region`,
        /// `allow_http`, ...: `oncelog-broker --tier-option`'s keys).
        #[arg(
            long = "store-option",
            value_name = "KEY=VALUE",
            requires = "store_url"
        )]
        store_options: Vec<String>,
        /// The partition's key prefix in the store (a log manager's: `<root>/<topic>-<n>`).
        #[arg(long)]
        prefix: String,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Serialize)]
struct Report {
    dir: String,
    prefix: String,
    /// The manifest's generation, `null` without one.
    generation: Option<u64>,
    /// The partition's log start offset the manifest records (DeleteRecords and retention
    /// across tiers move it), `null` without one.
    log_start_offset: Option<i64>,
    /// The offsets the remote segments hold, `[start, end)`.
    remote: Option<(i64, i64)>,
    remote_bytes: u64,
    segments: Vec<Line>,
}

#[derive(Serialize)]
struct Line {
    base_offset: i64,
    /// The next segment's base; `null` for the last local segment (the active one).
    end_offset: Option<i64>,
    /// `remote`, `local`, `both` or `differs`.
    place: &'static str,
    local_bytes: Option<u64>,
    remote_bytes: Option<u64>,
    upload_id: Option<String>,
}

pub fn run(args: &TierArgs) -> Result<Status, CliError> {
    let Op::Status {
        dir,
        store,
        store_url,
        store_options,
        prefix,
        json,
    } = &args.op;
    crate::require_dir(dir)?;
    crate::require_log(dir)?;
    let remote = match (store, store_url) {
        (Some(root), _) => {
            // Never created by a status: the store's root must be there.
            crate::require_dir(root)?;
            ObjectStoreRemote::local(root)?
        }
        (None, Some(url)) => {
            let mut options = Vec::new();
            for o in store_options {
                let (k, v) = o
                    .split_once('=')
                    .ok_or_else(|| CliError(format!("--store-option {o:?}: must be KEY=VALUE")))?;
                options.push((k.to_string(), v.to_string()));
            }
            ObjectStoreRemote::from_url(url, &options)?
        }
        (None, None) => return Err(CliError("--store or --store-url is needed".into())),
    };
    let manifest = match tier::read_manifest(&remote, prefix) {
        Ok(m) => m,
        Err(e @ (TierError::BadManifest { .. } | TierError::BadPartitionPrefix { .. })) => {
            println!("PROBLEM {e}");
            return Ok(Status::Failed);
        }
        Err(e) => return Err(CliError(e.to_string())),
    };
    let report = report(dir, prefix, &local_segments(dir)?, manifest.as_ref());
    let differs = report.segments.iter().any(|l| l.place == "differs");
    let mut out = Out::stdout();
    if *json {
        out.json(&report)?;
    } else {
        print_text(&mut out, &report)?;
    }
    out.flush()?;
    Ok(if differs { Status::Failed } else { Status::Ok })
}

/// The `.log` files of `dir`: base offset and length.
fn local_segments(dir: &std::path::Path) -> Result<BTreeMap<i64, u64>, CliError> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(p) = parse_file_name(&name).filter(|p| p.suffix.is_none() && p.ext == LOG_EXT) {
            out.insert(p.offset, entry.metadata()?.len());
        }
    }
    Ok(out)
}

fn report(
    dir: &std::path::Path,
    prefix: &str,
    local: &BTreeMap<i64, u64>,
    manifest: Option<&Manifest>,
) -> Report {
    let remote_segments = manifest.map_or(&[][..], |m| &m.segments[..]);
    let mut lines: BTreeMap<i64, Line> = BTreeMap::new();
    for s in remote_segments {
        lines.insert(
            s.base_offset,
            Line {
                base_offset: s.base_offset,
                end_offset: Some(s.end_offset),
                place: "remote",
                local_bytes: None,
                remote_bytes: Some(s.object(SegmentObject::Log).size),
                upload_id: Some(s.upload_id.to_string()),
            },
        );
    }
    let bases: Vec<i64> = local.keys().copied().collect();
    for (i, (&base, &bytes)) in local.iter().enumerate() {
        let end = bases.get(i + 1).copied();
        match lines.get_mut(&base) {
            Some(l) => {
                let same = l.end_offset == end && l.remote_bytes == Some(bytes);
                l.place = if same { "both" } else { "differs" };
                l.local_bytes = Some(bytes);
            }
            None => {
                lines.insert(
                    base,
                    Line {
                        base_offset: base,
                        end_offset: end,
                        place: "local",
                        local_bytes: Some(bytes),
                        remote_bytes: None,
                        upload_id: None,
                    },
                );
            }
        }
    }
    Report {
        dir: dir.display().to_string(),
        prefix: prefix.to_string(),
        generation: manifest.map(|m| m.generation),
        log_start_offset: manifest.map(|m| m.log_start_offset),
        remote: remote_segments
            .first()
            .zip(remote_segments.last())
            .map(|(a, b)| (a.base_offset, b.end_offset)),
        remote_bytes: remote_segments.iter().map(|s| s.bytes()).sum(),
        segments: lines.into_values().collect(),
    }
}

fn print_text(out: &mut Out, r: &Report) -> std::io::Result<()> {
    match (r.generation, r.remote) {
        (Some(g), Some((start, end))) => out.line(&format!(
            "remote: offsets [{start}, {end}) in {}, {} bytes (manifest generation {g})",
            plural(
                r.segments
                    .iter()
                    .filter(|l| l.remote_bytes.is_some())
                    .count() as u64,
                "segment",
                "segments"
            ),
            r.remote_bytes
        ))?,
        (Some(g), None) => out.line(&format!("remote: no segment (manifest generation {g})"))?,
        _ => out.line(&format!("remote: no manifest under {}", r.prefix))?,
    }
    if let Some(start) = r.log_start_offset {
        out.line(&format!("log start offset: {start} (across tiers)"))?;
    }
    for l in &r.segments {
        let end = l
            .end_offset
            .map_or("(active)".to_string(), |e| e.to_string());
        let place = match l.place {
            "both" => "local and remote",
            "differs" => "DIFFERS: the manifest names other offsets or another size",
            other => other,
        };
        let bytes = l.local_bytes.or(l.remote_bytes).unwrap_or(0);
        out.line(&format!(
            "SEGMENT {} {end} {bytes} bytes: {place}",
            l.base_offset
        ))?;
    }
    Ok(())
}
