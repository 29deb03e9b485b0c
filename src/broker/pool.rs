//! The worker pool that runs `tool.call` messages off the event loop thread. Each result goes
//! back over a channel and wakes the loop through its `mio::Waker`. One worker starts with the
//! pool; more (up to [`WORKERS`]) start only when calls queue up, so an invocation that makes
//! few or no tool calls does not pay for eight threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;

use mio::{Token, Waker};

use crate::broker::dispatch::{self, Shared};
use crate::broker::jsonrpc::Message;

/// Worker threads per invocation: tool calls block on I/O (HTTP, Bash), so more than the core
/// count, but few enough that a burst cannot exhaust the sandbox-independent broker.
const WORKERS: usize = 8;

type Job = (Token, Message);

/// What a new worker needs.
#[derive(Clone)]
struct Context {
    jobs: Arc<Mutex<mpsc::Receiver<Job>>>,
    shared: Arc<Shared>,
    results: mpsc::Sender<(Token, Option<Vec<u8>>)>,
    waker: Arc<Waker>,
    /// Jobs sent and not yet taken by a worker.
    queued: Arc<AtomicUsize>,
    /// Workers waiting for a job.
    idle: Arc<AtomicUsize>,
}

pub struct Pool {
    jobs: mpsc::Sender<Job>,
    context: Context,
    workers: usize,
}

impl Pool {
    pub fn new(
        shared: Arc<Shared>,
        results: mpsc::Sender<(Token, Option<Vec<u8>>)>,
        waker: Arc<Waker>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let context = Context {
            jobs: Arc::new(Mutex::new(rx)),
            shared,
            results,
            waker,
            queued: Arc::default(),
            idle: Arc::default(),
        };
        // The first worker must exist (a call queued without any worker would never run);
        // the others are best effort.
        spawn(context.clone(), 0)?;
        Ok(Self {
            jobs: tx,
            context,
            workers: 1,
        })
    }

    pub fn submit(&mut self, token: Token, message: Message) {
        let queued = self.context.queued.fetch_add(1, Ordering::SeqCst) + 1;
        if queued > self.context.idle.load(Ordering::SeqCst) && self.workers < WORKERS {
            match spawn(self.context.clone(), self.workers) {
                Ok(()) => self.workers += 1,
                Err(e) => tracing::warn!("failed to start another tool worker: {e}"),
            }
        }
        // Workers only stop when the pool is dropped, so the send cannot fail here.
        let _sent = self.jobs.send((token, message));
    }
}

/// Starts worker `i`. Workers are detached: they end when the job channel closes, and a tool
/// still running when the invocation ends must not hold the broker up (tools bound themselves
/// by the deadline).
fn spawn(cx: Context, i: usize) -> std::io::Result<()> {
    thread::Builder::new()
        .name(format!("cyberos-tool-{i}"))
        .spawn(move || {
            loop {
                cx.idle.fetch_add(1, Ordering::SeqCst);
                let job = cx
                    .jobs
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .recv();
                cx.idle.fetch_sub(1, Ordering::SeqCst);
                let Ok((token, message)) = job else { return };
                cx.queued.fetch_sub(1, Ordering::SeqCst);
                let response = dispatch::handle(&cx.shared, message);
                if cx.results.send((token, response)).is_err() {
                    return;
                }
                if let Err(e) = cx.waker.wake() {
                    tracing::warn!("failed to wake the broker loop: {e}");
                }
            }
        })
        .map(drop)
}
