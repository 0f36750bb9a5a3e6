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
    /// Connections closed idle (`connections.max.idle.ms`) or for a request that did not
    /// arrive whole within the read deadline.
    pub connections_timed_out: AtomicU64,
}

impl Stats {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Logs every counter as one structured line.
    /// `request_buffer_peak`: the most bytes the connections' read buffers held at once.
    pub fn log(&self, request_buffer_peak: u64) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        tracing::info!(
            connections = get(&self.connections),
            batches_appended = get(&self.batches_appended),
            duplicates = get(&self.duplicates),
            batches_refused = get(&self.batches_refused),
            malformed_requests = get(&self.malformed_requests),
            connections_timed_out = get(&self.connections_timed_out),
            request_buffer_peak,
            "broker stats"
        );
    }
}
