//! Journal benchmarks: the per-call append cost against a bare INSERT measured in the same run,
//! and the operator queries on a journal of 1,000,000 rows.
//!
//! `cargo bench --bench journal` (set `JOURNAL_BENCH_ROWS` for another size). A plain harness:
//! each figure is the median of several timed runs, printed as a table for docs/BENCHMARKS.md.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cyberos::journal::{BrokerIdentity, Journal, kind};
use rusqlite::{Connection, params};
use serde_json::{Value, json};

const APPENDS: usize = 20_000;

fn payload(inv: &str, call: usize, completed: bool) -> Value {
    let mut p = json!({
        "invocation_id": inv,
        "skill_id": "memory-capture",
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "call_id": call.to_string(),
        "tool_name": "MemoryRead",
    });
    let extra = if completed {
        json!({"outcome": "success", "duration_ms": 3, "result_hash": "ab12cd34ef5600112233445566778899aabbccddeeff00112233445566778899"})
    } else {
        json!({"args_hash": "3f2a1b9c44aa00112233445566778899aabbccddeeff00112233445566778899"})
    };
    if let (Some(map), Value::Object(extra)) = (p.as_object_mut(), extra) {
        map.extend(extra);
    }
    p
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

/// CPU time this thread has used: on a machine shared with other work, wall time mostly
/// measures the others; CPU time measures us.
fn thread_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the pointer, which points at a zeroed, properly
    // aligned rusage owned by this frame; RUSAGE_THREAD is supported since Linux 2.6.26.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage");
    // SAFETY: getrusage succeeded, so it initialised the struct (it was zeroed before anyway).
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Wall and CPU time of `f`.
fn timed(f: impl FnOnce()) -> (Duration, Duration) {
    let (wall, cpu) = (Instant::now(), thread_cpu());
    f();
    (wall.elapsed(), thread_cpu() - cpu)
}

fn per_op(total: Duration, ops: usize) -> f64 {
    total.as_secs_f64() * 1e6 / ops as f64
}

/// The baseline: one un-chained INSERT per row in its own transaction, the journal's pragmas, same
/// payloads serialised the ordinary way.
fn bare_inserts(dir: &Path, n: usize) -> (Duration, Duration) {
    let conn = Connection::open(dir.join("bare.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
    conn.pragma_update(
        None,
        "wal_autocheckpoint",
        cyberos::journal::WAL_AUTOCHECKPOINT,
    )
    .unwrap();
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS bare (seq INTEGER PRIMARY KEY, ts TEXT, kind TEXT, payload TEXT)",
    )
    .unwrap();
    let payloads: Vec<Value> = (0..n).map(|i| payload("inv", i / 2, i % 2 == 1)).collect();
    timed(|| {
        for p in &payloads {
            conn.prepare_cached("INSERT INTO bare (ts, kind, payload) VALUES (?1, ?2, ?3)")
                .unwrap()
                .execute(params![
                    cyberos::util::now_rfc3339(),
                    kind::TOOL_CALL_STARTED,
                    p.to_string()
                ])
                .unwrap();
        }
    })
}

fn chained_appends(journal: &Journal, n: usize, inv: &str) -> (Duration, Duration) {
    let payloads: Vec<Value> = (0..n).map(|i| payload(inv, i / 2, i % 2 == 1)).collect();
    timed(|| {
        for (i, p) in payloads.iter().enumerate() {
            let kind = if i % 2 == 0 {
                kind::TOOL_CALL_STARTED
            } else {
                kind::TOOL_CALL_COMPLETED
            };
            journal.append(kind, p).unwrap();
        }
    })
}

fn append_bench() {
    println!("## append ({APPENDS} rows per run, median of 5 runs)\n");
    let (mut bare, mut bare_cpu) = (Vec::new(), Vec::new());
    let (mut chained, mut chained_cpu) = (Vec::new(), Vec::new());
    let mut contended = Vec::new();
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let (wall, cpu) = bare_inserts(dir.path(), APPENDS);
        bare.push(wall);
        bare_cpu.push(cpu);
        let journal = Journal::open(dir.path()).unwrap();
        let (wall, cpu) = chained_appends(&journal, APPENDS, "solo");
        chained.push(wall);
        chained_cpu.push(cpu);
        // Two connections (as two invocations in two processes) appending at once: every
        // append finds the other's commit and re-reads the chain tip.
        let a = Arc::new(Journal::open(dir.path()).unwrap());
        let b = Arc::new(Journal::open(dir.path()).unwrap());
        let t = Instant::now();
        let other = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || chained_appends(&b, APPENDS / 2, "two"))
        };
        chained_appends(&a, APPENDS / 2, "one");
        other.join().unwrap();
        contended.push(t.elapsed());
        assert_eq!(a.verify().unwrap().broken, None);
    }
    let us = |d: Vec<Duration>| per_op(median(d), APPENDS);
    let (bare, bare_cpu, chained, chained_cpu) =
        (us(bare), us(bare_cpu), us(chained), us(chained_cpu));
    let contended = us(contended);
    println!(
        "| measure | wall µs per row | CPU µs per row | rows/s (wall) | audited calls/s (2 rows each, wall) |"
    );
    println!("|---|---|---|---|---|");
    for (name, wall, cpu) in [
        (
            "baseline: bare INSERT, un-chained table",
            bare,
            format!("{bare_cpu:.1}"),
        ),
        (
            "Journal::append (hash chain, counters)",
            chained,
            format!("{chained_cpu:.1}"),
        ),
        (
            "Journal::append, 2 connections at once",
            contended,
            "-".to_owned(),
        ),
    ] {
        println!(
            "| {name} | {wall:.1} | {cpu} | {:.0} | {:.0} |",
            1e6 / wall,
            1e6 / wall / 2.0
        );
    }
    println!(
        "\nappend / baseline: {:.2}× wall, {:.2}× CPU",
        chained / bare,
        chained_cpu / bare_cpu
    );
}

