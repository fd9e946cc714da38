//! The driver API functions implemented by hand. Everything else is a
//! generated stub (see `build.rs`).

pub mod context;
pub mod device;
pub mod exec;
pub mod host;
pub mod init;
pub mod launch;
pub mod library;
pub mod memory;
pub mod module;
pub mod pitched;
pub mod pointer;
pub mod pool;
pub mod vmm;
