//! Retention: removing the oldest rows while what remains still verifies.
//!
//! Only a prefix of the chain can go (rows `1..=N`), so the rows kept never depend on a row
//! removed. The hash of row N becomes a checkpoint that anchors row N+1, and a `journal.pruned`
//! row appended to the chain records the prune itself. A chain that is already broken is not
//! pruned: that would erase the evidence.

use rusqlite::{OptionalExtension, params};
use serde_json::json;

use super::chain::ChainBreak;
use super::kind;
use super::store::{InvocationRecord, Journal, JournalError};
use crate::util;

/// What a prune did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneReport {
    pub rows_removed: i64,
    /// Rows up to this seq are gone (0 when nothing was removed).
    pub through_seq: i64,
    pub invocations_removed: usize,
    /// The seq of the `journal.pruned` row (None when nothing was removed).
    pub pruned_row: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    #[error(
        "failed to prune: the hash chain is already broken at {0}; run `cyberos skill broker verify`"
    )]
    Broken(ChainBreak),
    #[error(transparent)]
    Journal(#[from] JournalError),
}

impl Journal {
    /// Removes every row written before `before_ms` up to the first row at or after it, records
    /// a checkpoint, and forgets invocations that ended (or whose broker died) before then.
    pub fn prune(&self, before_ms: i64) -> Result<PruneReport, PruneError> {
        // Outside the write lock: a full check can take a second on a large journal, and the
        // brokers must keep appending meanwhile.
        let report = self.verify()?;
        if let Some(b) = report.broken {
            return Err(PruneError::Broken(b));
        }
        let verified_through = report.last_seq;
        let mut inner = self.lock();
        let result = inner.write(|inner| {
            let conn = &inner.conn;
            let first_kept: Option<i64> = conn
                .query_row(
                    "SELECT seq FROM rows WHERE ts_ms >= ?1 ORDER BY seq LIMIT 1",
                    params![before_ms],
                    |r| r.get(0),
                )
                .optional()?;
            let through = match first_kept {
                Some(seq) => seq - 1,
                None => {
                    conn.query_row("SELECT coalesce(max(seq), 0) FROM rows", [], |r| r.get(0))?
                }
            };
            // Rows appended since the check above are not pruned this time.
            let through = through.min(verified_through);
            let hash: Option<Vec<u8>> = conn
                .query_row(
                    "SELECT hash FROM rows WHERE seq = ?1",
                    params![through],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(hash) = hash else {
                return Ok(PruneReport {
                    rows_removed: 0,
                    through_seq: 0,
                    invocations_removed: 0,
                    pruned_row: None,
                });
            };
            let now = util::now_ms();
            let rows_removed =
                conn.execute("DELETE FROM rows WHERE seq <= ?1", params![through])? as i64;
            conn.execute(
                "INSERT INTO checkpoints (through_seq, hash, before_ms, rows_removed, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![through, hash, before_ms, rows_removed, now],
            )?;
            conn.execute(
                "DELETE FROM day_counts WHERE day < ?1",
                params![before_ms.div_euclid(86_400_000)],
            )?;
            let mut invocations_removed = conn.execute(
                "DELETE FROM invocations WHERE completed_ms IS NOT NULL AND completed_ms < ?1",
                params![before_ms],
            )?;
            let sql = format!(
                "SELECT {} FROM invocations WHERE completed_ms IS NULL AND started_ms < ?1",
                InvocationRecord::COLUMNS
            );
            let stale: Vec<InvocationRecord> = conn
                .prepare(&sql)?
                .query_map(params![before_ms], InvocationRecord::from_sql)?
                .collect::<Result<_, _>>()?;
            for inv in stale.iter().filter(|i| !i.broker.is_alive()) {
                invocations_removed += conn.execute(
                    "DELETE FROM invocations WHERE invocation_id = ?1",
                    params![inv.invocation_id],
                )?;
            }
            let payload = json!({
                "before": util::rfc3339_ms(before_ms),
                "through_seq": through,
                "through_hash": hex::encode(&hash),
                "rows_removed": rows_removed,
                "invocations_removed": invocations_removed,
            });
            let pruned_row = inner.insert_row(
                kind::JOURNAL_PRUNED,
                &payload,
                &util::canonical_json(&payload),
            )?;
            Ok(PruneReport {
                rows_removed,
                through_seq: through,
                invocations_removed,
                pruned_row: Some(pruned_row),
            })
        });
        result.map_err(|e| PruneError::Journal(JournalError::Write(e)))
    }
}
