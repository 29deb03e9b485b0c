//! The benchmark suite (docs/BENCHMARKS.md): every case against a real baseline measured in the
//! same run, each figure as median and p10–p90 over repeated runs. `scripts/bench` runs it after
//! `cargo bench --bench policy`; this binary rewrites its own section of docs/BENCHMARKS.md.
//!
//! `cargo bench --bench suite -- [--quick] [--only 1,2,...] [--doc PATH]`
//!
//! The binary doubles as the measuring client that runs *inside* an invocation: copied into a
//! skill bundle as its `main`, it is started as `main __client ...` (see `client.rs`).

mod client;
mod common;
mod dispatch;
mod enforcement;
mod invoke;
mod journal_load;
mod memory;
mod memsearch;
mod report;
mod rpc;
mod search;
mod stats;

use std::path::PathBuf;
use std::process::Command;

use report::Row;

struct Options {
    quick: bool,
    only: Option<Vec<u32>>,
    doc: PathBuf,
}

fn options(args: &[String]) -> Options {
    let mut opts = Options {
        quick: false,
        only: None,
        doc: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/BENCHMARKS.md"),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => opts.quick = true,
            "--only" => {
                let list = it.next().expect("--only needs a list like 1,2");
                opts.only = Some(
                    list.split(',')
                        .map(|n| n.trim().parse().expect("--only takes case numbers"))
                        .collect(),
                );
            }
            "--doc" => opts.doc = PathBuf::from(it.next().expect("--doc needs a path")),
            // cargo passes --bench to harness=false targets.
            "--bench" => {}
            other => panic!("unknown argument {other:?}"),
        }
    }
    opts
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "unavailable".into())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{cores} cores ({cpu}), Linux {}, running as uid {}",
        first_line("uname", &["-r"]),
        // SAFETY: getuid has no preconditions.
        unsafe { libc::getuid() }
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("__client") {
        std::process::exit(client::main(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("__profile") {
        let n = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(100_000);
        match args.get(1).map(String::as_str) {
            Some("dispatch") => dispatch::profile(n),
            other => panic!("unknown profile target {other:?}"),
        }
        return;
    }
    // `cargo test --all-targets` runs this target without `--bench`: check the suite's own
    // arithmetic and file handling, and measure nothing.
    if !args.iter().any(|a| a == "--bench") {
        stats::checks::quantiles_interpolate();
        report::checks::the_section_is_replaced_and_the_rest_kept();
        report::checks::numbers_are_grouped();
        eprintln!("suite self-checks passed; run the benchmarks with scripts/bench");
        return;
    }
    let opts = options(&args);
    let want = |case: u32| opts.only.as_ref().is_none_or(|o| o.contains(&case));
    let q = opts.quick;
    let started = std::time::Instant::now();
    let load_before = loadavg();
    let ws = common::Workspace::new("suite");
    let mut rows: Vec<Row> = Vec::new();
    let mut notes: Vec<String> = Vec::new();

    if want(1) || want(7) {
        eprintln!("case 1/7: invocation overhead and startup (hyperfine)");
        let all = invoke::run(&ws, if q { 2 } else { 6 }, if q { 10 } else { 25 });
        rows.extend(all.into_iter().filter(|r| {
            let seven = r.case.starts_with('7');
            (seven && want(7)) || (!seven && want(1))
        }));
    }
    if want(2) {
        eprintln!("case 2: tool-call round trips");
        let h = dispatch::Harness::new();
        let batches = if q { 50 } else { 200 };
        let list = dispatch::measure(&h, dispatch::TOOL_LIST, batches);
        let read = dispatch::measure(&h, dispatch::MEMORY_READ, batches);
        rows.push(report::Row::new(
            "2. tool-call round trip",
            "in-process `dispatch::handle` alone: `tool.list`",
            report::Unit::Us,
            list,
        ));
        rows.push(report::Row::new(
            "2. tool-call round trip",
            "in-process `dispatch::handle` alone: audited `MemoryRead` (2 journal rows)",
            report::Unit::Us,
            read,
        ));
        rows.extend(rpc::run(
            &ws,
            if q { 2 } else { 6 },
            if q { 1_000 } else { 3_000 },
            if q { 5_000 } else { 20_000 },
            32,
        ));
    }
    if want(3) {
        eprintln!("case 3: enforcement (criterion results)");
        match enforcement::rows() {
            Ok(r) => rows.extend(r),
            Err(e) => notes.push(format!("case 3 not measured: {e}")),
        }
    }
    if want(4) {
        eprintln!("case 4: Grep and Glob against rg");
        let (r, note) = search::run(if q { 3 } else { 10 });
        rows.extend(r);
        notes.push(note);
    }
    if want(5) {
        eprintln!("case 5: MemorySearch over 100,000 documents");
        let (r, note) = memsearch::run(if q { 1 } else { 4 });
        rows.extend(r);
        notes.push(note);
    }
    if want(6) {
        eprintln!("case 6: journal status over 1M rows, then 16 concurrent invocations");
        let (r, note) = journal_load::status(if q { 2 } else { 4 }, if q { 10 } else { 20 });
        rows.extend(r);
        notes.push(note);
        rows.extend(journal_load::concurrent(
            &ws,
            if q { 1 } else { 3 },
            16,
            500,
        ));
    }
    if want(7) {
        eprintln!("case 7: broker peak RSS");
        rows.extend(memory::run(&ws, if q { 1 } else { 3 }, 10_000));
    }

    let conditions = vec![
        format!(
            "Run {} UTC{}, {:.0} s; {}.",
            first_line("date", &["-u", "+%Y-%m-%d %H:%M"]),
            if q { " (--quick)" } else { "" },
            started.elapsed().as_secs_f64(),
            machine()
        ),
        format!(
            "Load average before / after: {load_before} / {}. The machine is shared: baselines run in the same rounds, alternating order, so load hits both sides.",
            loadavg()
        ),
        format!(
            "Versions: {}; {}; {}; {}.",
            first_line(common::cyberos(), &["--version"]),
            first_line("bwrap", &["--version"]),
            first_line("rg", &["--version"]),
            first_line("hyperfine", &["--version"]),
        ),
        "Cases 1, 6 (status) and 7b are whole processes timed by hyperfine (`-N`, 3 warm-ups per round). Case 2 is timed by the skill itself: the suite's binary runs as the skill's `main` inside a real `cyberos skill invoke` (full sandbox, event loop, worker pool, enforcement, journal) and times each request on one connection; the echo floor is a blocking echo server driven by the same client code. Case 3 is criterion on `Policy`. Cases 4 and 5 call the tools in-process through the `Tool` trait (the tool's own cost; rg runs as a process, hot cache). Case 6 (concurrency) and 7a run real invocations of the same client.".into(),
    ];
    let body = report::render(&rows, &conditions, &notes);
    println!("{body}");
    let out_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&out_dir).expect("create target/bench");
    std::fs::write(out_dir.join("section.md"), &body).expect("write target/bench/section.md");
    report::write_section(&opts.doc, &body)
        .unwrap_or_else(|e| panic!("write {}: {e}", opts.doc.display()));
    eprintln!("wrote {}", opts.doc.display());
}
