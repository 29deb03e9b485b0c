//! Small shared helpers: canonical JSON and hashes, UTC timestamps, durations, W3C trace context.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Serialises `value` as RFC 8785 canonical JSON: object keys sorted by UTF-16 code units, no
/// insignificant whitespace, strings escaped minimally.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_canonical(value, &mut out);
    out
}

/// Lowercase hex SHA-256 of the canonical JSON of `value` (the journal's `args_hash`).
pub fn canonical_hash(value: &Value) -> String {
    sha256_hex(canonical_json(value).as_bytes())
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // RFC 8785 orders keys by UTF-16 code units. Byte order is the same order unless a
            // key holds a character at or above U+E000, and the map usually iterates sorted
            // already: compare UTF-16 only when it can make a difference.
            if entries
                .iter()
                .any(|(k, _)| k.chars().any(|c| c >= '\u{e000}'))
            {
                entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            } else if !entries.is_sorted_by(|a, b| a.0 <= b.0) {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

/// Numbers as ECMAScript prints them: integers without a fraction, others in shortest form with
/// JavaScript's exponent style (`1e+21`, `1e-7`).
fn write_number(n: &serde_json::Number, out: &mut String) {
    if n.is_i64() || n.is_u64() {
        out.push_str(&n.to_string());
        return;
    }
    let f = n.as_f64().unwrap_or(0.0);
    if f == 0.0 {
        out.push('0');
        return;
    }
    if f.fract() == 0.0 && f.abs() < 1e21 {
        let _ = write!(out, "{f:.0}");
        return;
    }
    let abs = f.abs();
    if (1e-6..1e21).contains(&abs) {
        let _ = write!(out, "{f}");
        return;
    }
    let formatted = format!("{f:e}");
    match formatted.split_once('e') {
        Some((mantissa, exp)) if !exp.starts_with('-') => {
            let _ = write!(out, "{mantissa}e+{exp}");
        }
        _ => out.push_str(&formatted),
    }
}

fn write_string(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    // Copy runs that need no escape in one go; only `"`, `\` and control characters are escaped.
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x0c => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..0x20 => "",
            _ => continue,
        };
        // `i` is at an ASCII byte, so both slices end on character boundaries.
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `2026-11-29T08:00:00.123Z` for a time in milliseconds since the epoch.
pub fn rfc3339_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// The current time as [`rfc3339_ms`].
pub fn now_rfc3339() -> String {
    rfc3339_ms(now_ms())
}

/// Milliseconds since the epoch at 00:00:00 UTC of the day containing `ms`.
pub fn utc_day_start_ms(ms: i64) -> i64 {
    ms - ms.rem_euclid(86_400_000)
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) to days since 1970-01-01.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `1500ms`, `90s`, `2m`, `1h` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 1500ms, 90s, 2m"))?;
    let ms = match unit {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1000),
        "m" | "min" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => {
            return Err(format!(
                "invalid duration {text:?}: unknown unit {unit:?} (use ms, s, m, h)"
            ));
        }
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("invalid duration {text:?}: too large"))
}

/// A W3C trace context: the ids a `traceparent` header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u8,
}

impl TraceContext {
    /// A fresh root context with random ids, sampled.
    pub fn new_root() -> Self {
        let mut bytes = [0u8; 24];
        loop {
            fill_random(&mut bytes);
            let mut trace_id = [0u8; 16];
            let mut span_id = [0u8; 8];
            trace_id.copy_from_slice(&bytes[..16]);
            span_id.copy_from_slice(&bytes[16..]);
            if trace_id != [0; 16] && span_id != [0; 8] {
                return Self {
                    trace_id,
                    span_id,
                    flags: 1,
                };
            }
        }
    }