fn build(dir: &Path, rows: usize) -> Journal {
    let journal = Journal::open(dir).unwrap();
    let per_invocation = 20;
    let dead = BrokerIdentity {
        pid: i32::MAX,
        start_time: 1,
    };
    let t = Instant::now();
    for n in 0..rows / per_invocation {
        let inv = format!("{n:08x}-0000-4000-8000-000000000000");
        journal
            .register_invocation(&inv, "memory-capture", dead)
            .unwrap();
        let ids = json!({"invocation_id": inv, "skill_id": "memory-capture", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"});
        journal.append(kind::INVOKED_STARTED, &ids).unwrap();
        for c in 0..(per_invocation - 2) / 2 {
            journal
                .append(kind::TOOL_CALL_STARTED, &payload(&inv, c, false))
                .unwrap();
            journal
                .append(kind::TOOL_CALL_COMPLETED, &payload(&inv, c, true))
                .unwrap();
        }
        // Every 1000th invocation stays open: its broker "crashed".
        if n % 1000 != 0 {
            journal.append(kind::INVOKED_COMPLETED, &ids).unwrap();
        }
    }
    eprintln!("built {rows} rows in {:.1?}", t.elapsed());
    journal
}

fn query_bench() {
    let rows: usize = std::env::var("JOURNAL_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    drop(build(dir.path(), rows));
    println!("## queries on {rows} rows (median)\n");
    println!("| query | time |");
    println!("|---|---|");
    // What `broker status` does, from opening the file to the liveness checks.
    let status = time(21, || {
        let journal = Journal::open_existing(dir.path()).unwrap().unwrap();
        let counts = journal.day_counts(cyberos::util::now_ms()).unwrap();
        let open = journal.open_invocations().unwrap();
        (counts, open.iter().filter(|i| i.broker.is_alive()).count())
    });
    println!("| status (open + counters + open invocations + liveness) | {status:.2?} |");
    let journal = Journal::open_existing(dir.path()).unwrap().unwrap();
    let inv = format!("{:08x}-0000-4000-8000-000000000000", rows / 40);
    let tail_poll = time(101, || journal.rows_for(&inv, 0).unwrap().len());
    println!("| tail poll: one invocation's rows (indexed) | {tail_poll:.2?} |");
    let idle_poll = time(101, || journal.data_version().unwrap());
    println!("| tail poll with nothing new (data_version) | {idle_poll:.2?} |");
    let replay = time(21, || {
        let rows = journal.rows_for(&inv, 0).unwrap();
        let span = (rows[0].seq, rows[rows.len() - 1].seq);
        (
            cyberos::journal::replay::replay(&inv, rows, false),
            journal.verify_span(span.0, span.1).unwrap(),
        )
    });
    println!("| replay of one invocation (with its chain span) | {replay:.2?} |");
    let verify = time(3, || journal.verify().unwrap());
    println!("| verify: the whole chain | {verify:.2?} |");
    println!();
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too, so keep that quick.
    if std::env::args().any(|a| a == "--bench") {
        append_bench();
        query_bench();
    } else {
        let dir = tempfile::tempdir().unwrap();
        let journal = build(dir.path(), 2_000);
        assert_eq!(journal.verify().unwrap().broken, None);
    }
}
