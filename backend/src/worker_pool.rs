//! Workers started before their sessions: a program's first command does
//! not wait for a process to start and its executor to initialise (on the
//! GPU, `cuInit` and the device scan take hundreds of milliseconds).
//!
//! The supervisor keeps `--worker-pool N` idle workers
//! (`pvgpu-backend pool-worker ...`). Each has its executor ready and
//! waits on a socket pair at [`POOL_FD`] for one session: the arguments a
//! freshly started worker would get, and the descriptors it would find at
//! fixed numbers (the connection, the report pipe, the ledger, ...),
//! passed with `SCM_RIGHTS`. The idle worker reserved those numbers before
//! its executor opened anything, and moves each descriptor onto its
//! number; from there it runs as a fresh worker does, confinement
//! included. A worker serves one session and exits, as before; the
//! supervisor starts another idle one in its place.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::process::Child;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where an idle worker finds its end of the pool socket.
pub const POOL_FD: i32 = 9;
/// The assignment that prepares an idle worker from a session's skeleton
/// ([`Idle::prepare`]) rather than giving it a session: its only argument.
pub const PREPARE: &str = "prepare-skeleton";
/// Where a worker being prepared finds the skeleton.
pub const SKELETON_FD: i32 = 3;
/// The fixed descriptor numbers a session's worker may be handed
/// (`crate::spawn`'s `*_FD`), reserved by an idle worker until then.
const RESERVED: std::ops::RangeInclusive<i32> = 3..=8;
/// Most descriptors one assignment carries.
const MAX_FDS: usize = 8;
/// Largest assignment message (the worker's arguments).
const MAX_MESSAGE: usize = 64 << 10;
/// After an idle worker died unused, the pool waits this long before
/// starting another (a broken driver must not make the backend fork in a
/// loop).
const BACKOFF: Duration = Duration::from_secs(5);

/// A session worker's arguments (after the binary's name), put together
/// as for a `Command`: the same for a worker started for its session and
/// for one of the pool's ([`Idle::assign`]).
#[derive(Default)]
pub struct WorkerArgs(pub Vec<OsString>);

impl WorkerArgs {
    /// Adds one argument.
    pub fn arg(&mut self, a: impl AsRef<std::ffi::OsStr>) -> &mut WorkerArgs {
        self.0.push(a.as_ref().to_os_string());
        self
    }

    /// Adds each of `all`.
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(&mut self, all: I) -> &mut WorkerArgs {
        for a in all {
            self.arg(a);
        }
        self
    }
}

/// An idle worker: its process and the supervisor's end of its socket.
pub struct Idle {
    child: Child,
    socket: OwnedFd,
}

/// The idle workers of one backend.
pub struct Pool {
    size: usize,
    idle: Mutex<VecDeque<Idle>>,
    /// When an idle worker was last found dead unused.
    died: Mutex<Option<Instant>>,
    /// Set by [`Pool::shutdown`]: no more idle workers.
    closed: std::sync::atomic::AtomicBool,
}

impl Pool {
    /// A pool that keeps `size` idle workers (0: none; every session's
    /// worker is started for it).
    pub fn new(size: usize) -> Pool {
        Pool { size, idle: Mutex::new(VecDeque::new()), died: Mutex::new(None), closed: Default::default() }
    }

    /// Starts idle workers with `start` (given this end's socket pair for
    /// the child: the child's end goes to [`POOL_FD`]) until the pool is
    /// full. Idle workers that died are reaped first.
    pub fn refill(&self, start: impl Fn(OwnedFd) -> io::Result<Child>) {
        if self.size == 0 || self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        self.reap();
        if self.died.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|t| t.elapsed() < BACKOFF) {
            return;
        }
        while self.lock().len() < self.size {
            let pair = match socket_pair() {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot make a pool socket; sessions start their own workers");
                    return;
                }
            };
            match start(pair.1) {
                Ok(child) => self.lock().push_back(Idle { child, socket: pair.0 }),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start an idle worker; sessions start their own workers");
                    *self.died.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                    return;
                }
            }
        }
    }

    /// A worker started with `start` as [`Pool::refill`] starts one, for
    /// the caller alone.
    pub fn start_one(start: impl Fn(OwnedFd) -> io::Result<Child>) -> io::Result<Idle> {
        let (mine, theirs) = socket_pair()?;
        Ok(Idle { child: start(theirs)?, socket: mine })
    }

    /// An idle worker, if one is ready (the oldest first: it has had the
    /// longest to initialise).
    pub fn take(&self) -> Option<Idle> {
        self.reap();
        self.lock().pop_front()
    }

    /// Drops idle workers that exited.
    fn reap(&self) {
        let mut idle = self.lock();
        let before = idle.len();
        idle.retain_mut(|w| matches!(w.child.try_wait(), Ok(None)));
        if idle.len() < before {
            tracing::warn!(died = before - idle.len(), "idle workers exited before any session (see their errors above)");
            *self.died.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        }
    }

    /// Ends every idle worker.
    pub fn shutdown(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        for mut w in self.lock().drain(..) {
            // Closing the socket tells it to exit; kill in case it is still
            // initialising.
            drop(w.socket);
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Idle>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).map_err(io::Error::from)
}

