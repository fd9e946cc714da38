//! Connections and listeners over rsockets.

use crate::RdmaError;
use crate::sys::{Rsockets, library};
use libc::{c_int, c_void, socklen_t};
use nix::sys::socket::{SockaddrLike, SockaddrStorage};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Each side's buffer for the other's RDMA writes, and for its own sends
/// (rsockets doubles what it is given, as Linux does for TCP): large enough
/// that an 8 MiB chunk of a copy is a few round trips of credits, not
/// hundreds (rsockets' own default is 128 KiB).
const BUFFER: u32 = 1 << 20;

/// How often [`RdmaListener::accept`] asks for a new connection: a
/// program's first command waits at most this much longer for it.
const ACCEPT_POLL: Duration = Duration::from_millis(5);

/// What [`RdmaStream`] and [`RdmaListener`] share: the rsocket, closed
/// when the last handle goes.
struct Socket {
    lib: &'static Rsockets,
    fd: c_int,
    /// Read and write timeouts in milliseconds, 0 for none.
    read_ms: AtomicU64,
    write_ms: AtomicU64,
}

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: `fd` is an rsocket this struct owns; no other handle
        // uses it once the last `Arc` is gone.
        unsafe { (self.lib.rclose)(self.fd) };
    }
}

impl Socket {
    fn open(lib: &'static Rsockets, addr: &str, to: &SocketAddr) -> Result<Socket, RdmaError> {
        let domain = if to.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
        // SAFETY: plain integers in, a descriptor (or -1 and errno) out.
        let fd = unsafe { (lib.rsocket)(domain, libc::SOCK_STREAM, 0) };
        if fd < 0 {
            return Err(call(addr, "rsocket", io::Error::last_os_error()));
        }
        let s = Socket { lib, fd, read_ms: AtomicU64::new(0), write_ms: AtomicU64::new(0) };
        s.set_int(libc::SOL_SOCKET, libc::SO_SNDBUF, BUFFER as c_int).map_err(|e| call(addr, "rsetsockopt(SO_SNDBUF)", e))?;
        s.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, BUFFER as c_int).map_err(|e| call(addr, "rsetsockopt(SO_RCVBUF)", e))?;
        s.set_int(libc::IPPROTO_TCP, libc::TCP_NODELAY, 1).map_err(|e| call(addr, "rsetsockopt(TCP_NODELAY)", e))?;
        Ok(s)
    }

    /// Sets the file status flags (`O_NONBLOCK` or none).
    fn set_flags(&self, flags: c_int) -> io::Result<()> {
        // SAFETY: F_SETFL takes one int argument.
        if unsafe { (self.lib.rfcntl)(self.fd, libc::F_SETFL, flags) } < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    fn set_int(&self, level: c_int, name: c_int, v: c_int) -> io::Result<()> {
        let (p, len) = ((&v as *const c_int).cast::<c_void>(), size_of::<c_int>() as socklen_t);
        // SAFETY: `p` points to `v`, which lives across the call, and `len`
        // is its size.
        let r = unsafe { (self.lib.rsetsockopt)(self.fd, level, name, p, len) };
        if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Waits up to `ms` milliseconds (0: without limit) for `events`.
    fn wait(&self, events: i16, ms: u64) -> io::Result<()> {
        if ms == 0 {
            return Ok(());
        }
        let mut p = libc::pollfd { fd: self.fd, events, revents: 0 };
        loop {
            // SAFETY: one valid pollfd naming this rsocket.
            let n = unsafe { (self.lib.rpoll)(&mut p, 1, ms.min(i32::MAX as u64) as c_int) };
            match n {
                0 => return Err(io::ErrorKind::WouldBlock.into()),
                n if n > 0 => return Ok(()),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }

    fn name(&self, peer: bool) -> io::Result<SocketAddr> {
        // SAFETY: all-zero bytes are a valid `sockaddr_storage`.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as socklen_t;
        let f = if peer { self.lib.rgetpeername } else { self.lib.rgetsockname };
        // SAFETY: `ss` has room for any address, and `len` says how much.
        if unsafe { f(self.fd, (&mut ss as *mut libc::sockaddr_storage).cast(), &mut len) } < 0 {
            return Err(io::Error::last_os_error());
        }
        to_std(&ss, len)
    }
}

fn to_std(ss: &libc::sockaddr_storage, len: socklen_t) -> io::Result<SocketAddr> {
    // SAFETY: `ss` holds `len` bytes of an address the library wrote.
    let a = unsafe { SockaddrStorage::from_raw((ss as *const libc::sockaddr_storage).cast(), Some(len)) };
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "not an internet address");
    let a = a.ok_or_else(bad)?;
    if let Some(v4) = a.as_sockaddr_in() {
        Ok(SocketAddr::V4((*v4).into()))
    } else if let Some(v6) = a.as_sockaddr_in6() {
        Ok(SocketAddr::V6((*v6).into()))
    } else {
        Err(bad())
    }
}

fn call(addr: &str, what: &'static str, source: io::Error) -> RdmaError {
    let hint = match source.raw_os_error() {
        Some(libc::ENODEV) | Some(libc::EADDRNOTAVAIL) | Some(libc::ENOENT) => {
            " (no RDMA device serves this address: on hardware, check `rdma link`; without one, soft-RoCE: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IFACE`)"
        }
        Some(libc::ECONNREFUSED) => " (nothing listens there: is the backend started with --listen rdma:HOST:PORT?)",
        _ => "",
    };
    RdmaError::Call { addr: addr.to_string(), what, source, hint }
}

fn resolve(addr: &str) -> Result<SocketAddr, RdmaError> {
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| RdmaError::Address(addr.to_string()))?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(RdmaError::Address(addr.to_string()));
    }
    let mut it = addr.to_socket_addrs().map_err(|source| RdmaError::Resolve { addr: addr.to_string(), source })?;
    it.next().ok_or_else(|| RdmaError::Resolve { addr: addr.to_string(), source: io::ErrorKind::NotFound.into() })
}

