//! The broker's metric instruments, names exactly as CONTRACT §8 gives them.
//!
//! Labels only ever take values from small fixed sets (tool names of CONTRACT §5, outcomes,
//! directions): a skill cannot grow the number of time series by inventing tool names.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, UpDownCounter};

use crate::tools::ToolName;

pub const TOOL_CALLS_TOTAL: &str = "skill_broker_tool_calls_total";
pub const TOOL_DURATION_SECONDS: &str = "skill_broker_tool_duration_seconds";
pub const ACTIVE_INVOCATIONS: &str = "skill_broker_active_invocations";
pub const SOCKET_BYTES_TOTAL: &str = "skill_broker_socket_bytes_total";
pub const FRONTMATTER_VALIDATION_TOTAL: &str = "skill_frontmatter_validation_total";

/// Histogram buckets in seconds: tool calls range from microseconds (a memory read) to the
/// two-minute Bash default.
const DURATION_BOUNDARIES: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    120.0,
];

/// The `tool_name` label of a metric: one of the eleven tool names, else `unknown`.
pub fn tool_label(tool_name: &str) -> &'static str {
    ToolName::parse(tool_name).map_or("unknown", ToolName::as_str)
}

/// Which way bytes crossed the broker socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Broker to skill.
    Tx,
    /// Skill to broker.
    Rx,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tx => "tx",
            Self::Rx => "rx",
        }
    }
}

#[derive(Debug)]
pub(crate) struct Instruments {
    tool_calls: Counter<u64>,
    tool_duration: Histogram<f64>,
    active_invocations: UpDownCounter<i64>,
    socket_bytes: Counter<u64>,
    validations: Counter<u64>,
}

impl Instruments {
    pub(crate) fn new(meter: &Meter) -> Self {
        Self {
            tool_calls: meter
                .u64_counter(TOOL_CALLS_TOTAL)
                .with_description("Tool calls that reached enforcement, by tool and outcome")
                .build(),
            tool_duration: meter
                .f64_histogram(TOOL_DURATION_SECONDS)
                .with_description("Time from a tool.call request to its response")
                .with_unit("s")
                .with_boundaries(DURATION_BOUNDARIES.to_vec())
                .build(),
            active_invocations: meter
                .i64_up_down_counter(ACTIVE_INVOCATIONS)
                .with_description("Invocations whose broker is running")
                .build(),
            socket_bytes: meter
                .u64_counter(SOCKET_BYTES_TOTAL)
                .with_description("Bytes read from (rx) and written to (tx) broker sockets")
                .with_unit("By")
                .build(),
            validations: meter
                .u64_counter(FRONTMATTER_VALIDATION_TOTAL)
                .with_description("SKILL.md frontmatter validations, by outcome")
                .build(),
        }
    }

    pub(crate) fn tool_call(&self, tool_label: &'static str, outcome: &'static str, seconds: f64) {
        self.tool_calls.add(
            1,
            &[
                KeyValue::new("tool_name", tool_label),
                KeyValue::new("outcome", outcome),
            ],
        );
        self.tool_duration
            .record(seconds, &[KeyValue::new("tool_name", tool_label)]);
    }

    pub(crate) fn invocation_started(&self) {
        self.active_invocations.add(1, &[]);
    }

    pub(crate) fn invocation_ended(&self) {
        self.active_invocations.add(-1, &[]);
    }

    pub(crate) fn socket_bytes(&self, direction: Direction, bytes: u64) {
        self.socket_bytes
            .add(bytes, &[KeyValue::new("direction", direction.as_str())]);
    }

    pub(crate) fn validation(&self, outcome: &'static str) {
        self.validations
            .add(1, &[KeyValue::new("outcome", outcome)]);
    }
}
