//! Sharing between the processes of one guest: memory and events handed
//! from one session to another (`cuIpcGetMemHandle`,
//! `cuIpcOpenMemHandle`, `cuIpcGetEventHandle`, ...).
//!
//! Each of a guest's processes has a session of its own, served by a worker
//! of its own. What one exports (the driver's handle of an allocation or
//! event, or a file descriptor the executor made) goes to the supervisor's
//! [`Registry`] under a random token, and the program receives that token
//! inside the 64 bytes of its handle. Another session presents the token;
//! the registry gives the exported object back only when the two sessions
//! belong to the same *scope* (the same guest domain, local user or TCP
//! peer, as admission counts peers) and are not the same session, so a
//! handle means nothing in another guest, and guessing one means guessing
//! 128 random bits. The driver's handles never reach a guest.
//!
//! A worker reaches the registry through a [`Broker`]: over a socket pair
//! with the supervisor (process isolation, descriptors passed with
//! `SCM_RIGHTS`), or directly (thread isolation). An export lives until
//! its session frees what it named, or ends.

mod broker;
mod registry;

pub use broker::{Broker, serve_worker};
pub(crate) use registry::random_token;
pub use registry::{Registry, Token};

use std::os::fd::OwnedFd;
use std::sync::Arc;

/// What an executor shares of an allocation or an event: the driver's
/// handle bytes, a file descriptor, or both.
#[derive(Debug, Clone)]
pub struct IpcObject {
    /// The driver's handle (`CUipcMemHandle`, `CUipcEventHandle`), or
    /// zeros.
    pub bytes: [u8; 64],
    /// A descriptor of the memory (the host executor's memfd, a shareable
    /// handle of physical memory).
    pub fd: Option<Arc<OwnedFd>>,
}

impl Default for IpcObject {
    fn default() -> Self {
        IpcObject { bytes: [0; 64], fd: None }
    }
}

/// Why an export or an import failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IpcError {
    /// No export of this kind under this token in the session's scope.
    #[error("no such handle in this guest")]
    Unknown,
    /// The session's own export: a process cannot open its own handles.
    #[error("a handle of this session's own")]
    Own,
    /// The session, or the backend, holds as many exports as it may.
    #[error("too many exported handles")]
    Full,
    /// The supervisor could not be reached.
    #[error("the backend's handle registry is unreachable")]
    Unreachable,
}

impl From<IpcError> for pvgpu_ring::CuError {
    fn from(e: IpcError) -> Self {
        match e {
            IpcError::Unknown => pvgpu_ring::CuError::INVALID_VALUE,
            // As the driver answers (measured on the H100 and H200).
            IpcError::Own => pvgpu_ring::CuError::INVALID_CONTEXT,
            IpcError::Full => pvgpu_ring::CuError::OUT_OF_MEMORY,
            IpcError::Unreachable => pvgpu_ring::CuError::NOT_SUPPORTED,
        }
    }
}
