//! Row kinds (CONTRACT §7).

pub const INVOKED_STARTED: &str = "skill.invoked_started";
pub const TOOL_CALL_STARTED: &str = "skill.tool_call_started";
pub const TOOL_CALL_COMPLETED: &str = "skill.tool_call_completed";
pub const TOOL_DENIED: &str = "skill.tool_denied";
pub const TIMEOUT: &str = "skill.timeout";
pub const NO_CONNECT: &str = "skill.no_connect";
pub const INVOKED_COMPLETED: &str = "skill.invoked_completed";
pub const MEMORY_EMITTED: &str = "memory.emitted";
/// The journal's own record of a `broker prune`: it belongs to no invocation, so its payload
/// carries `before`, `through_seq`, `through_hash` and `rows_removed` instead of the ids.
pub const JOURNAL_PRUNED: &str = "journal.pruned";
/// A connection to the broker socket from a process outside the invocation's sandbox, closed
/// unanswered (`peer_pid`, `peer_uid`).
pub const CONNECTION_REFUSED: &str = "skill.connection_refused";
