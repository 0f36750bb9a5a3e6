//! Counters of what the broker did, logged at shutdown (and readable by tests through the
//! log lines).

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Stats {
    pub connections: AtomicU64,
    pub batches_appended: AtomicU64,
    /// Retries answered with the original offsets.
    pub duplicates: AtomicU64,
    pub batches_refused: AtomicU64,
    pub malformed_requests: AtomicU64,
}

impl Stats {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Logs every counter as one structured line.
    pub fn log(&self) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        tracing::info!(
            connections = get(&self.connections),
            batches_appended = get(&self.batches_appended),
            duplicates = get(&self.duplicates),
            batches_refused = get(&self.batches_refused),
            malformed_requests = get(&self.malformed_requests),
            "broker stats"
        );
    }
}
