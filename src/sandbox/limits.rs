//! Layer §6.3: address space, CPU time, processes and core dumps. Applied by the supervisor after
//! it entered the sandbox's user namespace, so that RLIMIT_NPROC counts only this invocation's
//! processes (since Linux 5.14 the count is kept per user namespace and uid) and the parent
//! namespace keeps the broker's own limit.

use super::Limits;
use super::report::LayerState;

fn set(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: setrlimit reads the struct we pass and changes only this process's limits.
    super::sys::cvt(unsafe { libc::setrlimit(resource, &lim) }).map(drop)
}

/// Sets soft and hard limits; the hard limit can only go down, so a broker with tighter limits
/// keeps them (reported as applied: the sandbox is then stricter than asked).
///
/// Without a user namespace of its own, RLIMIT_NPROC would count every process of the sandbox's
/// uid on the host (other invocations, the user's own session): it is then left alone and the
/// layer reported degraded, rather than making the sandbox fail to start at random.
pub(crate) fn apply(limits: &Limits, own_user_ns: bool) -> LayerState {
    let mut wanted = vec![
        ("RLIMIT_AS", libc::RLIMIT_AS, limits.address_space_bytes),
        ("RLIMIT_CPU", libc::RLIMIT_CPU, limits.cpu_seconds.max(1)),
        ("RLIMIT_CORE", libc::RLIMIT_CORE, 0),
    ];
    let mut failures = Vec::new();
    if own_user_ns {
        wanted.push((
            "RLIMIT_NPROC",
            libc::RLIMIT_NPROC,
            limits.max_processes.max(1),
        ));
    } else {
        failures.push(
            "RLIMIT_NPROC not set: without a user namespace it would count every process of the \
             sandbox uid"
                .to_string(),
        );
    }
    for (name, resource, value) in wanted {
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own.
        let value = if unsafe { libc::getrlimit(resource, &mut cur) } == 0 {
            value.min(cur.rlim_max)
        } else {
            value
        };
        if let Err(e) = set(resource, value) {
            failures.push(format!("{name}: {e}"));
        }
    }
    if failures.is_empty() {
        LayerState::applied()
    } else {
        LayerState::degraded(failures.join(", "))
    }
}
