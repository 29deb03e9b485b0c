//! The journal's tables, and the one place that creates or checks them.
//!
//! `rows` is the chain itself; every other table is derived from it inside the same write
//! transaction (`day_counts` for `broker status`, `invocations` for liveness) or records a prune
//! (`checkpoints`). `PRAGMA user_version` says which layout a file has.

use rusqlite::{Connection, OptionalExtension};

/// The layout this build writes.
pub const VERSION: i64 = 1;

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS rows (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    ts            TEXT    NOT NULL,
    ts_ms         INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    invocation_id TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    prev_hash     BLOB    NOT NULL,
    hash          BLOB    NOT NULL
);
CREATE INDEX IF NOT EXISTS rows_by_invocation ON rows (invocation_id, seq);
CREATE TABLE IF NOT EXISTS invocations (
    invocation_id TEXT PRIMARY KEY,
    skill_id      TEXT    NOT NULL,
    pid           INTEGER NOT NULL,
    pid_start     INTEGER NOT NULL,
    started_ms    INTEGER NOT NULL,
    completed_ms  INTEGER
);
CREATE INDEX IF NOT EXISTS invocations_open ON invocations (started_ms) WHERE completed_ms IS NULL;
CREATE TABLE IF NOT EXISTS day_counts (
    day  INTEGER NOT NULL,
    kind TEXT    NOT NULL,
    n    INTEGER NOT NULL,
    PRIMARY KEY (day, kind)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
    through_seq  INTEGER PRIMARY KEY,
    hash         BLOB    NOT NULL,
    before_ms    INTEGER NOT NULL,
    rows_removed INTEGER NOT NULL,
    created_ms   INTEGER NOT NULL
);
";

/// What is wrong with a file's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// Written by a newer cyberos.
    Newer(i64),
    /// A `rows` table without the hash chain (an unreleased early layout).
    Unchained,
}

/// Creates the tables if needed (in one write transaction, so concurrent first opens agree)
/// and checks an existing file's layout.
pub fn ensure(conn: &Connection) -> rusqlite::Result<Result<(), Mismatch>> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version == VERSION {
        return Ok(Ok(()));
    }
    if version > VERSION {
        return Ok(Err(Mismatch::Newer(version)));
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let has_rows: Option<String> = conn
            .query_row(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'rows'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        if has_rows.is_some() {
            let has_hash: i64 = conn.query_row(
                "SELECT count(*) FROM pragma_table_info('rows') WHERE name = 'hash'",
                [],
                |r| r.get(0),
            )?;
            if has_hash == 0 {
                return Ok(Err(Mismatch::Unchained));
            }
        }
        conn.execute_batch(TABLES)?;
        conn.pragma_update(None, "user_version", VERSION)?;
        Ok(Ok(()))
    })();
    match &result {
        Ok(Ok(())) => conn.execute_batch("COMMIT")?,
        _ => conn.execute_batch("ROLLBACK")?,
    }
    result
}
