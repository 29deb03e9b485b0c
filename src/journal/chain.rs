//! The hash chain that makes the journal tamper-evident.
//!
//! Row `n` stores `prev_hash` (the hash of row `n-1`, or of the latest checkpoint, or 32 zero
//! bytes for the first row ever) and `hash = SHA-256(prev_hash ‖ canonical JSON of {seq, ts,
//! kind, payload})`. Editing, deleting or reordering a row by hand breaks a link that
//! [`ChainScanner`] finds and names. This module only computes and checks; it never writes.

use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::util;

/// A SHA-256 digest as stored in the journal (`BLOB`, 32 bytes).
pub type Hash = [u8; 32];

/// The `prev_hash` of the very first row of a journal.
pub const GENESIS: Hash = [0; 32];

/// The hash of one row. `payload_json` must be the payload's canonical JSON (the journal stores
/// exactly that), so the bytes hashed are those of `canonical_json({kind, payload, seq, ts})`
/// (keys in RFC 8785 order) without serialising the row a second time.
pub fn row_hash(prev: &Hash, seq: i64, ts: &str, kind: &str, payload_json: &str) -> Hash {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(b"{\"kind\":");
    h.update(util::canonical_json(&Value::from(kind)).as_bytes());
    h.update(b",\"payload\":");
    h.update(payload_json.as_bytes());
    h.update(b",\"seq\":");
    h.update(seq.to_string().as_bytes());
    h.update(b",\"ts\":");
    h.update(util::canonical_json(&Value::from(ts)).as_bytes());
    h.update(b"}");
    h.finalize().into()
}

/// The first place where the chain does not hold, naming the first bad row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainBreak {
    /// The row's contents do not match its stored hash: it was edited.
    Edited { seq: i64 },
    /// The row's `prev_hash` is not the hash of the row before it.
    Link { seq: i64 },
    /// Rows `from..=to` are missing before row `seq`: deleted.
    Missing { seq: i64, from: i64, to: i64 },
    /// Rows `from..=to` were written but are gone from the end of the journal.
    Truncated { from: i64, to: i64 },
    /// A row at or before the latest checkpoint, which pruned everything up to `checkpoint`.
    BeforeCheckpoint { seq: i64, checkpoint: i64 },
    /// An indexed column disagrees with the hashed contents of the row.
    Column { seq: i64, column: &'static str },
}

impl ChainBreak {
    /// The first bad row (for a truncation: the first missing one).
    pub fn seq(&self) -> i64 {
        match *self {
            Self::Edited { seq }
            | Self::Link { seq }
            | Self::Missing { seq, .. }
            | Self::BeforeCheckpoint { seq, .. }
            | Self::Column { seq, .. } => seq,
            Self::Truncated { from, .. } => from,
        }
    }
}

impl fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Edited { seq } => {
                write!(f, "row {seq}: its contents do not match its hash (edited)")
            }
            Self::Link { seq } => write!(
                f,
                "row {seq}: its prev_hash is not the hash of the row before it (row {} edited or replaced)",
                seq - 1
            ),
            Self::Missing { seq, from, to } if from == to => {
                write!(f, "row {seq}: row {from} before it is missing (deleted)")
            }
            Self::Missing { seq, from, to } => {
                write!(
                    f,
                    "row {seq}: rows {from}..{to} before it are missing (deleted)"
                )
            }
            Self::Truncated { from, to } if from == to => {
                write!(f, "row {from}: the last row is missing (deleted)")
            }
            Self::Truncated { from, to } => {
                write!(
                    f,
                    "row {from}: rows {from}..{to} at the end are missing (deleted)"
                )
            }
            Self::BeforeCheckpoint { seq, checkpoint } => write!(
                f,
                "row {seq}: it predates the checkpoint that pruned rows up to {checkpoint} (inserted)"
            ),
            Self::Column { seq, column } => {
                write!(
                    f,
                    "row {seq}: column {column} does not match the row's contents (edited)"
                )
            }
        }
    }
}

/// A row with everything the chain covers, as read back from the database.
#[derive(Debug, Clone)]
pub struct StoredRow {
    pub seq: i64,
    pub ts: String,
    pub ts_ms: i64,
    pub kind: String,
    pub invocation_id: String,
    pub payload: String,
    pub prev_hash: Vec<u8>,
    pub hash: Vec<u8>,
}

impl StoredRow {
    pub const COLUMNS: &'static str =
        "seq, ts, ts_ms, kind, invocation_id, payload, prev_hash, hash";

    pub fn from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            seq: r.get(0)?,
            ts: r.get(1)?,
            ts_ms: r.get(2)?,
            kind: r.get(3)?,
            invocation_id: r.get(4)?,
            payload: r.get(5)?,
            prev_hash: r.get(6)?,
            hash: r.get(7)?,
        })
    }
}

/// Checks rows one at a time, in `seq` order, against the link before them.
pub struct ChainScanner {
    prev_seq: i64,
    prev_hash: Hash,
    checkpoint: i64,
}

impl ChainScanner {
    /// Starts after row `seq` whose hash is `hash` (a checkpoint, or `(0, GENESIS)`).
    pub fn after(seq: i64, hash: Hash, checkpoint: i64) -> Self {
        Self {
            prev_seq: seq,
            prev_hash: hash,
            checkpoint,
        }
    }

