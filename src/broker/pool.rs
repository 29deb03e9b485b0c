//! The worker pool that runs `tool.call` messages off the event loop thread. Each result goes
//! back over a channel and wakes the loop through its `mio::Waker`.

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

pub struct Pool {
    jobs: mpsc::Sender<Job>,
}

impl Pool {
    pub fn new(
        shared: Arc<Shared>,
        results: mpsc::Sender<(Token, Option<Vec<u8>>)>,
        waker: Arc<Waker>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        // Workers are detached: they end when the job channel closes, and a tool still running
        // when the invocation ends must not hold the broker up (tools bound themselves by the
        // deadline).
        for i in 0..WORKERS {
            let rx = Arc::clone(&rx);
            let shared = Arc::clone(&shared);
            let results = results.clone();
            let waker = Arc::clone(&waker);
            thread::Builder::new()
                .name(format!("cyberos-tool-{i}"))
                .spawn(move || {
                    loop {
                        let job = rx
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .recv();
                        let Ok((token, message)) = job else { return };
                        let response = dispatch::handle(&shared, message);
                        if results.send((token, response)).is_err() {
                            return;
                        }
                        if let Err(e) = waker.wake() {
                            tracing::warn!("failed to wake the broker loop: {e}");
                        }
                    }
                })?;
        }
        Ok(Self { jobs: tx })
    }

    pub fn submit(&self, token: Token, message: Message) {
        // Workers only stop when the pool is dropped, so the send cannot fail here.
        let _sent = self.jobs.send((token, message));
    }
}
