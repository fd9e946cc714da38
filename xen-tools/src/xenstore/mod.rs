//! A XenStore client speaking the `xsd_sockmsg` wire protocol.
//!
//! It talks either to xenstored's Unix socket (Dom0, where the daemon runs:
//! `/run/xenstored/socket`) or to the kernel's `/dev/xen/xenbus` (a guest,
//! or a Dom0 whose xenstored is a stub domain), which forward the same
//! messages. [`XenStore::open`] picks whichever exists;
//! [`XenStore::over`] runs it over any stream (tests use a fake xenstored on
//! a socket pair).
//!
//! ## Messages
//!
//! Every message is a 16-byte header (`type`, `req_id`, `tx_id`, `len`, each
//! a `u32` in host byte order) and `len <= 4096` bytes of payload, usually
//! NUL-terminated strings:
//!
//! ```text
//! client                                   xenstored
//!   | XS_READ   req 7 tx 0 "path\0"           |
//!   |---------------------------------------->|
//!   |   XS_WATCH_EVENT "wpath\0token\0"       |   (a watch fired: queued
//!   |<----------------------------------------|    for read_watch)
//!   |   XS_READ req 7 "value"                 |   (or XS_ERROR "ENOENT\0")
//!   |<----------------------------------------|
//!   | XS_TRANSACTION_START req 8 "\0"         |
//!   |---------------------------------------->|
//!   |   "42\0"                                |
//!   |<----------------------------------------|
//!   | XS_WRITE req 9 tx 42 "path\0value"      |   ... ops carry tx 42
//!   | XS_TRANSACTION_END req 10 tx 42 "T\0"   |
//!   |---------------------------------------->|
//!   |   "OK\0", or XS_ERROR "EAGAIN\0": a     |
//!   |   conflicting write; run it all again   |
//!   |<----------------------------------------|
//! ```
//!
//! Requests are answered in order, but watch events may arrive at any time,
//! including between a request and its reply; they are queued for
//! [`XenStore::read_watch`]. Each reply must carry the request's id and type
//! (or `XS_ERROR`); anything else, an oversized payload or a truncated
//! stream breaks the connection with [`XenError::Protocol`] and later calls
//! fail at once. Nothing received can make this code panic.
//!
//! Registering a watch fires it once right away (xenstored does this so
//! clients need not race a read against the watch).

mod access;
#[cfg(any(test, feature = "fake-xenstore"))]
pub mod fake;
mod wire;

pub use access::XsAccess;
pub(crate) use wire::parse_u32;
pub use wire::{Access, HEADER_LEN, Message, Perm};

use crate::XenError;
use crate::abi::{XENSTORE_PAYLOAD_MAX, XsType};
use nix::poll::PollFlags;
use std::collections::VecDeque;
use std::fmt;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use wire::{errno_name, first_string, truncate, watch_arg};

/// Where xenstored listens, in the order [`XenStore::open`] tries them
/// (after `$XENSTORED_PATH`, if set).
pub const XENSTORED_SOCKETS: &[&str] = &["/run/xenstored/socket", "/var/run/xenstored/socket"];
/// The kernel's XenStore devices, tried after the sockets.
pub const XENBUS_DEVICES: &[&str] = &["/dev/xen/xenbus", "/proc/xen/xenbus"];
/// How many times [`XenStore::transaction`] runs a conflicting transaction
/// before giving up.
pub const MAX_TRANSACTION_ATTEMPTS: u32 = 16;
/// How long a request waits for its reply unless changed with
/// [`XenStore::set_request_timeout`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What a connection runs over.
trait Conn: Read + Write + AsFd + Send {}
impl<T: Read + Write + AsFd + Send> Conn for T {}

/// A connection to XenStore.
pub struct XenStore {
    conn: Box<dyn Conn>,
    name: String,
    rbuf: Vec<u8>,
    events: VecDeque<(String, String)>,
    next_req: u32,
    /// Ids of requests that timed out: their late replies are dropped.
    abandoned: VecDeque<u32>,
    timeout: Option<Duration>,
    broken: Option<String>,
}

