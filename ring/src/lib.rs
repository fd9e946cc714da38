//! # pvgpu-ring
//!
//! The parts of pvgpu that both ends of a connection share:
//!
//! - [`proto`]: wire protocol v1, fixed-layout little-endian messages decoded
//!   with `zerocopy`, where an unknown opcode or a malformed length is an
//!   error value, never undefined behaviour;
//! - [`channel`]: a single-producer/single-consumer channel of records with
//!   Xen-style event indices, generic over the memory it lives in;
//! - [`region`] and [`layout`]: a shared region (memfd, Xen grant pages)
//!   carved into a request channel, a response channel and a data area for
//!   bulk copies;
//! - [`notify`]: the doorbell trait both transports implement and the
//!   spin-then-block wait;
//! - [`local`]: memfd regions, eventfd doorbells and the Unix-socket
//!   handshake of the local transport; [`frame`]: message framing for TCP;
//! - [`cuda`]: `CUresult` codes (and [`CuError`], a status that is not
//!   success) and attribute numbers as CUDA 13 defines them;
//! - [`addr`]: the `local:`/`tcp:`/`xen` address grammar both sides parse;
//! - [`peer_copy`]: the opening of a copy from one backend to another;
//! - [`report`]: errors printed with their sources, for logs.
//!
//! The consumer side treats the peer as hostile: it copies each record out
//! of shared memory before decoding it, checks every index against the
//! buffer size, and reports an impossible state as an error that ends the
//! session.

pub mod addr;
pub mod channel;
pub mod cuda;
pub mod device_status;
#[cfg(not(loom))]
pub mod frame;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
pub mod local;
pub mod notify;
#[cfg(not(loom))]
pub mod peer_copy;
pub mod proto;
#[cfg(not(loom))]
pub mod region;
pub mod report;
mod sync;
#[cfg(not(loom))]
pub mod tcp_auth;

pub use cuda::{CuError, CuResult};
