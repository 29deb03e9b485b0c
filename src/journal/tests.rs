//! The journal against real SQLite files: chaining across connections, lock waits, tampering.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde_json::json;

use super::chain::ChainBreak;
use super::*;

fn payload(inv: &str, n: i64) -> serde_json::Value {
    json!({"invocation_id": inv, "skill_id": "s", "trace_id": "t", "n": n})
}

fn raw(dir: &std::path::Path) -> Connection {
    let conn = Connection::open(dir.join("journal.db")).unwrap();
    conn.busy_timeout(Duration::from_secs(15)).unwrap();
    conn
}

#[test]
fn appends_chain_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path()).unwrap();
    for n in 1..=5 {
        assert_eq!(
            j.append(kind::TOOL_CALL_STARTED, &payload("a", n)).unwrap(),
            n
        );
    }
    let report = j.verify().unwrap();
    assert_eq!((report.rows, report.last_seq, report.broken), (5, 5, None));
    let rows = j.rows_for("a", 2).unwrap();
    assert_eq!(rows.iter().map(|r| r.seq).collect::<Vec<_>>(), [3, 4, 5]);
    assert_eq!(rows[0].payload, payload("a", 3));
    assert_eq!(j.verify_span(2, 4).unwrap(), None);
}

#[test]
fn connections_interleaving_extend_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    let a = Journal::open(dir.path()).unwrap();
    let b = Journal::open(dir.path()).unwrap();
    for n in 0..10 {
        let j = if n % 3 == 0 { &a } else { &b };
        j.append(kind::TOOL_CALL_STARTED, &payload("x", n)).unwrap();
    }
    let report = a.verify().unwrap();
    assert_eq!((report.rows, report.broken), (10, None));
}

#[test]
fn concurrent_writers_in_threads_and_connections_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Arc::new(Journal::open(dir.path()).unwrap());
    let handles: Vec<_> = (0..6)
        .map(|t| {
            let path = dir.path().to_owned();
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                // Half the threads share one connection, half open their own (as processes do).
                let own = (t % 2 == 0).then(|| Journal::open(&path).unwrap());
                let j = own.as_ref().unwrap_or(&shared);
                for n in 0..100 {
                    j.append(kind::TOOL_CALL_COMPLETED, &payload(&format!("t{t}"), n))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let report = shared.verify().unwrap();
    assert_eq!(
        (report.rows, report.last_seq, report.broken),
        (600, 600, None)
    );
}

#[test]
fn a_writer_holding_the_lock_for_5s_delays_but_loses_no_row() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path()).unwrap();
    j.append(kind::TOOL_CALL_STARTED, &payload("a", 1)).unwrap();
    let blocker = raw(dir.path());
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let release = std::thread::spawn(move || {
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_secs(5));
        blocker.execute_batch("COMMIT").unwrap();
    });
    tx.send(()).unwrap();
    let started = Instant::now();
    assert_eq!(
        j.append(kind::TOOL_CALL_STARTED, &payload("a", 2)).unwrap(),
        2
    );
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "the append did not wait for the lock"
    );
    release.join().unwrap();
    assert_eq!(j.verify().unwrap().broken, None);
}

#[test]
fn hand_edits_and_deletions_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path()).unwrap();
    for n in 1..=6 {
        j.append(kind::TOOL_CALL_STARTED, &payload("a", n)).unwrap();
    }
    let conn = raw(dir.path());
    conn.execute(
        "UPDATE rows SET payload = replace(payload, '\"n\":3', '\"n\":4') WHERE seq = 3",
        [],
    )
    .unwrap();
    assert_eq!(
        j.verify().unwrap().broken,
        Some(ChainBreak::Edited { seq: 3 })
    );
    assert_eq!(
        j.verify_span(1, 6).unwrap(),
        Some(ChainBreak::Edited { seq: 3 })
    );

    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path()).unwrap();
    for n in 1..=6 {
        j.append(kind::TOOL_CALL_STARTED, &payload("a", n)).unwrap();
    }
    let conn = raw(dir.path());
    conn.execute("DELETE FROM rows WHERE seq = 4", []).unwrap();
    assert_eq!(
        j.verify().unwrap().broken,
        Some(ChainBreak::Missing {
            seq: 5,
            from: 4,
            to: 4
        })
    );
    conn.execute("DELETE FROM rows WHERE seq >= 4", []).unwrap();
    assert_eq!(
        j.verify().unwrap().broken,
        Some(ChainBreak::Truncated { from: 4, to: 6 })
    );
    // Appending after a hand deletion must not paper over it.
    j.append(kind::TOOL_CALL_STARTED, &payload("a", 7)).unwrap();
    assert_eq!(
        j.verify().unwrap().broken,
        Some(ChainBreak::Missing {
            seq: 7,
            from: 4,
            to: 6
        })
    );
}

