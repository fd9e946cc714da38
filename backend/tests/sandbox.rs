//! A worker's confinement (`pvgpu_backend::sandbox`).
//!
//! Confining the test process itself would break the harness, so each test
//! runs itself again, alone, in a child process (`--exact NAME`) with
//! `PVGPU_SANDBOX_CHILD` set: the child confines itself, checks what it can
//! and cannot do, and prints `CHILD DONE` last; the parent asserts on its
//! exit status and that line (an `execve` that got through would end the
//! child without it). The last tests run the `pvgpu-backend` binary and
//! look at a real worker serving a session.

use nix::sys::prctl;
use nix::unistd::{Gid, Uid};
use pvgpu_backend::sandbox::{Confinement, SandboxError, WorkerUser, confine};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "PVGPU_SANDBOX_CHILD";
const SECRET: &str = "PVGPU_SANDBOX_SECRET";
const DONE: &str = "CHILD DONE";
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether this process is the child of `test`.
fn in_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs `test` alone in a child process and checks that it finished.
fn run_child(test: &str, env: &[(&str, &std::path::Path)]) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"]).env(CHILD, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child of {test} failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    assert!(stdout.contains(DONE), "child of {test} did not finish its checks\nstdout:\n{stdout}\nstderr:\n{stderr}");
    out
}

/// The errno of a libc call that returned -1.
fn errno(rc: i64) -> Option<i32> {
    (rc == -1).then(|| std::io::Error::last_os_error().raw_os_error().unwrap())
}

fn status_field(pid: &str, key: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string()).unwrap_or_default()
}

