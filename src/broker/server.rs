//! The broker's event loop for one invocation, on `mio`: the listener, every connection from
//! inside the sandbox, the sandbox's exit (a pidfd), the deadline timers and the broker's own
//! SIGINT/SIGTERM. Tool calls run on a worker pool and come back through a `mio::Waker`, so a
//! slow tool never stalls timers, other connections or `broker.status`.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mio::net::{UnixListener, UnixStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use serde_json::json;

use crate::broker::dispatch::{self, MAX_REQUEST, Shared};
use crate::broker::frame::{self, Decoder, Frame};
use crate::broker::jsonrpc;
use crate::broker::pool::Pool;
use crate::journal::kind;
use crate::sandbox::{Exit, Sandbox};
use crate::telemetry;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const CHILD: Token = Token(2);
const SIGINT: Token = Token(3);
const SIGTERM: Token = Token(4);
const FIRST_CONN: usize = 16;

/// Stop reading from a connection whose unsent responses exceed this, until it drains.
const MAX_PENDING_OUT: usize = 64 * 1024 * 1024;
/// Requests of one connection running at once; more wait in the socket (backpressure).
const MAX_IN_FLIGHT_PER_CONN: usize = 64;
/// Requests running at once over all connections: each holds a parsed body of up to 1 MiB.
const MAX_IN_FLIGHT: usize = 256;
/// Connections open at once; a skill that opens more gets the extra ones closed.
const MAX_CONNS: usize = 64;
/// Bytes read from one connection before the loop turns to the others (fairness).
const READ_BUDGET: usize = 256 * 1024;
/// A skill that has not connected within this long gets a `skill.no_connect` row.
const NO_CONNECT_AFTER: Duration = Duration::from_secs(60);
/// After the broker itself is interrupted: at most this long between SIGTERM and SIGKILL.
const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// What the loop needs besides the dispatcher's shared state.
pub struct LoopInput {
    pub listener: UnixListener,
    pub sandbox: Sandbox,
    pub started: Instant,
    /// SIGTERM at 90 % of the budget.
    pub term_at: Instant,
    /// SIGKILL at 100 %.
    pub kill_at: Instant,
    /// Read ends of the self-pipes signal-hook writes to on SIGINT and SIGTERM.
    pub sigint: UnixStream,
    pub sigterm: UnixStream,
}

/// How the invocation ended, as the loop saw it.
#[derive(Debug, Clone, Copy)]
pub struct LoopOutcome {
    pub exit: Exit,
    /// The 90 % SIGTERM was sent (`Some(elapsed)`).
    pub deadline_fired: Option<Duration>,
    /// The 100 % SIGKILL was sent.
    pub deadline_killed: bool,
    /// The broker received SIGINT (2) or SIGTERM (15).
    pub interrupted: Option<i32>,
}

struct Conn {
    stream: UnixStream,
    decoder: Decoder,
    out: Vec<u8>,
    out_pos: usize,
    in_flight: usize,
    read_closed: bool,
    /// Reading stopped at a limit with data possibly left unread; resumed from `ready`.
    blocked: bool,
    writable: bool,
}

impl Conn {
    fn pending_out(&self) -> usize {
        self.out.len() - self.out_pos
    }

    fn done(&self) -> bool {
        self.read_closed && self.in_flight == 0 && self.pending_out() == 0
    }
}

struct Loop {
    poll: Poll,
    shared: Arc<Shared>,
    pool: Pool,
    results: mpsc::Receiver<(Token, Option<Vec<u8>>)>,
    conns: HashMap<Token, Conn>,
    /// Connections that may have unread input although no event will say so (mio is
    /// edge-triggered): read again before sleeping.
    ready: Vec<Token>,
    next_token: usize,
    in_flight: usize,
    connected_once: bool,
}

