//! The driver API functions implemented by hand. Everything else is a
//! generated stub (see `build.rs`).

pub mod across;
pub mod array;
pub mod capture;
pub mod context;
pub mod device;
pub mod exec;
pub mod graph;
pub mod graph_add;
pub mod graph_cond;
pub mod graph_copy;
pub mod graph_exec;
pub mod graph_host;
pub mod graph_kernel;
pub mod graph_mem;
pub mod graph_node;
pub mod graph_params;
pub mod host;
mod host_register;
pub mod init;
pub mod ipc;
pub mod launch;
pub mod library;
pub mod link;
mod link_objects;
pub mod managed;
pub mod memop;
pub mod memory;
pub mod module;
pub mod pitched;
pub mod pointer;
pub mod pool;
pub mod shareable;
pub mod stream_attr;
pub mod texture;
pub mod user_object;
pub mod vmm;
