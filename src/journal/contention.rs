//! Many writers, one journal. Inside a process, the broker's worker threads share one connection:
//! rows that arrive while another thread is committing are written together in the next
//! transaction (group commit), so N concurrent tool calls cost one commit instead of N queued ones.
//! Across processes, SQLite's write lock is retried with short sleeps instead of SQLite's default
//! busy handler, whose first waits are whole milliseconds: a lock held for 50 µs must not idle a
//! waiter for 1 ms.
//!
//! A row is never reported written before the transaction holding it has committed.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::store::{BUSY_TIMEOUT, JournalError};

/// A row waiting for its commit.
pub(super) struct Pending {
    pub kind: String,
    pub invocation_id: String,
    pub payload_json: String,
}

/// The rows waiting to be written, and the results of those already written.
#[derive(Default)]
struct Queue {
    next_ticket: u64,
    pending: Vec<(u64, Pending)>,
    done: HashMap<u64, Result<i64, JournalError>>,
    /// A thread is writing a batch right now.
    writing: bool,
    /// Threads waiting for their row's result (a lone writer wakes nobody).
    waiting: usize,
}

/// The group-commit queue of one journal connection.
#[derive(Default)]
pub(super) struct GroupCommit {
    queue: Mutex<Queue>,
    written: Condvar,
}

impl GroupCommit {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Nothing in the queue is left half-updated by a panic (every change is one statement).
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `row` with whatever else is waiting, and returns its seq once committed.
    /// `write_batch` runs on the calling thread when no other thread is writing; it must return
    /// one result per row, in order.
    pub fn append(
        &self,
        row: Pending,
        write_batch: impl Fn(&[Pending]) -> Vec<Result<i64, JournalError>>,
    ) -> Result<i64, JournalError> {
        let mut queue = self.queue();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.pending.push((ticket, row));
        loop {
            if let Some(result) = queue.done.remove(&ticket) {
                return result;
            }
            if !queue.writing {
                break;
            }
            queue.waiting += 1;
            queue = self
                .written
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
            queue.waiting -= 1;
        }
        // This thread writes everything queued so far, its own row included.
        queue.writing = true;
        let batch = std::mem::take(&mut queue.pending);
        drop(queue);
        let (tickets, rows): (Vec<u64>, Vec<Pending>) = batch.into_iter().unzip();
        let results = write_batch(&rows);
        let mut queue = self.queue();
        queue.writing = false;
        queue.done.extend(tickets.into_iter().zip(results));
        let mine = queue.done.remove(&ticket);
        let wake = queue.waiting > 0;
        drop(queue);
        if wake {
            self.written.notify_all();
        }
        mine.unwrap_or_else(|| Err(JournalError::Write(rusqlite::Error::InvalidQuery)))
    }
}

/// The busy handler of every journal connection: retries a locked journal for up to
/// [`BUSY_TIMEOUT`], sleeping 20 µs at first and at most 1 ms between attempts.
pub(super) fn busy_handler() -> impl FnMut(i32) -> bool + Send + 'static {
    let mut since = Instant::now();
    move |attempt| {
        if attempt == 0 {
            since = Instant::now();
        }
        if since.elapsed() >= BUSY_TIMEOUT {
            return false;
        }
        let micros = 20u64 << attempt.clamp(0, 6) as u32;
        std::thread::sleep(Duration::from_micros(micros.min(1_000)));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn concurrent_rows_share_batches_and_each_gets_its_own_result() {
        let group = Arc::new(GroupCommit::default());
        let batches = Arc::new(AtomicUsize::new(0));
        let seq = Arc::new(Mutex::new(0i64));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (group, batches, seq) = (group.clone(), batches.clone(), seq.clone());
                std::thread::spawn(move || {
                    (0..200)
                        .map(|i| {
                            let row = Pending {
                                kind: "k".into(),
                                invocation_id: format!("{t}"),
                                payload_json: format!("{i}"),
                            };
                            group
                                .append(row, |rows| {
                                    batches.fetch_add(1, Ordering::Relaxed);
                                    std::thread::sleep(Duration::from_micros(50));
                                    let mut seq = seq.lock().unwrap();
                                    rows.iter()
                                        .map(|r| {
                                            *seq += 1;
                                            // An odd row fails on its own, the others not.
                                            if r.payload_json == "13" && r.invocation_id == "3" {
                                                Err(JournalError::Write(
                                                    rusqlite::Error::InvalidQuery,
                                                ))
                                            } else {
                                                Ok(*seq)
                                            }
                                        })
                                        .collect()
                                })
                                .map_err(|_| (t, i))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut seqs = Vec::new();
        let mut failed = Vec::new();
        for t in threads {
            for r in t.join().unwrap() {
                match r {
                    Ok(s) => seqs.push(s),
                    Err(e) => failed.push(e),
                }
            }
        }
        assert_eq!(failed, vec![(3, 13)]);
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), 8 * 200 - 1, "every row got its own seq");
        assert!(
            batches.load(Ordering::Relaxed) < 8 * 200,
            "concurrent rows were batched"
        );
    }
}
