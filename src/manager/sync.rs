//! A log dir's sync pool: makes many partitions durable at once, their syncs issued in
//! parallel from a few threads (docs/design.md, "Many partitions: one sync per partition,
//! issued in parallel").
//!
//! Each partition is its own files, so each needs its own sync; what a caller holding many
//! dirty partitions (a broker answering one acks=all produce request over many partitions, the
//! flush job) must not do is issue them in turn: one at a time a device does a few hundred to a
//! few thousand syncs a second, several thousand with many in flight (docs/benchmarks.md). The
//! pool's threads are spawned as work needs them, up to the manager's `sync_threads` per log
//! dir, and each runs `Log::flush_to`, the log's group commit: a partition that many callers
//! wait on is synced once for all of them, and its recovery point moves only after its own
//! sync, as with any flush.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::log::{FlushError, Log};

/// One log dir's sync threads.
pub(crate) struct SyncPool {
    shared: Arc<Shared>,
    max_threads: usize,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    stopped: bool,
}

/// One partition to make durable below `to`, the `slot`-th answer of `batch`.
struct Job {
    log: Arc<Log>,
    to: i64,
    slot: usize,
    batch: Arc<Batch>,
}

/// The answers of one call, and the wait for the last of them.
pub(crate) struct Batch {
    state: Mutex<BatchState>,
    done: Condvar,
}

struct BatchState {
    left: usize,
    results: Vec<Option<Result<(), FlushError>>>,
}

impl Batch {
    /// A batch expecting `n` answers.
    pub(crate) fn new(n: usize) -> Arc<Batch> {
        Arc::new(Batch {
            state: Mutex::new(BatchState {
                left: n,
                results: (0..n).map(|_| None).collect(),
            }),
            done: Condvar::new(),
        })
    }

    /// Records the answer for `slot` (a slot that is not the batch's own is ignored).
    pub(crate) fn answer(&self, slot: usize, result: Result<(), FlushError>) {
        let mut state = self.state.lock();
        if let Some(r) = state.results.get_mut(slot) {
            if r.replace(result).is_none() {
                state.left -= 1;
            }
        }
        if state.left == 0 {
            self.done.notify_all();
        }
    }

    /// Waits for every answer, in slot order.
    pub(crate) fn wait(&self) -> Vec<Result<(), FlushError>> {
        let mut state = self.state.lock();
        while state.left > 0 {
            self.done.wait(&mut state);
        }
        state.results.iter_mut().filter_map(Option::take).collect()
    }
}

impl SyncPool {
    pub(crate) fn new(max_threads: usize) -> SyncPool {
        SyncPool {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                work: Condvar::new(),
            }),
            max_threads: max_threads.max(1),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Queues `log`'s flush below `to` as answer `slot` of `batch`; a thread of the pool runs
    /// it (one is spawned if none is idle and the pool is not full). After [`SyncPool::stop`]
    /// the flush runs on the caller's thread.
    pub(crate) fn submit(&self, log: Arc<Log>, to: i64, slot: usize, batch: &Arc<Batch>) {
        let job = Job {
            log,
            to,
            slot,
            batch: Arc::clone(batch),
        };
        let spawn = {
            let mut queue = self.shared.queue.lock();
            if queue.stopped {
                drop(queue);
                return run(job);
            }
            queue.jobs.push_back(job);
            queue.jobs.len() > queue.idle
        };
        self.shared.work.notify_one();
        if spawn {
            self.spawn_if_room();
        }
    }

    fn spawn_if_room(&self) {
        let mut threads = self.threads.lock();
        if threads.len() >= self.max_threads {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("oncelog-sync".into())
            .spawn(move || work(&shared));
        // Without a new thread the queued job still runs: on a thread already there, or, with
        // none at all, on the caller's (an empty pool drains its queue here).
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(_) if threads.is_empty() => {
                drop(threads);
                let jobs: Vec<Job> = self.shared.queue.lock().jobs.drain(..).collect();
                jobs.into_iter().for_each(run);
            }
            Err(_) => {}
        }
    }

    /// Stops the threads once the queue is empty, and waits for them.
    pub(crate) fn stop(&self) {
        self.shared.queue.lock().stopped = true;
        self.shared.work.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for SyncPool {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A sync thread: runs jobs until the pool stops and the queue is empty.
fn work(shared: &Shared) {
    loop {
        let job = {
            let mut queue = shared.queue.lock();
            loop {
                if let Some(job) = queue.jobs.pop_front() {
                    break job;
                }
                if queue.stopped {
                    return;
                }
                queue.idle += 1;
                shared.work.wait(&mut queue);
                queue.idle -= 1;
            }
        };
        run(job);
    }
}

fn run(job: Job) {
    let result = job.log.flush_to(job.to);
    job.batch.answer(job.slot, result);
}
