//! Which process runs an invocation's broker, so that a crashed broker is told apart from a
//! live one even after its pid has been reused.

/// The process that runs an invocation's broker: a pid and its start time (clock ticks after
/// boot, field 22 of /proc/PID/stat), so a reused pid is not mistaken for a live broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerIdentity {
    pub pid: i32,
    pub start_time: u64,
}

impl BrokerIdentity {
    /// This process.
    pub fn current() -> Option<Self> {
        let pid = std::process::id() as i32;
        Some(Self {
            pid,
            start_time: process_start_time(pid)?,
        })
    }

    /// Is that very process still running?
    pub fn is_alive(&self) -> bool {
        process_start_time(self.pid) == Some(self.start_time)
    }
}

/// Field 22 (starttime) of /proc/PID/stat. The command name (field 2) may hold spaces and `)`, so
/// fields are counted after its last `)`.
pub fn process_start_time(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let me = BrokerIdentity::current().expect("/proc is mounted");
        assert!(me.is_alive());
        assert!(
            !BrokerIdentity {
                start_time: me.start_time + 1,
                ..me
            }
            .is_alive()
        );
        assert!(
            !BrokerIdentity {
                pid: 0,
                start_time: 0
            }
            .is_alive()
        );
    }
}
