//! The measuring client. The suite copies its own binary into a skill bundle and runs it as the
//! skill's `main` (`main __client ...`), so it runs inside a real invocation: full sandbox, the
//! real broker event loop, worker pool, enforcement and journal. It times each request itself and
//! prints its samples as one JSON line on stdout. The same code, outside any sandbox, drives the
//! echo server that stands for the floor.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use serde_json::json;

/// The 1 KiB memory document every MemoryRead asks for.
pub const DOC_PATH: &str = "bench/doc-1k.md";

struct Conn {
    stream: UnixStream,
    body: Vec<u8>,
    next_id: u64,
}

impl Conn {
    fn connect(path: &str) -> Self {
        let stream = UnixStream::connect(path).unwrap_or_else(|e| panic!("connect {path}: {e}"));
        Self {
            stream,
            body: Vec::with_capacity(4096),
            next_id: 1,
        }
    }

    fn send(&mut self, request: &str) {
        let mut frame = Vec::with_capacity(request.len() + 4);
        frame.extend_from_slice(&(request.len() as u32).to_be_bytes());
        frame.extend_from_slice(request.as_bytes());
        self.stream.write_all(&frame).expect("send a request");
    }

    /// Reads one response frame into `self.body`.
    fn recv(&mut self) {
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .expect("read a response length");
        let len = u32::from_be_bytes(len) as usize;
        self.body.resize(len, 0);
        self.stream
            .read_exact(&mut self.body)
            .expect("read a response body");
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn tool_list(&mut self) -> String {
        let id = self.id();
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tool.list","params":{{}}}}"#)
    }

    fn memory_read(&mut self) -> String {
        let id = self.id();
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tool.call","params":{{"tool":"MemoryRead","args":{{"path":"{DOC_PATH}"}}}}}}"#
        )
    }

    /// Asserts the last response was a success (checked outside the timed section).
    fn expect_result(&self, what: &str) {
        let text = std::str::from_utf8(&self.body).expect("UTF-8 response");
        assert!(
            text.contains("\"result\"") && !text.contains("\"error\""),
            "{what} failed: {text}"
        );
    }

    /// `n` sequential round trips of `make`'s request; latencies in microseconds.
    fn sequential(&mut self, n: usize, make: fn(&mut Self) -> String, what: &str) -> Vec<f64> {
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let request = make(self);
            let t = Instant::now();
            self.send(&request);
            self.recv();
            samples.push(t.elapsed().as_secs_f64() * 1e6);
            self.expect_result(what);
        }
        samples
    }

    /// `total` MemoryReads with `window` requests in flight on this one connection; seconds.
    fn pipelined(&mut self, total: usize, window: usize) -> f64 {
        let t = Instant::now();
        let mut sent = 0;
        let mut received = 0;
        while sent < total.min(window) {
            let r = self.memory_read();
            self.send(&r);
            sent += 1;
        }
        while received < total {
            self.recv();
            received += 1;
            self.expect_result("pipelined MemoryRead");
            if sent < total {
                let r = self.memory_read();
                self.send(&r);
                sent += 1;
            }
        }
        t.elapsed().as_secs_f64()
    }
}

fn socket() -> String {
    std::env::var("CYBEROS_BROKER_SOCKET").expect("CYBEROS_BROKER_SOCKET (run as a skill)")
}

fn arg(args: &[String], i: usize) -> usize {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("client argument {i} missing in {args:?}"))
}

/// `main __client MODE ...`; returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    let mode = args.first().map(String::as_str).unwrap_or("");
    let out = match mode {
        // Latency of tool.list and MemoryRead, then pipelined MemoryRead throughput.
        "rpc" => {
            let (n, total, window) = (arg(args, 1), arg(args, 2), arg(args, 3));
            let mut c = Conn::connect(&socket());
            // Warm up both paths (page cache, allocator, worker threads).
            c.sequential(200, Conn::tool_list, "tool.list");
            c.sequential(200, Conn::memory_read, "MemoryRead");
            let list = c.sequential(n, Conn::tool_list, "tool.list");
            let read = c.sequential(n, Conn::memory_read, "MemoryRead");
            let secs = c.pipelined(total, window);
            json!({"tool_list_us": list, "memory_read_us": read,
                   "pipelined_calls": total, "pipelined_secs": secs})
        }
        // The floor: the same request frames echoed back by a trivial server.
        "echo" => {
            let (path, n) = (args.get(1).expect("echo socket").clone(), arg(args, 2));
            let mut c = Conn::connect(&path);
            let mut samples = Vec::with_capacity(n);
            for i in 0..n + 200 {
                let request = c.tool_list();
                let t = Instant::now();
                c.send(&request);
                c.recv();
                if i >= 200 {
                    samples.push(t.elapsed().as_secs_f64() * 1e6);
                }
                assert_eq!(c.body, request.as_bytes(), "the echo differs");
            }
            json!({"echo_us": samples})
        }
        // `n` sequential MemoryReads as fast as possible (the concurrency and memory cases).
        "calls" | "hold" => {
            let n = arg(args, 1);
            let mut c = Conn::connect(&socket());
            let t = Instant::now();
            if n > 0 {
                c.sequential(n, Conn::memory_read, "MemoryRead");
            }
            let secs = t.elapsed().as_secs_f64();
            let line = json!({"calls": n, "secs": secs});
            println!("{line}");
            std::io::stdout().flush().expect("flush stdout");
            if mode == "hold" {
                // Keep the invocation (and the broker) alive until the suite has read the
                // broker's memory figures and closes our stdin.
                let mut sink = Vec::new();
                let _eof = std::io::stdin().read_to_end(&mut sink);
            }
            return 0;
        }
        other => {
            eprintln!("unknown client mode {other:?}");
            return 2;
        }
    };
    println!("{out}");
    0
}
