//! Least privilege for a worker process, once it holds what it needs.
//!
//! A worker ([`crate::worker_process`]) serves one guest, whose requests
//! reach the NVIDIA driver: a bug in the driver or in pvgpu that the guest
//! can drive is code execution in the worker. [`confine`] limits what that
//! buys, in this order:
//!
//! 1. **User.** When the worker runs as root and a [`WorkerUser`] is set,
//!    it takes that user's groups, gid and uid (`setgroups`, `setresgid`,
//!    `setresuid`: real, effective and saved), then checks that `setuid(0)`
//!    and `setgid(0)` fail. Changing credentials clears the parent-death
//!    signal; it is set again, and raised at once if the supervisor died
//!    meanwhile.
//! 2. **No new privileges, not dumpable.** `PR_SET_NO_NEW_PRIVS` (no
//!    set-user-id or file capabilities on any later exec, and what seccomp
//!    needs without `CAP_SYS_ADMIN`) and `PR_SET_DUMPABLE 0` (no core dump;
//!    other processes of the same user cannot `ptrace` it or read its
//!    `/proc/<pid>/mem`).
//! 3. **Seccomp.** A BPF filter ([`filter`]) on every thread of the process
//!    (`SECCOMP_FILTER_FLAG_TSYNC`, so the driver's threads are covered).
//!
//! The filter is a **deny-list**: every system call is allowed except the
//! ones listed in [`filter`]. An allow-list would be stronger, but the
//! NVIDIA user-mode driver is closed and makes many `ioctl`s, `mmap`s,
//! `futex`es, `clone`s of threads and `/proc` and `/sys` reads that vary by
//! driver version; an allow-list that misses one breaks a guest's program
//! in ways that are hard to find. What it denies is what turns code
//! execution into more than this session: starting programs (`execve`,
//! `fork`), reaching other processes (`ptrace`, `process_vm_*`, signals to
//! other processes), the network (`socket` of any family but `AF_UNIX`),
//! the kernel's administrative interfaces (modules, `bpf`, `perf_event_open`,
//! mounts, namespaces, keyrings, clocks, swap, reboot), and changing user
//! again. Denied calls fail with `EPERM` (`clone3` with `ENOSYS`, so that
//! glibc falls back to `clone`, whose flags the filter can see); the
//! process is not killed, because the driver we do not control may probe a
//! call and cope with its failure.
//!
//! Seccomp is built for x86_64 and aarch64; elsewhere [`confine`] with
//! seccomp asked for fails with [`SandboxError::Unsupported`].

use nix::sys::prctl;
use nix::unistd::{Gid, Pid, Uid};
use std::ffi::CString;

