//! Opening the journal and appending rows to its hash chain.
//!
//! Every append runs in its own `BEGIN IMMEDIATE` transaction: SQLite's write lock orders the
//! appends of all processes sharing the file, and the previous row's hash is read under that
//! lock, so concurrent invocations extend one chain. The last hash is kept in memory and trusted
//! only while `PRAGMA data_version` says no other connection has committed since.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde_json::Value;

use super::chain::{self, GENESIS, Hash};
use super::contention::{self, GroupCommit, Pending};
use super::identity::BrokerIdentity;
use super::kind;
use super::schema;
use crate::util;

/// WAL frames between SQLite's automatic checkpoints (its default is 1000). Appends rewrite the
/// same few rightmost pages of the rows table, its index and the counters, so a checkpoint copies
/// few distinct pages however many frames it covers, and its cost is its two fsyncs: at 1000
/// frames (about 100 audited tool calls) they were most of a tool call's wall time. The log this
/// leaves (up to ~32 MB) is read back only by a process that opens the journal while no other
/// process has it open, and an invocation empties it when it ends ([`Journal::trim_log`]).
pub const WAL_AUTOCHECKPOINT: i64 = 8000;

/// The length past which an invocation empties the write-ahead log when it ends
/// ([`Journal::trim_log`]): about 15 invocations' rows, read back in well under a millisecond.
pub const LOG_TRIM_BYTES: u64 = 256 * 1024;

/// How long a writer waits for another process's write lock before giving up on a row.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("failed to open journal {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("failed to open journal {path}: it was written by a newer cyberos (layout {version})")]
    NewerLayout { path: PathBuf, version: i64 },
    #[error(
        "failed to open journal {path}: it predates the hash chain; move it aside to start a new one"
    )]
    Unchained { path: PathBuf },
    #[error("failed to write journal row: {0}")]
    Write(#[source] rusqlite::Error),
    #[error("failed to read journal: {0}")]
    Read(#[source] rusqlite::Error),
    #[error("invocation id {0} is already in the journal")]
    DuplicateInvocation(String),
}

/// A journal row as CONTRACT §7 shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub seq: i64,
    pub ts: String,
    pub kind: String,
    pub payload: Value,
}

impl Row {
    pub fn to_json(&self) -> Value {
        serde_json::json!({"seq": self.seq, "ts": self.ts, "kind": self.kind, "payload": self.payload})
    }

    pub(super) fn from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        let payload: String = r.get(3)?;
        Ok(Self {
            seq: r.get(0)?,
            ts: r.get(1)?,
            kind: r.get(2)?,
            payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
        })
    }
}

/// One invocation as the broker registered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvocationRecord {
    pub invocation_id: String,
    pub skill_id: String,
    pub broker: BrokerIdentity,
    pub started_ms: i64,
    pub completed_ms: Option<i64>,
}

impl InvocationRecord {
    pub(super) const COLUMNS: &'static str =
        "invocation_id, skill_id, pid, pid_start, started_ms, completed_ms";

    pub(super) fn from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            invocation_id: r.get(0)?,
            skill_id: r.get(1)?,
            broker: BrokerIdentity {
                pid: r.get(2)?,
                start_time: r.get::<_, i64>(3)? as u64,
            },
            started_ms: r.get(4)?,
            completed_ms: r.get(5)?,
        })
    }

    /// Started, not completed, and its broker process is still the one that registered it.
    pub fn is_active(&self) -> bool {
        self.completed_ms.is_none() && self.broker.is_alive()
    }
}

/// The newest row this connection knows of, valid while `data_version` is unchanged.
#[derive(Debug, Clone, Copy)]
struct Tip {
    seq: i64,
    hash: Hash,
    data_version: i64,
}

pub(super) struct Inner {
    pub(super) conn: Connection,
    tip: Option<Tip>,
}

impl Inner {
    /// Links and inserts one row inside the caller's write transaction. The tip is updated
    /// optimistically: if the transaction then rolls back, the next append sees a different
    /// `data_version` or finds the tip row missing, and re-reads.
    pub(super) fn insert_row(
        &mut self,
        kind: &str,
        payload: &Value,
        payload_json: &str,
    ) -> rusqlite::Result<i64> {
        self.insert_json(kind, invocation_id_of(payload), payload_json)
    }

