//! `skill broker status`: today's counters and the invocations running now, as one JSON line.

use std::path::Path;

use serde_json::{Value, json};

use crate::journal::{DayCounts, InvocationRecord};
use crate::util;

pub fn run(home: &Path) -> anyhow::Result<u8> {
    let now = util::now_ms();
    // No journal yet means nothing has run here: the truthful answer is all zeros.
    let (counts, open) = match super::open(home)? {
        Some(journal) => (journal.day_counts(now)?, journal.open_invocations()?),
        None => (DayCounts::default(), Vec::new()),
    };
    let (active, crashed): (Vec<_>, Vec<_>) = open.iter().partition(|i| i.broker.is_alive());
    let out = json!({
        "active_invocations": active.len(),
        "tool_calls_today": counts.tool_calls,
        "denied_today": counts.denied,
        "timeouts_today": counts.timeouts,
        "invocations_today": counts.invocations,
        "active": active.iter().map(|i| entry(i)).collect::<Vec<_>>(),
        "crashed": crashed.iter().map(|i| entry(i)).collect::<Vec<_>>(),
    });
    println!("{out}");
    Ok(crate::exit::SUCCESS)
}

fn entry(inv: &InvocationRecord) -> Value {
    json!({
        "invocation_id": inv.invocation_id,
        "skill_id": inv.skill_id,
        "pid": inv.broker.pid,
        "started_at": util::rfc3339_ms(inv.started_ms),
    })
}
