//! `skill broker replay`: an invocation's tool calls rebuilt from the journal, with every
//! integrity problem named. Exit 0 whenever the invocation was found: judging is `verify`'s job.

use crate::cli::ReplayArgs;
use crate::exit;
use crate::journal::replay::{Replay, replay};

use super::format::{Style, prefix};

pub fn run(args: &ReplayArgs) -> anyhow::Result<u8> {
    let home = super::home(args.home.as_deref())?;
    let id = args.invocation.as_str();
    let Some(journal) = super::open(&home)? else {
        return Err(super::unknown_invocation(id, &home));
    };
    let registered = journal.invocation(id)?;
    let rows = journal.rows_for(id, 0)?;
    if rows.is_empty() && registered.is_none() {
        return Err(super::unknown_invocation(id, &home));
    }
    let running = registered.as_ref().is_some_and(|inv| inv.is_active());
    let span = rows.first().zip(rows.last()).map(|(a, b)| (a.seq, b.seq));
    let mut result = replay(id, rows, running);
    if result.skill_id.is_none() {
        result.skill_id = registered.map(|inv| inv.skill_id);
    }
    if let Some((from, to)) = span
        && let Some(broken) = journal.verify_span(from, to)?
    {
        result
            .problems
            .push(format!("hash chain broken at {broken}"));
    }
    if args.json {
        println!("{}", result.to_json());
    } else {
        print_human(&result, Style::for_stdout());
    }
    Ok(exit::SUCCESS)
}

fn print_human(r: &Replay, style: Style) {
    println!(
        "invocation {}  skill {}  outcome {}  {} calls",
        r.invocation_id,
        r.skill_id.as_deref().unwrap_or("-"),
        style.outcome(&r.outcome),
        r.calls.len()
    );
    for (i, call) in r.calls.iter().enumerate() {
        let dash = |v: Option<&str>| v.unwrap_or("-").to_owned();
        let line = format!(
            "{:>4}  {}  {:<12} {}  {:>8}  args {:<12}  result {:<12}  {}",
            i + 1,
            call.started_at
                .as_deref()
                .map_or("-", |t| t.get(11..23).unwrap_or(t)),
            call.tool_name,
            style.outcome_padded(&call.outcome, 11),
            call.duration_ms
                .map_or_else(|| "-".to_owned(), |d| format!("{d} ms")),
            dash(call.args_hash.as_deref().map(prefix)),
            dash(call.result_hash.as_deref().map(prefix)),
            call.reason.as_deref().unwrap_or(""),
        );
        println!("{}", line.trim_end());
    }
    if r.problems.is_empty() {
        println!("integrity: ok");
    } else {
        println!("integrity: {} problem(s)", r.problems.len());
        for p in &r.problems {
            println!("  - {p}");
        }
    }
}
