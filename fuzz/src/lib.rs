//! The fuzz oracles of cyberos: one module per fuzz target, each with a `run(&[u8])` that turns
//! the fuzzer's bytes into an input, drives the real library code and checks the result against
//! an independent oracle, panicking on any disagreement.
//!
//! The same modules are compiled into the main test suite (`tests/cli/regressions.rs` includes
//! this file), which replays every committed corpus file through them, so CI checks what the
//! fuzzer found without running it. Nothing here may touch the filesystem outside the temporary
//! directories it creates.

pub mod dispatch;
pub mod domain;
pub mod file_path;
pub mod fixture;
pub mod frame;
pub mod memory_path;
pub mod skill_parser;

/// An oracle: panics when the input shows a bug.
pub type Oracle = fn(&[u8]);

/// Every target: its corpus directory name and its oracle.
pub const TARGETS: &[(&str, Oracle)] = &[
    ("frame_decoder", frame::run),
    ("jsonrpc_dispatch", dispatch::run),
    ("skill_parser", skill_parser::run),
    ("memory_path", memory_path::run),
    ("file_path", file_path::run),
    ("domain", domain::run),
];
