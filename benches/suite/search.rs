//! Case 4: the Grep and Glob tools over a generated 100 MB source tree, called in-process through
//! the `Tool` trait (argument checks, the policy-filtered walk, matching and the JSON result: the
//! tool's own cost, without a socket), against `rg` run as a process on the same tree, hot cache.
//! rg gets `-uu` (no ignore files, hidden files searched) because the tools honour neither.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use cyberos::tools::ToolName;
use serde_json::json;

use crate::common::{self, Rng};
use crate::report::{Row, Target, Unit};
use crate::stats::Summary;

const CASE: &str = "4. search tools";
const FILES: usize = 4_000;
const FILE_BYTES: usize = 25_000;
const NEEDLE: &str = r"XYZZY_[0-9]+";

const WORDS: [&str; 32] = [
    "value", "index", "buffer", "reader", "writer", "config", "parse", "token", "error", "result",
    "handle", "socket", "stream", "policy", "journal", "invoke", "sandbox", "worker", "event",
    "frame", "cache", "memory", "search", "glob", "match", "path", "entry", "state", "count",
    "limit", "trace", "span",
];

/// `target/bench-data/tree-v1`: FILES files of about FILE_BYTES each (100 MB) in 20×10
/// directories, .rs, .py and .md, with a rare needle. Deterministic; generated once.
pub fn tree() -> PathBuf {
    let root = common::data_dir().join("tree-v1");
    let done = common::data_dir().join("tree-v1.complete");
    if done.exists() {
        return root;
    }
    let _ = std::fs::remove_dir_all(&root);
    let mut rng = Rng::new(0x5eed_7ee5);
    let mut text = String::with_capacity(FILE_BYTES + 200);
    for i in 0..FILES {
        let dir = root.join(format!("m{:02}/d{:02}", i % 20, (i / 20) % 10));
        std::fs::create_dir_all(&dir).expect("create tree dir");
        let ext = ["rs", "rs", "py", "md"][i % 4];
        text.clear();
        let mut line = 0usize;
        while text.len() < FILE_BYTES {
            line += 1;
            let (a, b, c) = (
                WORDS[rng.below(WORDS.len())],
                WORDS[rng.below(WORDS.len())],
                WORDS[rng.below(WORDS.len())],
            );
            let indent = "    ".repeat(rng.below(4));
            if rng.below(2_000) == 0 {
                let _ = writeln!(text, "{indent}// XYZZY_{i}_{line}: {a} {b}");
            } else {
                let _ = writeln!(
                    text,
                    "{indent}let {a}_{line} = {b}::{c}(&{a}, {}, \"{c}\");",
                    rng.below(10_000)
                );
            }
        }
        std::fs::write(dir.join(format!("f{i:04}.{ext}")), &text).expect("write tree file");
    }
    std::fs::write(&done, "").expect("mark the tree complete");
    root
}

fn tree_bytes(root: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read tree").flatten() {
            let m = e.metadata().expect("stat");
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.len();
            }
        }
    }
    total
}

pub fn run(rounds: usize) -> (Vec<Row>, String) {
    let root = tree();
    let mb = tree_bytes(&root) as f64 / 1e6;
    let inv = common::invocation(
        vec![format!("{}/**", root.display())],
        Vec::new(),
        common::data_dir().join("unused-memory"),
    );
    let grep_args = json!({"pattern": NEEDLE, "path": root, "max_results": 10_000});
    let glob_args = json!({"pattern": format!("{}/**/*.rs", root.display()), "limit": 10_000});
    let rg_grep = || {
        let mut c = Command::new("rg");
        c.args(["-uu", "-n", NEEDLE]).arg(&root);
        c
    };
    let rg_files = || {
        let mut c = Command::new("rg");
        c.args(["-uu", "--files", "-g", "*.rs"]).arg(&root);
        c
    };
    // Warm the page cache and check that both sides find the same thing.
    let (grep_out, _) = common::call_tool(&inv, ToolName::Grep, &grep_args);
    let (rg_out, _) = common::timed_output(&mut rg_grep());
    let tool_matches = grep_out["matches"].as_array().expect("matches").len();
    let rg_matches = rg_out
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(grep_out["truncated"], false);
    assert_eq!(tool_matches, rg_matches, "Grep and rg disagree");
    let (glob_out, _) = common::call_tool(&inv, ToolName::Glob, &glob_args);
    let (rg_list, _) = common::timed_output(&mut rg_files());
    let tool_files = glob_out["matches"].as_array().expect("matches").len();
    let rg_files_n = rg_list
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(glob_out["truncated"], false);
    assert_eq!(tool_files, rg_files_n, "Glob and rg --files disagree");

    let (mut grep, mut rg, mut glob, mut rgf) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut tools = || {
            grep.push(common::call_tool(&inv, ToolName::Grep, &grep_args).1);
            glob.push(common::call_tool(&inv, ToolName::Glob, &glob_args).1);
        };
        let mut rgs = || {
            rg.push(common::timed_output(&mut rg_grep()).1);
            rgf.push(common::timed_output(&mut rg_files()).1);
        };
        if round % 2 == 0 {
            tools();
            rgs();
        } else {
            rgs();
            tools();
        }
    }
    let rows = vec![
        Row::new(
            CASE,
            format!("Grep tool `{NEEDLE}` over {mb:.0} MB, {FILES} files ({tool_matches} matches)"),
            Unit::Ms,
            Summary::of(&grep),
        )
        .baseline("`rg -uu -n` (process)", Summary::of(&rg))
        .target(Target::RatioAtMost(1.5)),
        Row::new(
            CASE,
            format!("Glob tool `**/*.rs` ({tool_files} paths)"),
            Unit::Ms,
            Summary::of(&glob),
        )
        .baseline("`rg -uu --files -g '*.rs'` (process)", Summary::of(&rgf))
        .target(Target::RatioAtMost(1.5)),
    ];
    (rows, format!("search tree: {mb:.0} MB in {FILES} files"))
}