/// What seccomp must deny, and what the driver and the session need.
fn check_seccomp(helper: &std::sync::mpsc::Sender<std::sync::mpsc::Sender<Option<i32>>>) {
    assert_eq!(status_field("self", "Seccomp:"), "2", "filter mode");

    // Starting programs.
    let path = CString::new("/bin/true").unwrap();
    let argv = [path.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null()];
    // SAFETY: NUL-terminated path and NULL-terminated argv and envp that
    // outlive the call; if it succeeded the child would end without DONE.
    let rc = unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    assert_eq!(errno(rc.into()), Some(libc::EPERM), "execve");
    println!("execve: EPERM");
    assert!(Command::new("/bin/true").status().is_err(), "std::process::Command");
    // SAFETY: fork in a test process; a child that got through exits at once.
    let rc = unsafe { libc::fork() };
    if rc == 0 {
        // SAFETY: leaving the forked child without running anything.
        unsafe { libc::_exit(0) };
    }
    assert_eq!(errno(rc.into()), Some(libc::EPERM), "fork");
    println!("fork: EPERM");
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the raw fork system call; a child that got through exits.
        let rc = unsafe { libc::syscall(libc::SYS_fork) };
        if rc == 0 {
            // SAFETY: as above.
            unsafe { libc::_exit(0) };
        }
        assert_eq!(errno(rc), Some(libc::EPERM), "SYS_fork");
        // An x32 system call (getpid) must not pass as x86_64.
        // SAFETY: getpid through the x32 number; no arguments.
        let rc = unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) };
        assert_eq!(errno(rc), Some(libc::EPERM), "x32 getpid");
    }
    // clone3 answers ENOSYS, so glibc falls back to clone.
    let mut args = [0u64; 11];
    args[4] = libc::SIGCHLD as u64; // exit_signal
    // SAFETY: a clone_args of its size; a child that got through exits.
    let rc = unsafe { libc::syscall(libc::SYS_clone3, args.as_mut_ptr(), std::mem::size_of_val(&args)) };
    if rc == 0 {
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    assert_eq!(errno(rc), Some(libc::ENOSYS), "clone3");
    println!("clone3: ENOSYS");

    // The network; AF_UNIX stays.
    for (name, family) in
        [("AF_INET", libc::AF_INET), ("AF_INET6", libc::AF_INET6), ("AF_NETLINK", libc::AF_NETLINK), ("AF_PACKET", libc::AF_PACKET)]
    {
        // SAFETY: socket(2) with plain integer arguments.
        let rc = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        assert_eq!(errno(rc.into()), Some(libc::EPERM), "socket({name})");
    }
    println!("socket(AF_INET, AF_INET6, AF_NETLINK, AF_PACKET): EPERM");
    assert!(std::net::TcpListener::bind("127.0.0.1:0").is_err(), "TCP listener");
    let (mut a, mut b) = std::os::unix::net::UnixStream::pair().expect("AF_UNIX socketpair");
    a.write_all(b"ping").unwrap();
    let mut got = [0u8; 4];
    b.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping");
    let l = std::os::unix::net::UnixDatagram::unbound().expect("AF_UNIX socket");
    drop(l);
    println!("AF_UNIX: works");

    // Other processes; this one's own signals work.
    // SAFETY: signal 0 only checks.
    assert_eq!(errno(unsafe { libc::kill(1, 0) }.into()), Some(libc::EPERM), "kill(1)");
    // SAFETY: signal 0 to ourselves.
    assert_eq!(unsafe { libc::kill(libc::getpid(), 0) }, 0, "kill(self)");
    // SAFETY: signal 0 to this thread.
    assert_eq!(unsafe { libc::pthread_kill(libc::pthread_self(), 0) }, 0, "pthread_kill(self)");
    // SAFETY: PTRACE_TRACEME takes no pointers.
    let rc = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
    assert_eq!(errno(rc), Some(libc::EPERM), "ptrace");
    // SAFETY: unshare with a flag.
    assert_eq!(errno(unsafe { libc::unshare(libc::CLONE_NEWUSER) }.into()), Some(libc::EPERM), "unshare");
    // SAFETY: personality with a flag; the query form is allowed.
    assert_eq!(errno(unsafe { libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) }.into()), Some(libc::EPERM));
    // SAFETY: as above.
    assert_ne!(unsafe { libc::personality(0xffff_ffff) }, -1, "personality query");
    // SAFETY: io_uring_setup with a null params pointer (EFAULT if allowed).
    let rc = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, std::ptr::null_mut::<u8>()) };
    assert_eq!(errno(rc), Some(libc::EPERM), "io_uring_setup");
    let me = nix::unistd::getuid();
    assert_eq!(nix::unistd::setuid(me), Err(nix::errno::Errno::EPERM), "setuid to the same uid");
    println!("ptrace, kill(other), unshare, personality, io_uring, setuid: EPERM");

    // What the driver needs: threads, memory mappings, memfd.
    let handles: Vec<_> = (0..4).map(|i| std::thread::spawn(move || i * 2)).collect();
    assert_eq!(handles.into_iter().map(|h| h.join().unwrap()).sum::<i32>(), 12);
    let len = 1 << 20;
    // SAFETY: a fresh anonymous mapping, written and unmapped below, not
    // used after.
    unsafe {
        let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        std::ptr::write_bytes(p.cast::<u8>(), 0xab, len);
        assert_eq!(libc::mprotect(p, len, libc::PROT_READ), 0, "mprotect");
        assert_eq!(libc::madvise(p, len, libc::MADV_DONTNEED), 0, "madvise");
        assert_eq!(libc::munmap(p, len), 0, "munmap");
    }
    let fd = nix::sys::memfd::memfd_create(c"pvgpu-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).expect("memfd_create");
    nix::unistd::ftruncate(&fd, len as i64).unwrap();
    // SAFETY: a shared mapping of our own memfd, unmapped right after.
    unsafe {
        let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0);
        assert_ne!(p, libc::MAP_FAILED, "mmap of a memfd");
        assert_eq!(libc::munmap(p, len), 0);
    }
    println!("threads, mmap, mprotect, madvise, munmap, memfd: work");

    // A thread that was running before confine is confined too (TSYNC).
    let (tx, rx) = std::sync::mpsc::channel();
    helper.send(tx).unwrap();
    assert_eq!(rx.recv().unwrap(), Some(libc::EPERM), "socket(AF_INET) on a thread started before confine");
    println!("earlier thread: confined");
}

/// Starts a thread before confinement that, when asked, tries a socket.
fn earlier_thread() -> std::sync::mpsc::Sender<std::sync::mpsc::Sender<Option<i32>>> {
    let (tx, rx) = std::sync::mpsc::channel::<std::sync::mpsc::Sender<Option<i32>>>();
    std::thread::spawn(move || {
        for reply in rx {
            // SAFETY: socket(2) with plain integer arguments.
            let rc = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
            let e = errno(rc.into());
            if rc >= 0 {
                // SAFETY: closing the socket just made.
                unsafe { libc::close(rc) };
            }
            let _ = reply.send(e);
        }
    });
    tx
}

