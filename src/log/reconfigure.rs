//! Settings changed while a log is open: Kafka's dynamic topic configurations
//! ([`Log::reconfigure`]).

use std::sync::Arc;

use super::config::ConfigError;
use super::{jitter, Log, LogConfig};

impl Log {
    /// Replaces the log's settings while it stays open, as Kafka applies a topic's altered
    /// configuration: retention (`retention_bytes`, `retention_ms`, `file_delete_delay_ms`)
    /// and compaction (`cleanup_policy`, `compaction`) at their next run, `max_message_bytes`
    /// and `message_timestamp_type` from the next append, the segment settings
    /// (`segment_bytes`, `segment_ms`, `segment_jitter_ms`, `segment_index_bytes`,
    /// `index_interval_bytes`) from the next roll (a smaller `segment_bytes` rolls the active
    /// segment at the next append that would pass it).
    ///
    /// The other settings shape the files, the memory or the recovery of an open log and are
    /// refused here: [`ConfigError`] names the first that differs, and nothing changes (reopen
    /// the log with it). A configuration that fails [`LogConfig::validate`] is refused the same
    /// way. Appends and rewrites see one configuration each: the change is made under the
    /// append lock.
    pub fn reconfigure(&self, config: LogConfig) -> Result<(), ConfigError> {
        config.validate()?;
        let mut st = self.append.lock();
        fixed_settings_unchanged(&st.config, &config)?;
        let now = self.env.clock.now_ms();
        st.roll_jitter_ms = jitter(config.segment_jitter_ms.min(config.segment_ms), now);
        let config = Arc::new(config);
        *self.config.write() = Arc::clone(&config);
        st.config = config;
        Ok(())
    }
}

impl Log {
    /// Whether [`Log::reconfigure`] would take `config` (its fixed settings unchanged), without
    /// changing anything.
    pub(crate) fn check_reconfigure(&self, config: &LogConfig) -> Result<(), ConfigError> {
        fixed_settings_unchanged(&self.config.read(), config)
    }
}

/// Refuses a change to a setting that cannot change while the log is open. The macro
/// destructures the whole `LogConfig` from its two lists, so a new setting must be placed in
/// one of them before this compiles.
fn fixed_settings_unchanged(old: &LogConfig, new: &LogConfig) -> Result<(), ConfigError> {
    macro_rules! settings {
        (live: [$($live:ident),* $(,)?], fixed: [$($fixed:ident),* $(,)?]) => {{
            let LogConfig { $($live: _,)* $($fixed,)* } = old;
            $(
                if *$fixed != new.$fixed {
                    return Err(ConfigError {
                        field: stringify!($fixed),
                        value: format!("{:?}", new.$fixed),
                        rule: format!(
                            "cannot change while the log is open (it is {:?}); reopen the log \
                             with it",
                            $fixed
                        ),
                    });
                }
            )*
        }};
    }
    settings!(
        // Read where they are used, from the configuration of the moment.
        live: [
            segment_bytes,
            segment_ms,
            segment_jitter_ms,
            segment_index_bytes,
            index_interval_bytes,
            max_message_bytes,
            message_timestamp_type,
            retention_bytes,
            retention_ms,
            file_delete_delay_ms,
            cleanup_policy,
            compaction,
        ],
        // They shaped the open log's files, memory or recovery.
        fixed: [
            allocation_step_bytes,
            preallocation,
            append_writes,
            recycled_segments,
            max_mapped_segments,
            max_decompressed_bytes,
            high_watermark,
            flush_policy,
            recovery_mode,
            deep_recovery,
            producer_state,
            snapshot_version,
            prefault_bytes,
            snapshot_interval_bytes,
        ]
    );
    Ok(())
}
