//! What the supervisor hands a session once a peer is admitted: its
//! connection, opened as far as admission goes (a local peer's complete
//! hello, a TCP peer past the key check, a TLS peer's relay, a Xen
//! guest's published ring), and who the peer is.

use crate::image_cache::Owner;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;

/// The transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Local shared memory.
    Local,
    /// TCP.
    Tcp,
    /// TCP inside TLS.
    Tls,
    /// RDMA (rsockets).
    Rdma,
    /// A Xen guest's vgpu device.
    Xen,
}

impl Transport {
    /// The name logs and limits use (`local`, `tcp`, `tls`, `rdma`, `xen`).
    pub fn name(self) -> &'static str {
        match self {
            Transport::Local => "local",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
            Transport::Rdma => "rdma",
            Transport::Xen => "xen",
        }
    }

    /// Which session limit counts it: local 0, TCP, TLS and RDMA 1, Xen 2.
    pub fn session_class(self) -> usize {
        match self {
            Transport::Local => 0,
            Transport::Tcp | Transport::Tls | Transport::Rdma => 1,
            Transport::Xen => 2,
        }
    }

    /// Whether the session's bytes travel inline on a stream (TCP, TLS,
    /// RDMA) rather than through shared memory.
    pub fn is_stream(self) -> bool {
        matches!(self, Transport::Tcp | Transport::Tls | Transport::Rdma)
    }

    /// The session limit's name (`tcp` for TLS and RDMA too).
    pub fn session_class_name(self) -> &'static str {
        ["local", "tcp", "xen"][self.session_class()]
    }
}

/// A connection ready for its session.
pub enum Handover {
    /// Local transport: the socket and the frontend's complete hello.
    Local {
        /// The handshake's socket (the doorbell afterwards).
        sock: UnixStream,
        /// The hello, read and checked by the supervisor.
        hello: pvgpu_ring::local::Hello,
        /// The user at the other end.
        uid: u32,
    },
    /// TCP, past its key check.
    Tcp(TcpStream),
    /// A TLS or RDMA connection the supervisor relays, after its opening
    /// and key check: the session's end of the relay, who the peer is, and
    /// over what.
    Relayed {
        /// The session's end.
        sock: UnixStream,
        /// The peer (see [`crate::admission::peer::tcp_peer`]).
        peer: String,
        /// TLS or RDMA.
        transport: Transport,
    },
    /// A Xen guest's vgpu device whose frontend is `Initialised`.
    Xen {
        /// Guest domain.
        domid: u16,
        /// Device id.
        devid: u32,
        /// The ring it published, as the supervisor read it.
        ring: crate::xen::XenRing,
    },
}

impl Handover {
    /// Who is at the other end: the guest domain, the local user, or the
    /// TCP peer.
    pub fn owner(&self) -> Owner {
        use crate::admission::peer;
        Owner(match self {
            Handover::Local { uid, .. } => peer::local_peer(*uid),
            Handover::Tcp(s) => s.peer_addr().map_or("tcp".into(), |a| peer::tcp_peer(a.ip())),
            Handover::Relayed { peer, .. } => peer.clone(),
            Handover::Xen { domid, .. } => peer::xen_peer(*domid),
        })
    }

    /// The transport.
    pub fn transport(&self) -> Transport {
        match self {
            Handover::Local { .. } => Transport::Local,
            Handover::Tcp(_) => Transport::Tcp,
            Handover::Relayed { transport, .. } => *transport,
            Handover::Xen { .. } => Transport::Xen,
        }
    }
}
