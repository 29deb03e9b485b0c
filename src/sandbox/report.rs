//! What the sandbox really enforced, layer by layer (CONTRACT §6): the object recorded in
//! `skill.invoked_started.sandbox`, printed by `invoke --json` and `cyberos sandbox check`.
//! A layer is only ever reported as applied after it was applied and checked; never guessed.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// One layer of CONTRACT §6. The order here is the order of reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// The program's environment is exactly the one given (§6.1).
    Env,
    /// Only fds 0, 1, 2 are open when the program starts (§6.2).
    Fds,
    /// RLIMIT_AS, RLIMIT_CPU, RLIMIT_NPROC per invocation, no core dumps (§6.3).
    Limits,
    /// Not root, no supplementary groups (root broker), no capabilities, no_new_privs (§6.4).
    Identity,
    UserNs,
    PidNs,
    NetNs,
    /// The mount namespace and the minimal view built in it (§6.5).
    MountNs,
    IpcNs,
    UtsNs,
    Landlock,
    Seccomp,
    /// A new session without a controlling terminal (§6.8).
    Session,
    /// The sandbox dies with the broker and leaves no process behind (§6.8).
    Lifetime,
}

impl Layer {
    pub const ALL: [Layer; 14] = [
        Layer::Env,
        Layer::Fds,
        Layer::Limits,
        Layer::Identity,
        Layer::UserNs,
        Layer::PidNs,
        Layer::NetNs,
        Layer::MountNs,
        Layer::IpcNs,
        Layer::UtsNs,
        Layer::Landlock,
        Layer::Seccomp,
        Layer::Session,
        Layer::Lifetime,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Layer::Env => "env",
            Layer::Fds => "fds",
            Layer::Limits => "limits",
            Layer::Identity => "identity",
            Layer::UserNs => "user_ns",
            Layer::PidNs => "pid_ns",
            Layer::NetNs => "net_ns",
            Layer::MountNs => "mount_ns",
            Layer::IpcNs => "ipc_ns",
            Layer::UtsNs => "uts_ns",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::Session => "session",
            Layer::Lifetime => "lifetime",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How much of a layer is in force. Ordered from best to worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Applied,
    /// In force, but weaker than the contract asks (the reason says how).
    Degraded,
    /// Not in force at all.
    Unavailable,
}

/// One layer's state: `{"status":"applied"}`, `{"status":"degraded","reason":"..."}`; Landlock also
/// carries the kernel's ABI version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerState {
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abi: Option<u32>,
}

impl LayerState {
    pub fn applied() -> Self {
        Self {
            status: Status::Applied,
            reason: None,
            abi: None,
        }
    }

    pub fn degraded(reason: impl Into<String>) -> Self {
        Self {
            status: Status::Degraded,
            reason: Some(reason.into()),
            abi: None,
        }
    }

    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self {
            status: Status::Unavailable,
            reason: Some(reason.into()),
            abi: None,
        }
    }

    pub fn with_abi(mut self, abi: u32) -> Self {
        self.abi = Some(abi);
        self
    }

    pub fn is_applied(&self) -> bool {
        self.status == Status::Applied
    }

    /// The worse of two observations of the same layer, keeping every reason.
    fn worst(self, other: LayerState) -> LayerState {
        let status = self.status.max(other.status);
        let reason = match (self.reason, other.reason) {
            (Some(a), Some(b)) if a != b => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
        LayerState {
            status,
            reason,
            abi: self.abi.or(other.abi),
        }
    }
}

impl fmt::Display for LayerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = match self.status {
            Status::Applied => "applied",
            Status::Degraded => "degraded",
            Status::Unavailable => "unavailable",
        };
        f.write_str(word)?;
        if let Some(abi) = self.abi {
            write!(f, " (ABI {abi})")?;
        }
        if let Some(reason) = &self.reason {
            write!(f, ": {reason}")?;
        }
        Ok(())
    }
}

/// Every layer's state. Serialises as one JSON object keyed by layer name, in [`Layer::ALL`] order;
/// a layer nobody reported is unavailable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LayerReport {
    states: BTreeMap<Layer, LayerState>,
}

impl LayerReport {
    pub fn new() -> Self {
        Self::default()
    }

    /// The state of `layer` (unavailable when never reported).
    pub fn get(&self, layer: Layer) -> LayerState {
        self.states
            .get(&layer)
            .cloned()
            .unwrap_or_else(|| LayerState::unavailable("not set up"))
    }

    /// Records `state` for `layer`, replacing what was there.
    pub fn set(&mut self, layer: Layer, state: LayerState) {
        self.states.insert(layer, state);
    }

    /// Records `state` unless `layer` already looks worse: a later observation never hides an
    /// earlier failure.
    pub fn worsen(&mut self, layer: Layer, state: LayerState) {
        let merged = match self.states.remove(&layer) {
            Some(old) => old.worst(state),
            None => state,
        };
        self.states.insert(layer, merged);
    }

    /// Every layer with its state, in report order.
    pub fn layers(&self) -> Vec<(Layer, LayerState)> {
        Layer::ALL.iter().map(|&l| (l, self.get(l))).collect()
    }

    /// The layers that are not fully applied (what best-effort warns about and strict refuses).
    pub fn missing(&self) -> Vec<(Layer, LayerState)> {
        self.layers()
            .into_iter()
            .filter(|(_, s)| !s.is_applied())
            .collect()
    }

    /// True when every layer is applied.
    pub fn is_complete(&self) -> bool {
        self.missing().is_empty()
    }

    /// Fills in every layer nobody reported, so that the JSON always names all of them.
    pub(crate) fn complete_with(&mut self, reason: &str) {
        for layer in Layer::ALL {
            self.states
                .entry(layer)
                .or_insert_with(|| LayerState::unavailable(reason));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_as_an_object_in_layer_order() {
        let mut report = LayerReport::new();
        report.set(Layer::Seccomp, LayerState::applied());
        report.set(Layer::Env, LayerState::applied());
        report.set(Layer::Landlock, LayerState::applied().with_abi(7));
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(
            json,
            r#"{"env":{"status":"applied"},"landlock":{"status":"applied","abi":7},"seccomp":{"status":"applied"}}"#
        );
        let back: LayerReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
    }

    #[test]
    fn worsen_keeps_the_worst_state_and_all_reasons() {
        let mut report = LayerReport::new();
        report.worsen(Layer::Seccomp, LayerState::applied());
        report.worsen(Layer::Seccomp, LayerState::degraded("supervisor: x"));
        report.worsen(Layer::Seccomp, LayerState::applied());
        assert_eq!(
            report.get(Layer::Seccomp),
            LayerState::degraded("supervisor: x")
        );
        report.worsen(Layer::Seccomp, LayerState::unavailable("y"));
        assert_eq!(report.get(Layer::Seccomp).status, Status::Unavailable);
        assert_eq!(
            report.get(Layer::Seccomp).reason.as_deref(),
            Some("supervisor: x; y")
        );
    }

    #[test]
    fn unreported_layers_are_missing() {
        let mut report = LayerReport::new();
        report.set(Layer::Env, LayerState::applied());
        assert!(!report.is_complete());
        assert_eq!(report.missing().len(), Layer::ALL.len() - 1);
        for layer in Layer::ALL {
            report.set(layer, LayerState::applied());
        }
        assert!(report.is_complete());
    }
}