    /// Parses a `traceparent` strictly: lowercase hex, exact lengths, non-zero ids, version ≠ ff.
    pub fn parse(header: &str) -> Option<Self> {
        let b = header.as_bytes();
        if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let lower_hex = |s: &[u8]| s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        let version = &b[0..2];
        if !lower_hex(version) || version == b"ff" {
            return None;
        }
        // Version 00 has exactly four fields; a later version may append more after a dash.
        if (version == b"00" && b.len() != 55) || (b.len() > 55 && b[55] != b'-') {
            return None;
        }
        let (trace, span, flags) = (&b[3..35], &b[36..52], &b[53..55]);
        if !lower_hex(trace) || !lower_hex(span) || !lower_hex(flags) {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        hex::decode_to_slice(trace, &mut trace_id).ok()?;
        hex::decode_to_slice(span, &mut span_id).ok()?;
        let mut flag = [0u8; 1];
        hex::decode_to_slice(flags, &mut flag).ok()?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            flags: flag[0],
        })
    }

    /// The same trace with a new span id (a child of this context).
    pub fn child(&self) -> Self {
        let mut span_id = [0u8; 8];
        while span_id == [0; 8] {
            fill_random(&mut span_id);
        }
        Self { span_id, ..*self }
    }

    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }

    pub fn span_id_hex(&self) -> String {
        hex::encode(self.span_id)
    }

    /// The `traceparent` header value (version 00).
    pub fn header(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id_hex(),
            self.span_id_hex(),
            self.flags
        )
    }
}

/// Fills `buf` from the kernel's CSPRNG. getrandom(2) only fails on pre-3.17 kernels, which
/// cannot run the sandbox anyway.
pub fn fill_random(buf: &mut [u8]) {
    if let Err(err) = getrandom::fill(buf) {
        panic!("the kernel random source is unavailable: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_strings_escape_exactly_the_required_characters() {
        let s = "plain é 😀 \"q\" back\\slash \u{8}\u{c}\n\r\t \u{1} \u{1f} \u{7f}";
        assert_eq!(
            canonical_json(&json!(s)),
            "\"plain é 😀 \\\"q\\\" back\\\\slash \\b\\f\\n\\r\\t \\u0001 \\u001f \u{7f}\""
        );
        // Keys are ordered by UTF-16 code units: U+FF61 sorts after U+1F600 in UTF-16 (a
        // surrogate pair starts with 0xD83D) although it is before it in UTF-8.
        let v = json!({"\u{ff61}": 1, "\u{1f600}": 2, "b": 3, "a": 4});
        assert_eq!(canonical_json(&v), "{\"a\":4,\"b\":3,\"😀\":2,\"｡\":1}");
    }

    #[test]
    fn canonical_json_sorts_keys_and_drops_whitespace() {
        let v = json!({"b": [1, 2.5, "x"], "a": {"d": null, "c": true}, "é": "\n"});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"c":true,"d":null},"b":[1,2.5,"x"],"é":"\n"}"#
        );
    }

    #[test]
    fn canonical_numbers_follow_ecmascript() {
        assert_eq!(canonical_json(&json!(1e21)), "1e+21");
        assert_eq!(canonical_json(&json!(1e-7)), "1e-7");
        assert_eq!(canonical_json(&json!(100.0)), "100");
        assert_eq!(canonical_json(&json!(0.000001)), "0.000001");
    }

    #[test]
    fn timestamps_are_utc_with_millis() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_795_939_200_123), "2026-11-29T08:00:00.123Z");
        assert_eq!(
            days_from_civil(2026, 11, 29) * 86_400_000 + 8 * 3_600_000,
            1_795_939_200_000
        );
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("2x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
    }

    #[test]
    fn traceparent_is_parsed_strictly() {
        let ok = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let tc = TraceContext::parse(ok).unwrap();
        assert_eq!(tc.header(), ok);
        for bad in [
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
            "",
        ] {
            assert!(TraceContext::parse(bad).is_none(), "{bad}");
        }
        assert!(
            TraceContext::parse("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-xy")
                .is_some()
        );
    }
}