/// Why a worker could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// No such user in the user database.
    #[error("Unknown user '{0}'")]
    UnknownUser(String),
    /// The user database could not be read.
    #[error("Cannot look up user '{name}'")]
    UserLookup {
        /// The name looked up.
        name: String,
        /// Why.
        #[source]
        source: nix::Error,
    },
    /// The user to run as is root, which confines nothing.
    #[error("The worker user must not be root (uid 0 or gid 0)")]
    RootUser,
    /// A user is configured but the process cannot switch to it.
    #[error("Cannot switch to uid {target}: the worker runs as uid {current}, not as root")]
    NotRoot {
        /// The effective uid of the worker.
        current: u32,
        /// The configured uid.
        target: u32,
    },
    /// A step of the privilege drop failed.
    #[error("Cannot drop privileges: {step} failed")]
    Drop {
        /// The call that failed.
        step: &'static str,
        /// Why.
        #[source]
        source: nix::Error,
    },
    /// After the drop, the process could still become root again, or its
    /// ids are not the ones asked for.
    #[error("Privilege drop did not hold: {0}")]
    NotDropped(&'static str),
    /// A `prctl` failed.
    #[error("prctl({0}) failed")]
    Prctl(&'static str, #[source] nix::Error),
    /// The core size limit could not be set.
    #[error("setrlimit(RLIMIT_CORE) failed")]
    CoreLimit(#[source] nix::Error),
    /// The seccomp filter could not be built.
    #[error("Cannot build the seccomp filter")]
    Filter(#[source] seccompiler::BackendError),
    /// The compiled filter does not have the layout its extra checks are
    /// inserted into (a `seccompiler` upgrade changed it).
    #[error("Unexpected layout of the compiled seccomp filter")]
    FilterLayout,
    /// The kernel refused the filter.
    #[error("Cannot install the seccomp filter")]
    Install(#[source] seccompiler::Error),
    /// No seccomp filter for this architecture.
    #[error("Seccomp confinement is not supported on {0} (run workers with --no-seccomp)")]
    Unsupported(&'static str),
}

/// Whether [`filter`] is built for this architecture.
pub const SECCOMP_SUPPORTED: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// The user a worker runs as, resolved by the backend at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerUser {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Every group of the user (supplementary, and the primary one), so a
    /// `video` or `nvidia` group that may open `/dev/nvidia*` is kept. Empty
    /// means the primary group only.
    pub groups: Vec<u32>,
}

impl WorkerUser {
    /// Looks `name` up in the user database, with its groups.
    pub fn lookup(name: &str) -> Result<WorkerUser, SandboxError> {
        let lookup_err = |source| SandboxError::UserLookup { name: name.to_string(), source };
        let user = nix::unistd::User::from_name(name).map_err(lookup_err)?.ok_or_else(|| SandboxError::UnknownUser(name.to_string()))?;
        let cname = CString::new(name).map_err(|_| SandboxError::UnknownUser(name.to_string()))?;
        let groups = nix::unistd::getgrouplist(&cname, user.gid).map_err(lookup_err)?;
        let u = WorkerUser { uid: user.uid.as_raw(), gid: user.gid.as_raw(), groups: groups.iter().map(|g| g.as_raw()).collect() };
        if u.uid == 0 || u.gid == 0 {
            return Err(SandboxError::RootUser);
        }
        Ok(u)
    }
}

/// What [`confine`] applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// The user to switch to (when running as root); `None` keeps the
    /// process's own.
    pub user: Option<WorkerUser>,
    /// Whether to install the seccomp filter.
    pub seccomp: bool,
}

impl Default for Confinement {
    /// Seccomp on, the process's own user.
    fn default() -> Self {
        Confinement { user: None, seccomp: true }
    }
}

/// Keeps what the supervisor holds (the TCP key, the TLS key, relayed TLS
/// plaintext) out of reach of other processes of its user and out of core
/// files: not dumpable (no core dump; no `ptrace` or `/proc/<pid>/mem`
/// for processes of the same user without `CAP_SYS_PTRACE`) and a core size
/// limit of 0, hard and soft, which its children inherit.
pub fn protect_secrets() -> Result<(), SandboxError> {
    use nix::sys::resource::{Resource, setrlimit};
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(SandboxError::CoreLimit)?;
    prctl::set_dumpable(false).map_err(|e| SandboxError::Prctl("PR_SET_DUMPABLE", e))
}

/// Confines the calling process for the rest of its life: see the module
/// documentation. Call it once the GPU is open and the connection set up,
/// before the first request is served. It cannot be undone; on error the
/// process may be partly confined and should exit.
pub fn confine(c: &Confinement) -> Result<(), SandboxError> {
    if c.seccomp && !SECCOMP_SUPPORTED {
        return Err(SandboxError::Unsupported(std::env::consts::ARCH));
    }
    if let Some(u) = &c.user {
        drop_privileges(u)?;
    }
    prctl::set_no_new_privs().map_err(|e| SandboxError::Prctl("PR_SET_NO_NEW_PRIVS", e))?;
    prctl::set_dumpable(false).map_err(|e| SandboxError::Prctl("PR_SET_DUMPABLE", e))?;
    if c.seccomp {
        let prog = filter(nix::unistd::getpid())?;
        seccompiler::apply_filter_all_threads(&prog).map_err(SandboxError::Install)?;
    }
    Ok(())
}

/// Switches every thread of the process to `u` (glibc applies `set*id` to
/// all threads) and checks that root cannot be regained.
fn drop_privileges(u: &WorkerUser) -> Result<(), SandboxError> {
    use nix::unistd::{getresgid, getresuid, setgid, setgroups, setresgid, setresuid, setuid};
    if u.uid == 0 || u.gid == 0 {
        return Err(SandboxError::RootUser);
    }
    let (uid, gid) = (Uid::from_raw(u.uid), Gid::from_raw(u.gid));
    let ids = getresuid().map_err(|source| SandboxError::Drop { step: "getresuid", source })?;
    if !ids.effective.is_root() {
        if ids.real == uid && ids.effective == uid && ids.saved == uid {
            // Already that user (started as it): nothing to drop.
            return Ok(());
        }
        return Err(SandboxError::NotRoot { current: ids.effective.as_raw(), target: u.uid });
    }
    let ppid = nix::unistd::getppid();
    let pdeath = prctl::get_pdeathsig().map_err(|e| SandboxError::Prctl("PR_GET_PDEATHSIG", e))?;

    let groups: Vec<Gid> = if u.groups.is_empty() { vec![gid] } else { u.groups.iter().map(|&g| Gid::from_raw(g)).collect() };
    setgroups(&groups).map_err(|source| SandboxError::Drop { step: "setgroups", source })?;
    // The group first: once the uid is not root, the gid cannot change.
    setresgid(gid, gid, gid).map_err(|source| SandboxError::Drop { step: "setresgid", source })?;
    setresuid(uid, uid, uid).map_err(|source| SandboxError::Drop { step: "setresuid", source })?;

    let r = getresuid().map_err(|source| SandboxError::Drop { step: "getresuid", source })?;
    let g = getresgid().map_err(|source| SandboxError::Drop { step: "getresgid", source })?;
    if [r.real, r.effective, r.saved] != [uid; 3] || [g.real, g.effective, g.saved] != [gid; 3] {
        return Err(SandboxError::NotDropped("user or group ids differ from the ones set"));
    }
    if setuid(Uid::from_raw(0)).is_ok() {
        return Err(SandboxError::NotDropped("setuid(0) succeeded"));
    }
    if setgid(Gid::from_raw(0)).is_ok() {
        return Err(SandboxError::NotDropped("setgid(0) succeeded"));
    }

    // Changing credentials cleared the parent-death signal: the supervisor
    // relies on it to end its workers when it dies.
    if let Some(sig) = pdeath {
        prctl::set_pdeathsig(sig).map_err(|e| SandboxError::Prctl("PR_SET_PDEATHSIG", e))?;
        if nix::unistd::getppid() != ppid {
            // The parent died before the signal was set again.
            nix::sys::signal::raise(sig).map_err(|source| SandboxError::Drop { step: "raise", source })?;
        }
    }
    tracing::debug!(uid = u.uid, gid = u.gid, groups = ?u.groups, "worker privileges dropped");
    Ok(())
}

/// The seccomp program [`confine`] installs, for process `pid` (signals
/// may only be sent to it). Public so that it can be inspected and tested.
pub fn filter(pid: Pid) -> Result<seccompiler::BpfProgram, SandboxError> {
    imp::filter(pid)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod imp {
    use super::SandboxError;

    pub fn filter(_pid: nix::unistd::Pid) -> Result<seccompiler::BpfProgram, SandboxError> {
        Err(SandboxError::Unsupported(std::env::consts::ARCH))
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod imp {
    use super::SandboxError;
    use libc::c_long;
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter, SeccompRule,
        TargetArch, sock_filter,
    };
    use std::collections::BTreeMap;

    #[cfg(target_arch = "x86_64")]
    const ARCH: TargetArch = TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    const ARCH: TargetArch = TargetArch::aarch64;

    /// Denied whatever their arguments.
    pub(super) const DENIED: &[(&str, c_long)] = &[
        // Starting programs.
        ("execve", libc::SYS_execve),
        ("execveat", libc::SYS_execveat),
        #[cfg(target_arch = "x86_64")]
        ("fork", libc::SYS_fork),
        #[cfg(target_arch = "x86_64")]
        ("vfork", libc::SYS_vfork),
        // Other processes' memory.
        ("ptrace", libc::SYS_ptrace),
        ("process_vm_readv", libc::SYS_process_vm_readv),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        ("process_madvise", libc::SYS_process_madvise),
        ("pidfd_getfd", libc::SYS_pidfd_getfd),
        ("pidfd_send_signal", libc::SYS_pidfd_send_signal),
        ("tkill", libc::SYS_tkill),
        // Filesystems and namespaces.
        ("mount", libc::SYS_mount),
        ("umount2", libc::SYS_umount2),
        ("pivot_root", libc::SYS_pivot_root),
        ("chroot", libc::SYS_chroot),
        ("fsopen", libc::SYS_fsopen),
        ("fsconfig", libc::SYS_fsconfig),
        ("fsmount", libc::SYS_fsmount),
        ("fspick", libc::SYS_fspick),
        ("move_mount", libc::SYS_move_mount),
        ("open_tree", libc::SYS_open_tree),
        ("mount_setattr", libc::SYS_mount_setattr),
        ("unshare", libc::SYS_unshare),
        ("setns", libc::SYS_setns),
        ("open_by_handle_at", libc::SYS_open_by_handle_at),
        ("name_to_handle_at", libc::SYS_name_to_handle_at),
        ("quotactl", libc::SYS_quotactl),
        ("fanotify_init", libc::SYS_fanotify_init),
        ("swapon", libc::SYS_swapon),
        ("swapoff", libc::SYS_swapoff),
        ("acct", libc::SYS_acct),
        ("lookup_dcookie", libc::SYS_lookup_dcookie),
        // The kernel itself.
        ("kexec_load", libc::SYS_kexec_load),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("init_module", libc::SYS_init_module),
        ("finit_module", libc::SYS_finit_module),
        ("delete_module", libc::SYS_delete_module),
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        ("reboot", libc::SYS_reboot),
        ("syslog", libc::SYS_syslog),
        ("settimeofday", libc::SYS_settimeofday),
        ("clock_settime", libc::SYS_clock_settime),
        ("clock_adjtime", libc::SYS_clock_adjtime),
        ("adjtimex", libc::SYS_adjtimex),
        #[cfg(target_arch = "x86_64")]
        ("iopl", libc::SYS_iopl),
        #[cfg(target_arch = "x86_64")]
        ("ioperm", libc::SYS_ioperm),
        #[cfg(target_arch = "x86_64")]
        ("uselib", libc::SYS_uselib),
        // Changing user again.
        ("setuid", libc::SYS_setuid),
        ("setgid", libc::SYS_setgid),
        ("setreuid", libc::SYS_setreuid),
        ("setregid", libc::SYS_setregid),
        ("setresuid", libc::SYS_setresuid),
        ("setresgid", libc::SYS_setresgid),
        ("setfsuid", libc::SYS_setfsuid),
        ("setfsgid", libc::SYS_setfsgid),
        ("setgroups", libc::SYS_setgroups),
    ];

    /// Allowed at once, before the rest of the filter is walked: the calls
    /// the driver and the session make most. None is in [`DENIED`].
    pub(super) const FAST: &[c_long] =
        &[libc::SYS_ioctl, libc::SYS_futex, libc::SYS_read, libc::SYS_write, libc::SYS_mmap, libc::SYS_munmap];

    /// Namespace flags that `clone` may not have, even for a thread.
    const CLONE_NEW: &[i32] = &[
        libc::CLONE_NEWNS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
    ];

    /// x32 system calls (x86_64 numbers with this bit) pass the x86_64
    /// architecture check; a deny-list keyed on x86_64 numbers would miss
    /// them, so they are all denied.
    #[cfg(target_arch = "x86_64")]
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;

    fn cond(arg: u8, op: Op, value: u64) -> Result<Cond, SandboxError> {
        Cond::new(arg, Len::Dword, op, value).map_err(SandboxError::Filter)
    }

    fn rule(conds: Vec<Cond>) -> Result<SeccompRule, SandboxError> {
        SeccompRule::new(conds).map_err(SandboxError::Filter)
    }

    pub fn filter(pid: nix::unistd::Pid) -> Result<BpfProgram, SandboxError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|&(_, nr)| (nr, vec![])).collect();
        // A process of its own (fork), or new namespaces: threads are fine.
        let mut clone = vec![rule(vec![cond(0, Op::MaskedEq(libc::CLONE_THREAD as u64), 0)?])?];
        for &f in CLONE_NEW {
            clone.push(rule(vec![cond(0, Op::MaskedEq(f as u64), f as u64)?])?);
        }
        rules.insert(libc::SYS_clone, clone);
        // Sockets of any family but AF_UNIX (the network, netlink, raw
        // packets; socketpair only makes AF_UNIX pairs).
        rules.insert(libc::SYS_socket, vec![rule(vec![cond(0, Op::Ne, libc::AF_UNIX as u64)?])?]);
        // Signals, and pidfds, only for this process (its own threads).
        let own = pid.as_raw() as u32 as u64;
        for nr in [libc::SYS_kill, libc::SYS_tgkill, libc::SYS_rt_sigqueueinfo, libc::SYS_rt_tgsigqueueinfo, libc::SYS_pidfd_open] {
            rules.insert(nr, vec![rule(vec![cond(0, Op::Ne, own)?])?]);
        }
        // personality: only the query (0xffffffff) and PER_LINUX (0), not
        // e.g. ADDR_NO_RANDOMIZE.
        rules.insert(libc::SYS_personality, vec![rule(vec![cond(0, Op::Ne, 0xffff_ffff)?, cond(0, Op::Ne, 0)?])?]);

        let f = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), ARCH)
            .map_err(SandboxError::Filter)?;
        let prog: BpfProgram = f.try_into().map_err(SandboxError::Filter)?;
        with_prefix(prog)
    }

    /// BPF_LD | BPF_W | BPF_ABS.
    const BPF_LD_W_ABS: u16 = 0x20;
    /// BPF_JMP | BPF_JEQ | BPF_K.
    const BPF_JEQ_K: u16 = 0x15;
    #[cfg(target_arch = "x86_64")]
    /// BPF_JMP | BPF_JGE | BPF_K.
    const BPF_JGE_K: u16 = 0x35;
    /// BPF_RET | BPF_K.
    const BPF_RET_K: u16 = 0x06;
    /// Offset of the system call number in `struct seccomp_data`.
    const NR_OFFSET: u32 = 0;
    /// Where seccompiler loads the system call number: after its three
    /// instructions of architecture check.
    pub(super) const NR_LOAD: usize = 3;

    fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
        sock_filter { code, jt, jf, k }
    }

    /// Inserts, right after seccompiler loads the system call number, what
    /// its one match action per filter cannot say: `clone3` fails with
    /// `ENOSYS` (glibc then uses `clone`, whose flags are checked), x32
    /// calls are denied, and the hottest calls are allowed at once. BPF
    /// jumps go forward only, and none before the load jumps past it, so
    /// the instructions after it keep their offsets.
    fn with_prefix(mut prog: BpfProgram) -> Result<BpfProgram, SandboxError> {
        match prog.get(NR_LOAD) {
            Some(i) if i.code == BPF_LD_W_ABS && i.k == NR_OFFSET => {}
            _ => return Err(SandboxError::FilterLayout),
        }
        if prog[..NR_LOAD].iter().enumerate().any(|(at, i)| i.code & 0x07 == 0x05 && at + 1 + i.jt.max(i.jf) as usize > NR_LOAD) {
            return Err(SandboxError::FilterLayout);
        }
        let ret = |action: SeccompAction| insn(BPF_RET_K, 0, 0, u32::from(action));
        let mut pre = Vec::new();
        #[cfg(target_arch = "x86_64")]
        pre.extend([insn(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), ret(SeccompAction::Errno(libc::EPERM as u32))]);
        pre.extend([insn(BPF_JEQ_K, 0, 1, libc::SYS_clone3 as u32), ret(SeccompAction::Errno(libc::ENOSYS as u32))]);
        for &nr in FAST {
            pre.extend([insn(BPF_JEQ_K, 0, 1, nr as u32), ret(SeccompAction::Allow)]);
        }
        prog.splice(NR_LOAD + 1..NR_LOAD + 1, pre);
        // BPF_MAXINSNS.
        if prog.len() > 4096 {
            return Err(SandboxError::FilterLayout);
        }
        Ok(prog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_user_is_an_error() {
        assert!(matches!(WorkerUser::lookup("pvgpu-no-such-user-x"), Err(SandboxError::UnknownUser(_))));
    }

    #[test]
    fn root_is_refused_as_worker_user() {
        assert!(matches!(WorkerUser::lookup("root"), Err(SandboxError::RootUser)));
    }

    #[test]
    fn nobody_resolves_with_its_groups() {
        // nobody exists on every Linux system we build on; skip loudly if not.
        match WorkerUser::lookup("nobody") {
            Ok(u) => {
                assert_ne!(u.uid, 0);
                assert!(u.groups.contains(&u.gid), "getgrouplist includes the primary group: {u:?}");
            }
            Err(e) => eprintln!("skipped: no user 'nobody' here ({e})"),
        }
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn filter_has_its_prefix_and_fits() {
        let prog = filter(nix::unistd::getpid()).unwrap();
        assert!(prog.len() < 4096);
        // seccompiler's architecture check, then the number load, then ours.
        assert_eq!(prog[imp::NR_LOAD].code, 0x20);
        let after = &prog[imp::NR_LOAD + 1..];
        let clone3 = after.iter().position(|i| i.code == 0x15 && i.k == libc::SYS_clone3 as u32).unwrap();
        assert_eq!(after[clone3 + 1].k, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        #[cfg(target_arch = "x86_64")]
        assert_eq!((after[0].code, after[0].k), (0x35, 0x4000_0000));
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn fast_path_allows_nothing_denied() {
        for nr in imp::FAST {
            assert!(!imp::DENIED.iter().any(|(_, d)| d == nr), "{nr} is both fast-allowed and denied");
        }
        for nr in [libc::SYS_clone, libc::SYS_socket, libc::SYS_kill, libc::SYS_clone3] {
            assert!(!imp::FAST.contains(&nr));
        }
    }
}
