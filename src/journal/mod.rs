//! The local SQLite journal (CONTRACT §7): the record of truth for every invocation and tool call.
//! WAL mode, shared safely by concurrent invocations. Raw tool arguments and results never reach
//! it, only their hashes. This module stores and queries rows; it never decides policy.

pub mod kind;
mod store;

pub use store::{BrokerIdentity, Journal, JournalError, Row};