/// Runs the loop until the sandbox exits, then waits (bounded by the deadline) for tool calls
/// still running so that their completed rows are written.
pub fn run(shared: Arc<Shared>, mut input: LoopInput) -> io::Result<LoopOutcome> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let (tx, results) = mpsc::channel();
    let pool = Pool::new(Arc::clone(&shared), tx, waker)?;
    let registry = poll.registry();
    registry.register(&mut input.listener, LISTENER, Interest::READABLE)?;
    let pidfd: RawFd = input.sandbox.pidfd().as_raw_fd();
    registry.register(&mut SourceFd(&pidfd), CHILD, Interest::READABLE)?;
    registry.register(&mut input.sigint, SIGINT, Interest::READABLE)?;
    registry.register(&mut input.sigterm, SIGTERM, Interest::READABLE)?;

    let mut lp = Loop {
        poll,
        shared,
        pool,
        results,
        conns: HashMap::new(),
        ready: Vec::new(),
        next_token: FIRST_CONN,
        in_flight: 0,
        connected_once: false,
    };
    let mut outcome = LoopOutcome {
        exit: Exit::Code(0),
        deadline_fired: None,
        deadline_killed: false,
        interrupted: None,
    };
    let no_connect_at = input.started + NO_CONNECT_AFTER;
    let mut no_connect_done = false;
    let mut interrupt_kill_at: Option<Instant> = None;
    let mut events = Events::with_capacity(256);

    let exit = loop {
        let now = Instant::now();
        // Timers first, so a busy loop can never starve them.
        if outcome.deadline_fired.is_none() && now >= input.term_at {
            outcome.deadline_fired = Some(now - input.started);
            input.sandbox.terminate();
        }
        if !outcome.deadline_killed && now >= input.kill_at {
            outcome.deadline_killed = true;
            input.sandbox.kill();
        }
        if interrupt_kill_at.is_some_and(|at| now >= at) {
            interrupt_kill_at = None;
            input.sandbox.kill();
        }
        if !no_connect_done && now >= no_connect_at {
            no_connect_done = true;
            if !lp.connected_once {
                let waited = NO_CONNECT_AFTER.as_millis() as u64;
                let _unaudited = lp.shared.record(
                    kind::NO_CONNECT,
                    &lp.shared.trace,
                    json!({"waited_ms": waited}),
                );
            }
        }
        if let Some(exit) = input.sandbox.try_wait()? {
            break exit;
        }

        let mut next = input.kill_at;
        if outcome.deadline_fired.is_none() {
            next = next.min(input.term_at);
        }
        if !no_connect_done {
            next = next.min(no_connect_at);
        }
        if let Some(at) = interrupt_kill_at {
            next = next.min(at);
        }
        let timeout = if !lp.ready.is_empty() {
            Duration::ZERO
        } else if outcome.deadline_killed {
            // Only waiting for the killed sandbox to be reaped now.
            Duration::from_millis(50)
        } else {
            next.saturating_duration_since(Instant::now())
        };
        match lp.poll.poll(&mut events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for event in &events {
            match event.token() {
                LISTENER => lp.accept(&input.listener, &input.sandbox)?,
                WAKER => lp.drain_results(),
                CHILD => {}
                SIGINT | SIGTERM => {
                    let (pipe, sig) = if event.token() == SIGINT {
                        (&mut input.sigint, libc::SIGINT)
                    } else {
                        (&mut input.sigterm, libc::SIGTERM)
                    };
                    drain_pipe(pipe);
                    if outcome.interrupted.is_none() {
                        outcome.interrupted = Some(sig);
                        input.sandbox.terminate();
                        let left = input.kill_at.saturating_duration_since(Instant::now());
                        interrupt_kill_at = Some(Instant::now() + INTERRUPT_GRACE.min(left));
                    }
                }
                token => lp.conn_event(token, event.is_readable(), event.is_writable()),
            }
        }
        lp.drain_results();
        lp.read_ready();
    };
    outcome.exit = exit;
    // The program is gone; make sure nothing of the sandbox outlives it.
    input.sandbox.kill();
    lp.finish(input.kill_at + Duration::from_secs(1));
    Ok(outcome)
}

fn drain_pipe(pipe: &mut UnixStream) {
    let mut buf = [0u8; 64];
    while matches!(pipe.read(&mut buf), Ok(n) if n > 0) {}
}

