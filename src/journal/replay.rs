//! Rebuilding one invocation's tool-call sequence from its rows, and naming what does not add
//! up: a call started and never completed (the broker died during it), a completion without a
//! start, rows out of order. The hash chain itself is checked by [`Journal::verify_span`];
//! this module only reads the rows it is given.
//!
//! [`Journal::verify_span`]: super::Journal::verify_span

use std::collections::HashMap;

use serde_json::{Value, json};

use super::kind;
use super::store::Row;

/// One `tool.call` as the journal tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub call_id: String,
    pub tool_name: String,
    /// `success`, `error`, `timeout` (from the completed row), `denied`, `in_progress` (the
    /// broker is still running it) or `incomplete` (it never completed and never will).
    pub outcome: String,
    /// The denial reason (or the reason a completed row gives, if any).
    pub reason: Option<String>,
    pub started_at: Option<String>,
    pub duration_ms: Option<i64>,
    pub args_hash: Option<String>,
    pub result_hash: Option<String>,
    /// Every row of this call.
    pub seqs: Vec<i64>,
}

impl Call {
    pub fn to_json(&self) -> Value {
        json!({
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "outcome": self.outcome,
            "reason": self.reason,
            "started_at": self.started_at,
            "duration_ms": self.duration_ms,
            "args_hash": self.args_hash,
            "result_hash": self.result_hash,
        })
    }
}

/// An invocation rebuilt from its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    pub invocation_id: String,
    pub skill_id: Option<String>,
    /// The `skill.invoked_completed` outcome; `running` while the broker lives; `incomplete`
    /// when it stopped without one.
    pub outcome: String,
    pub calls: Vec<Call>,
    pub rows: Vec<Row>,
    pub problems: Vec<String>,
}

impl Replay {
    pub fn to_json(&self) -> Value {
        json!({
            "invocation_id": self.invocation_id,
            "skill_id": self.skill_id,
            "outcome": self.outcome,
            "calls": self.calls.iter().map(Call::to_json).collect::<Vec<_>>(),
            "rows": self.rows.iter().map(Row::to_json).collect::<Vec<_>>(),
            "integrity": {"ok": self.problems.is_empty(), "problems": self.problems},
        })
    }
}

