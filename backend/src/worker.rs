//! Executor selection and the worker process that serves one session.

use crate::exec::cuda::{CudaExecutor, CudaInitError};
use crate::exec::host::HostExecutor;
use crate::server::{Accepted, SessionConfig, WORKER_FD, run_connection};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Which executor runs the commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorKind {
    /// The GPU, through the CUDA driver.
    Cuda,
    /// The host test double (no GPU; for tests).
    Host,
}

/// Executor settings passed to every worker.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Which executor.
    pub kind: ExecutorKind,
    /// Bytes of fake device memory of the host executor.
    pub host_mem: u64,
}

/// Why a worker could not serve its session.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The GPU executor did not start.
    #[error(transparent)]
    Cuda(#[from] CudaInitError),
    /// The `--conn` value is unknown, or `xen` lacks its device.
    #[error("Bad connection '{0}' (expected local or tcp, or xen with --domid and --devid)")]
    Conn(String),
    /// Signal handlers could not be installed.
    #[error("Cannot install signal handlers: {0}")]
    Signals(std::io::Error),
}

/// Starts the configured executor once, so that a missing driver is reported
/// at start-up rather than per session.
pub fn probe(cfg: &ExecutorConfig) -> Result<(), WorkerError> {
    if cfg.kind == ExecutorKind::Cuda {
        let e = CudaExecutor::new()?;
        use crate::exec::Executor;
        for (i, d) in e.devices().iter().enumerate() {
            tracing::info!(device = i, name = %d.name, total_mem = d.total_mem, "GPU");
        }
    }
    Ok(())
}

/// Serves one session: a connection handed over on fd 3 (`local`, `tcp`),
/// or guest `xen`'s vgpu device.
pub fn run_worker(
    conn: &str,
    xen: Option<(u16, u32)>,
    session: u64,
    exec: &ExecutorConfig,
    cfg: &SessionConfig,
) -> Result<(), WorkerError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).map_err(WorkerError::Signals)?;
    }
    let acc = match (conn, xen) {
        ("xen", Some((domid, devid))) => Accepted::Xen { domid, devid },
        ("local" | "tcp", None) => {
            // SAFETY: the backend placed this session's socket on WORKER_FD
            // before exec (server::ProcessSpawner) and nothing else in this
            // process owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(WORKER_FD) };
            if conn == "local" { Accepted::Unix(fd.into()) } else { Accepted::Tcp(fd.into()) }
        }
        (other, _) => return Err(WorkerError::Conn(other.to_string())),
    };
    match exec.kind {
        ExecutorKind::Cuda => {
            let e = Arc::new(CudaExecutor::new()?);
            run_connection(e, acc, cfg, session, &stop);
        }
        ExecutorKind::Host => {
            let e = Arc::new(HostExecutor::new(exec.host_mem));
            run_connection(e, acc, cfg, session, &stop);
        }
    }
    Ok(())
}

/// Parses a byte count with an optional K, M, G or T suffix (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("unknown size suffix in '{s}' (use K, M, G or T)")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("'{s}' is not a byte count"))?;
    n.checked_mul(mult).ok_or_else(|| format!("'{s}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("2g"), Ok(2 << 30));
        assert!(parse_bytes("12Q").is_err());
        assert!(parse_bytes("x").is_err());
    }
}