impl Loop {
    fn accept(&mut self, listener: &UnixListener, sandbox: &Sandbox) -> io::Result<()> {
        loop {
            let (mut stream, _) = match listener.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // A transient failure (EMFILE, ECONNABORTED) must not end the invocation.
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    return Ok(());
                }
            };
            let peer = peer_credentials(&stream);
            let allowed = peer.is_some_and(|(pid, _)| sandbox.contains_peer(pid));
            if !allowed {
                let (pid, uid) = peer.unwrap_or((-1, u32::MAX));
                let _unaudited = self.shared.record(
                    kind::CONNECTION_REFUSED,
                    &self.shared.trace,
                    json!({"peer_pid": pid, "peer_uid": uid}),
                );
                drop(stream);
                continue;
            }
            self.connected_once = true;
            if self.conns.len() >= MAX_CONNS {
                tracing::warn!("closing a connection: {MAX_CONNS} are open already");
                drop(stream);
                continue;
            }
            let token = Token(self.next_token);
            self.next_token += 1;
            self.poll
                .registry()
                .register(&mut stream, token, Interest::READABLE)?;
            self.conns.insert(
                token,
                Conn {
                    stream,
                    decoder: Decoder::new(MAX_REQUEST),
                    out: Vec::new(),
                    out_pos: 0,
                    in_flight: 0,
                    read_closed: false,
                    blocked: false,
                    writable: false,
                },
            );
        }
    }

    fn conn_event(&mut self, token: Token, readable: bool, writable: bool) {
        if writable {
            self.flush(token);
        }
        if readable {
            self.read(token);
        }
        self.settle(token);
    }

    /// Reads what one connection sent, within the limits, and dispatches complete frames.
    fn read(&mut self, token: Token) {
        let global_full = self.in_flight >= MAX_IN_FLIGHT;
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if conn.read_closed {
            return;
        }
        if global_full
            || conn.in_flight >= MAX_IN_FLIGHT_PER_CONN
            || conn.pending_out() > MAX_PENDING_OUT
        {
            conn.blocked = true;
            return;
        }
        let mut frames = Vec::new();
        let mut buf = [0u8; 64 * 1024];
        let mut budget = READ_BUDGET;
        loop {
            if budget == 0 {
                // More may be waiting: come back after the other connections had their turn.
                self.ready.push(token);
                break;
            }
            match conn.stream.read(&mut buf[..budget.min(64 * 1024)]) {
                Ok(0) => {
                    conn.read_closed = true;
                    break;
                }
                Ok(n) => {
                    budget -= n;
                    telemetry::socket_bytes(telemetry::Direction::Rx, n);
                    conn.decoder.feed(&buf[..n], &mut frames);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    conn.read_closed = true;
                    break;
                }
            }
        }
        for frame in frames {
            match frame {
                Frame::TooLarge { len } => {
                    self.respond(token, Some(dispatch::request_too_large(len)));
                }
                Frame::Body(body) => {
                    let message = jsonrpc::parse(&body);
                    if dispatch::needs_worker(&message) {
                        if let Some(conn) = self.conns.get_mut(&token) {
                            conn.in_flight += 1;
                        }
                        self.in_flight += 1;
                        self.pool.submit(token, message);
                    } else {
                        let response = dispatch::handle(&self.shared, message);
                        self.respond(token, response);
                    }
                }
            }
        }
    }

    /// Reads the connections queued in `ready`, and those blocked at a limit that has cleared.
    fn read_ready(&mut self) {
        if self.in_flight < MAX_IN_FLIGHT {
            for (token, conn) in &mut self.conns {
                if conn.blocked
                    && conn.in_flight < MAX_IN_FLIGHT_PER_CONN
                    && conn.pending_out() <= MAX_PENDING_OUT
                {
                    conn.blocked = false;
                    self.ready.push(*token);
                }
            }
        }
        for token in std::mem::take(&mut self.ready) {
            self.read(token);
            self.settle(token);
        }
    }

    fn respond(&mut self, token: Token, body: Option<Vec<u8>>) {
        let Some(body) = body else { return };
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if conn.out_pos == conn.out.len() {
            conn.out.clear();
            conn.out_pos = 0;
        }
        frame::encode_into(&body, &mut conn.out);
        self.flush(token);
    }

    fn flush(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        while conn.out_pos < conn.out.len() {
            match conn.stream.write(&conn.out[conn.out_pos..]) {
                Ok(0) => break,
                Ok(n) => {
                    telemetry::socket_bytes(telemetry::Direction::Tx, n);
                    conn.out_pos += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // The peer is gone: drop what it will never read.
                    conn.out.clear();
                    conn.out_pos = 0;
                    conn.read_closed = true;
                    break;
                }
            }
        }
        if conn.out_pos == conn.out.len() {
            conn.out.clear();
            conn.out_pos = 0;
        }
    }

    /// Updates write interest to match the connection's state, or closes it when it is done.
    fn settle(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if conn.done() {
            let mut conn = self.conns.remove(&token).expect("present");
            let _closing = self.poll.registry().deregister(&mut conn.stream);
            return;
        }
        let want_write = conn.pending_out() > 0;
        if want_write == conn.writable {
            return;
        }
        conn.writable = want_write;
        // Read interest stays on even while reading is blocked at a limit: edge-triggered events
        // are cheap, and `read` checks the limits itself.
        let interest = if want_write {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        if let Err(e) = self
            .poll
            .registry()
            .reregister(&mut conn.stream, token, interest)
        {
            tracing::warn!("failed to update connection interest: {e}");
        }
    }

    fn drain_results(&mut self) {
        while let Ok((token, body)) = self.results.try_recv() {
            self.in_flight -= 1;
            if let Some(conn) = self.conns.get_mut(&token) {
                conn.in_flight -= 1;
            }
            self.respond(token, body);
            self.settle(token);
        }
    }

    /// Waits for tool calls still running (their rows matter), at most until `until`.
    fn finish(&mut self, until: Instant) {
        while self.in_flight > 0 {
            let left = until.saturating_duration_since(Instant::now());
            match self.results.recv_timeout(left) {
                Ok(_) => self.in_flight -= 1,
                Err(_) => break,
            }
        }
    }
}

/// The (pid, uid) of the peer process, as the kernel recorded it at connect time.
fn peer_credentials(stream: &UnixStream) -> Option<(i32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a properly sized, writable ucred and `len` holds its size, as
    // SO_PEERCRED requires; the fd is a live Unix socket owned by `stream`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    (rc == 0 && cred.pid > 0).then_some((cred.pid, cred.uid))
}