/// A connection: bytes in order, each read or write one rsockets call.
/// One thread may read while another writes (rsockets serialise each
/// socket's sends and receives on locks of their own). Clones share the connection (as `TcpStream::try_clone` does), so one
/// may set timeouts while another is boxed as a reader and writer; it is
/// closed when the last clone goes.
#[derive(Clone)]
pub struct RdmaStream {
    sock: Arc<Socket>,
}

impl RdmaStream {
    /// Connects to `addr` (`HOST:PORT`): address and route resolution and
    /// the connection's exchange, each bounded by the RDMA connection
    /// manager's own timeouts (a few seconds).
    pub fn connect(addr: &str) -> Result<RdmaStream, RdmaError> {
        let lib = library()?;
        let to = resolve(addr)?;
        let sock = Socket::open(lib, addr, &to)?;
        let sa = SockaddrStorage::from(to);
        // SAFETY: `sa` is a valid address of the length given.
        if unsafe { (lib.rconnect)(sock.fd, sa.as_ptr().cast(), sa.len()) } < 0 {
            return Err(call(addr, "rconnect", io::Error::last_os_error()));
        }
        Ok(RdmaStream { sock: Arc::new(sock) })
    }

    /// Bounds each read (`None`: none), as `TcpStream`'s: a read that
    /// finds nothing in time fails with `WouldBlock`; one that finds some
    /// returns it at once.
    pub fn set_read_timeout(&self, t: Option<Duration>) {
        self.sock.read_ms.store(t.map_or(0, |t| t.as_millis().max(1) as u64), Ordering::Relaxed);
    }

    /// Bounds each write (`None`: none): a write sends what fits within
    /// it, and fails with `WouldBlock` if nothing does.
    pub fn set_write_timeout(&self, t: Option<Duration>) {
        self.sock.write_ms.store(t.map_or(0, |t| t.as_millis().max(1) as u64), Ordering::Relaxed);
    }