#[test]
fn completed_row_closes_the_invocation() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path()).unwrap();
    let me = BrokerIdentity::current().unwrap();
    j.register_invocation("inv", "s", me).unwrap();
    assert!(matches!(
        j.register_invocation("inv", "s", me),
        Err(JournalError::DuplicateInvocation(_))
    ));
    assert_eq!(j.invocation_broker("inv").unwrap(), Some((me, false)));
    assert!(j.invocation("inv").unwrap().unwrap().is_active());
    j.append(kind::INVOKED_COMPLETED, &payload("inv", 0))
        .unwrap();
    assert_eq!(j.invocation_broker("inv").unwrap(), Some((me, true)));
    assert_eq!(j.invocation_broker("other").unwrap(), None);
}

#[test]
fn an_unchained_layout_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    raw(dir.path())
        .execute_batch(
            "CREATE TABLE rows (seq INTEGER PRIMARY KEY, ts TEXT, kind TEXT, payload TEXT)",
        )
        .unwrap();
    let err = Journal::open(dir.path()).err().expect("refused");
    assert!(err.to_string().contains("predates the hash chain"), "{err}");
    assert!(
        Journal::open_existing(&dir.path().join("nowhere"))
            .unwrap()
            .is_none()
    );
}

fn wal_len(dir: &std::path::Path) -> u64 {
    std::fs::metadata(dir.join("journal.db-wal")).map_or(0, |m| m.len())
}

#[test]
fn a_long_log_is_emptied_without_losing_a_row_and_a_short_one_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path()).unwrap();
    j.append(kind::TOOL_CALL_STARTED, &payload("a", 0)).unwrap();
    let short = wal_len(dir.path());
    assert!(short > 0 && short < LOG_TRIM_BYTES);
    j.trim_log();
    assert_eq!(wal_len(dir.path()), short, "a short log is left alone");

    let mut n = 1;
    while wal_len(dir.path()) <= LOG_TRIM_BYTES {
        j.append(kind::TOOL_CALL_STARTED, &payload("a", n)).unwrap();
        n += 1;
    }
    j.trim_log();
    assert_eq!(wal_len(dir.path()), 0, "the log was emptied");
    // Every row is in the database file itself, and the chain goes on from there.
    j.append(kind::TOOL_CALL_STARTED, &payload("a", n)).unwrap();
    drop(j);
    let report = Journal::open(dir.path()).unwrap().verify().unwrap();
    assert_eq!((report.rows, report.broken), (n as u64 + 1, None));
}

#[test]
fn trimming_never_waits_for_another_reader() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path()).unwrap();
    for n in 0.. {
        if wal_len(dir.path()) > LOG_TRIM_BYTES {
            break;
        }
        j.append(kind::TOOL_CALL_STARTED, &payload("a", n)).unwrap();
    }
    let reader = raw(dir.path());
    reader
        .execute_batch("BEGIN; SELECT count(*) FROM rows;")
        .unwrap();
    let started = Instant::now();
    j.trim_log();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(wal_len(dir.path()) > 0, "the log stays while it is read");
    reader.execute_batch("COMMIT").unwrap();
    // The writer still waits for locks as before.
    j.append(kind::TOOL_CALL_STARTED, &payload("b", 0)).unwrap();
}
