//! Errors of the client.

use pvgpu_ring::CuResult;
use pvgpu_ring::channel::ChannelError;
use pvgpu_ring::local::LocalError;
use pvgpu_ring::proto::DecodeError;

/// Why a transport stopped working. After any of these the client is
/// unusable: every later call fails the same way, without blocking.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The backend closed the connection or died.
    #[error("The pvgpu backend went away; restart the program once the backend is back")]
    BackendGone,
    /// Connecting or the handshake failed.
    #[error("Cannot connect to the pvgpu backend at {addr}: {reason}")]
    Connect {
        /// Where.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The backend broke the ring protocol.
    #[error("The backend broke the ring protocol: {0}")]
    Channel(#[from] ChannelError),
    /// The backend sent something that does not decode.
    #[error("The backend sent a malformed message: {0}")]
    Decode(#[from] DecodeError),
    /// The backend's reply does not match the request.
    #[error("Protocol error: {0}")]
    Protocol(String),
    /// No reply within the configured timeout (`PVGPU_TIMEOUT`).
    #[error("The backend did not answer within the call timeout")]
    Timeout,
    /// The OS failed us.
    #[error("I/O error talking to the backend: {0}")]
    Io(#[from] std::io::Error),
    /// The local handshake failed.
    #[error("Local transport handshake failed: {0}")]
    Local(#[from] LocalError),
}

/// An error of a client call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The backend's driver (or the session's checks) returned this status.
    #[error("{0}")]
    Cuda(CuResult),
    /// The connection to the backend failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// `PVGPU_BACKEND` or an explicit address is malformed.
    #[error("Bad backend address '{0}': use local:PATH, tcp:HOST:PORT or xen")]
    Address(String),
}

impl Error {
    /// The `CUresult` a driver-API caller should see: the CUDA status, or
    /// `CUDA_ERROR_DEVICE_UNAVAILABLE` when the backend cannot be reached.
    pub fn code(&self) -> CuResult {
        match self {
            Error::Cuda(c) => *c,
            Error::Transport(_) => CuResult::DEVICE_UNAVAILABLE,
            Error::Address(_) => CuResult::INVALID_VALUE,
        }
    }
}

impl From<CuResult> for Error {
    fn from(c: CuResult) -> Self {
        Error::Cuda(c)
    }
}

/// Result of client calls.
pub type Result<T> = std::result::Result<T, Error>;