    /// Whether a read would find something now (without waiting).
    pub fn readable(&self) -> io::Result<bool> {
        let mut p = libc::pollfd { fd: self.sock.fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd naming this rsocket; a zero timeout
        // only looks.
        match unsafe { (self.sock.lib.rpoll)(&mut p, 1, 0) } {
            n if n >= 0 => Ok(n > 0),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock.name(true)
    }

    /// Ends both directions; the peer reads the end of the stream.
    pub fn shutdown(&self) {
        // SAFETY: the rsocket is open while `self` lives.
        unsafe { (self.sock.lib.rshutdown)(self.sock.fd, libc::SHUT_RDWR) };
    }
}

impl Read for &RdmaStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let ms = self.sock.read_ms.load(Ordering::Relaxed);
        self.sock.wait(libc::POLLIN, ms)?;
        // With a timeout, what is there and no more: the wait said there is
        // some.
        let flags = if ms == 0 { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { (self.sock.lib.rrecv)(self.sock.fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
    }
}

impl Write for &RdmaStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let ms = self.sock.write_ms.load(Ordering::Relaxed);
        self.sock.wait(libc::POLLOUT, ms)?;
        // With a timeout, as much as fits now (never blocking past it).
        let flags = if ms == 0 { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: `buf` is readable for its length.
        let n = unsafe { (self.sock.lib.rsend)(self.sock.fd, buf.as_ptr().cast(), buf.len(), flags) };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for RdmaStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for RdmaStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A listening port.
pub struct RdmaListener {
    sock: Socket,
    addr: String,
}

impl RdmaListener {
    /// Binds `addr` (`HOST:PORT`; the host must be an address of an RDMA
    /// device's network interface, or `0.0.0.0` for all) and listens.
    pub fn bind(addr: &str) -> Result<RdmaListener, RdmaError> {
        let lib = library()?;
        let at = resolve(addr)?;
        let sock = Socket::open(lib, addr, &at)?;
        sock.set_int(libc::SOL_SOCKET, libc::SO_REUSEADDR, 1).map_err(|e| call(addr, "rsetsockopt(SO_REUSEADDR)", e))?;
        let sa = SockaddrStorage::from(at);
        // SAFETY: `sa` is a valid address of the length given.
        if unsafe { (lib.rbind)(sock.fd, sa.as_ptr().cast(), sa.len()) } < 0 {
            return Err(call(addr, "rbind", io::Error::last_os_error()));
        }
        // SAFETY: a bound rsocket.
        if unsafe { (lib.rlisten)(sock.fd, 128) } < 0 {
            return Err(call(addr, "rlisten", io::Error::last_os_error()));
        }
        // Accepts are tried without waiting (see `accept`).
        sock.set_flags(libc::O_NONBLOCK).map_err(|e| call(addr, "rfcntl(O_NONBLOCK)", e))?;
        Ok(RdmaListener { sock, addr: addr.to_string() })
    }

    /// The address bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.name(false)
    }

    /// Accepts a connection that comes within `tick`. `Ok(None)`: none
    /// came. The connection inherits the listener's buffer sizes and
    /// blocks in its reads and writes.
    ///
    /// The listener is asked every [`ACCEPT_POLL`] without waiting, rather
    /// than waited on with rsockets' poll: in the Xen lab (2026-11-28) that
    /// poll, bounded by `tick`, did not come back while other threads
    /// polled their connections, and the loop that calls this one also
    /// reaps ended sessions and watches the stop flag.
    pub fn accept(&self, tick: Duration) -> io::Result<Option<RdmaStream>> {
        let until = std::time::Instant::now() + tick;
        loop {
            // SAFETY: a listening rsocket; the peer's address is not asked
            // for.
            let fd = unsafe { (self.sock.lib.raccept)(self.sock.fd, std::ptr::null_mut(), std::ptr::null_mut()) };
            if fd >= 0 {
                let sock = Socket { lib: self.sock.lib, fd, read_ms: AtomicU64::new(0), write_ms: AtomicU64::new(0) };
                sock.set_flags(0)?;
                return Ok(Some(RdmaStream { sock: Arc::new(sock) }));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => {}
                _ => return Err(io::Error::new(e.kind(), format!("rdma:{}: raccept: {e}", self.addr))),
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            std::thread::sleep(left.min(ACCEPT_POLL));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_need_a_host_and_a_port() {
        for bad in ["", "host", ":7400", "host:port", "host:70000"] {
            assert!(matches!(resolve(bad), Err(RdmaError::Address(_))), "{bad}");
        }
        assert_eq!(resolve("127.0.0.1:7400").unwrap(), "127.0.0.1:7400".parse().unwrap());
        assert_eq!(resolve("[::1]:7400").unwrap(), "[::1]:7400".parse().unwrap());
    }

    /// Where there is no RDMA device (CI's machines), a connection fails
    /// with a message that says so, or that rdma-core is missing.
    #[test]
    fn without_a_device_a_connection_says_why() {
        if !crate::devices().is_empty() {
            return;
        }
        let e = RdmaStream::connect("127.0.0.1:7400").err().expect("connected without an RDMA device");
        let msg = e.to_string();
        assert!(msg.contains("librdmacm") || msg.contains("rdma_rxe") || msg.contains("rconnect"), "{msg}");
        eprintln!("{msg}");
    }

    #[test]
    fn a_refusal_names_its_cause() {
        let e = call("10.0.0.1:7400", "rconnect", io::Error::from_raw_os_error(libc::ECONNREFUSED));
        assert!(e.to_string().contains("--listen rdma:"), "{e}");
        let e = call("10.0.0.1:7400", "rbind", io::Error::from_raw_os_error(libc::ENODEV));
        assert!(e.to_string().contains("rdma_rxe"), "{e}");
    }
}