impl fmt::Debug for XenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XenStore").field("over", &self.name).field("queued_events", &self.events.len()).finish()
    }
}

impl XenStore {
    /// Connects to XenStore: `$XENSTORED_PATH` if set, else the first of
    /// [`XENSTORED_SOCKETS`] that accepts a connection, else the first of
    /// [`XENBUS_DEVICES`] that opens.
    pub fn open() -> Result<Self, XenError> {
        let mut candidates: Vec<String> = Vec::new();
        if let Some(p) = std::env::var_os("XENSTORED_PATH") {
            candidates.push(p.to_string_lossy().into_owned());
        }
        candidates.extend(XENSTORED_SOCKETS.iter().chain(XENBUS_DEVICES).map(|s| s.to_string()));
        let mut last_err = None;
        for c in &candidates {
            if !Path::new(c).exists() {
                continue;
            }
            match XenStore::open_path(c) {
                Ok(xs) => return Ok(xs),
                Err(e) => {
                    tracing::debug!(path = %c, "XenStore candidate failed: {e}");
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or(XenError::NoXenStore { tried: candidates.join(", ") }))
    }

    /// Connects through `path`: a Unix socket (xenstored's) or a device
    /// node (`/dev/xen/xenbus`).
    pub fn open_path(path: impl AsRef<Path>) -> Result<Self, XenError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(XenError::DeviceMissing { path: name, hint: "is xenstored running (Dom0), or is this a Xen guest?" });
            }
            Err(io) => return Err(XenError::StoreIo { what: "inspecting the XenStore path", io }),
        };
        let xs = if meta.file_type().is_socket() {
            let s = UnixStream::connect(path).map_err(|io| XenError::StoreIo { what: "connecting to xenstored's socket", io })?;
            XenStore::with_conn(Box::new(s), name)
        } else {
            let f = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(|io| match io.raw_os_error() {
                Some(raw) => XenError::Open { path: name.clone(), errno: nix::errno::Errno::from_raw(raw) },
                None => XenError::StoreIo { what: "opening the xenbus device", io },
            })?;
            XenStore::with_conn(Box::new(f), name)
        };
        tracing::debug!(over = %xs.name, "connected to XenStore");
        Ok(xs)
    }

    /// Runs the protocol over `stream` (a socket to xenstored, or a fake in
    /// tests). Reads are always preceded by a poll on its descriptor.
    pub fn over<S: Read + Write + AsFd + Send + 'static>(stream: S) -> Self {
        XenStore::with_conn(Box::new(stream), "stream".into())
    }

    fn with_conn(conn: Box<dyn Conn>, name: String) -> Self {
        XenStore {
            conn,
            name,
            rbuf: Vec::new(),
            events: VecDeque::new(),
            next_req: 1,
            abandoned: VecDeque::new(),
            timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            broken: None,
        }
    }

    /// Sets how long a request waits for its reply (`None`: forever).
    pub fn set_request_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// The connection's descriptor, for polling alongside others. Watch
    /// events may already be queued ([`XenStore::queued_events`]) while it
    /// shows nothing to read.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.conn.as_fd()
    }

    /// How many watch events are queued for [`XenStore::read_watch`].
    pub fn queued_events(&self) -> usize {
        self.events.len()
    }

    fn fail(&mut self, why: String) -> XenError {
        tracing::warn!(over = %self.name, "XenStore connection broken: {why}");
        self.broken = Some(why.clone());
        XenError::Protocol(why)
    }

    fn check_usable(&self) -> Result<(), XenError> {
        match &self.broken {
            Some(why) => Err(XenError::Protocol(format!("the connection broke earlier ({why})"))),
            None => Ok(()),
        }
    }

    /// Reads the next message, waiting until `deadline`. `None` on timeout.
    fn next_message(&mut self, deadline: Option<Instant>) -> Result<Option<Message>, XenError> {
        loop {
            match Message::decode(&self.rbuf) {
                Ok(Some((m, used))) => {
                    self.rbuf.drain(..used);
                    return Ok(Some(m));
                }
                Ok(None) => {}
                Err(XenError::Protocol(why)) => return Err(self.fail(why)),
                Err(e) => return Err(e),
            }
            match crate::sys::poll_until(self.conn.as_fd(), PollFlags::POLLIN, deadline) {
                Ok(ev) if ev.is_empty() => return Ok(None),
                Ok(_) => {}
                Err(errno) => return Err(XenError::Sys { what: "polling the XenStore connection", errno }),
            }
            let mut chunk = [0u8; HEADER_LEN + XENSTORE_PAYLOAD_MAX];
            match self.conn.read(&mut chunk) {
                Ok(0) => return Err(self.fail("the other end closed the connection".into())),
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted || e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(io) => {
                    self.broken = Some(format!("read failed: {io}"));
                    return Err(XenError::StoreIo { what: "reading from XenStore", io });
                }
            }
        }
    }

    /// Queues a watch event; a malformed one is logged and dropped.
    fn queue_event(&mut self, m: &Message) {
        let mut parts = m.payload.split(|b| *b == 0);
        let (Some(path), Some(token)) = (parts.next(), parts.next()) else {
            tracing::warn!(payload = %truncate(&m.payload), "dropping a malformed XenStore watch event");
            return;
        };
        match (std::str::from_utf8(path), std::str::from_utf8(token)) {
            (Ok(p), Ok(t)) if !p.is_empty() => self.events.push_back((p.to_string(), t.to_string())),
            _ => tracing::warn!(payload = %truncate(&m.payload), "dropping a malformed XenStore watch event"),
        }
    }

    /// Whether `m` is the late reply of a request that timed out (and so
    /// may be dropped).
    fn is_abandoned(&mut self, m: &Message) -> bool {
        if let Some(i) = self.abandoned.iter().position(|id| *id == m.req_id) {
            self.abandoned.remove(i);
            tracing::debug!(req_id = m.req_id, "dropping the late reply of a timed-out XenStore request");
            true
        } else {
            false
        }
    }

    /// Sends a request inside transaction `tx` (0: none) and waits for its
    /// reply.
    fn call(&mut self, tx: u32, ty: XsType, payload: &[u8]) -> Result<Vec<u8>, XenError> {
        self.check_usable()?;
        let req_id = self.next_req;
        self.next_req = self.next_req.wrapping_add(1).max(1);
        let bytes = Message { ty: ty as u32, req_id, tx_id: tx, payload: payload.to_vec() }.encode()?;
        if let Err(io) = self.conn.write_all(&bytes).and_then(|_| self.conn.flush()) {
            self.broken = Some(format!("write failed: {io}"));
            return Err(XenError::StoreIo { what: "writing to XenStore", io });
        }
        let deadline = crate::sys::deadline(self.timeout);
        loop {
            let Some(m) = self.next_message(deadline)? else {
                self.abandoned.push_back(req_id);
                if self.abandoned.len() > 64 {
                    self.abandoned.pop_front();
                }
                return Err(XenError::Timeout { op: ty.c_name(), path: first_string(payload), timeout: self.timeout.unwrap_or_default() });
            };
            if m.ty == XsType::WatchEvent as u32 {
                self.queue_event(&m);
                continue;
            }
            if m.req_id != req_id {
                if self.is_abandoned(&m) {
                    continue;
                }
                return Err(self.fail(format!("reply with request id {} while waiting for {req_id} ({ty})", m.req_id)));
            }
            if m.ty == XsType::Error as u32 {
                return Err(XenError::Store { op: ty.c_name(), path: first_string(payload), errno: errno_name(&m.payload) });
            }
            if m.ty != ty as u32 {
                return Err(self.fail(format!("reply of type {} to a {ty} request", m.ty)));
            }
            return Ok(m.payload);
        }
    }

    /// Runs `f` in a transaction and commits it, running everything again
    /// (up to [`MAX_TRANSACTION_ATTEMPTS`] times) when the commit fails with
    /// `EAGAIN` because another writer got in between. `f` must therefore be
    /// safe to repeat. If `f` fails, the transaction is aborted and its error
    /// returned (an `EAGAIN` from inside `f` is retried as well).
    pub fn transaction<T>(&mut self, mut f: impl FnMut(&mut Transaction<'_>) -> Result<T, XenError>) -> Result<T, XenError> {
        for attempt in 1..=MAX_TRANSACTION_ATTEMPTS {
            let reply = self.call(0, XsType::TransactionStart, b"\0")?;
            let id = parse_u32(&reply).filter(|id| *id != 0).ok_or_else(|| {
                let why = format!("transaction start answered {:?}, not a transaction id", truncate(&reply));
                self.fail(why)
            })?;
            let result = f(&mut Transaction { xs: self, id });
            match result {
                Ok(v) => match self.call(id, XsType::TransactionEnd, b"T\0") {
                    Ok(_) => return Ok(v),
                    Err(e) if e.is_again() => tracing::debug!(attempt, "XenStore transaction conflicted; retrying"),
                    Err(e) => return Err(e),
                },
                Err(e) => {
                    if let Err(abort) = self.call(id, XsType::TransactionEnd, b"F\0") {
                        tracing::debug!("aborting XenStore transaction {id}: {abort}");
                    }
                    if !e.is_again() {
                        return Err(e);
                    }
                    tracing::debug!(attempt, "XenStore transaction hit EAGAIN; retrying");
                }
            }
        }
        Err(XenError::TransactionConflict { attempts: MAX_TRANSACTION_ATTEMPTS })
    }

    /// Watches `path` (and everything under it): changes are reported by
    /// [`XenStore::read_watch`] as `(changed path, token)`. The watch fires
    /// once right after it is set.
    pub fn watch(&mut self, path: &str, token: &str) -> Result<(), XenError> {
        let p = watch_arg(path, token)?;
        self.call(0, XsType::Watch, &p).map(drop)
    }

    /// Removes a watch set with the same `path` and `token`.
    pub fn unwatch(&mut self, path: &str, token: &str) -> Result<(), XenError> {
        let p = watch_arg(path, token)?;
        self.call(0, XsType::Unwatch, &p).map(drop)
    }

    /// The next watch event `(path, token)`, waiting up to `timeout`
    /// (`None`: forever); `None` if none came in time.
    pub fn read_watch(&mut self, timeout: Option<Duration>) -> Result<Option<(String, String)>, XenError> {
        if let Some(ev) = self.events.pop_front() {
            return Ok(Some(ev));
        }
        self.check_usable()?;
        let deadline = crate::sys::deadline(timeout);
        loop {
            let Some(m) = self.next_message(deadline)? else { return Ok(None) };
            if m.ty == XsType::WatchEvent as u32 {
                self.queue_event(&m);
                if let Some(ev) = self.events.pop_front() {
                    return Ok(Some(ev));
                }
            } else if !self.is_abandoned(&m) {
                return Err(self.fail(format!("unsolicited message of type {} (request id {})", m.ty, m.req_id)));
            }
        }
    }

    /// This domain's id (the relative key `domid`).
    pub fn domid(&mut self) -> Result<u16, XenError> {
        let v = self.read("domid")?;
        parse_u32(&v).and_then(|d| u16::try_from(d).ok()).ok_or_else(|| XenError::BadValue {
            path: "domid".into(),
            value: truncate(&v),
            expected: "a domain id",
        })
    }

    /// The home directory of domain `domid` (`/local/domain/<domid>`).
    pub fn domain_path(&mut self, domid: u16) -> Result<String, XenError> {
        let reply = self.call(0, XsType::GetDomainPath, format!("{domid}\0").as_bytes())?;
        let s = reply.split(|b| *b == 0).next().unwrap_or_default();
        match std::str::from_utf8(s) {
            Ok(p) if p.starts_with('/') => Ok(p.to_string()),
            _ => Err(XenError::BadValue { path: format!("domain path of {domid}"), value: truncate(s), expected: "an absolute path" }),
        }
    }
}