    /// [`Self::insert_row`] for a payload already serialised (its invocation id given apart).
    fn insert_json(
        &mut self,
        kind: &str,
        invocation_id: &str,
        payload_json: &str,
    ) -> rusqlite::Result<i64> {
        let conn = &self.conn;
        let data_version: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        let (last_seq, last_hash) = match self.tip.take() {
            Some(t) if t.data_version == data_version => (t.seq, t.hash),
            _ => read_tip(conn)?,
        };
        let seq = last_seq + 1;
        // Taken under the write lock, so `ts` never goes backwards along the chain unless the
        // clock itself does.
        let ts_ms = util::now_ms();
        let ts = util::rfc3339_ms(ts_ms);
        let hash = chain::row_hash(&last_hash, seq, &ts, kind, payload_json);
        conn.prepare_cached(
            "INSERT INTO rows (seq, ts, ts_ms, kind, invocation_id, payload, prev_hash, hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            seq,
            ts,
            ts_ms,
            kind,
            invocation_id,
            payload_json,
            &last_hash[..],
            &hash[..]
        ])?;
        if counted(kind) {
            conn.prepare_cached(
                "INSERT INTO day_counts (day, kind, n) VALUES (?1, ?2, 1)
                 ON CONFLICT (day, kind) DO UPDATE SET n = n + 1",
            )?
            .execute(params![ts_ms.div_euclid(86_400_000), kind])?;
        }
        if kind == kind::INVOKED_COMPLETED {
            conn.prepare_cached(
                "UPDATE invocations SET completed_ms = ?2 WHERE invocation_id = ?1 AND completed_ms IS NULL",
            )?
            .execute(params![invocation_id, ts_ms])?;
        }
        // Our own commit does not change our data_version: the next append may trust the tip
        // unless another connection commits in between.
        self.tip = Some(Tip {
            seq,
            hash,
            data_version,
        });
        Ok(seq)
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction: committed if it succeeds, rolled back (and
    /// the cached tip forgotten, as it may name a row that was never committed) if not.
    pub(super) fn write<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let result = f(self).and_then(|value| {
            self.conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(value)
        });
        if result.is_err() {
            self.abandon();
        }
        result
    }

    /// Rolls back whatever transaction is open and forgets the tip.
    fn abandon(&mut self) {
        self.tip = None;
        if !self.conn.is_autocommit() {
            // Nothing more can be done about a failed rollback: the connection reports it again
            // on its next statement.
            if let Err(err) = self.conn.execute_batch("ROLLBACK") {
                tracing::warn!("failed to roll back a journal transaction: {err}");
            }
        }
    }
}