    /// The last row checked (or the starting point).
    pub fn last(&self) -> (i64, Hash) {
        (self.prev_seq, self.prev_hash)
    }

    /// Checks the next row; the first problem found wins.
    pub fn check(&mut self, row: &StoredRow) -> Option<ChainBreak> {
        let seq = row.seq;
        if seq <= self.checkpoint {
            return Some(ChainBreak::BeforeCheckpoint {
                seq,
                checkpoint: self.checkpoint,
            });
        }
        if seq != self.prev_seq + 1 {
            return Some(ChainBreak::Missing {
                seq,
                from: self.prev_seq + 1,
                to: seq - 1,
            });
        }
        let prev: Option<Hash> = row.prev_hash.as_slice().try_into().ok();
        let Some(prev) = prev else {
            return Some(ChainBreak::Edited { seq });
        };
        let computed = row_hash(&prev, seq, &row.ts, &row.kind, &row.payload);
        if computed[..] != row.hash[..] {
            return Some(ChainBreak::Edited { seq });
        }
        if prev != self.prev_hash {
            return Some(ChainBreak::Link { seq });
        }
        if util::rfc3339_ms(row.ts_ms) != row.ts {
            return Some(ChainBreak::Column {
                seq,
                column: "ts_ms",
            });
        }
        if payload_invocation_id(&row.payload).as_deref() != Some(row.invocation_id.as_str()) {
            return Some(ChainBreak::Column {
                seq,
                column: "invocation_id",
            });
        }
        self.prev_seq = seq;
        self.prev_hash = computed;
        None
    }
}

/// The payload's top-level `invocation_id` ("" when absent), as the indexed column stores it;
/// None when the payload is not a JSON object.
pub fn payload_invocation_id(payload: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Ids<'a> {
        #[serde(borrow, default)]
        invocation_id: Option<std::borrow::Cow<'a, str>>,
    }
    let ids: Ids<'_> = serde_json::from_str(payload).ok()?;
    Some(
        ids.invocation_id
            .map(std::borrow::Cow::into_owned)
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn row_hash_is_sha256_of_prev_and_the_canonical_row() {
        let payload = json!({"skill_id": "s", "invocation_id": "i\"d", "n": 1.5, "z": [1, {"b": 2, "a": "é"}]});
        let prev = [7u8; 32];
        let row = json!({"seq": 42, "ts": "2026-11-29T08:00:00.123Z", "kind": "skill.tool_denied", "payload": payload});
        let mut expected = prev.to_vec();
        expected.extend_from_slice(util::canonical_json(&row).as_bytes());
        let got = row_hash(
            &prev,
            42,
            "2026-11-29T08:00:00.123Z",
            "skill.tool_denied",
            &util::canonical_json(&payload),
        );
        assert_eq!(hex::encode(got), util::sha256_hex(&expected));
    }

    fn chain(n: i64) -> Vec<StoredRow> {
        let mut prev = GENESIS;
        (1..=n)
            .map(|seq| {
                let ts = util::rfc3339_ms(1_000 * seq);
                let payload = format!("{{\"invocation_id\":\"inv\",\"n\":{seq}}}");
                let hash = row_hash(&prev, seq, &ts, "k", &payload);
                let row = StoredRow {
                    seq,
                    ts,
                    ts_ms: 1_000 * seq,
                    kind: "k".into(),
                    invocation_id: "inv".into(),
                    payload,
                    prev_hash: prev.to_vec(),
                    hash: hash.to_vec(),
                };
                prev = hash;
                row
            })
            .collect()
    }

    fn first_break(rows: &[StoredRow]) -> Option<ChainBreak> {
        let mut scanner = ChainScanner::after(0, GENESIS, 0);
        rows.iter().find_map(|r| scanner.check(r))
    }

    #[test]
    fn an_intact_chain_passes_and_each_kind_of_tampering_is_named() {
        let rows = chain(5);
        assert_eq!(first_break(&rows), None);

        let mut edited = rows.clone();
        edited[2].payload = "{\"invocation_id\":\"inv\",\"n\":99}".into();
        assert_eq!(first_break(&edited), Some(ChainBreak::Edited { seq: 3 }));

        let mut deleted = rows.clone();
        deleted.remove(1);
        assert_eq!(
            first_break(&deleted),
            Some(ChainBreak::Missing {
                seq: 3,
                from: 2,
                to: 2
            })
        );

        let mut relinked = rows.clone();
        relinked[3].prev_hash = vec![1; 32];
        let h = row_hash(&[1; 32], 4, &relinked[3].ts, "k", &relinked[3].payload);
        relinked[3].hash = h.to_vec();
        assert_eq!(first_break(&relinked), Some(ChainBreak::Link { seq: 4 }));

        let mut column = rows.clone();
        column[0].invocation_id = "other".into();
        assert_eq!(
            first_break(&column),
            Some(ChainBreak::Column {
                seq: 1,
                column: "invocation_id"
            })
        );
        assert!(
            ChainBreak::Edited { seq: 3 }
                .to_string()
                .starts_with("row 3:")
        );
    }
}