impl Idle {
    /// Has this worker make ahead what the skeleton in `skeleton`
    /// describes (`crate::session::Premade`), and waits up to `wait` for it
    /// to say how that went: `Ok(Err(why))` where it could not. It then
    /// waits for its session as before ([`Idle::assign`]).
    pub fn prepare(&self, skeleton: &std::fs::File, wait: Duration) -> io::Result<Result<(), String>> {
        send(&self.socket, &[OsString::from(PREPARE)], &[(skeleton.as_raw_fd(), SKELETON_FD)])?;
        let deadline = Instant::now() + wait;
        loop {
            let mut p = libc::pollfd { fd: self.socket.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let ms = i32::try_from(deadline.saturating_duration_since(Instant::now()).as_millis()).unwrap_or(i32::MAX);
            // SAFETY: one valid pollfd that lives across the call.
            let n = unsafe { libc::poll(&mut p, 1, ms) };
            match n {
                1.. => break,
                0 => return Err(io::Error::new(io::ErrorKind::TimedOut, "the worker did not finish preparing in time")),
                _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
                _ => return Err(io::Error::last_os_error()),
            }
        }
        let mut buf = [0u8; 1024];
        let got =
            nix::sys::socket::recv(self.socket.as_raw_fd(), &mut buf, nix::sys::socket::MsgFlags::empty()).map_err(io::Error::from)?;
        match &buf[..got] {
            [] => Err(io::Error::other("the worker exited while it prepared")),
            b"ok" => Ok(Ok(())),
            why => Ok(Err(String::from_utf8_lossy(why).into_owned())),
        }
    }

    /// Ends this worker.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether its process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Hands this worker a session: `args` (after the binary's name, as a
    /// fresh worker would get them) and each `(descriptor, number)` of
    /// `fds`. Returns its process, which now serves the session; on an
    /// error the worker is killed and the session may start a fresh one.
    pub fn assign(mut self, args: &[OsString], fds: &[(RawFd, i32)]) -> io::Result<Child> {
        match send(&self.socket, args, fds) {
            Ok(()) => Ok(self.child),
            Err(e) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                Err(e)
            }
        }
    }
}

/// The message: the descriptors' numbers (a count byte, then each as four
/// little-endian bytes), then the arguments, each ended by a NUL.
fn encode(args: &[OsString], targets: &[i32]) -> io::Result<Vec<u8>> {
    let mut msg = vec![u8::try_from(targets.len()).map_err(|_| io::Error::other("too many descriptors"))?];
    for t in targets {
        msg.extend_from_slice(&t.to_le_bytes());
    }
    for a in args {
        if a.as_bytes().contains(&0) {
            return Err(io::Error::other("an argument holds a NUL"));
        }
        msg.extend_from_slice(a.as_bytes());
        msg.push(0);
    }
    if msg.len() > MAX_MESSAGE {
        return Err(io::Error::other("the worker's arguments are too long"));
    }
    Ok(msg)
}

/// [`encode`]'s message back: the numbers and the arguments.
fn decode(msg: &[u8]) -> io::Result<(Vec<i32>, Vec<OsString>)> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "a malformed assignment");
    let (&n, rest) = msg.split_first().ok_or_else(bad)?;
    let n = usize::from(n);
    if n > MAX_FDS || rest.len() < 4 * n {
        return Err(bad());
    }
    let (nums, args) = rest.split_at(4 * n);
    let targets = nums.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>();
    if targets.iter().any(|t| !RESERVED.contains(t)) {
        return Err(bad());
    }
    let args = args.split(|&b| b == 0).map(|a| OsString::from_vec(a.to_vec())).collect::<Vec<_>>();
    let args = match args.split_last() {
        // The last argument's NUL leaves an empty piece after it.
        Some((last, init)) if last.is_empty() => init.to_vec(),
        _ => return Err(bad()),
    };
    Ok((targets, args))
}

fn send(socket: &OwnedFd, args: &[OsString], fds: &[(RawFd, i32)]) -> io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    if fds.len() > MAX_FDS {
        return Err(io::Error::other("too many descriptors for one worker"));
    }
    let targets: Vec<i32> = fds.iter().map(|(_, t)| *t).collect();
    let raw: Vec<RawFd> = fds.iter().map(|(f, _)| *f).collect();
    let msg = encode(args, &targets)?;
    let iov = [io::IoSlice::new(&msg)];
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let sent = sendmsg::<()>(socket.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None).map_err(io::Error::from)?;
    if sent != msg.len() { Err(io::Error::other("the assignment was cut")) } else { Ok(()) }
}

