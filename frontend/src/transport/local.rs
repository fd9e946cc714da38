//! The local transport: a memfd ring handed to the backend over its Unix
//! socket. The data area is sized from the options; a backend that allows
//! less is asked again with less page-locked memory.

use super::ring::RingTransport;
use crate::error::{Result, TransportError};
use crate::options::Options;
use pvgpu_ring::layout::Geometry;
use pvgpu_ring::local::{LocalError, Refusal, client_handshake};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Connects to the backend listening on `path`.
pub fn connect(path: &Path, opts: &Options) -> Result<RingTransport> {
    let addr = || format!("local:{}", path.display());
    let staging = (opts.data_area.max(1 << 20) + 4095) & !4095;
    let mut pinned = (opts.pinned + 4095) & !4095;
    for _ in 0..2 {
        let sock = UnixStream::connect(path).map_err(|source| TransportError::Connect { addr: addr(), source })?;
        let g = Geometry { data_size: staging + pinned, ..Geometry::default() };
        match client_handshake(sock, &g) {
            Ok(side) => {
                let t =
                    RingTransport::new(side.region, &side.geometry, staging, Box::new(side.notifier), opts.spin, opts.timeout, "local")?;
                return Ok(t);
            }
            Err(LocalError::Refused { reason: Refusal::Geometry, max_data }) if max_data >= staging && max_data < staging + pinned => {
                tracing::info!(
                    asked = staging + pinned,
                    max = max_data,
                    "backend limits the data area; reconnecting with less page-locked memory"
                );
                pinned = (max_data - staging) & !4095;
            }
            Err(e) => return Err(TransportError::Local(e).into()),
        }
    }
    Err(TransportError::Refused { addr: addr(), reason: "the data area negotiation did not converge".into() }.into())
}