/// The payload's `invocation_id` as the indexed column stores it ("" when absent).
fn invocation_id_of(payload: &Value) -> &str {
    payload
        .get("invocation_id")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The journal: one SQLite connection behind a mutex, shareable between the broker's threads.
pub struct Journal {
    inner: Mutex<Inner>,
    path: PathBuf,
    group: GroupCommit,
}

impl Journal {
    /// Opens (creating) `home/journal.db`.
    pub fn open(home: &Path) -> Result<Self, JournalError> {
        Self::open_with(home.join("journal.db"), OpenFlags::default())
    }

    /// Opens `home/journal.db` if it exists, without creating it.
    pub fn open_existing(home: &Path) -> Result<Option<Self>, JournalError> {
        let path = home.join("journal.db");
        if !path.exists() {
            return Ok(None);
        }
        let flags = OpenFlags::default() - OpenFlags::SQLITE_OPEN_CREATE;
        Self::open_with(path, flags).map(Some)
    }

    fn open_with(path: PathBuf, flags: OpenFlags) -> Result<Self, JournalError> {
        let open_err = |source| JournalError::Open {
            path: path.clone(),
            source,
        };
        let mut conn = Connection::open_with_flags(&path, flags).map_err(open_err)?;
        conn.busy_handler(Some(contention::busy_handler()))
            .map_err(open_err)?;
        // Closing must not checkpoint: every command that opens the journal (each invocation,
        // each `broker status`) would pay two fsyncs for it, and its successor a third to start
        // a new log. An invocation resets the log when it ends instead, once it is long enough
        // to slow the next opener down (`trim_log`).
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(open_err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            // Switching needs a moment of exclusive access; a concurrent first open may hold
            // it, and this pragma does not always go through the busy handler.
            retry_busy(|| conn.pragma_update(None, "journal_mode", "WAL")).map_err(open_err)?;
        }
        // NORMAL in WAL mode: a committed row survives any process crash; only a power loss
        // can take the newest commits with it. FULL would fsync on every tool call.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT)
            .map_err(open_err)?;
        match retry_busy(|| schema::ensure(&conn)).map_err(open_err)? {
            Ok(()) => {}
            Err(schema::Mismatch::Newer(version)) => {
                return Err(JournalError::NewerLayout { path, version });
            }
            Err(schema::Mismatch::Unchained) => return Err(JournalError::Unchained { path }),
        }
        Ok(Self {
            inner: Mutex::new(Inner { conn, tip: None }),
            group: GroupCommit::default(),
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock may leave a transaction open: roll it back, and the
        // connection is as good as new.
        self.inner.lock().unwrap_or_else(|poisoned| {
            let mut inner = poisoned.into_inner();
            inner.abandon();
            self.inner.clear_poison();
            inner
        })
    }

    /// Appends one row and returns its `seq`. `payload` must carry `invocation_id`, `skill_id`
    /// and `trace_id`. An `skill.invoked_completed` row also marks its invocation completed.
    ///
    /// Rows appended concurrently by other threads may share its transaction (group commit);
    /// it returns once that transaction has committed.
    pub fn append(&self, kind: &str, payload: &Value) -> Result<i64, JournalError> {
        let row = Pending {
            kind: kind.to_owned(),
            invocation_id: invocation_id_of(payload).to_owned(),
            payload_json: util::canonical_json(payload),
        };
        self.group.append(row, |rows| self.write_batch(rows))
    }

    /// Writes `rows` in one transaction; if that fails, each in its own, so that every row gets
    /// its own result.
    fn write_batch(&self, rows: &[Pending]) -> Vec<Result<i64, JournalError>> {
        let mut inner = self.lock();
        let insert = |inner: &mut Inner, row: &Pending| {
            inner.insert_json(&row.kind, &row.invocation_id, &row.payload_json)
        };
        if rows.len() > 1 {
            let all: rusqlite::Result<Vec<i64>> =
                inner.write(|inner| rows.iter().map(|r| insert(inner, r)).collect());
            if let Ok(seqs) = all {
                return seqs.into_iter().map(Ok).collect::<Vec<_>>();
            }
        }
        rows.iter()
            .map(|row| {
                inner
                    .write(|inner| insert(inner, row))
                    .map_err(JournalError::Write)
            })
            .collect()
    }

    /// Copies the write-ahead log into the database and empties it, if it has grown past
    /// [`LOG_TRIM_BYTES`]. The first process to open the journal rebuilds the log's index by
    /// reading every frame in it, so a long log slows down every invocation and every `broker`
    /// command that follows; SQLite's own checkpoints copy the log but leave it for that reader.
    /// An invocation calls this once it has written its last row. Nothing waits: while another
    /// process is using the journal, the log is left for whoever ends last.
    pub fn trim_log(&self) {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let long = std::fs::metadata(&wal).is_ok_and(|m| m.len() > LOG_TRIM_BYTES);
        if !long {
            return;
        }
        let mut inner = self.lock();
        // Without a busy handler a checkpoint that would have to wait reports "busy" at once.
        let trimmed = inner.conn.busy_timeout(Duration::ZERO).and_then(|()| {
            inner
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    r.get::<_, i64>(0)
                })
        });
        match trimmed {
            Ok(0) => {}
            Ok(_busy) => tracing::debug!("journal log left as it is: the journal is in use"),
            Err(e) => tracing::debug!("journal log left as it is: {e}"),
        }
        if let Err(e) = inner.conn.busy_handler(Some(contention::busy_handler())) {
            tracing::warn!("failed to restore the journal's busy handler: {e}");
        }
    }

    /// Records that an invocation started under this broker; refuses an id already used.
    pub fn register_invocation(
        &self,
        invocation_id: &str,
        skill_id: &str,
        broker: BrokerIdentity,
    ) -> Result<(), JournalError> {
        let inserted = self
            .lock()
            .conn
            .execute(
                "INSERT OR IGNORE INTO invocations (invocation_id, skill_id, pid, pid_start, started_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![invocation_id, skill_id, broker.pid, broker.start_time as i64, util::now_ms()],
            )
            .map_err(JournalError::Write)?;
        if inserted == 0 {
            return Err(JournalError::DuplicateInvocation(invocation_id.to_owned()));
        }
        Ok(())
    }

    /// Marks an invocation finished (appending its `skill.invoked_completed` row does too).
    pub fn complete_invocation(&self, invocation_id: &str) -> Result<(), JournalError> {
        self.lock()
            .conn
            .execute(
                "UPDATE invocations SET completed_ms = ?2 WHERE invocation_id = ?1 AND completed_ms IS NULL",
                params![invocation_id, util::now_ms()],
            )
            .map_err(JournalError::Write)?;
        Ok(())
    }

    /// The broker of a known invocation, with whether it has completed; None if unknown.
    pub fn invocation_broker(
        &self,
        invocation_id: &str,
    ) -> Result<Option<(BrokerIdentity, bool)>, JournalError> {
        Ok(self
            .invocation(invocation_id)?
            .map(|i| (i.broker, i.completed_ms.is_some())))
    }

    /// A registered invocation; None if unknown.
    pub fn invocation(
        &self,
        invocation_id: &str,
    ) -> Result<Option<InvocationRecord>, JournalError> {
        let inner = self.lock();
        let sql = format!(
            "SELECT {} FROM invocations WHERE invocation_id = ?1",
            InvocationRecord::COLUMNS
        );
        inner
            .conn
            .prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_row(params![invocation_id], InvocationRecord::from_sql)
                    .optional()
            })
            .map_err(JournalError::Read)
    }

    /// All rows of one invocation with `seq > after`, in order.
    pub fn rows_for(&self, invocation_id: &str, after: i64) -> Result<Vec<Row>, JournalError> {
        let inner = self.lock();
        let mut stmt = inner
            .conn
            .prepare_cached(
                "SELECT seq, ts, kind, payload FROM rows WHERE invocation_id = ?1 AND seq > ?2 ORDER BY seq",
            )
            .map_err(JournalError::Read)?;
        let rows = stmt
            .query_map(params![invocation_id, after], Row::from_sql)
            .map_err(JournalError::Read)?;
        rows.collect::<Result<_, _>>().map_err(JournalError::Read)
    }

    /// Changes whenever another connection commits: a cheap "anything new?" for followers.
    pub fn data_version(&self) -> Result<i64, JournalError> {
        self.lock()
            .conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(JournalError::Read)
    }
}

