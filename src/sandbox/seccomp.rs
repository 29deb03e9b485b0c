//! Layer §6.7: seccomp, as a default-deny allowlist. Anything not listed fails with EPERM:
//! ptrace, process_vm_*, mount and friends, unshare/setns, bpf, perf_event_open, the key
//! syscalls, userfaultfd, io_uring, kexec, module loading, and every syscall newer than this list.
//! Arguments are checked where a listed syscall has a dangerous mode: `clone` with namespace flags,
//! `socket`/`socketpair` outside AF_UNIX, `ioctl` TIOCSTI/TIOCLINUX, `personality` changes.
//! `clone3` fails with ENOSYS (its flags live in memory, out of seccomp's reach) so that libc falls
//! back to `clone`. x32 syscall numbers match nothing and fail with EPERM; the i386 ABI fails the
//! architecture check and kills the process.
//!
//! Only x86_64 has a list; elsewhere the layer is reported unavailable rather than guessed.

use super::report::LayerState;

/// Which processes a filter is for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Profile {
    /// The init and the program: an ordinary Unix process without privileged or kernel-attack
    /// surface syscalls.
    Sandbox,
    /// The supervisor: waits, forwards signals and talks over its sockets; nothing else.
    Supervisor,
}

#[cfg(target_arch = "x86_64")]
mod x86_64 {
    use std::collections::BTreeMap;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
        SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
    };

    use super::Profile;

    // Syscalls newer than the libc crate's table.
    const SYS_URETPROBE: i64 = 335;
    const SYS_CACHESTAT: i64 = 451;
    const SYS_MAP_SHADOW_STACK: i64 = 453;
    const SYS_FUTEX_WAKE: i64 = 454;
    const SYS_FUTEX_WAIT: i64 = 455;
    const SYS_FUTEX_REQUEUE: i64 = 456;
    const SYS_SETXATTRAT: i64 = 463;
    const SYS_GETXATTRAT: i64 = 464;
    const SYS_LISTXATTRAT: i64 = 465;
    const SYS_REMOVEXATTRAT: i64 = 466;

    /// Every namespace flag `clone` accepts.
    const NS_FLAGS: u64 = (libc::CLONE_NEWNS
        | libc::CLONE_NEWCGROUP
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUSER
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | 0x80/* CLONE_NEWTIME */) as u64;

    /// Syscalls allowed with any arguments in the sandbox profile.
    #[rustfmt::skip]
    const SANDBOX: &[i64] = &[
        // files and descriptors
        libc::SYS_read, libc::SYS_write, libc::SYS_open, libc::SYS_openat, libc::SYS_openat2, libc::SYS_close,
        libc::SYS_close_range, libc::SYS_creat, libc::SYS_stat, libc::SYS_fstat, libc::SYS_lstat,
        libc::SYS_newfstatat, libc::SYS_statx, libc::SYS_statfs, libc::SYS_fstatfs, libc::SYS_lseek,
        libc::SYS_pread64, libc::SYS_pwrite64, libc::SYS_readv, libc::SYS_writev, libc::SYS_preadv,
        libc::SYS_pwritev, libc::SYS_preadv2, libc::SYS_pwritev2, libc::SYS_access, libc::SYS_faccessat,
        libc::SYS_faccessat2, libc::SYS_pipe, libc::SYS_pipe2, libc::SYS_dup, libc::SYS_dup2, libc::SYS_dup3,
        libc::SYS_fcntl, libc::SYS_flock, libc::SYS_fsync, libc::SYS_fdatasync, libc::SYS_sync,
        libc::SYS_syncfs, libc::SYS_sync_file_range, libc::SYS_truncate, libc::SYS_ftruncate,
        libc::SYS_fallocate, libc::SYS_fadvise64, libc::SYS_readahead, libc::SYS_getdents,
        libc::SYS_getdents64, libc::SYS_getcwd, libc::SYS_chdir, libc::SYS_fchdir, libc::SYS_rename,
        libc::SYS_renameat, libc::SYS_renameat2, libc::SYS_mkdir, libc::SYS_mkdirat, libc::SYS_rmdir,
        libc::SYS_link, libc::SYS_linkat, libc::SYS_unlink, libc::SYS_unlinkat, libc::SYS_symlink,
        libc::SYS_symlinkat, libc::SYS_readlink, libc::SYS_readlinkat, libc::SYS_chmod, libc::SYS_fchmod,
        libc::SYS_fchmodat, libc::SYS_fchmodat2, libc::SYS_chown, libc::SYS_fchown, libc::SYS_lchown,
        libc::SYS_fchownat, libc::SYS_umask, libc::SYS_mknod, libc::SYS_mknodat, libc::SYS_utime,
        libc::SYS_utimes, libc::SYS_futimesat, libc::SYS_utimensat, libc::SYS_sendfile, libc::SYS_splice,
        libc::SYS_tee, libc::SYS_vmsplice, libc::SYS_copy_file_range, libc::SYS_getxattr, libc::SYS_lgetxattr,
        libc::SYS_fgetxattr, libc::SYS_listxattr, libc::SYS_llistxattr, libc::SYS_flistxattr,
        libc::SYS_setxattr, libc::SYS_lsetxattr, libc::SYS_fsetxattr, libc::SYS_removexattr,
        libc::SYS_lremovexattr, libc::SYS_fremovexattr, SYS_SETXATTRAT, SYS_GETXATTRAT, SYS_LISTXATTRAT,
        SYS_REMOVEXATTRAT, libc::SYS_inotify_init, libc::SYS_inotify_init1, libc::SYS_inotify_add_watch,
        libc::SYS_inotify_rm_watch, libc::SYS_memfd_create, SYS_CACHESTAT,
        // polling and events
        libc::SYS_select, libc::SYS_pselect6, libc::SYS_poll, libc::SYS_ppoll, libc::SYS_epoll_create,
        libc::SYS_epoll_create1, libc::SYS_epoll_ctl, libc::SYS_epoll_wait, libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2, libc::SYS_eventfd, libc::SYS_eventfd2, libc::SYS_timerfd_create,
        libc::SYS_timerfd_settime, libc::SYS_timerfd_gettime, libc::SYS_signalfd, libc::SYS_signalfd4,
        // memory
        libc::SYS_brk, libc::SYS_mmap, libc::SYS_munmap, libc::SYS_mremap, libc::SYS_mprotect,
        libc::SYS_madvise, libc::SYS_msync, libc::SYS_mincore, libc::SYS_mlock, libc::SYS_mlock2,
        libc::SYS_munlock, libc::SYS_mlockall, libc::SYS_munlockall, libc::SYS_remap_file_pages,
        libc::SYS_pkey_alloc, libc::SYS_pkey_free, libc::SYS_pkey_mprotect, libc::SYS_get_mempolicy,
        libc::SYS_set_mempolicy, libc::SYS_mbind, libc::SYS_set_mempolicy_home_node, libc::SYS_membarrier,
        libc::SYS_mseal, SYS_MAP_SHADOW_STACK,
        // processes, threads, signals
        libc::SYS_fork, libc::SYS_vfork, libc::SYS_execve, libc::SYS_execveat, libc::SYS_exit,
        libc::SYS_exit_group, libc::SYS_wait4, libc::SYS_waitid, libc::SYS_kill, libc::SYS_tkill,
        libc::SYS_tgkill, libc::SYS_rt_sigaction, libc::SYS_rt_sigprocmask, libc::SYS_rt_sigreturn,
        libc::SYS_rt_sigpending, libc::SYS_rt_sigtimedwait, libc::SYS_rt_sigsuspend,
        libc::SYS_rt_sigqueueinfo, libc::SYS_rt_tgsigqueueinfo, libc::SYS_sigaltstack, libc::SYS_pause,
        libc::SYS_restart_syscall, libc::SYS_pidfd_open, libc::SYS_pidfd_send_signal,
        libc::SYS_set_tid_address, libc::SYS_set_robust_list, libc::SYS_rseq, libc::SYS_futex,
        libc::SYS_futex_waitv, SYS_FUTEX_WAKE, SYS_FUTEX_WAIT, SYS_FUTEX_REQUEUE, libc::SYS_arch_prctl,
        libc::SYS_prctl, libc::SYS_capget, libc::SYS_capset, libc::SYS_seccomp,
        libc::SYS_landlock_create_ruleset, libc::SYS_landlock_add_rule, libc::SYS_landlock_restrict_self,
        SYS_URETPROBE,
        // identity (without capabilities these can only keep or lower privileges)
        libc::SYS_getpid, libc::SYS_getppid, libc::SYS_gettid, libc::SYS_getuid, libc::SYS_geteuid,
        libc::SYS_getgid, libc::SYS_getegid, libc::SYS_getresuid, libc::SYS_getresgid, libc::SYS_getgroups,
        libc::SYS_setuid, libc::SYS_setgid, libc::SYS_setreuid, libc::SYS_setregid, libc::SYS_setresuid,
        libc::SYS_setresgid, libc::SYS_setfsuid, libc::SYS_setfsgid, libc::SYS_setgroups, libc::SYS_getpgrp,
        libc::SYS_getpgid, libc::SYS_setpgid, libc::SYS_getsid, libc::SYS_setsid,
        // scheduling, time, limits, system information
        libc::SYS_sched_yield, libc::SYS_sched_getaffinity, libc::SYS_sched_setaffinity,
        libc::SYS_sched_getparam, libc::SYS_sched_setparam, libc::SYS_sched_getscheduler,
        libc::SYS_sched_setscheduler, libc::SYS_sched_get_priority_max, libc::SYS_sched_get_priority_min,
        libc::SYS_sched_rr_get_interval, libc::SYS_sched_getattr, libc::SYS_sched_setattr,
        libc::SYS_getpriority, libc::SYS_setpriority, libc::SYS_ioprio_get, libc::SYS_ioprio_set,
        libc::SYS_getcpu, libc::SYS_nanosleep, libc::SYS_clock_nanosleep, libc::SYS_clock_gettime,
        libc::SYS_clock_getres, libc::SYS_gettimeofday, libc::SYS_time, libc::SYS_alarm, libc::SYS_getitimer,
        libc::SYS_setitimer, libc::SYS_timer_create, libc::SYS_timer_settime, libc::SYS_timer_gettime,
        libc::SYS_timer_getoverrun, libc::SYS_timer_delete, libc::SYS_times, libc::SYS_getrusage,
        libc::SYS_getrlimit, libc::SYS_setrlimit, libc::SYS_prlimit64, libc::SYS_uname, libc::SYS_sysinfo,
        libc::SYS_getrandom,
        // Unix-domain sockets (creating any other family is refused below)
        libc::SYS_bind, libc::SYS_connect, libc::SYS_listen, libc::SYS_accept, libc::SYS_accept4,
        libc::SYS_getsockname, libc::SYS_getpeername, libc::SYS_sendto, libc::SYS_recvfrom, libc::SYS_sendmsg,
        libc::SYS_recvmsg, libc::SYS_sendmmsg, libc::SYS_recvmmsg, libc::SYS_shutdown, libc::SYS_setsockopt,
        libc::SYS_getsockopt,
        // System V IPC and POSIX message queues, private to the ipc namespace
        libc::SYS_shmget, libc::SYS_shmat, libc::SYS_shmdt, libc::SYS_shmctl, libc::SYS_semget,
        libc::SYS_semop, libc::SYS_semtimedop, libc::SYS_semctl, libc::SYS_msgget, libc::SYS_msgsnd,
        libc::SYS_msgrcv, libc::SYS_msgctl, libc::SYS_mq_open, libc::SYS_mq_unlink, libc::SYS_mq_timedsend,
        libc::SYS_mq_timedreceive, libc::SYS_mq_notify, libc::SYS_mq_getsetattr,
    ];

    /// Syscalls the supervisor needs once the sandbox is built.
    #[rustfmt::skip]
    const SUPERVISOR: &[i64] = &[
        libc::SYS_read, libc::SYS_write, libc::SYS_close, libc::SYS_poll, libc::SYS_ppoll, libc::SYS_fcntl,
        libc::SYS_wait4, libc::SYS_waitid, libc::SYS_kill, libc::SYS_tgkill, libc::SYS_getpid,
        libc::SYS_gettid, libc::SYS_rt_sigaction, libc::SYS_rt_sigprocmask, libc::SYS_rt_sigreturn,
        libc::SYS_sigaltstack, libc::SYS_signalfd4, libc::SYS_restart_syscall, libc::SYS_exit,
        libc::SYS_exit_group, libc::SYS_brk, libc::SYS_mmap, libc::SYS_munmap, libc::SYS_mremap,
        libc::SYS_madvise, libc::SYS_mprotect, libc::SYS_futex, libc::SYS_sched_yield,
        libc::SYS_clock_gettime, libc::SYS_clock_nanosleep, libc::SYS_nanosleep, libc::SYS_getrandom,
        libc::SYS_sendto, libc::SYS_recvfrom, libc::SYS_sendmsg, libc::SYS_recvmsg, libc::SYS_shutdown,
    ];

    fn cond(arg: u8, len: Len, op: Op, value: u64) -> Result<Cond, seccompiler::BackendError> {
        Cond::new(arg, len, op, value)
    }

    fn rule(conds: Vec<Cond>) -> Result<SeccompRule, seccompiler::BackendError> {
        SeccompRule::new(conds)
    }

    fn allowlist(
        profile: Profile,
    ) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
        let list = match profile {
            Profile::Sandbox => SANDBOX,
            Profile::Supervisor => SUPERVISOR,
        };
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
            list.iter().map(|&nr| (nr, Vec::new())).collect();
        if let Profile::Supervisor = profile {
            return Ok(rules);
        }
        // clone without any namespace flag (flags are the first argument on x86_64).
        rules.insert(
            libc::SYS_clone,
            vec![rule(vec![cond(0, Len::Qword, Op::MaskedEq(NS_FLAGS), 0)?])?],
        );
        let unix_only = || -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
            Ok(vec![rule(vec![cond(
                0,
                Len::Dword,
                Op::Eq,
                libc::AF_UNIX as u64,
            )?])?])
        };
        rules.insert(libc::SYS_socket, unix_only()?);
        rules.insert(libc::SYS_socketpair, unix_only()?);
        // ioctl's request is an unsigned int: the upper half of the register is ignored by the kernel.
        rules.insert(
            libc::SYS_ioctl,
            vec![rule(vec![
                cond(1, Len::Dword, Op::Ne, libc::TIOCSTI)?,
                cond(1, Len::Dword, Op::Ne, libc::TIOCLINUX)?,
            ])?],
        );
        // personality(0xffffffff) queries; personality(PER_LINUX) is a no-op. Nothing else.
        rules.insert(
            libc::SYS_personality,
            vec![
                rule(vec![cond(0, Len::Dword, Op::Eq, 0xffff_ffff)?])?,
                rule(vec![cond(0, Len::Dword, Op::Eq, 0)?])?,
            ],
        );
        Ok(rules)
    }

    /// The filters to install, in order: the allowlist, then the `clone3` → ENOSYS filter. The
    /// kernel runs the newest filter first and keeps its errno among equal actions.
    pub(super) fn programs(profile: Profile) -> Result<Vec<BpfProgram>, String> {
        let arch = TargetArch::x86_64;
        let e = |e: seccompiler::BackendError| e.to_string();
        let main = SeccompFilter::new(
            allowlist(profile).map_err(e)?,
            SeccompAction::Errno(libc::EPERM as u32),
            SeccompAction::Allow,
            arch,
        )
        .map_err(e)?;
        let mut out: Vec<BpfProgram> = vec![main.try_into().map_err(e)?];
        if let Profile::Sandbox = profile {
            let clone3 = SeccompFilter::new(
                [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
                SeccompAction::Allow,
                SeccompAction::Errno(libc::ENOSYS as u32),
                arch,
            )
            .map_err(e)?;
            out.push(clone3.try_into().map_err(e)?);
        }
        Ok(out)
    }
}

/// Installs the filters of `profile` on this thread (sets no_new_privs first, as seccomp requires).
pub(crate) fn install(profile: Profile) -> LayerState {
    #[cfg(target_arch = "x86_64")]
    {
        let programs = match x86_64::programs(profile) {
            Ok(p) => p,
            Err(e) => return LayerState::unavailable(format!("failed to build the filter: {e}")),
        };
        for program in &programs {
            if let Err(e) = seccompiler::apply_filter(program) {
                return LayerState::unavailable(format!("failed to install the filter: {e}"));
            }
        }
        LayerState::applied()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = profile;
        LayerState::unavailable(format!(
            "no syscall allowlist for {}",
            std::env::consts::ARCH
        ))
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn both_profiles_compile_to_bpf() {
        assert_eq!(x86_64::programs(Profile::Sandbox).unwrap().len(), 2);
        assert_eq!(x86_64::programs(Profile::Supervisor).unwrap().len(), 1);
    }
}
