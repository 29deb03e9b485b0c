//! Opening the journal and appending rows.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use crate::util;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("failed to open journal {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
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
}

/// The process that runs an invocation's broker: a pid and its start time (clock ticks after
/// boot, field 22 of /proc/PID/stat), so a reused pid is not mistaken for a live broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerIdentity {
    pub pid: i32,
    pub start_time: u64,
}

impl BrokerIdentity {
    /// This process.
    pub fn current() -> Option<Self> {
        let pid = std::process::id() as i32;
        Some(Self {
            pid,
            start_time: process_start_time(pid)?,
        })
    }

    /// Is that very process still running?
    pub fn is_alive(&self) -> bool {
        process_start_time(self.pid) == Some(self.start_time)
    }
}

/// Field 22 (starttime) of /proc/PID/stat. The command name (field 2) may hold spaces and `)`, so
/// fields are counted after its last `)`.
pub fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// The journal: one SQLite connection behind a mutex, shareable between the broker's threads.
pub struct Journal {
    conn: Mutex<Connection>,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rows (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    ts            TEXT    NOT NULL,
    ts_ms         INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    invocation_id TEXT    NOT NULL,
    payload       TEXT    NOT NULL
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
";

impl Journal {
    /// Opens (creating) `home/journal.db`.
    pub fn open(home: &Path) -> Result<Self, JournalError> {
        let path = home.join("journal.db");
        let open_err = |source| JournalError::Open {
            path: path.clone(),
            source,
        };
        let conn = Connection::open(&path).map_err(open_err)?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(open_err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_err)?;
        conn.execute_batch(SCHEMA).map_err(open_err)?;
        Ok(Self {
            conn: Mutex::new(conn),
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave the connection half-written: SQLite rolls
        // back an unfinished transaction, so the poisoned guard is still usable.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends one row and returns its `seq`. `payload` must carry `invocation_id`, `skill_id`
    /// and `trace_id`.
    pub fn append(&self, kind: &str, payload: &Value) -> Result<i64, JournalError> {
        let ts_ms = util::now_ms();
        let invocation_id = payload
            .get("invocation_id")
            .and_then(Value::as_str)
            .unwrap_or("");
        let conn = self.lock();
        conn.execute(
            "INSERT INTO rows (ts, ts_ms, kind, invocation_id, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![util::rfc3339_ms(ts_ms), ts_ms, kind, invocation_id, payload.to_string()],
        )
        .map_err(JournalError::Write)?;
        Ok(conn.last_insert_rowid())
    }

    /// Records that an invocation started under this broker; refuses an id already used.
    pub fn register_invocation(
        &self,
        invocation_id: &str,
        skill_id: &str,
        broker: BrokerIdentity,
    ) -> Result<(), JournalError> {
        let conn = self.lock();
        let inserted = conn
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

    /// Marks an invocation finished.
    pub fn complete_invocation(&self, invocation_id: &str) -> Result<(), JournalError> {
        self.lock()
            .execute(
                "UPDATE invocations SET completed_ms = ?2 WHERE invocation_id = ?1",
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
        self.lock()
            .query_row(
                "SELECT pid, pid_start, completed_ms IS NOT NULL FROM invocations WHERE invocation_id = ?1",
                params![invocation_id],
                |r| {
                    Ok((
                        BrokerIdentity { pid: r.get(0)?, start_time: r.get::<_, i64>(1)? as u64 },
                        r.get(2)?,
                    ))
                },
            )
            .optional()
            .map_err(JournalError::Read)
    }

    /// All rows of one invocation with `seq > after`, in order.
    pub fn rows_for(&self, invocation_id: &str, after: i64) -> Result<Vec<Row>, JournalError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, ts, kind, payload FROM rows WHERE invocation_id = ?1 AND seq > ?2 ORDER BY seq",
            )
            .map_err(JournalError::Read)?;
        let rows = stmt
            .query_map(params![invocation_id, after], |r| {
                let payload: String = r.get(3)?;
                Ok(Row {
                    seq: r.get(0)?,
                    ts: r.get(1)?,
                    kind: r.get(2)?,
                    payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
                })
            })
            .map_err(JournalError::Read)?;
        rows.collect::<Result<_, _>>().map_err(JournalError::Read)
    }
}
