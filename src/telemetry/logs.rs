//! Journal rows as OTLP log records (`OTEL_LOGS_EXPORTER=otlp`), so that the audits of many
//! machines meet in one collector-fed backend. The local journal stays the record of truth: this
//! only copies rows that were written, and never writes or changes one.

use std::time::{Duration, SystemTime};

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, Severity};
use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
use serde_json::Value;

use super::pipeline::Telemetry;
use crate::journal::Row;
use crate::util::{TraceContext, days_from_civil};

/// The event name of every exported row.
pub const JOURNAL_ROW_EVENT: &str = "cyberos.journal.row";

pub(crate) fn export_row(telemetry: &Telemetry, row: &Row, trace: Option<TraceContext>) {
    let Some(logger) = &telemetry.logger else {
        return;
    };
    let field = |name: &str| {
        row.payload
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mut record = logger.create_log_record();
    record.set_event_name(JOURNAL_ROW_EVENT);
    record.set_body(AnyValue::from(row.to_json().to_string()));
    record.set_severity_number(Severity::Info);
    record.set_severity_text("INFO");
    if let Some(time) = row_time(&row.ts) {
        record.set_timestamp(time);
    }
    record.set_observed_timestamp(SystemTime::now());
    record.add_attribute("kind", row.kind.clone());
    record.add_attribute("invocation_id", field("invocation_id"));
    record.add_attribute("skill_id", field("skill_id"));
    record.add_attribute("seq", row.seq);
    if let Some(tc) = trace {
        record.set_trace_context(
            TraceId::from_bytes(tc.trace_id),
            SpanId::from_bytes(tc.span_id),
            Some(TraceFlags::new(tc.flags)),
        );
    }
    logger.emit(record);
}

/// Parses the journal's own timestamp format (`2026-11-29T08:00:00.123Z`, always UTC).
fn row_time(ts: &str) -> Option<SystemTime> {
    let b = ts.as_bytes();
    if b.len() != 24
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[23] != b'Z'
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| ts.get(range)?.parse::<i64>().ok();
    let days = days_from_civil(
        num(0..4)?,
        u32::try_from(num(5..7)?).ok()?,
        u32::try_from(num(8..10)?).ok()?,
    );
    let secs = days * 86_400 + num(11..13)? * 3600 + num(14..16)? * 60 + num(17..19)?;
    let ms = u64::try_from(secs * 1000 + num(20..23)?).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_times_round_trip() {
        for ms in [0i64, 1_764_403_200_123, 1_800_000_000_999] {
            let ts = crate::util::rfc3339_ms(ms);
            let time = row_time(&ts).unwrap();
            assert_eq!(
                time.duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64,
                ms,
                "{ts}"
            );
        }
        assert_eq!(row_time("2026-11-29T08:00:00Z"), None);
        assert_eq!(row_time("2026-11-29 08:00:00.123Z"), None);
    }
}
