//! The worker process: serves one session, on the connection the
//! supervisor hands it (fd 3) or on a Xen guest's vgpu device, with the
//! executor the supervisor names, and exits when the session ends (which
//! frees everything the session held on the GPU).

use crate::config::{ExecutorConfig, ExecutorKind, SessionConfig};
use crate::exec::cuda::{CudaExecutor, CudaInitError};
use crate::exec::host::HostExecutor;
use crate::sandbox::{Confinement, SandboxError, confine};
use crate::session_loop::{Accepted, run_connection};
use crate::supervisor::WORKER_FD;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

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
    #[error("Cannot install signal handlers")]
    Signals(#[source] std::io::Error),
    /// The worker could not give up its privileges.
    #[error("Cannot confine the worker")]
    Sandbox(#[source] SandboxError),
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
    confinement: &Confinement,
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
    // This process serves one session: its frontend may know where its
    // shared memory lies here.
    let cfg = &SessionConfig { same_address: true, ..cfg.clone() };
    // CONFINEMENT HOOK (crate::sandbox): once the executor is up, before
    // the first request. A Xen session still needs root for XenStore and
    // its grants until xen::open_session has run in run_connection, so
    // here its worker keeps its user (seccomp applies to every transport).
    let mut confinement = confinement.clone();
    if matches!(acc, Accepted::Xen { .. }) {
        confinement.user = None;
    }
    match exec.kind {
        ExecutorKind::Cuda => {
            // What kernels print reaches this process's standard output;
            // send it to the program instead (this process serves one
            // session).
            if let Err(e) = crate::exec::cuda::output::capture() {
                tracing::warn!(error = %pvgpu_ring::report::Chain(&e), "kernel output stays in the backend's log");
            }
            let e = Arc::new(CudaExecutor::new()?);
            confine(&confinement).map_err(WorkerError::Sandbox)?;
            run_connection(e, acc, cfg, session, &stop);
        }
        ExecutorKind::Host => {
            let e = Arc::new(HostExecutor::new(exec.host_mem));
            confine(&confinement).map_err(WorkerError::Sandbox)?;
            run_connection(e, acc, cfg, session, &stop);
        }
    }
    Ok(())
}
