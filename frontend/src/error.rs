//! Errors of the client. Messages follow the workspace's one rule: they say
//! what happened at their own level and never repeat their source; print
//! them with [`Chain`] (or anyhow's `{:#}`) to see the whole story.

use pvgpu_ring::addr::AddrError;
use pvgpu_ring::channel::ChannelError;
use pvgpu_ring::layout::LayoutError;
use pvgpu_ring::local::LocalError;
use pvgpu_ring::proto::DecodeError;
use pvgpu_ring::region::RegionError;
use pvgpu_ring::{CuError, CuResult};
use pvgpu_xen::XenError;

pub use pvgpu_ring::report::Chain;

/// Why a transport stopped working. After any of these the client is
/// unusable: every later call fails the same way, without blocking.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The backend closed the connection or died.
    #[error("The pvgpu backend went away; restart the program once the backend is back")]
    BackendGone,
    /// The backend checkpointed the session and it did not come back.
    #[error(
        "The pvgpu backend checkpointed this session and it was not restored within {secs} s (pvgpu-ctl restore FILE; PVGPU_RESUME_TIMEOUT_S sets the wait)"
    )]
    NotResumed {
        /// How long the frontend waited.
        secs: u64,
    },
    /// The session was sent from backend to backend too many times.
    #[error("The pvgpu backends sent this session on {hops} times without one taking it (last: {last}); check `pvgpu-ctl restores` there")]
    MovedTooOften {
        /// How many times.
        hops: u32,
        /// The last address it was sent to.
        last: String,
    },
    /// The backend's address cannot be reached.
    #[error("Cannot connect to the pvgpu backend at {addr}")]
    Connect {
        /// Where.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An RDMA connection could not be made (no rdma-core, no RDMA device,
    /// nothing listening): the error says which.
    #[error("Cannot connect to the pvgpu backend over RDMA: {0}")]
    Rdma(#[from] pvgpu_rdma::RdmaError),
    /// TLS could not be set up (its settings, or the handshake).
    #[error("TLS: {why} (PVGPU_TLS_CA names the certificate the backend's --tls-cert is, or is signed by)")]
    Tls {
        /// What went wrong.
        why: String,
    },
    /// The TCP opening (key check) failed.
    #[error("Cannot open a session with the pvgpu backend at {addr}")]
    Auth {
        /// Where.
        addr: String,
        /// Why, and what to do.
        #[source]
        source: pvgpu_ring::tcp_auth::AuthError,
    },
    /// The backend, or the toolstack's set-up, turned the connection down.
    #[error("The pvgpu backend at {addr} refused the connection: {reason}")]
    Refused {
        /// Where.
        addr: String,
        /// Why, in words.
        reason: String,
    },
    /// A step of the Xen handshake failed.
    #[error("Xen transport: {step} failed")]
    Xen {
        /// The step.
        step: &'static str,
        /// Why.
        #[source]
        source: XenError,
    },
    /// The shared region could not be laid out.
    #[error("Cannot lay out the shared region")]
    Layout(#[from] LayoutError),
    /// An access outside the shared region.
    #[error("Shared region access out of bounds")]
    Region(#[from] RegionError),
    /// A copy does not fit the data area, or unfinished copies hold all of it.
    #[error("The data area has no room for this copy")]
    Staging(#[from] StagingError),
    /// The backend broke the ring protocol.
    #[error("The backend broke the ring protocol")]
    Channel(#[from] ChannelError),
    /// The backend sent something that does not decode.
    #[error("The backend sent a malformed message")]
    Decode(#[from] DecodeError),
    /// The backend's reply does not fit the request.
    #[error("The backend's reply does not fit the request")]
    Protocol(#[from] ProtocolError),
    /// No reply within the configured timeout (`PVGPU_TIMEOUT_MS`).
    #[error("The backend did not answer within the call timeout (PVGPU_TIMEOUT_MS)")]
    Timeout,
    /// The OS failed us.
    #[error("I/O error talking to the backend")]
    Io(#[from] std::io::Error),
    /// The local handshake failed.
    #[error("Local transport handshake failed")]
    Local(#[from] LocalError),
}

/// Why a copy found no room in the data area.
#[derive(Debug, thiserror::Error)]
pub enum StagingError {
    /// Larger than the staging part of the area.
    #[error("{len} bytes do not fit the {cap}-byte data area")]
    TooLarge {
        /// Bytes to place.
        len: u64,
        /// Staging capacity.
        cap: u64,
    },
    /// Copies whose replies have not been read hold the whole area.
    #[error("Data area exhausted by unfinished copies")]
    Exhausted,
}

/// How a reply failed to fit its request.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// A reply to another request.
    #[error("Reply to request {got} (opcode {got_op}) while waiting for {want} (opcode {want_op})")]
    Mismatch {
        /// Id of the reply.
        got: u64,
        /// Its opcode.
        got_op: u16,
        /// Id waited for.
        want: u64,
        /// Its opcode.
        want_op: u16,
    },
    /// A function reply whose parameters do not fit its packed size.
    #[error("Function reply with an impossible parameter layout")]
    ParamLayout,
    /// A reply whose length is not what its header says.
    #[error("Reply length does not match its header")]
    ReplyLength,
    /// A copy's reply carried another number of bytes than asked for.
    #[error("Copy reply of {got} bytes for {want} asked")]
    CopyLength {
        /// Bytes in the reply.
        got: usize,
        /// Bytes asked.
        want: usize,
    },
    /// The backend answered the hello with another address space than
    /// asked: it predates several backends per program.
    #[error(
        "The backend kept address space {got} for the {asked} asked: it is too old to be one of several backends of a program (PVGPU_BACKEND lists it at place {asked}); upgrade it"
    )]
    SpaceIgnored {
        /// The space asked for.
        asked: u16,
        /// The space answered.
        got: u16,
    },
    /// The backend sent a message while no call waited, other than its
    /// request for a call: the connection is out of step.
    #[error("The backend sent a message (flags {flags:#x}) while no call waited; the connection is out of step and ends")]
    Stray {
        /// The message's flags.
        flags: u32,
    },
    /// A page of kernel names that was empty before the last name.
    #[error("Kernel-name page ended early")]
    NamesPage,
    /// A host-call message that does not decode.
    #[error("Malformed host-call message")]
    BadHostCall,
    /// A node-parameters reply of a kind the backend does not answer.
    #[error("Node-parameters reply of node type {0}")]
    NodeKind(u32),
    /// A conditional node's reply without one body graph per body asked.
    #[error("Conditional-node reply with {got} body graphs for {want} asked")]
    CondBodies {
        /// Body graphs in the reply.
        got: usize,
        /// Body graphs asked.
        want: u32,
    },
}

/// An error of a client call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The backend's driver (or the session's checks) returned this status.
    #[error("{0}")]
    Cuda(CuError),
    /// The connection to the backend failed.
    #[error("The connection to the pvgpu backend failed")]
    Transport(#[from] TransportError),
    /// `PVGPU_BACKEND` or an explicit address is malformed.
    #[error("Bad backend address (PVGPU_BACKEND)")]
    Address(#[from] AddrError),
    /// A setting of the environment makes no sense.
    #[error(transparent)]
    Setting(#[from] SettingError),
}

/// A setting of the environment that makes no sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}='{value}': {why}")]
pub struct SettingError {
    /// The variable.
    pub var: String,
    /// Its value.
    pub value: String,
    /// What is wrong, and what to write instead.
    pub why: String,
}

impl Error {
    /// The `CUresult` a driver-API caller should see: the CUDA status, or
    /// `CUDA_ERROR_DEVICE_UNAVAILABLE` when the backend cannot be reached.
    pub fn code(&self) -> CuError {
        match self {
            Error::Cuda(c) => *c,
            Error::Transport(_) => CuError::DEVICE_UNAVAILABLE,
            Error::Address(_) | Error::Setting(_) => CuError::INVALID_VALUE,
        }
    }

    /// The status of a failed call, as a `CUresult`.
    pub fn status(&self) -> CuResult {
        self.code().into()
    }
}

impl From<CuError> for Error {
    fn from(c: CuError) -> Self {
        Error::Cuda(c)
    }
}

/// Result of client calls.
pub type Result<T> = std::result::Result<T, Error>;