impl XsAccess for XenStore {
    fn request(&mut self, ty: XsType, payload: &[u8]) -> Result<Vec<u8>, XenError> {
        self.call(0, ty, payload)
    }
}

/// An open transaction (see [`XenStore::transaction`]). Its reads see a
/// snapshot; its writes become visible together at commit.
pub struct Transaction<'a> {
    xs: &'a mut XenStore,
    id: u32,
}

impl fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction").field("id", &self.id).finish()
    }
}

impl Transaction<'_> {
    /// The transaction id xenstored assigned.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl XsAccess for Transaction<'_> {
    fn request(&mut self, ty: XsType, payload: &[u8]) -> Result<Vec<u8>, XenError> {
        self.xs.call(self.id, ty, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{Fake, connect};
    use super::wire::path_arg;
    use super::*;
    use crate::abi::XENSTORE_REL_PATH_MAX;

    #[test]
    fn codec_round_trips_and_bounds_payloads() {
        let m = Message { ty: XsType::Write as u32, req_id: 9, tx_id: 3, payload: b"/a\0xyz".to_vec() };
        let mut bytes = m.encode().unwrap();
        assert_eq!(bytes.len(), 16 + 6);
        assert_eq!(&bytes[..4], &11u32.to_ne_bytes());
        assert_eq!(&bytes[12..16], &6u32.to_ne_bytes());
        assert_eq!(Message::decode(&bytes[..10]).unwrap(), None);
        assert_eq!(Message::decode(&bytes[..20]).unwrap(), None);
        bytes.extend_from_slice(b"next");
        assert_eq!(Message::decode(&bytes).unwrap(), Some((m, 22)));
        let big = Message { ty: 2, req_id: 1, tx_id: 0, payload: vec![0; XENSTORE_PAYLOAD_MAX + 1] };
        assert!(matches!(big.encode(), Err(XenError::InvalidArgument(_))));
        let mut hdr = [0u8; 16];
        hdr[12..].copy_from_slice(&4097u32.to_ne_bytes());
        assert!(matches!(Message::decode(&hdr), Err(XenError::Protocol(_))));
        hdr[12..].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(matches!(Message::decode(&hdr), Err(XenError::Protocol(_))));
    }

    #[test]
    fn perms_parse_and_print() {
        for s in ["n0", "b5", "r3", "w65535"] {
            assert_eq!(s.parse::<Perm>().unwrap().to_string(), s);
        }
        assert_eq!("r3".parse::<Perm>().unwrap(), Perm::new(3, Access::Read));
        for bad in ["", "x1", "r", "r-1", "r65536", "rr1", "r 1", "b1x"] {
            assert!(bad.parse::<Perm>().is_err(), "{bad}");
        }
    }

    #[test]
    fn arguments_are_validated() {
        assert!(path_arg("").is_err());
        assert!(path_arg("a\0b").is_err());
        assert!(path_arg(&"a".repeat(XENSTORE_REL_PATH_MAX + 1)).is_err());
        assert!(path_arg(&format!("/{}", "a".repeat(XENSTORE_REL_PATH_MAX + 1))).is_ok());
        assert_eq!(path_arg("domid").unwrap(), b"domid\0");
        assert!(watch_arg("/a", "t\0").is_err());
        assert_eq!(parse_u32(b" 42\0"), Some(42));
        assert_eq!(parse_u32(b"4x"), None);
        assert_eq!(parse_u32(b"-1"), None);
        assert_eq!(parse_u32(b"99999999999"), None);
        assert_eq!(errno_name(b"ENOENT\0"), "ENOENT");
        assert!(errno_name(b"\xff\0").starts_with("unrecognised"));
    }

    #[test]
    fn read_write_directory_perms_and_errors() {
        let (mut xs, t) = connect(Fake::default());
        assert_eq!(xs.domid().unwrap(), 3);
        assert_eq!(xs.domain_path(7).unwrap(), "/local/domain/7");
        xs.write("/a/b/c", b"hello").unwrap();
        xs.write("/a/b/d", b"").unwrap();
        assert_eq!(xs.read("/a/b/c").unwrap(), b"hello");
        assert_eq!(xs.read_string("/a/b/c").unwrap(), "hello");
        assert_eq!(xs.directory("/a/b").unwrap(), vec!["c", "d"]);
        xs.mkdir("/a/e").unwrap();
        assert_eq!(xs.directory("/a").unwrap(), vec!["b", "e"]);
        let e = xs.read("/a/nope").unwrap_err();
        assert!(e.is_not_found());
        assert!(matches!(&e, XenError::Store { op: "XS_READ", path, errno } if path == "/a/nope" && errno == "ENOENT"));
        assert_eq!(xs.try_read("/a/nope").unwrap(), None);
        let e = xs.read("/denied").unwrap_err();
        assert_eq!(e.store_errno(), Some("EACCES"));
        assert!(e.to_string().contains("permission"), "{e}");
        xs.set_perms("/a/b/c", &[Perm::new(0, Access::None), Perm::new(5, Access::Read)]).unwrap();
        assert_eq!(xs.get_perms("/a/b/c").unwrap(), vec![Perm::new(0, Access::None), Perm::new(5, Access::Read)]);
        assert!(xs.set_perms("/a", &[]).is_err());
        xs.rm("/a/b").unwrap();
        assert!(xs.read("/a/b/c").unwrap_err().is_not_found());
        assert!(xs.rm("/a/b").unwrap_err().is_not_found());
        assert!(!xs.try_rm("/a/b").unwrap());
        assert!(xs.try_rm("/a/e").unwrap());
        assert!(matches!(xs.write("/big", &[0; XENSTORE_PAYLOAD_MAX]), Err(XenError::InvalidArgument(_))));
        drop(xs);
        t.join().unwrap();
    }

    #[test]
    fn transaction_retries_on_eagain() {
        let (mut xs, t) = connect(Fake { eagain_commits: 1, ..Fake::default() });
        let mut runs = 0;
        let v = xs
            .transaction(|tx| {
                runs += 1;
                assert!(tx.id() > 40);
                tx.write("/dev/ring-ref", b"8")?;
                tx.write("/dev/event-channel", b"17")?;
                tx.read("/dev/ring-ref")
            })
            .unwrap();
        assert_eq!(v, b"8");
        assert_eq!(runs, 2);
        // A failing closure aborts and returns its error, without retrying.
        let e = xs.transaction(|tx| tx.read("/missing")).unwrap_err();
        assert!(e.is_not_found());
        drop(xs);
        let f = t.join().unwrap();
        assert_eq!((f.commits, f.aborts), (1, 1));
    }

    #[test]
    fn transaction_gives_up_after_bounded_conflicts() {
        let (mut xs, t) = connect(Fake { eagain_commits: u32::MAX, ..Fake::default() });
        let mut runs = 0;
        let e = xs
            .transaction(|tx| {
                runs += 1;
                tx.write("/x", b"1")
            })
            .unwrap_err();
        assert!(matches!(e, XenError::TransactionConflict { attempts: MAX_TRANSACTION_ATTEMPTS }));
        assert_eq!(runs, MAX_TRANSACTION_ATTEMPTS);
        drop(xs);
        t.join().unwrap();
    }

    #[test]
    fn watch_events_interleaved_with_replies_are_queued() {
        let (mut xs, t) = connect(Fake::default());
        // The fake fires the watch before answering XS_WATCH.
        xs.watch("/backend/pvgpu", "tok").unwrap();
        assert_eq!(xs.queued_events(), 1);
        xs.write("/backend/pvgpu/3/0/state", b"2").unwrap();
        // The write's event arrives after its reply; the next request reads
        // past it.
        assert_eq!(xs.read("/backend/pvgpu/3/0/state").unwrap(), b"2");
        assert_eq!(xs.read_watch(Some(Duration::from_secs(5))).unwrap(), Some(("/backend/pvgpu".into(), "tok".into())));
        assert_eq!(xs.read_watch(Some(Duration::from_secs(5))).unwrap(), Some(("/backend/pvgpu/3/0/state".into(), "tok".into())));
        assert_eq!(xs.read_watch(Some(Duration::from_millis(20))).unwrap(), None);
        xs.unwatch("/backend/pvgpu", "tok").unwrap();
        xs.write("/backend/pvgpu/x", b"1").unwrap();
        assert_eq!(xs.read_watch(Some(Duration::from_millis(20))).unwrap(), None);
        drop(xs);
        t.join().unwrap();
    }

    /// A scripted peer: reads one request, answers with `reply(req)`.
    fn scripted(reply: impl FnOnce(Message) -> Vec<u8> + Send + 'static) -> XenStore {
        let (a, mut b) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 8192];
            let mut have = 0;
            let m = loop {
                if let Ok(Some((m, _))) = Message::decode(&buf[..have]) {
                    break m;
                }
                match b.read(&mut buf[have..]) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => have += n,
                }
            };
            let _ = b.write_all(&reply(m));
            // Hold the socket open until the client is done.
            let _ = b.read(&mut buf);
        });
        let mut xs = XenStore::over(a);
        xs.set_request_timeout(Some(Duration::from_secs(5)));
        xs
    }

    fn raw(ty: u32, req_id: u32, len: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [ty, req_id, 0, len] {
            v.extend_from_slice(&w.to_ne_bytes());
        }
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn bad_replies_break_the_connection_without_panicking() {
        let mut xs = scripted(|m| raw(m.ty, m.req_id, 5000, b""));
        assert!(matches!(xs.read("/a"), Err(XenError::Protocol(_))));
        // Later calls fail at once.
        assert!(matches!(xs.read("/a"), Err(XenError::Protocol(_))));

        let mut xs = scripted(|m| raw(m.ty, m.req_id + 1, 2, b"ok"));
        let e = xs.read("/a").unwrap_err();
        assert!(e.to_string().contains("request id"), "{e}");

        let mut xs = scripted(|m| raw(XsType::Directory as u32, m.req_id, 0, b""));
        assert!(matches!(xs.read("/a"), Err(XenError::Protocol(_))));

        // A truncated stream: the header promises more than ever comes.
        let mut xs = scripted(|m| {
            let mut v = raw(m.ty, m.req_id, 10, b"abc");
            v.truncate(18);
            v
        });
        xs.set_request_timeout(Some(Duration::from_millis(50)));
        assert!(matches!(xs.read("/a"), Err(XenError::Timeout { op: "XS_READ", .. })));

        // An error reply with garbage for an errno.
        let mut xs = scripted(|m| raw(XsType::Error as u32, m.req_id, 3, b"\xff\xfe\0"));
        let e = xs.read("/a").unwrap_err();
        assert!(e.store_errno().unwrap().starts_with("unrecognised"), "{e}");

        // A malformed watch event is dropped; the reply still arrives.
        let mut xs = scripted(|m| {
            let mut v = raw(XsType::WatchEvent as u32, 0, 3, b"abc");
            v.extend(raw(m.ty, m.req_id, 1, b"v"));
            v
        });
        assert_eq!(xs.read("/a").unwrap(), b"v");
        assert_eq!(xs.queued_events(), 0);

        // The peer hangs up.
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let mut xs = XenStore::over(a);
        assert!(xs.read("/a").is_err());
    }

    #[test]
    fn late_replies_of_timed_out_requests_are_dropped() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut xs = XenStore::over(a);
        xs.set_request_timeout(Some(Duration::from_millis(20)));
        assert!(matches!(xs.read("/slow"), Err(XenError::Timeout { .. })));
        // Now the peer answers the first request late, then the second.
        let mut buf = [0u8; 256];
        let n = b.read(&mut buf).unwrap();
        let (first, _) = Message::decode(&buf[..n]).unwrap().unwrap();
        b.write_all(&raw(first.ty, first.req_id, 4, b"late")).unwrap();
        let t = std::thread::spawn(move || {
            let n = b.read(&mut buf).unwrap();
            let (second, _) = Message::decode(&buf[..n]).unwrap().unwrap();
            b.write_all(&raw(second.ty, second.req_id, 5, b"fresh")).unwrap();
            b
        });
        xs.set_request_timeout(Some(Duration::from_secs(5)));
        assert_eq!(xs.read("/fast").unwrap(), b"fresh");
        drop(t.join().unwrap());
    }

    #[test]
    fn open_path_explains_a_missing_store() {
        let e = XenStore::open_path("/nonexistent/xenstored/socket").unwrap_err();
        assert!(matches!(e, XenError::DeviceMissing { .. }), "{e}");
    }
}
