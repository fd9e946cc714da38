//! The listeners: sockets bound for each `--listen` address, and the
//! connections they accept, before any opening.

use crate::admission::pending::Cutter;
use crate::config::{AdmissionConfig, Listen};
use crate::handover::Transport;
use pvgpu_rdma::{RdmaListener, RdmaStream};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

/// Why a listener could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The socket could not be bound.
    #[error("Cannot listen on {what}")]
    Bind {
        /// The address.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A Unix socket path is already served by a running backend.
    #[error("{0} is in use by a running backend; stop it or choose another path")]
    InUse(PathBuf),
    /// TCP without a key, and the network not declared trusted.
    #[error(
        "Refusing to serve TCP or RDMA without a key: pass --tcp-key FILE (clients set PVGPU_TCP_KEY to a copy), or --state-dir DIR to serve tenant keys (`pvgpu-ctl key issue`), or --tcp-trusted-network if every host that can reach the port is trusted"
    )]
    TcpWithoutKey,
    /// A TLS listener without a certificate.
    #[error("--listen tls: needs --tls-cert FILE and --tls-key FILE")]
    TlsWithoutCert,
    /// RDMA cannot be served here (rdma-core missing, no RDMA device on
    /// the address).
    #[error("Cannot serve RDMA")]
    Rdma(#[from] pvgpu_rdma::RdmaError),
    /// XenStore is not reachable.
    #[error("Cannot serve Xen guests (run the backend in the domain that owns the GPU, with xenstored running)")]
    Xen(#[from] pvgpu_xen::XenError),
}

/// A bound listener.
pub enum Listener {
    /// The local transport's socket.
    Unix(UnixListener),
    /// A TCP port, plain or TLS.
    Tcp {
        /// The socket.
        l: TcpListener,
        /// Whether its connections speak TLS.
        tls: bool,
    },
    /// An RDMA port (rsockets).
    Rdma(RdmaListener),
    /// XenStore, for guests' vgpu devices.
    Xen(pvgpu_xen::XenStore),
}

/// A connection a listener accepted, before its opening.
pub enum Accepted {
    /// Local transport, and the user at the other end.
    Unix {
        /// The socket.
        sock: UnixStream,
        /// The peer's uid.
        uid: u32,
    },
    /// TCP.
    Tcp(TcpStream),
    /// TCP on a TLS listener, before its TLS handshake.
    Tls(TcpStream),
    /// RDMA.
    Rdma(RdmaStream),
}

impl Accepted {
    /// The peer it counts as (see [`crate::admission::peer`]).
    pub fn peer(&self) -> String {
        use crate::admission::peer;
        match self {
            Accepted::Unix { uid, .. } => peer::local_peer(*uid),
            Accepted::Tcp(s) | Accepted::Tls(s) => s.peer_addr().map_or("tcp".into(), |a| peer::tcp_peer(a.ip())),
            // An RDMA peer is its IP address, as over TCP: one host's
            // connections share its limits whichever way they come.
            Accepted::Rdma(s) => s.peer_addr().map_or("tcp".into(), |a| peer::tcp_peer(a.ip())),
        }
    }

    /// The transport.
    pub fn transport(&self) -> Transport {
        match self {
            Accepted::Unix { .. } => Transport::Local,
            Accepted::Tcp(_) => Transport::Tcp,
            Accepted::Tls(_) => Transport::Tls,
            Accepted::Rdma(_) => Transport::Rdma,
        }
    }

    /// A duplicate of the socket, for the pool of openings to cut it.
    pub fn dup(&self) -> io::Result<Cutter> {
        use std::os::fd::OwnedFd;
        Ok(match self {
            Accepted::Unix { sock, .. } => sock.try_clone().map(OwnedFd::from)?.into(),
            Accepted::Tcp(s) | Accepted::Tls(s) => s.try_clone().map(OwnedFd::from)?.into(),
            Accepted::Rdma(s) => Cutter::Rdma(s.clone()),
        })
    }
}

/// A network listener needs a key to check, tenants' keys, or the
/// operator's word that the network is trusted.
fn keyed(adm: &AdmissionConfig) -> Result<(), ListenError> {
    if adm.tcp_key.is_none() && adm.tenants.is_none() && !adm.tcp_trusted_network {
        return Err(ListenError::TcpWithoutKey);
    }
    Ok(())
}

/// Binds `l`. A TCP, TLS or RDMA listener needs a key (or a trusted
/// network) and TLS its certificate; a local socket gets the configured
/// mode.
pub fn bind(l: &Listen, adm: &AdmissionConfig) -> Result<(Listener, Option<SocketAddr>), ListenError> {
    match l {
        Listen::Local(path) => {
            let err = |source| ListenError::Bind { what: path.display().to_string(), source };
            if path.exists() {
                if UnixStream::connect(path).is_ok() {
                    return Err(ListenError::InUse(path.clone()));
                }
                let _ = std::fs::remove_file(path);
            }
            let ul = UnixListener::bind(path).map_err(err)?;
            // The mode decides who may connect, whatever the umask.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(adm.socket_mode)).map_err(err)?;
            ul.set_nonblocking(true).map_err(err)?;
            Ok((Listener::Unix(ul), None))
        }
        Listen::Tcp(a) | Listen::Tls(a) => {
            let tls = matches!(l, Listen::Tls(_));
            keyed(adm)?;
            if tls && adm.tls.is_none() {
                return Err(ListenError::TlsWithoutCert);
            }
            let err = |source| ListenError::Bind { what: a.clone(), source };
            let tl = TcpListener::bind(a).map_err(err)?;
            tl.set_nonblocking(true).map_err(err)?;
            let addr = tl.local_addr().map_err(err)?;
            Ok((Listener::Tcp { l: tl, tls }, Some(addr)))
        }
        Listen::Rdma(a) => {
            keyed(adm)?;
            let rl = RdmaListener::bind(a)?;
            let addr = rl.local_addr().map_err(|source| ListenError::Bind { what: format!("rdma:{a}"), source })?;
            Ok((Listener::Rdma(rl), Some(addr)))
        }
        Listen::Xen => Ok((Listener::Xen(pvgpu_xen::XenStore::open()?), None)),
    }
}

impl Listener {
    /// The transport it serves.
    pub fn transport(&self) -> Transport {
        match self {
            Listener::Unix(_) => Transport::Local,
            Listener::Tcp { tls: false, .. } => Transport::Tcp,
            Listener::Tcp { tls: true, .. } => Transport::Tls,
            Listener::Rdma(_) => Transport::Rdma,
            Listener::Xen(_) => Transport::Xen,
        }
    }

    /// Waits up to `tick` for a connection and accepts it (blocking from
    /// then on). `Ok(None)`: none came.
    pub fn accept(&self, tick: Duration) -> io::Result<Option<Accepted>> {
        use crate::conn::readable;
        let acc = match self {
            Listener::Unix(l) => {
                if !readable(l, tick)? {
                    return Ok(None);
                }
                match l.accept() {
                    Ok((sock, _)) => {
                        sock.set_nonblocking(false)?;
                        let cred = nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::PeerCredentials)?;
                        Accepted::Unix { sock, uid: cred.uid() }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                    Err(e) => return Err(e),
                }
            }
            Listener::Tcp { l, tls } => {
                if !readable(l, tick)? {
                    return Ok(None);
                }
                match l.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(false)?;
                        if *tls { Accepted::Tls(s) } else { Accepted::Tcp(s) }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                    Err(e) => return Err(e),
                }
            }
            Listener::Rdma(l) => match l.accept(tick)? {
                Some(s) => Accepted::Rdma(s),
                None => return Ok(None),
            },
            Listener::Xen(_) => return Ok(None),
        };
        Ok(Some(acc))
    }
}
