//! # pvgpu-backend
//!
//! The Dom0 side of pvgpu: accepts frontends over the local shared-memory
//! transport and TCP, runs one session per frontend, and executes its CUDA
//! driver-API commands.
//!
//! - [`server`]: listeners, one session per connection in a worker process
//!   (default) or a thread, clean shutdown;
//! - [`session`]: per-session handle tables, device-range checks, quota,
//!   deferred errors of calls sent without waiting;
//! - [`exec`]: the executors, [`exec::cuda`] (cudarc) and [`exec::host`]
//!   (a test double that runs without a GPU);
//! - [`conn`]: the backend's end of a ring or TCP connection;
//! - [`xen`]: vgpu devices in XenStore, the xenbus handshake, sessions over
//!   grant-mapped rings.
//!
//! The guest is treated as hostile: requests are copied out of shared memory
//! before they are decoded, every handle and device range is checked against
//! the session's own tables, and a broken peer loses its session and nothing
//! else.

pub mod conn;
pub mod exec;
mod handles;
pub mod serve;
pub mod server;
pub mod session;
pub mod worker;
pub mod xen;

pub use server::{Backend, Config, Isolation, Listen, SessionConfig};
