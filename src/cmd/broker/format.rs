//! The human form of journal rows for `tail` and `replay`: one line per row, colour only when
//! stdout is a terminal and `NO_COLOR` is unset or empty (https://no-color.org).

use std::io::IsTerminal as _;

use serde_json::Value;

use crate::journal::{Row, kind};

/// How many hex digits of a hash a human line shows.
const HASH_PREFIX: usize = 12;

#[derive(Debug, Clone, Copy)]
pub struct Style {
    colour: bool,
}

#[derive(Debug, Clone, Copy)]
enum Tone {
    Good,
    Bad,
    Warn,
    Dim,
}

impl Style {
    /// Colour for a terminal, unless `NO_COLOR` says otherwise.
    pub fn for_stdout() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self {
            colour: !no_color && std::io::stdout().is_terminal(),
        }
    }

    fn paint(self, tone: Tone, text: &str) -> String {
        if !self.colour {
            return text.to_owned();
        }
        let code = match tone {
            Tone::Good => "32",
            Tone::Bad => "31",
            Tone::Warn => "33",
            Tone::Dim => "2",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }

    /// An outcome, padded to `width` columns before any colour is added.
    pub fn outcome_padded(self, outcome: &str, width: usize) -> String {
        let pad = width.saturating_sub(outcome.chars().count());
        format!("{}{}", self.outcome(outcome), " ".repeat(pad))
    }

    pub fn outcome(self, outcome: &str) -> String {
        let tone = match outcome {
            "success" | "ok" => Tone::Good,
            "timeout" | "in_progress" | "running" => Tone::Warn,
            _ => Tone::Bad,
        };
        self.paint(tone, outcome)
    }
}

fn s<'a>(p: &'a Value, key: &str) -> &'a str {
    p.get(key).and_then(Value::as_str).unwrap_or("-")
}

fn n(p: &Value, key: &str) -> String {
    match p.get(key) {
        Some(Value::Null) | None => "-".into(),
        Some(v) => v.to_string(),
    }
}

/// The first digits of a hash.
pub fn prefix(hash: &str) -> &str {
    hash.get(..HASH_PREFIX).unwrap_or(hash)
}

/// `HH:MM:SS.mmm` of an RFC 3339 timestamp.
fn clock(ts: &str) -> &str {
    ts.get(11..23).unwrap_or(ts)
}

/// One row as a line: time, what happened, the tool, the outcome or denial reason, the
/// duration and the hash prefixes.
pub fn row_line(row: &Row, style: Style) -> String {
    let p = &row.payload;
    let time = style.paint(Tone::Dim, clock(&row.ts));
    let what = match row.kind.as_str() {
        kind::INVOKED_STARTED => format!(
            "start    skill {} {}  pid {}  deadline {} ms",
            s(p, "skill_id"),
            s(p, "skill_version"),
            n(p, "pid"),
            n(p, "deadline_ms")
        ),
        kind::TOOL_CALL_STARTED => format!(
            "call     {:<12} {}  args {}",
            s(p, "tool_name"),
            s(p, "call_id"),
            prefix(s(p, "args_hash"))
        ),
        kind::TOOL_CALL_COMPLETED => format!(
            "done     {:<12} {}  {}  {} ms  result {}",
            s(p, "tool_name"),
            s(p, "call_id"),
            style.outcome(s(p, "outcome")),
            n(p, "duration_ms"),
            prefix(s(p, "result_hash"))
        ),
        kind::TOOL_DENIED => format!(
            "denied   {:<12} {}  {}  args {}{}",
            s(p, "tool_name"),
            s(p, "call_id"),
            style.paint(Tone::Bad, s(p, "reason")),
            prefix(s(p, "attempted_args_hash")),
            p.get("detail")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
                .map(|d| format!("  ({d})"))
                .unwrap_or_default()
        ),
        kind::TIMEOUT => format!(
            "{}  after {} ms  signal {}  last call {}",
            style.paint(Tone::Warn, "timeout"),
            n(p, "elapsed_ms"),
            s(p, "signal"),
            s(p, "last_tool_call")
        ),
        kind::NO_CONNECT => format!(
            "no-conn  no broker connection after {} ms",
            n(p, "waited_ms")
        ),
        kind::INVOKED_COMPLETED => format!(
            "end      {}  exit {}  signal {}  {} ms  {} calls, {} denied",
            style.outcome(s(p, "outcome")),
            n(p, "exit_code"),
            n(p, "signal"),
            n(p, "duration_ms"),
            n(p, "tool_calls"),
            n(p, "denied")
        ),
        kind::MEMORY_EMITTED => format!("emit     {}", s(p, "path")),
        other => format!("{other}  {p}"),
    };
    format!("{time}  {what}")
}
