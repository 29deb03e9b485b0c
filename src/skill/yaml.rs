//! The frontmatter's YAML turned into a JSON value, under a hard budget: duplicate keys, alias
//! bombs, deep nesting and oversized input are refused with an error instead of costing time or
//! memory. This module never applies schema rules; it only decides what the YAML says.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;
use serde_saphyr::options::{DuplicateKeyPolicy, MergeKeyPolicy, NonFiniteFloatPolicy};

use crate::skill::rules::MAX_SKILL_MD_BYTES;

/// Real frontmatter nests two or three levels; `x-*` values may go a little deeper.
pub const MAX_DEPTH: usize = 32;

fn options() -> serde_saphyr::Options {
    let max_bytes = MAX_SKILL_MD_BYTES as usize;
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: Some(max_bytes),
            max_events: 100_000,
            max_nodes: 50_000,
            max_aliases: 100,
            max_anchors: 100,
            max_recorded_anchor_events: 10_000,
            max_recorded_anchor_bytes: max_bytes,
            max_depth: MAX_DEPTH,
            flow_nesting_limit: MAX_DEPTH,
            max_documents: 1,
            max_inclusion_depth: 0,
            max_total_scalar_bytes: max_bytes,
            max_merge_keys: 100,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 10_000,
            max_replay_stack_depth: 16,
        },
        duplicate_keys: DuplicateKeyPolicy::Error,
        // YAML 1.2 core: `yes`/`no`/`on`/`off` stay strings, and the YAML 1.1 merge key is
        // refused rather than silently expanded, so every YAML 1.2 parser reads the same
        // mapping (the signature is computed over it).
        strict_booleans: true,
        merge_keys: MergeKeyPolicy::Error,
        reject_unsupported_tags: true,
        non_finite_float_policy: NonFiniteFloatPolicy::Reject,
    }
}

/// Parses the frontmatter. An empty frontmatter is an empty mapping. Error messages count lines
/// from the start of the file: the frontmatter begins on line 2, after the opening fence.
pub fn to_json(frontmatter: &str) -> Result<Value, String> {
    if frontmatter.len() as u64 > MAX_SKILL_MD_BYTES {
        return Err(format!(
            "the frontmatter is larger than {MAX_SKILL_MD_BYTES} bytes"
        ));
    }
    if frontmatter.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    match serde_saphyr::from_str_with_options::<Value>(frontmatter, options()) {
        Ok(Value::Null) => Ok(Value::Object(serde_json::Map::new())),
        Ok(value) => Ok(value),
        Err(err) => Err(describe(&err.to_string())),
    }
}

static LOCATED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:error: )?line (\d+) column (\d+): (.*)$").unwrap_or_else(|e| panic!("{e}"))
});

/// One line for people: the file's line and column, and what was refused in this project's terms
/// rather than the parser's option names.
fn describe(rendered: &str) -> String {
    // serde-saphyr renders a source snippet after the first line.
    let first = rendered
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("invalid YAML");
    let (place, text) = match LOCATED.captures(first) {
        Some(c) => {
            let line = c[1].parse::<u64>().map_or(0, |n| n + 1);
            (format!("line {line}, column {}: ", &c[2]), c[3].to_owned())
        }
        None => (
            String::new(),
            first.trim_start_matches("error: ").to_owned(),
        ),
    };
    let text = if text.contains("duplicate mapping key") {
        text.split(", set DuplicateKeyPolicy")
            .next()
            .unwrap_or(&text)
            .to_owned()
    } else if text.contains("budget breached: Depth") || text.contains("recursion limit") {
        format!("nesting deeper than {MAX_DEPTH} levels is refused")
    } else if text.contains("budget breached: RecordedAnchor")
        || text.contains("budget breached: Alias")
        || text.contains("replay")
    {
        "too many alias expansions (an alias bomb?) are refused".to_owned()
    } else if text.contains("budget breached") {
        format!("the frontmatter is too large or complex ({text})")
    } else if text.contains("merge keys are not allowed") {
        "YAML merge keys (`<<`) are refused: write the mapping out".to_owned()
    } else {
        text
    };
    format!("{place}{text}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn plain_yaml_becomes_json() {
        let v = to_json("id: a\nn: 3\nlist: [a, 'b']\nmap: {k: v}\nyes_word: yes\n").unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id":"a","n":3,"list":["a","b"],"map":{"k":"v"},"yes_word":"yes"})
        );
    }

    #[test]
    fn hostile_yaml_is_refused_quickly() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            bomb.push_str(&format!(
                "{}: &{} [",
                (b'a' + i) as char,
                (b'a' + i) as char
            ));
            let prev = (b'a' + i - 1) as char;
            bomb.push_str(&vec![format!("*{prev}"); 10].join(", "));
            bomb.push_str("]\n");
        }
        let deep_flow = format!("x: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
        let deep_block = format!("x:\n  {}x\n", "- ".repeat(10_000));
        for (name, text) in [
            ("bomb", bomb),
            ("duplicate", "id: a\nid: b\n".to_owned()),
            ("merge key", "a: &a {k: v}\nb:\n  <<: *a\n".to_owned()),
            ("nan", "x: .nan\n".to_owned()),
            ("deep flow", deep_flow),
            ("deep block", deep_block),
        ] {
            let started = Instant::now();
            let err = to_json(&text).unwrap_err();
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{name} took {:?}",
                started.elapsed()
            );
            assert!(!err.is_empty(), "{name}");
        }
    }
}
