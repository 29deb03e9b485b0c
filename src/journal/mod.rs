//! The local SQLite journal (CONTRACT §7): the record of truth for every invocation and tool call.
//! WAL mode, shared safely by concurrent invocations, hash-chained so that a row edited or deleted
//! by hand is detected. Raw tool arguments and results never reach it, only their hashes. This
//! module stores, verifies and queries rows; it never decides policy.

pub mod chain;
mod contention;
mod identity;
pub mod kind;
mod prune;
pub mod replay;
mod schema;
mod status;
mod store;
#[cfg(test)]
mod tests;
mod verify;

pub use identity::{BrokerIdentity, process_start_time};
pub use prune::{PruneError, PruneReport};
pub use status::DayCounts;
pub use store::{
    BUSY_TIMEOUT, InvocationRecord, Journal, JournalError, LOG_TRIM_BYTES, Row, WAL_AUTOCHECKPOINT,
};
pub use verify::VerifyReport;
