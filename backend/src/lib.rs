//! # pvgpu-backend
//!
//! The Dom0 side of pvgpu: accepts frontends over the local shared-memory
//! transport, TCP and Xen, runs one session per frontend, and executes its
//! CUDA driver-API commands.
//!
//! - [`affinity`]: CPU lists and pinning session threads to them;
//! - [`config`]: what an operator sets (listeners, isolation, executor,
//!   session limits);
//! - [`supervisor`]: the listeners, one session per connection, clean
//!   shutdown;
//! - [`roster`]: the supervisor's list of live sessions;
//! - [`control`]: the control socket (`pvgpu-ctl`'s API) above the
//!   supervisor;
//! - [`listener`]: the bound listeners and the connections they accept;
//! - [`admission`]: what a peer must do before it gets a worker (hello,
//!   key check, under a total deadline in a bounded pool) and how many
//!   sessions it may hold;
//! - [`handover`]: the admitted connection a session is handed;
//! - [`ledger`]: what one peer's sessions hold together (shared by its
//!   worker processes);
//! - [`spawn`]: sessions in worker processes (default) or threads, and the
//!   supervisor's hold on their lifetime;
//! - [`share`]: GPU time shared by the tenants' weights (`--gpu-share
//!   weighted`): sessions take turns on each GPU;
//! - [`session_loop`]: one session's serving loop over its connection;
//! - [`worker_process`]: the worker process that runs one session;
//! - [`sandbox`]: what a worker gives up before serving (its user, a
//!   seccomp deny-list);
//! - [`session`]: per-session handle tables, device-range checks, quota,
//!   deferred errors of calls sent without waiting, and the command
//!   handlers by family;
//! - [`exec`]: the executors, [`exec::cuda`] (cudarc) and [`exec::host`]
//!   (a test double that runs without a GPU);
//! - [`conn`]: the backend's end of a ring or TCP connection;
//! - [`tls`]: TLS for TCP listeners, relayed by the supervisor;
//! - [`rdma`]: RDMA listeners (rsockets), relayed by the supervisor;
//! - [`xen`]: vgpu devices in XenStore, the xenbus handshake, sessions over
//!   grant-mapped rings.
//!
//! The guest is treated as hostile: requests are copied out of shared memory
//! before they are decoded, every handle and device range is checked against
//! the session's own tables, and a broken peer loses its session and nothing
//! else.

pub mod admission;
pub mod affinity;
pub mod checkpoints;
pub mod config;
pub mod config_file;
pub mod conn;
pub mod control;
pub mod devices;
pub mod exec;
pub mod fd_table;
pub mod file_guard;
pub mod handed_memory;
mod handles;
pub mod handover;
pub mod image_cache;
pub mod ipc;
pub mod layout;
pub mod ledger;
pub mod listener;
pub mod log_limit;
pub mod log_sink;
pub mod meter;
pub mod metrics;
pub mod peer_copy;
pub mod peers;
pub mod prepared_workers;
pub mod rdma;
pub mod roster;
pub mod sandbox;
pub mod session;
pub mod session_loop;
pub mod share;
pub mod spawn;
pub mod staging;
pub mod supervisor;
pub mod tenants;
pub mod tls;
pub mod worker_pool;
pub mod worker_process;
mod worker_start;
pub mod xen;

pub use config::{Config, Isolation, Listen, SessionConfig};
pub use supervisor::Backend;