/// What the privilege drop must hold (the child runs as root before it).
fn check_dropped(secret: &std::path::Path) {
    let r = nix::unistd::getresuid().unwrap();
    let g = nix::unistd::getresgid().unwrap();
    assert_eq!([r.real, r.effective, r.saved], [Uid::from_raw(NOBODY); 3]);
    assert_eq!([g.real, g.effective, g.saved], [Gid::from_raw(NOBODY); 3]);
    assert_eq!(nix::unistd::getgroups().unwrap(), vec![Gid::from_raw(NOBODY)]);
    assert!(nix::unistd::setuid(Uid::from_raw(0)).is_err(), "setuid(0) after the drop");
    assert!(nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0)).is_err());
    assert!(nix::unistd::setgid(Gid::from_raw(0)).is_err(), "setgid(0) after the drop");
    let e = std::fs::File::open(secret).expect_err("a root-only file opened after the drop");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    println!("uid/gid {NOBODY}: setuid(0) fails, root-only file: permission denied");
    // The supervisor's parent-death signal survives the change of user.
    assert_eq!(prctl::get_pdeathsig().unwrap(), Some(nix::sys::signal::Signal::SIGTERM), "parent-death signal");
    // The local handshake reads /proc/self/fd links, which a non-dumpable
    // process of another user must still do.
    let efd = nix::sys::eventfd::EventFd::new().unwrap();
    let link = std::fs::read_link(format!("/proc/self/fd/{}", efd.as_raw_fd())).unwrap();
    assert_eq!(link.to_string_lossy(), "anon_inode:[eventfd]");
    println!("parent-death signal kept, /proc/self/fd readable");
}

/// A root-owned directory (0755) with a file only root may read (0600).
fn root_only_file(tag: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("pvgpu-sandbox-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = dir.join("secret");
    std::fs::write(&f, b"root only").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    (dir, f)
}

fn nobody() -> WorkerUser {
    WorkerUser { uid: NOBODY, gid: NOBODY, groups: vec![NOBODY] }
}

#[test]
fn seccomp_denies_escapes_and_keeps_what_the_driver_needs() {
    if in_child() {
        let helper = earlier_thread();
        confine(&Confinement { user: None, seccomp: true }).expect("confine");
        assert!(prctl::get_no_new_privs().unwrap());
        assert!(!prctl::get_dumpable().unwrap());
        check_seccomp(&helper);
        println!("{DONE}");
        return;
    }
    let out = run_child("seccomp_denies_escapes_and_keeps_what_the_driver_needs", &[]);
    print!("{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn privilege_drop_cannot_be_undone() {
    if in_child() {
        prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).unwrap();
        let secret = std::path::PathBuf::from(std::env::var_os(SECRET).unwrap());
        std::fs::File::open(&secret).expect("root reads the file before the drop");
        confine(&Confinement { user: Some(nobody()), seccomp: false }).expect("confine");
        assert_eq!(status_field("self", "Seccomp:"), "0");
        assert!(prctl::get_no_new_privs().unwrap());
        assert!(!prctl::get_dumpable().unwrap());
        check_dropped(&secret);
        // A second switch, to another user, is refused (no longer root).
        let other = WorkerUser { uid: NOBODY - 1, gid: NOBODY - 1, groups: vec![] };
        assert!(matches!(confine(&Confinement { user: Some(other), seccomp: false }), Err(SandboxError::NotRoot { .. })));
        // Confining again as the same user is fine.
        confine(&Confinement { user: Some(nobody()), seccomp: false }).expect("confine as the user already in effect");
        println!("{DONE}");
        return;
    }
    if !is_root() {
        println!("skipped: the privilege drop needs root (the seccomp tests still run)");
        return;
    }
    let (dir, secret) = root_only_file("drop");
    let out = run_child("privilege_drop_cannot_be_undone", &[(SECRET, &secret)]);
    print!("{}", String::from_utf8_lossy(&out.stdout));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn full_confinement_as_a_worker_gets_it() {
    if in_child() {
        let helper = earlier_thread();
        prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).unwrap();
        let secret = std::env::var_os(SECRET).map(std::path::PathBuf::from);
        let user = secret.as_ref().map(|_| nobody());
        confine(&Confinement { user, seccomp: true }).expect("confine");
        match &secret {
            Some(s) => check_dropped(s),
            None => println!("skipped: the privilege drop needs root"),
        }
        check_seccomp(&helper);
        println!("{DONE}");
        return;
    }
    if is_root() {
        let (dir, secret) = root_only_file("full");
        let out = run_child("full_confinement_as_a_worker_gets_it", &[(SECRET, &secret)]);
        print!("{}", String::from_utf8_lossy(&out.stdout));
        let _ = std::fs::remove_dir_all(dir);
    } else {
        let out = run_child("full_confinement_as_a_worker_gets_it", &[]);
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

/// The supervisor holds the TCP and TLS keys and relays TLS plaintext:
/// it makes itself not dumpable, with no core files, for itself and the
/// workers it starts.
#[test]
fn the_supervisor_keeps_its_secrets_out_of_dumps() {
    if !in_child() {
        run_child("the_supervisor_keeps_its_secrets_out_of_dumps", &[]);
        return;
    }
    pvgpu_backend::sandbox::protect_secrets().unwrap();
    assert!(!prctl::get_dumpable().unwrap(), "dumpable");
    let (soft, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_CORE).unwrap();
    assert_eq!((soft, hard), (0, 0), "core size limit");
    println!("{DONE}");
}

#[test]
fn refuses_another_user_when_not_root() {
    if is_root() {
        // Covered inside privilege_drop_cannot_be_undone, after its drop.
        return;
    }
    let me = nix::unistd::geteuid().as_raw();
    let other = WorkerUser { uid: me + 1, gid: me + 1, groups: vec![] };
    // Fails before changing anything, so it is safe in this process.
    assert!(matches!(confine(&Confinement { user: Some(other), seccomp: false }), Err(SandboxError::NotRoot { .. })));
}

/// The pids of `pid`'s children.
/// The session workers among `pid`'s children: those named
/// `pvgpu-worker` (the idle workers of its pool are `pvgpu-idle`).
fn session_workers(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        }
    }
    out.retain(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "pvgpu-worker"));
    out
}

