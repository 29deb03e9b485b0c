//! Case 2, decomposed: the broker's per-call work without the socket, the event loop or the
//! worker pool. `cyberos::broker::dispatch::handle` on a real `Shared` (policy, registry,
//! journal in a fresh home) for the same frames the client sends; what is left of the round
//! trip is IPC and thread hand-offs. Also the target of `suite __profile dispatch N` (for perf
//! or callgrind).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cyberos::broker::dispatch::{self, Shared};
use cyberos::broker::jsonrpc;
use cyberos::journal::Journal;
use cyberos::util::TraceContext;

use crate::client::DOC_PATH;
use crate::common::{self, Workspace};
use crate::stats::Summary;

pub struct Harness {
    shared: Shared,
    _ws: Workspace,
}

impl Harness {
    pub fn new() -> Self {
        let ws = Workspace::new("dispatch");
        let home = ws.home("home");
        let doc = home.join("memory").join(DOC_PATH);
        std::fs::create_dir_all(doc.parent().expect("parent")).expect("memory dir");
        std::fs::write(&doc, "m".repeat(1024)).expect("write the document");
        let mut inv = common::invocation(Vec::new(), vec!["bench/**".into()], home.join("memory"));
        inv.journal = Some(Arc::new(Journal::open(&home).expect("open the journal")));
        let now = cyberos::util::now_ms();
        let shared = Shared::new(
            inv,
            cyberos::tools::registry(),
            false,
            TraceContext::new_root(),
            now,
            now + Duration::from_secs(3600).as_millis() as i64,
            false,
        );
        Self { shared, _ws: ws }
    }

    /// Handles one frame body; returns the response body.
    pub fn handle(&self, body: &[u8]) -> Vec<u8> {
        dispatch::handle(&self.shared, jsonrpc::parse(body)).expect("a response")
    }
}

pub const MEMORY_READ: &[u8] = br#"{"jsonrpc":"2.0","id":7,"method":"tool.call","params":{"tool":"MemoryRead","args":{"path":"bench/doc-1k.md"}}}"#;
pub const TOOL_LIST: &[u8] = br#"{"jsonrpc":"2.0","id":7,"method":"tool.list","params":{}}"#;

/// Microseconds per call of `body`, in batches of 100 calls (one sample per batch).
pub fn measure(h: &Harness, body: &[u8], batches: usize) -> Summary {
    let check = String::from_utf8(h.handle(body)).expect("UTF-8");
    assert!(check.contains("\"result\""), "dispatch failed: {check}");
    let mut samples = Vec::with_capacity(batches);
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..100 {
            std::hint::black_box(h.handle(body));
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6 / 100.0);
    }
    Summary::of(&samples)
}

/// `__profile dispatch N`: N MemoryRead calls in a row, for a profiler.
pub fn profile(n: usize) {
    let h = Harness::new();
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(h.handle(MEMORY_READ));
    }
    eprintln!(
        "{n} MemoryRead dispatches: {:.1} us each",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