fn text(payload: &Value, key: &str) -> Option<String> {
    payload.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Rebuilds the calls of `rows` (one invocation's, in seq order). `running`: its broker is
/// alive and has not completed it, so an open call is in progress rather than lost.
pub fn replay(invocation_id: &str, rows: Vec<Row>, running: bool) -> Replay {
    let mut problems = Vec::new();
    let mut calls: Vec<Call> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    // Per call: (seq of its started row, seq of its completed row).
    let mut marks: Vec<(Option<i64>, Option<i64>)> = Vec::new();
    let mut skill_id = None;
    let mut outcome = None;
    let mut started_row: Option<i64> = None;
    let mut completed_row: Option<i64> = None;
    let mut prev: Option<&Row> = None;

    for row in &rows {
        let p = &row.payload;
        if skill_id.is_none() {
            skill_id = text(p, "skill_id");
        }
        if let Some(prev) = prev
            && row.ts < prev.ts
        {
            problems.push(format!(
                "rows out of order: row {} ({}) is dated before row {} ({})",
                row.seq, row.ts, prev.seq, prev.ts
            ));
        }
        prev = Some(row);
        if let Some(done) = completed_row {
            problems.push(format!(
                "rows out of order: row {} ({}) comes after skill.invoked_completed (row {done})",
                row.seq, row.kind
            ));
        }
        match row.kind.as_str() {
            kind::INVOKED_STARTED => {
                if let Some(first) = started_row {
                    problems.push(format!(
                        "skill.invoked_started appears twice (rows {first} and {})",
                        row.seq
                    ));
                }
                started_row.get_or_insert(row.seq);
            }
            kind::INVOKED_COMPLETED => {
                outcome = text(p, "outcome");
                completed_row.get_or_insert(row.seq);
            }
            kind::TOOL_CALL_STARTED | kind::TOOL_CALL_COMPLETED | kind::TOOL_DENIED => {
                let call_id = text(p, "call_id").unwrap_or_default();
                let index = *by_id.entry(call_id.clone()).or_insert_with(|| {
                    calls.push(Call {
                        call_id: call_id.clone(),
                        tool_name: text(p, "tool_name").unwrap_or_default(),
                        outcome: String::new(),
                        reason: None,
                        started_at: None,
                        duration_ms: None,
                        args_hash: None,
                        result_hash: None,
                        seqs: Vec::new(),
                    });
                    marks.push((None, None));
                    calls.len() - 1
                });
                let call = &mut calls[index];
                let mark = &mut marks[index];
                call.seqs.push(row.seq);
                match row.kind.as_str() {
                    kind::TOOL_CALL_STARTED => {
                        if let Some(first) = mark.0 {
                            problems.push(format!(
                                "call {} (call_id {call_id}) has two started rows ({first} and {})",
                                index + 1,
                                row.seq
                            ));
                        }
                        mark.0.get_or_insert(row.seq);
                        call.started_at = Some(row.ts.clone());
                        call.args_hash = text(p, "args_hash");
                    }
                    kind::TOOL_CALL_COMPLETED => {
                        if let Some(first) = mark.1 {
                            problems.push(format!(
                                "call {} (call_id {call_id}) has two completed rows ({first} and {})",
                                index + 1,
                                row.seq
                            ));
                        }
                        mark.1.get_or_insert(row.seq);
                        call.outcome = text(p, "outcome").unwrap_or_default();
                        call.duration_ms = p.get("duration_ms").and_then(Value::as_i64);
                        call.result_hash = text(p, "result_hash");
                        if call.reason.is_none() {
                            call.reason = text(p, "reason");
                        }
                    }
                    _ => {
                        call.outcome = "denied".into();
                        call.started_at = Some(row.ts.clone());
                        call.reason = text(p, "reason");
                        call.args_hash = text(p, "attempted_args_hash");
                    }
                }
                if let Some(first) = started_row.filter(|_| call.seqs.len() == 1)
                    && first > row.seq
                {
                    problems.push(format!(
                        "rows out of order: call {} (row {}) comes before skill.invoked_started (row {first})",
                        index + 1,
                        row.seq
                    ));
                }
            }
            _ => {}
        }
    }

    for (index, (call, (started, completed))) in calls.iter_mut().zip(&marks).enumerate() {
        let n = index + 1;
        let denied = call.outcome == "denied";
        match (started, completed) {
            (Some(_), None) if running => call.outcome = "in_progress".into(),
            (Some(s), None) => {
                call.outcome = "incomplete".into();
                problems.push(format!(
                    "crash during call {n} (call_id {}, {}): started at row {s}, never completed",
                    call.call_id, call.tool_name
                ));
            }
            (None, Some(c)) if !denied => problems.push(format!(
                "call {n} (call_id {}, {}): completed at row {c} without a started row",
                call.call_id, call.tool_name
            )),
            (Some(s), Some(c)) if c < s => problems.push(format!(
                "rows out of order: call {n} (call_id {}) completed at row {c} before it started at row {s}",
                call.call_id
            )),
            _ => {}
        }
        if denied && (started.is_some() || completed.is_some()) {
            problems.push(format!(
                "call {n} (call_id {}) was denied and also has started or completed rows",
                call.call_id
            ));
        }
    }

    let outcome = match outcome {
        Some(o) => o,
        None if running => "running".into(),
        None => {
            if !rows.is_empty() {
                problems.push(
                    "no skill.invoked_completed row, and the broker is no longer running (crashed or killed)"
                        .into(),
                );
            }
            "incomplete".into()
        }
    };
    if started_row.is_none() && !rows.is_empty() {
        problems.push("no skill.invoked_started row".into());
    }
    Replay {
        invocation_id: invocation_id.to_owned(),
        skill_id,
        outcome,
        calls,
        rows,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, kind: &str, payload: Value) -> Row {
        Row {
            seq,
            ts: format!("2026-11-29T08:00:{:02}.000Z", seq),
            kind: kind.into(),
            payload,
        }
    }

    fn started(seq: i64, id: &str) -> Row {
        row(
            seq,
            kind::TOOL_CALL_STARTED,
            json!({"call_id": id, "tool_name": "Read", "args_hash": "aa"}),
        )
    }

    fn completed(seq: i64, id: &str) -> Row {
        row(
            seq,
            kind::TOOL_CALL_COMPLETED,
            json!({"call_id": id, "tool_name": "Read", "outcome": "success", "duration_ms": 3, "result_hash": "bb"}),
        )
    }

    fn begin() -> Row {
        row(1, kind::INVOKED_STARTED, json!({"skill_id": "s"}))
    }

    #[test]
    fn a_clean_invocation_has_no_problems() {
        let rows = vec![
            begin(),
            started(2, "c1"),
            completed(3, "c1"),
            row(
                4,
                kind::TOOL_DENIED,
                json!({"call_id": "c2", "tool_name": "Bash", "reason": "tool_not_in_allowed_tools", "attempted_args_hash": "cc"}),
            ),
            row(5, kind::INVOKED_COMPLETED, json!({"outcome": "success"})),
        ];
        let r = replay("i", rows, false);
        assert_eq!(r.problems, Vec::<String>::new());
        assert_eq!(r.outcome, "success");
        assert_eq!(r.skill_id.as_deref(), Some("s"));
        assert_eq!(r.calls.len(), 2);
        assert_eq!(r.calls[0].to_json()["duration_ms"], 3);
        assert_eq!(r.calls[1].outcome, "denied");
        assert_eq!(r.calls[1].args_hash.as_deref(), Some("cc"));
    }

    #[test]
    fn an_open_call_is_a_crash_unless_the_broker_still_runs() {
        let rows = vec![
            begin(),
            started(2, "c1"),
            completed(3, "c1"),
            started(4, "c2"),
        ];
        let crashed = replay("i", rows.clone(), false);
        assert_eq!(crashed.outcome, "incomplete");
        assert!(
            crashed.problems[0].starts_with("crash during call 2 (call_id c2, Read)"),
            "{:?}",
            crashed.problems
        );
        let running = replay("i", rows, true);
        assert_eq!(running.problems, Vec::<String>::new());
        assert_eq!(running.calls[1].outcome, "in_progress");
    }

    #[test]
    fn orphans_and_disorder_are_named() {
        let mut late = started(5, "c1");
        late.ts = "2026-11-29T07:00:00.000Z".into();
        let rows = vec![begin(), completed(2, "c9"), completed(3, "c1"), late];
        let r = replay("i", rows, false);
        let all = r.problems.join("\n");
        assert!(
            all.contains("call 1 (call_id c9, Read): completed at row 2 without a started row"),
            "{all}"
        );
        assert!(
            all.contains("completed at row 3 before it started at row 5"),
            "{all}"
        );
        assert!(
            all.contains("row 5 (2026-11-29T07:00:00.000Z) is dated before row 3"),
            "{all}"
        );
    }
}