/// A backend process, stopped with SIGKILL if a test panics.
struct Backend(std::process::Child);

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the backend binary (host executor, worker processes), serves one
/// session through a frontend and reads its worker's /proc status.
fn worker_status(extra: &[&str]) -> (String, String, String) {
    let dir = std::env::temp_dir().join(format!("pvgpu-sandbox-e2e-{}-{}", std::process::id(), extra.len()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("b.sock");
    let mut backend = Backend(
        Command::new(env!("CARGO_BIN_EXE_pvgpu-backend"))
            .args(["--executor", "host", "--image-cache", "off", "--listen"])
            .arg(format!("local:{}", sock.display()))
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    while !sock.exists() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(sock.exists(), "the backend did not create its socket");

    let client = pvgpu_frontend::Client::connect(&pvgpu_frontend::BackendAddr::Local(sock.clone()), &pvgpu_frontend::Options::default())
        .expect("connect to a confined worker");
    client.init().unwrap();
    let ctx = client.ctx_create(0, 0).unwrap();
    let d = client.mem_alloc(ctx, 4096).unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    client.memcpy_htod(d, &data).unwrap();
    let mut back = vec![0u8; 4096];
    client.memcpy_dtoh(&mut back, d).unwrap();
    assert_eq!(back, data, "a round trip through the confined worker");

    let workers = session_workers(backend.0.id());
    assert_eq!(workers.len(), 1, "one worker for one session: {workers:?}");
    let w = workers[0].to_string();
    let got = (status_field(&w, "Seccomp:"), status_field(&w, "NoNewPrivs:"), status_field(&w, "Uid:"));
    // The supervisor, and the worker it started, write no core files.
    for pid in [backend.0.id().to_string(), w] {
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let core = limits.lines().find(|l| l.starts_with("Max core file size")).unwrap_or_default().to_string();
        assert_eq!(core.split_whitespace().skip(4).take(2).collect::<Vec<_>>(), ["0", "0"], "{pid}: {core}");
    }
    client.mem_free(d).unwrap();
    drop(client);

    // SAFETY: signalling our own child.
    unsafe { libc::kill(backend.0.id() as i32, libc::SIGTERM) };
    let status = backend.0.wait().unwrap();
    let mut err = String::new();
    backend.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "backend exit status {status}\n{err}");
    assert!(!err.contains("Cannot confine"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
    got
}

#[test]
fn workers_serve_sessions_confined() {
    let user: &[&str] = if is_root() { &["--worker-user", "nobody"] } else { &[] };
    let (seccomp, nnp, uid) = worker_status(user);
    assert_eq!(seccomp, "2", "the worker runs under its filter");
    assert_eq!(nnp, "1");
    if is_root() {
        assert!(uid.split_whitespace().all(|u| u == NOBODY.to_string()), "worker uids: {uid}");
    } else {
        println!("skipped: --worker-user needs root");
    }
}

#[test]
fn no_seccomp_leaves_the_filter_out() {
    let (seccomp, nnp, _) = worker_status(&["--no-seccomp"]);
    assert_eq!(seccomp, "0");
    assert_eq!(nnp, "1", "no_new_privs is set either way");
}
