//! The capability broker of one invocation (CONTRACT §4): the per-invocation socket, framing,
//! JSON-RPC 2.0, enforcement and dispatch, on a `mio` event loop with a worker pool. It never
//! sets up the sandbox itself (that is `crate::sandbox`) and never implements a tool (`crate::tools`).

pub mod client;
pub mod dispatch;
pub mod frame;
pub mod invocation;
pub mod jsonrpc;
mod pool;
pub mod server;
pub mod socket;
