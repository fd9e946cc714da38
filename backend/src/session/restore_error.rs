//! Why a snapshot could not be restored ([`super::restore`]).

use pvgpu_ctl::snapshot::SnapshotError;
use pvgpu_ring::CuError;

/// Why a snapshot could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// It ran on another executor.
    #[error("the snapshot ran on the {want} executor; this backend runs {have}")]
    Executor {
        /// The snapshot's.
        want: String,
        /// This backend's.
        have: String,
    },
    /// A device it used is missing here, or another model.
    #[error("the snapshot used device {ordinal}, a {want}; here it is {have}")]
    Device {
        /// The ordinal.
        ordinal: usize,
        /// The snapshot's model.
        want: String,
        /// This backend's, or "missing".
        have: String,
    },
    /// The session would see other devices than its guest saw.
    #[error(
        "the guest saw the backend's devices {want:?}, and here its session may use {have:?} (its tenant's GPUs, less those drained); restore where the same devices are given to it"
    )]
    Gpus {
        /// What the guest saw.
        want: Vec<usize>,
        /// What the session may use here.
        have: Vec<usize>,
    },
    /// An address could not be had again.
    #[error("{what} at {address:#x} cannot be restored at that address ({error}); the snapshot is kept")]
    Address {
        /// What it is.
        what: String,
        /// The address.
        address: u64,
        /// What the executor said.
        error: CuError,
    },
    /// The driver numbered a texture or surface object otherwise.
    #[error(
        "a texture or surface object had the value {from} and the driver gives {to} now (kernels receive the value); the snapshot is kept"
    )]
    ObjectValue {
        /// Its value.
        from: u64,
        /// The value the driver gave.
        to: u64,
    },
    /// The driver numbered a conditional handle otherwise.
    #[error("a conditional handle had the value {from} and the driver gives {to} now (kernels receive the value); the snapshot is kept")]
    CondHandle {
        /// Its value.
        from: u64,
        /// The value the driver gave.
        to: u64,
    },
    /// The driver placed a module global elsewhere.
    #[error("module global {name} was at {from:#x} and the driver placed it at {to:#x} now; the snapshot is kept")]
    Moved {
        /// The global.
        name: String,
        /// Where it was.
        from: u64,
        /// Where it is now.
        to: u64,
    },
    /// Rebuilding an object failed.
    #[error("restoring {what} failed: {error}")]
    Rebuild {
        /// What.
        what: String,
        /// The executor's error.
        error: CuError,
    },
    /// The snapshot names something impossible.
    #[error("the snapshot is inconsistent: {0}")]
    Inconsistent(String),
    /// Reading it failed.
    #[error(transparent)]
    File(#[from] SnapshotError),
    /// Its device memory was handed over in place, and cannot be had here.
    #[error("the snapshot's device memory was handed over in place: {0}")]
    Handed(String),
    /// It does not fit the session's quota here.
    #[error("the snapshot's {0} bytes of device memory do not fit this session's quota here")]
    Quota(u64),
}
