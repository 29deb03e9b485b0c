//! The numbers behind `broker status`: today's counters (kept per UTC day by every append, so
//! this is a handful of index lookups at any journal size) and the invocations not completed.

use rusqlite::params;

use super::kind;
use super::store::{InvocationRecord, Journal, JournalError};

/// Rows of one UTC day, by what `broker status` reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DayCounts {
    /// `tool.call`s that reached enforcement: started rows plus denied rows.
    pub tool_calls: i64,
    pub denied: i64,
    /// `skill.timeout` rows: invocations whose deadline fired.
    pub timeouts: i64,
    /// `skill.invoked_started` rows.
    pub invocations: i64,
}

impl Journal {
    /// The counters of the UTC day that contains `ms`.
    pub fn day_counts(&self, ms: i64) -> Result<DayCounts, JournalError> {
        let inner = self.lock();
        let mut stmt = inner
            .conn
            .prepare_cached("SELECT kind, n FROM day_counts WHERE day = ?1")
            .map_err(JournalError::Read)?;
        let rows = stmt
            .query_map(params![ms.div_euclid(86_400_000)], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(JournalError::Read)?;
        let mut counts = DayCounts::default();
        for row in rows {
            let (kind, n) = row.map_err(JournalError::Read)?;
            match kind.as_str() {
                kind::TOOL_CALL_STARTED => counts.tool_calls += n,
                kind::TOOL_DENIED => {
                    counts.tool_calls += n;
                    counts.denied += n;
                }
                kind::TIMEOUT => counts.timeouts += n,
                kind::INVOKED_STARTED => counts.invocations += n,
                _ => {}
            }
        }
        Ok(counts)
    }

    /// Registered invocations without a completion, oldest first; whether each broker is still
    /// alive is for the caller to ask ([`InvocationRecord::is_active`]).
    pub fn open_invocations(&self) -> Result<Vec<InvocationRecord>, JournalError> {
        let inner = self.lock();
        let sql = format!(
            "SELECT {} FROM invocations WHERE completed_ms IS NULL ORDER BY started_ms",
            InvocationRecord::COLUMNS
        );
        let mut stmt = inner
            .conn
            .prepare_cached(&sql)
            .map_err(JournalError::Read)?;
        let rows = stmt
            .query_map([], InvocationRecord::from_sql)
            .map_err(JournalError::Read)?;
        rows.collect::<Result<_, _>>().map_err(JournalError::Read)
    }
}
