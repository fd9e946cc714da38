//! RDMA streams for pvgpu's `rdma:HOST:PORT` transport.
//!
//! The transport runs on rdma-core's rsockets (`librdmacm.so.1`): a
//! connection is a reliable-connected queue pair set up through the RDMA
//! connection manager, and every byte travels as an RDMA write (with
//! immediate data) straight into receive buffers the peer registered and
//! advertised; commands are small writes, sent inline in the work request.
//! No kernel socket carries data, and neither side copies it between
//! kernel and user space. The library is loaded when an `rdma:` address is
//! first used, so pvgpu runs on hosts without rdma-core and says what to
//! install where it is missing.
//!
//! - [`RdmaStream`]: a connection, [`std::io::Read`] and [`std::io::Write`]
//!   with read and write timeouts, as `TcpStream` offers them;
//! - [`RdmaListener`]: a bound, listening port that accepts them;
//! - [`devices`]: the RDMA devices the kernel offers (a soft-RoCE `rxe`
//!   device counts), for a clear message where there are none.

mod stream;
mod sys;

pub use stream::{RdmaListener, RdmaStream};

use std::path::Path;

/// Why an RDMA connection or listener could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    /// rdma-core's connection manager library is not installed.
    #[error(
        "cannot load librdmacm.so.1 ({0}): install rdma-core's librdmacm1, libibverbs1 and ibverbs-providers (Debian package names) to use rdma: addresses"
    )]
    Library(String),
    /// The address does not name a host and port.
    #[error("'{0}' is not HOST:PORT")]
    Address(String),
    /// The host name does not resolve.
    #[error("cannot resolve {addr}: {source}")]
    Resolve {
        /// The address.
        addr: String,
        /// What the resolver said.
        #[source]
        source: std::io::Error,
    },
    /// A call of the connection manager failed.
    #[error("rdma:{addr}: {what} failed: {source}{hint}")]
    Call {
        /// The address.
        addr: String,
        /// The call (`rsocket`, `rconnect`, ...).
        what: &'static str,
        /// The error it set.
        #[source]
        source: std::io::Error,
        /// What to check, where the cause is commonly one thing.
        hint: &'static str,
    },
}

/// The RDMA devices the kernel offers, by name (`/sys/class/infiniband`):
/// a soft-RoCE device made with `rdma link add rxe0 type rxe netdev
/// IFACE` counts. Empty where there is none, or no RDMA core at all.
pub fn devices() -> Vec<String> {
    devices_in(Path::new("/sys/class/infiniband"))
}

fn devices_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether librdmacm can be loaded here (without connecting anywhere).
pub fn available() -> Result<(), RdmaError> {
    sys::library().map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_listed_sorted_and_none_is_empty() {
        let d = std::env::temp_dir().join(format!("pvgpu-rdma-devs-{}", std::process::id()));
        std::fs::create_dir_all(d.join("rxe1")).unwrap();
        std::fs::create_dir_all(d.join("mlx5_0")).unwrap();
        assert_eq!(devices_in(&d), ["mlx5_0", "rxe1"]);
        std::fs::remove_dir_all(&d).unwrap();
        assert!(devices_in(&d).is_empty());
    }
}
