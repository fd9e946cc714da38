//! # pvgpu-frontend
//!
//! The guest side of pvgpu: a typed client of the CUDA driver API whose
//! calls run on a pvgpu backend, over the local shared-memory ring or TCP.
//!
//! ```no_run
//! use pvgpu_frontend::{Client, Stream};
//! # fn main() -> pvgpu_frontend::Result<()> {
//! // PVGPU_BACKEND=local:/run/pvgpu/pvgpu.sock or tcp:HOST:PORT
//! let gpu = Client::from_env()?;
//! gpu.init()?;
//! let ctx = gpu.primary_ctx_retain(0)?;
//! let buf = gpu.mem_alloc(ctx, 4096)?;
//! gpu.memcpy_htod(buf, &[1u8; 4096])?;
//! let mut back = vec![0u8; 4096];
//! gpu.memcpy_dtoh(&mut back, buf)?;
//! gpu.mem_free(buf)?;
//! # Ok(()) }
//! ```
//!
//! Calls whose result the program does not need at once (launches, async
//! copies of data already captured, memsets, event records, frees and
//! destroys) are sent without waiting; an error they cause is returned by
//! the next call that waits for the backend, as CUDA reports asynchronous
//! errors. Set `PVGPU_SYNC=1` to make every call wait (for debugging).
//!
//! When the backend goes away, every call fails with
//! [`TransportError::BackendGone`] (`CUDA_ERROR_DEVICE_UNAVAILABLE` through
//! [`Error::code`]) instead of blocking.
//!
//! Modules: [`Client`] and its typed calls, copies, the RPC plumbing that
//! matches replies to requests, [`Options`] and the backend address, and
//! the [`transport`]s (local ring, Xen ring, TCP).

mod array;
mod bulk;
mod capture_mode;
mod client;
mod copy;
pub mod error;
mod exec;
mod graph;
mod graph_params;
mod handles;
mod host_call;
mod ipc;
mod leave_keeper;
mod link;
pub mod log;
mod memo;
mod memory;
mod mirror;
mod mirror_keeper;
mod options;
mod output;
mod peer_copy;
mod pool;
mod reattach;
mod rpc;
mod stats;
pub mod transport;
mod vmm;

pub use array::{ArrayEnd, ArrayShape, TexSampling};
pub use client::{CACHED_IMAGE_MIN, Client};
pub use copy::Pitched;
pub use error::{Error, Result, SettingError, TransportError};
pub use graph::{CaptureInfo, Graph, GraphExec, GraphNode, KernelNode, NodeInfo};
pub use graph_params::NodeParams;
pub use handles::*;
pub use host_call::HostFn;
pub use ipc::PhysInfo;
pub use link::Linked;
pub use options::{BackendAddr, DEFAULT_SOCKET, Options, backend_from_env, backends_from_env};
pub use output::{set_error_handler, set_output_handler};
pub use peer_copy::Ticket;
pub use pvgpu_ring::{CuError, CuResult};
pub use stats::{CallCount, CallStats};
pub use vmm::{Access, PhysMem};

use zerocopy::{Immutable, IntoBytes};

/// Bytes of a plain value, for [`Client::launch`] arguments.
pub fn arg<T: IntoBytes + Immutable>(v: &T) -> &[u8] {
    v.as_bytes()
}
