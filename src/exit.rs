//! Exit codes of CONTRACT §2, and the one error type that carries a code out of a command.
//!
//! Commands return `anyhow::Result<ExitCode>`; an error that must end the process with a specific
//! code wraps itself in [`Coded`]. Anything else is exit 1. `main` maps both in one place.

use std::fmt;

pub const SUCCESS: u8 = 0;
pub const ERROR: u8 = 1;
pub const USAGE: u8 = 2;
pub const CHAIN_BROKEN: u8 = 3;
pub const INVALID_SKILL: u8 = 6;
pub const DEADLINE: u8 = 124;
pub const BROKER_FAILED: u8 = 125;
pub const NOT_EXECUTABLE: u8 = 126;
pub const NOT_FOUND: u8 = 127;
pub const INTERRUPTED: u8 = 130;
pub const TERMINATED: u8 = 143;

/// An error that ends the process with a specific exit code.
#[derive(Debug)]
pub struct Coded {
    pub code: u8,
    pub message: String,
}

impl Coded {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// Builds an `anyhow::Error` that exits with `code`.
pub fn coded(code: u8, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Coded::new(code, message))
}

/// The exit code for an error returned by a command.
pub fn code_of(err: &anyhow::Error) -> u8 {
    err.chain()
        .find_map(|e| e.downcast_ref::<Coded>())
        .map_or(ERROR, |c| c.code)
}
