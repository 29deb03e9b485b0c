//! Walking the hash chain: the whole journal (`broker verify`) or the span of one invocation
//! (`broker replay`). Reads inside one read transaction, so a consistent snapshot is checked
//! while other invocations keep appending.

use rusqlite::{Connection, OptionalExtension, params};

use super::chain::{ChainBreak, ChainScanner, GENESIS, Hash, StoredRow};
use super::store::{Journal, JournalError, checkpoint_anchor, high_water};

/// What `broker verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Rows checked.
    pub rows: u64,
    /// The seq the chain starts after (0, or the latest checkpoint's).
    pub anchor_seq: i64,
    /// The last intact row and its hash (the head, when the chain is intact).
    pub last_seq: i64,
    pub last_hash: Hash,
    /// The first break, if any.
    pub broken: Option<ChainBreak>,
}

impl Journal {
    /// Checks the whole chain, from the latest checkpoint (or the first row) to the last seq
    /// ever handed out.
    pub fn verify(&self) -> Result<VerifyReport, JournalError> {
        let inner = self.lock();
        let conn = &inner.conn;
        let _snapshot = ReadTx::begin(conn).map_err(JournalError::Read)?;
        let (anchor_seq, anchor_hash) = checkpoint_anchor(conn)
            .map_err(JournalError::Read)?
            .unwrap_or((0, GENESIS));
        let mut scanner = ChainScanner::after(anchor_seq, anchor_hash, anchor_seq);
        let mut rows = 0u64;
        let mut broken = None;
        let sql = format!("SELECT {} FROM rows ORDER BY seq", StoredRow::COLUMNS);
        let mut stmt = conn.prepare(&sql).map_err(JournalError::Read)?;
        let mut cursor = stmt.query([]).map_err(JournalError::Read)?;
        while let Some(r) = cursor.next().map_err(JournalError::Read)? {
            let row = StoredRow::from_sql(r).map_err(JournalError::Read)?;
            rows += 1;
            if let Some(b) = scanner.check(&row) {
                broken = Some(b);
                break;
            }
        }
        let (last_seq, last_hash) = scanner.last();
        if broken.is_none() {
            let high_water = high_water(conn).map_err(JournalError::Read)?;
            if high_water > last_seq {
                broken = Some(ChainBreak::Truncated {
                    from: last_seq + 1,
                    to: high_water,
                });
            }
        }
        Ok(VerifyReport {
            rows,
            anchor_seq,
            last_seq,
            last_hash,
            broken,
        })
    }

    /// Checks the chain over rows `from..=to` (an invocation's span), linking the first to the
    /// row, checkpoint or genesis before it.
    pub fn verify_span(&self, from: i64, to: i64) -> Result<Option<ChainBreak>, JournalError> {
        let inner = self.lock();
        let conn = &inner.conn;
        let _snapshot = ReadTx::begin(conn).map_err(JournalError::Read)?;
        let checkpoint = checkpoint_anchor(conn).map_err(JournalError::Read)?;
        let before: Option<Vec<u8>> = conn
            .prepare_cached("SELECT hash FROM rows WHERE seq = ?1")
            .and_then(|mut s| s.query_row(params![from - 1], |r| r.get(0)).optional())
            .map_err(JournalError::Read)?;
        let checkpoint_seq = checkpoint.map_or(0, |c| c.0);
        let anchor = match (before, checkpoint) {
            (Some(hash), _) => hash.as_slice().try_into().unwrap_or(GENESIS),
            (None, Some((seq, hash))) if seq == from - 1 => hash,
            (None, None) if from == 1 => GENESIS,
            (None, _) if from - 1 > checkpoint_seq => {
                return Ok(Some(ChainBreak::Missing {
                    seq: from,
                    from: from - 1,
                    to: from - 1,
                }));
            }
            (None, _) => GENESIS,
        };
        let mut scanner = ChainScanner::after(from - 1, anchor, checkpoint_seq);
        let sql = format!(
            "SELECT {} FROM rows WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq",
            StoredRow::COLUMNS
        );
        let mut stmt = conn.prepare_cached(&sql).map_err(JournalError::Read)?;
        let mut cursor = stmt.query(params![from, to]).map_err(JournalError::Read)?;
        while let Some(r) = cursor.next().map_err(JournalError::Read)? {
            let row = StoredRow::from_sql(r).map_err(JournalError::Read)?;
            if let Some(b) = scanner.check(&row) {
                return Ok(Some(b));
            }
        }
        let (last, _) = scanner.last();
        if last < to {
            return Ok(Some(ChainBreak::Missing {
                seq: to,
                from: last + 1,
                to,
            }));
        }
        Ok(None)
    }
}

/// A read transaction: one snapshot for every statement until dropped.
struct ReadTx<'c> {
    conn: &'c Connection,
}

impl<'c> ReadTx<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.execute_batch("BEGIN DEFERRED")?;
        Ok(Self { conn })
    }
}

impl Drop for ReadTx<'_> {
    fn drop(&mut self) {
        if !self.conn.is_autocommit() {
            // A read transaction has nothing to lose; ending it only releases the snapshot.
            if let Err(err) = self.conn.execute_batch("COMMIT") {
                tracing::warn!("failed to end a journal read transaction: {err}");
            }
        }
    }
}