/// Names this process (`ps -o comm`, `/proc/PID/comm`): `pvgpu-idle`
/// while it waits in the pool, `pvgpu-worker` once it serves a session.
pub fn name_process(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16
    // bytes; both names are shorter. It names the calling thread, the
    // main one here, whose name is the process's.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// In an idle worker, before anything else opens a descriptor: holds the
/// numbers a session's descriptors will take ([`RESERVED`]) with
/// `/dev/null`, so the executor's own descriptors land above them.
pub fn reserve_numbers() -> io::Result<()> {
    // Opened above the reserved numbers: the lowest free number, where
    // open puts it, is one of them.
    let null = std::fs::File::open("/dev/null")?;
    let high = nix::fcntl::fcntl(&null, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(*RESERVED.end() + 2)).map_err(io::Error::from)?;
    // SAFETY: fcntl just made this descriptor; nothing else owns it.
    let high = unsafe { OwnedFd::from_raw_fd(high) };
    drop(null);
    for n in RESERVED {
        // SAFETY: dup2 onto a number nothing in this process owns (the
        // supervisor gave it only POOL_FD and the standard three, and the
        // copy made above lies past them).
        if unsafe { libc::dup2(high.as_raw_fd(), n) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// In a worker being prepared: says how that went (`Ok`, or why not).
pub fn answer(r: Result<(), String>) -> io::Result<()> {
    let msg = match r {
        Ok(()) => "ok".to_string(),
        Err(why) if why == "ok" || why.is_empty() => "failed".to_string(),
        Err(why) => why.chars().take(1000).collect(),
    };
    // POOL_FD stays open until the worker's session comes.
    // SAFETY: the supervisor placed this worker's end of the pool socket there before exec.
    let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(POOL_FD) };
    nix::sys::socket::send(socket.as_raw_fd(), msg.as_bytes(), nix::sys::socket::MsgFlags::MSG_NOSIGNAL).map_err(io::Error::from)?;
    Ok(())
}

/// In a worker being prepared: the skeleton, moved off [`SKELETON_FD`],
/// whose number is held again as before.
pub fn take_skeleton() -> io::Result<std::fs::File> {
    // SAFETY: the assignment placed the skeleton on SKELETON_FD, open until reserve_numbers below.
    let skeleton = unsafe { std::os::fd::BorrowedFd::borrow_raw(SKELETON_FD) };
    let fd = nix::fcntl::fcntl(skeleton, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(*RESERVED.end() + 2)).map_err(io::Error::from)?;
    // SAFETY: fcntl just made this descriptor; nothing else owns it.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    reserve_numbers()?;
    Ok(file)
}

/// In an idle worker: waits for its session. Returns the worker's
/// arguments with each descriptor already at its number, or `None` when
/// the supervisor closed the socket (the backend is stopping). The pool
/// socket is closed once a session came; a worker asked to prepare
/// ([`PREPARE`]) keeps it, to answer and to wait again.
pub fn wait_for_session() -> io::Result<Option<Vec<OsString>>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    // SAFETY: the supervisor placed this worker's end of the pool socket on
    // POOL_FD before exec, and nothing else in this process owns it.
    let socket = std::mem::ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(POOL_FD) });
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (len, received) = loop {
        let mut iov = [io::IoSliceMut::new(&mut buf)];
        match recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Ok(m) => {
                let mut fds: Vec<OwnedFd> = Vec::new();
                for c in m.cmsgs().map_err(io::Error::from)? {
                    let ControlMessageOwned::ScmRights(list) = c else { continue };
                    for f in list {
                        // SAFETY: the kernel just installed this descriptor
                        // in this process; nothing else owns it.
                        fds.push(unsafe { OwnedFd::from_raw_fd(f) });
                    }
                }
                break (m.bytes, fds);
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if len == 0 {
        drop(std::mem::ManuallyDrop::into_inner(socket));
        return Ok(None);
    }
    let (targets, args) = decode(&buf[..len])?;
    if args.first().is_none_or(|a| a != PREPARE) {
        drop(std::mem::ManuallyDrop::into_inner(socket));
    }
    if targets.len() != received.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "the assignment's descriptors do not match its numbers"));
    }
    for (fd, target) in received.iter().zip(&targets) {
        // SAFETY: `target` is one of the reserved numbers (checked by
        // decode), held by /dev/null; dup2 replaces it atomically and the
        // copy is not close-on-exec, as a fresh worker's would be.
        if unsafe { libc::dup2(fd.as_raw_fd(), *target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(Some(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_round_trip_and_bad_ones_are_refused() {
        let args: Vec<OsString> = ["worker", "--conn", "tcp", "--session", "7", ""].iter().map(OsString::from).collect();
        let msg = encode(&args, &[3, 4, 6]).unwrap();
        assert_eq!(decode(&msg).unwrap(), (vec![3, 4, 6], args));
        assert!(decode(&encode(&[OsString::from("x")], &[9]).unwrap()).is_err(), "a number outside the reserved ones");
        assert!(decode(&[]).is_err());
        assert!(decode(&[2, 3, 0, 0, 0]).is_err(), "cut numbers");
        assert!(decode(&[0, b'x']).is_err(), "an argument without its NUL");
        assert!(encode(&[OsString::from_vec(b"a\0b".to_vec())], &[]).is_err());
    }
}
