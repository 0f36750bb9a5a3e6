//! Waking long-polling fetchers when a batch is appended.
//!
//! The broker is the only writer of its logs, so its produce path signals each partition after
//! every append. oncelog's `Log` is gaining a wait/notify API of its own; when it lands, only
//! this module changes: the fetch path sees nothing but [`AppendSignal::listen`] and
//! [`any_append`].

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

/// The per-partition signal that a batch was appended.
#[derive(Debug, Default)]
pub struct AppendSignal {
    notify: Arc<Notify>,
}

impl AppendSignal {
    /// Wakes every fetcher listening now. Callable from any thread (the appends run on
    /// blocking threads).
    pub fn appended(&self) {
        self.notify.notify_waiters();
    }

    /// A listener registered at once: an append that happens after this call wakes it, even if
    /// it happens before the listener is awaited. Listen first, then read the log, then wait:
    /// no append can slip between the read and the wait.
    pub fn listen(&self) -> AppendListener {
        let mut notified = Box::pin(Arc::clone(&self.notify).notified_owned());
        notified.as_mut().enable();
        AppendListener { notified }
    }
}

/// One registration for the next append of one partition.
#[derive(Debug)]
pub struct AppendListener {
    notified: Pin<Box<OwnedNotified>>,
}

/// Waits until one of the partitions behind `listeners` had an append, or until `deadline`.
/// Returns whether an append came. An empty set of listeners just waits for the deadline.
pub async fn any_append(listeners: &mut [AppendListener], deadline: Instant) -> bool {
    let woken = poll_fn(|cx| {
        for listener in listeners.iter_mut() {
            if listener.notified.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    });
    tokio::time::timeout_at(deadline.into(), woken)
        .await
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_append_between_listen_and_wait_is_not_lost() {
        let signal = AppendSignal::default();
        let mut listeners = vec![signal.listen()];
        signal.appended();
        let deadline = Instant::now() + Duration::from_secs(10);
        assert!(any_append(&mut listeners, deadline).await);
    }

    #[tokio::test]
    async fn any_partition_wakes_the_fetcher() {
        let (a, b) = (AppendSignal::default(), AppendSignal::default());
        let mut listeners = vec![a.listen(), b.listen()];
        b.appended();
        assert!(any_append(&mut listeners, Instant::now() + Duration::from_secs(10)).await);
    }

    #[tokio::test]
    async fn without_an_append_the_wait_ends_at_the_deadline() {
        let signal = AppendSignal::default();
        let mut listeners = vec![signal.listen()];
        let deadline = Instant::now() + Duration::from_millis(20);
        assert!(!any_append(&mut listeners, deadline).await);
        assert!(Instant::now() >= deadline);
    }
}