/// Kinds that `broker status` counts per UTC day.
fn counted(kind: &str) -> bool {
    matches!(
        kind,
        kind::TOOL_CALL_STARTED | kind::TOOL_DENIED | kind::TIMEOUT | kind::INVOKED_STARTED
    )
}

/// The seq and hash the next row links to: the newest row, else the latest checkpoint, else
/// genesis. The seq never reuses one handed out before (AUTOINCREMENT's high-water mark), so a
/// row deleted from the end by hand stays visible as a gap.
pub(super) fn read_tip(conn: &Connection) -> rusqlite::Result<(i64, Hash)> {
    let last: Option<(i64, Vec<u8>)> = conn
        .prepare_cached("SELECT seq, hash FROM rows ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (seq, hash) = match last {
        Some(last) => last,
        None => checkpoint_anchor(conn)?.map_or((0, GENESIS.to_vec()), |(s, h)| (s, h.to_vec())),
    };
    Ok((
        seq.max(high_water(conn)?),
        hash.as_slice().try_into().unwrap_or(GENESIS),
    ))
}

/// The highest seq ever handed out (AUTOINCREMENT's high-water mark), 0 for a new journal.
pub(super) fn high_water(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'rows'")?
        .query_row([], |r| r.get(0))
}

/// The latest checkpoint: every row up to its seq was pruned; its hash anchors the next row.
pub(super) fn checkpoint_anchor(conn: &Connection) -> rusqlite::Result<Option<(i64, Hash)>> {
    let cp: Option<(i64, Vec<u8>)> = conn
        .prepare_cached(
            "SELECT through_seq, hash FROM checkpoints ORDER BY through_seq DESC LIMIT 1",
        )?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(cp.map(|(seq, hash)| (seq, hash.as_slice().try_into().unwrap_or(GENESIS))))
}

/// Retries an operation that may fail with SQLITE_BUSY outside the busy handler (changing the
/// journal mode, the first creation of the tables) for up to [`BUSY_TIMEOUT`].
fn retry_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match f() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}
