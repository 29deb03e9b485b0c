//! Case 5: MemorySearch over 100,000 generated memory documents, called in-process through the
//! `Tool` trait once the index is built ("warm"), against the floor: the same FTS5 query run
//! directly on the tool's own index with rusqlite (no freshness walk, no scope filter, no
//! re-read of the documents, no snippets).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use cyberos::tools::ToolName;
use serde_json::json;

use crate::common::{self, Rng};
use crate::report::{Row, Target, Unit};
use crate::stats::Summary;

const CASE: &str = "5. MemorySearch";
const DOCS: usize = 100_000;
const VOCABULARY: usize = 5_000;
const SYLLABLES: [&str; 16] = [
    "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "fe", "gu", "ha", "ji", "be",
];

fn word(rank: usize) -> String {
    let mut r = rank + 16;
    let mut w = String::new();
    while r > 0 {
        w.push_str(SYLLABLES[r % 16]);
        r /= 16;
    }
    w
}

/// Zipf-distributed ranks (s = 1): a few words everywhere, most words rare, as in prose.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize) -> Self {
        let mut acc = 0.0;
        let cumulative = (1..=n)
            .map(|r| {
                acc += 1.0 / r as f64;
                acc
            })
            .collect();
        Self { cumulative }
    }

    fn sample(&self, rng: &mut Rng) -> usize {
        let total = *self.cumulative.last().expect("non-empty");
        let x = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * total;
        self.cumulative.partition_point(|&c| c < x)
    }
}

/// `target/bench-data/memory-v1`: a cyberos home whose memory holds DOCS notes in 100
/// directories. Deterministic; generated once.
fn home() -> PathBuf {
    let home = common::data_dir().join("memory-v1");
    let done = common::data_dir().join("memory-v1.complete");
    if done.exists() {
        return home;
    }
    let _ = std::fs::remove_dir_all(&home);
    let zipf = Zipf::new(VOCABULARY);
    let mut rng = Rng::new(0x00c0_ffee);
    let mut text = String::new();
    for i in 0..DOCS {
        let dir = home.join(format!("memory/memories/d{:02}", i % 100));
        if i < 100 {
            std::fs::create_dir_all(&dir).expect("create memory dir");
        }
        text.clear();
        let _ = writeln!(
            text,
            "# note {i}: {} {}\n",
            word(zipf.sample(&mut rng)),
            word(zipf.sample(&mut rng))
        );
        for _ in 0..3 {
            for k in 0..40 {
                text.push_str(&word(zipf.sample(&mut rng)));
                text.push(if k % 12 == 11 { '\n' } else { ' ' });
            }
            text.push_str("\n\n");
        }
        let _ = writeln!(text, "ref{i}");
        std::fs::write(dir.join(format!("n{i:06}.md")), &text).expect("write a note");
    }
    std::fs::write(&done, "").expect("mark the memory complete");
    home
}

fn queries() -> Vec<String> {
    let mut q = Vec::new();
    for k in 0..8 {
        q.push(format!("{} {}", word(20 + 17 * k), word(60 + 29 * k)));
    }
    for k in 0..4 {
        q.push(word(2_500 + 300 * k));
    }
    for k in 0..4 {
        q.push(format!("ref{}", 12_345 + 20_000 * k));
    }
    q
}

/// The floor: the tool's FTS5 query, alone, on the same index.
fn raw_query(conn: &rusqlite::Connection, query: &str) -> usize {
    let quoted = query
        .split_whitespace()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(" ");
    let mut stmt = conn
        .prepare_cached(
            "SELECT d.path, bm25(docs_fts) AS rank FROM docs_fts JOIN docs d ON d.id = docs_fts.rowid
             WHERE docs_fts MATCH ?1 ORDER BY rank, d.path",
        )
        .expect("prepare the raw query");
    let rows = stmt
        .query_map([quoted], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?))
        })
        .expect("run the raw query");
    let mut n = 0;
    for row in rows {
        std::hint::black_box(row.expect("a row"));
        n += 1;
    }
    n
}

pub fn run(rounds: usize) -> (Vec<Row>, String) {
    let home = home();
    let root = home.join("memory");
    let index = home.join("memory-index.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", index.display()));
    }
    let inv = common::invocation(Vec::new(), vec!["memories/**".into()], root.clone());
    let queries = queries();
    // The first search builds the index from nothing.
    let t = Instant::now();
    let (first, _) = common::call_tool(&inv, ToolName::MemorySearch, &json!({"query": queries[0]}));
    let build_s = t.elapsed().as_secs_f64();
    assert!(!first["results"].as_array().expect("results").is_empty());
    let conn = rusqlite::Connection::open(&index).expect("open the index");
    let mut hits = 0usize;
    for q in &queries {
        let (out, _) = common::call_tool(&inv, ToolName::MemorySearch, &json!({"query": q}));
        let n = out["results"].as_array().expect("results").len();
        assert!(n > 0, "query {q:?} found nothing");
        hits += raw_query(&conn, q);
    }
    let (mut tool, mut raw) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for q in &queries {
            let mut t_tool = || {
                tool.push(common::call_tool(&inv, ToolName::MemorySearch, &json!({"query": q})).1)
            };
            let mut t_raw = || {
                let t = Instant::now();
                std::hint::black_box(raw_query(&conn, q));
                raw.push(t.elapsed().as_secs_f64() * 1000.0);
            };
            if round % 2 == 0 {
                t_tool();
                t_raw();
            } else {
                t_raw();
                t_tool();
            }
        }
    }
    let rows = vec![
        Row::new(
            CASE,
            format!(
                "MemorySearch over {DOCS} documents, warm ({} queries × {rounds})",
                queries.len()
            ),
            Unit::Ms,
            Summary::of(&tool),
        )
        .baseline("the same FTS5 query alone", Summary::of(&raw))
        .target(Target::AtMost(50.0)),
        Row::new(
            CASE,
            "first search: builds the index from nothing (one sample)",
            Unit::Ms,
            Summary::of(&[build_s * 1000.0]),
        ),
    ];
    let avg = hits as f64 / queries.len() as f64;
    (
        rows,
        format!(
            "memory: {DOCS} notes of ~150 Zipf-distributed words; queries match {avg:.0} documents on average"
        ),
    )
}
