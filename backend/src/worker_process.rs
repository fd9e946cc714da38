//! The worker process: serves one session, on the connection the
//! supervisor hands it (fd 3) or on a Xen guest's vgpu device, with the
//! executor the supervisor names, and exits when the session ends (which
//! frees everything the session held on the GPU).

use crate::config::{ExecutorConfig, ExecutorKind, SessionConfig};
use crate::exec::cuda::{CudaExecutor, CudaInitError};
use crate::exec::host::HostExecutor;
use crate::handover::{Handover, Transport};
use crate::sandbox::{Confinement, SandboxError, confine};
use crate::session::Premade;
use crate::session_loop::{Ended, open_connection, serve_opened};
use crate::spawn::{BROKER_FD, LEDGER_FD, MEMFD_FD, METER_FD, WORKER_FD};
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Why a worker could not serve its session.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The GPU executor did not start.
    #[error(transparent)]
    Cuda(#[from] CudaInitError),
    /// The `--conn` value is unknown, `xen` lacks its device, or `local`
    /// its hello.
    #[error("Bad connection '{0}' (expected local with --local-hello, tcp, tls, or xen with --domid, --devid and --xen-ring)")]
    Conn(String),
    /// The peer's memory ledger cannot be mapped.
    #[error("Cannot map the peer's memory ledger")]
    Ledger(#[source] std::io::Error),
    /// The session's meter cannot be mapped.
    #[error("Cannot map the session's meter")]
    Meter(#[source] std::io::Error),
    /// Signal handlers could not be installed.
    #[error("Cannot install signal handlers")]
    Signals(#[source] std::io::Error),
    /// The worker could not give up its privileges.
    #[error("Cannot confine the worker")]
    Sandbox(#[source] SandboxError),
}

/// Starts the configured executor once, so that a missing driver is reported
/// at start-up rather than per session; returns how many devices it has.
pub fn probe(cfg: &ExecutorConfig) -> Result<Vec<[u8; 16]>, WorkerError> {
    use crate::exec::Executor;
    match cfg.kind {
        ExecutorKind::Cuda => {
            let e = CudaExecutor::new()?;
            for (i, d) in e.devices().iter().enumerate() {
                tracing::info!(device = i, name = %d.name, total_mem = d.total_mem, "GPU");
            }
            Ok(e.devices().iter().map(|d| d.uuid).collect())
        }
        ExecutorKind::Host => {
            let e = HostExecutor::with_devices(cfg.host_mem, cfg.host_devices.clamp(1, 16));
            Ok(e.devices().iter().map(|d| d.uuid).collect())
        }
    }
}

/// An executor started before the worker's session came (an idle worker
/// of the pool, [`crate::worker_pool`]), with the session made ahead from
/// a skeleton where the worker was prepared for one ([`prepare_skeleton`]).
pub enum Prepared {
    /// The GPU's.
    Cuda(Arc<CudaExecutor>, Option<Premade<CudaExecutor>>),
    /// The host test double's.
    Host(Arc<HostExecutor>, Option<Premade<HostExecutor>>),
}

/// Confines this worker ([`confine`]) unless it was already: a worker
/// prepared for a session is confined before it makes anything from the
/// session's skeleton (its module images are the guest's), and not again
/// when its session comes.
pub fn confine_once(c: &Confinement) -> Result<(), SandboxError> {
    static CONFINED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if CONFINED.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(());
    }
    confine(c)?;
    CONFINED.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// In an idle worker asked to prepare ([`crate::worker_pool::PREPARE`]):
/// makes ahead, with `prepared`'s executor (started here if need be), the
/// session the skeleton on [`crate::worker_pool::SKELETON_FD`] describes.
/// Why not, where it could not.
pub fn prepare_skeleton(prepared: &mut Option<Prepared>, exec: &ExecutorConfig, cfg: &SessionConfig) -> Result<(), String> {
    let file = crate::worker_pool::take_skeleton().map_err(|e| format!("the skeleton could not be taken: {e}"))?;
    let t = std::time::Instant::now();
    *prepared = Some(match (prepared.take(), exec.kind) {
        (Some(Prepared::Cuda(e, _)), _) => Prepared::Cuda(e.clone(), Some(make(e, &file, cfg)?)),
        (Some(Prepared::Host(e, _)), _) => Prepared::Host(e.clone(), Some(make(e, &file, cfg)?)),
        (None, ExecutorKind::Cuda) => {
            let e = prepare_cuda(exec.device_memory).map_err(|e| e.to_string())?;
            Prepared::Cuda(e.clone(), Some(make(e, &file, cfg)?))
        }
        (None, ExecutorKind::Host) => {
            crate::session::reserve_copy_buffer();
            let e = Arc::new(HostExecutor::with_devices(exec.host_mem, exec.host_devices));
            Prepared::Host(e.clone(), Some(make(e, &file, cfg)?))
        }
    });
    tracing::info!(secs = t.elapsed().as_secs_f64(), "worker prepared from a session's skeleton");
    Ok(())
}

/// The session the skeleton in `file` describes, made with `exec`.
fn make<E: crate::exec::Executor>(exec: Arc<E>, file: &std::fs::File, cfg: &SessionConfig) -> Result<Premade<E>, String> {
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    // The supervisor read it through the same open file, to its end.
    std::io::Seek::rewind(&mut &*file).map_err(|e| e.to_string())?;
    let (mut reader, meta) =
        pvgpu_ctl::snapshot::Reader::open(std::io::BufReader::new(file), len).map_err(|e| format!("the skeleton: {e}"))?;
    let made = crate::session::prepare(exec, cfg.limits.clone(), &meta, &mut reader).map_err(|e| e.to_string())?;
    reader.finish().map_err(|e| format!("the skeleton: {e}"))?;
    Ok(made)
}

/// Starts the CUDA executor in a process that serves one session, with
/// what kernels print sent to the program (it reaches this process's
/// standard output, which is captured before the driver starts).
pub fn prepare_cuda(memory: crate::config::DeviceMemory) -> Result<Arc<CudaExecutor>, WorkerError> {
    if let Err(e) = crate::exec::cuda::output::capture() {
        tracing::warn!(error = %pvgpu_ring::report::Chain(&e), "kernel output stays in the backend's log");
    }
    crate::session::reserve_copy_buffer();
    Ok(Arc::new(CudaExecutor::with_memory(memory)?))
}

/// The session a worker serves, as the supervisor names it.
#[derive(Debug, Clone)]
pub struct WorkerSession<'a> {
    /// `local`, `tcp`, `tls`, `rdma` (a connection on fd 3) or `xen`.
    pub conn: &'a str,
    /// Guest domain and vgpu device (`xen`).
    pub xen: Option<(u16, u32)>,
    /// The ring the guest published (`xen`), as the supervisor read it.
    pub xen_ring: Option<&'a str>,
    /// Session number.
    pub id: u64,
    /// The peer of a relayed TLS or RDMA session.
    pub peer: Option<&'a str>,
    /// Where to report how the session ended.
    pub report_fd: Option<i32>,
    /// A local frontend's hello, as the supervisor read it:
    /// `REQ,RSP,DATA,ADDRESS` (its memfd is on [`MEMFD_FD`]).
    pub local_hello: Option<&'a str>,
    /// The session's seat in its peer's memory ledger (on [`LEDGER_FD`]).
    pub ledger_seat: Option<usize>,
    /// The session's meter is on [`METER_FD`].
    pub meter: bool,
    /// Whom the session belongs to when not its connection's peer.
    pub scope: Option<&'a str>,
    /// Whether the supervisor's handle registry is on [`BROKER_FD`].
    pub ipc: bool,
}

/// Parses `--local-hello`.
fn parse_hello(arg: &str, memfd: OwnedFd) -> Option<pvgpu_ring::local::Hello> {
    let mut it = arg.split(',').map(str::parse::<u64>);
    let (req, rsp, data, addr) = (it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?);
    let geometry = pvgpu_ring::layout::Geometry { req_size: req.try_into().ok()?, rsp_size: rsp.try_into().ok()?, data_size: data };
    Some(pvgpu_ring::local::Hello { geometry, region_addr: addr, memfd })
}

/// Serves one session: a connection handed over on fd 3 (`local`, `tcp`,
/// `tls`), or guest `xen`'s vgpu device. The connection is set up before
/// the executor starts, so a peer that cannot open one never costs a GPU
/// context. How the session ended goes to `report_fd`, for the supervisor
/// to log.
pub fn run_worker(
    w: &WorkerSession<'_>,
    exec: &ExecutorConfig,
    cfg: &SessionConfig,
    confinement: &Confinement,
    prepared: Option<Prepared>,
) -> Result<(), WorkerError> {
    let WorkerSession { conn, xen, xen_ring, id: session, peer, report_fd, local_hello, ledger_seat, ipc, meter, scope } = *w;
    crate::worker_pool::name_process(c"pvgpu-worker");
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).map_err(WorkerError::Signals)?;
    }
    // The supervisor's nudge: a checkpoint is ordered for this session.
    let nudge = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, nudge.clone()).map_err(WorkerError::Signals)?;
    // The supervisor started this process with it blocked (a nudge before
    // the handler would have ended it); one that came meanwhile arrives now.
    let usr1 = nix::sys::signal::SigSet::from(nix::sys::signal::Signal::SIGUSR1);
    usr1.thread_unblock().map_err(|e| WorkerError::Signals(e.into()))?;
    // The supervisor placed the write end of this session's report pipe on
    // `report_fd` before exec (spawn::ProcessSpawner).
    // SAFETY: that descriptor is open, and nothing else in this process owns it.
    let mut report = report_fd.map(|fd| std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }));
    let handover = handover(conn, xen, xen_ring, peer, local_hello)?;
    let mut cfg = cfg.clone();
    if let Some(seat) = ledger_seat {
        // SAFETY: the supervisor placed its ledger's memfd on LEDGER_FD
        // before exec, and nothing else in this process owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(LEDGER_FD) };
        cfg.limits.peer_ledger = Some(crate::ledger::LedgerView::map(fd, seat).map_err(WorkerError::Ledger)?);
    }
    if meter {
        // SAFETY: the supervisor placed the session's meter memfd on
        // METER_FD before exec, and nothing else in this process owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(METER_FD) };
        cfg.limits.meter = Some(crate::meter::MeterView::map(fd).map_err(WorkerError::Meter)?);
    }
    if ipc {
        // SAFETY: the supervisor placed this worker's end of the handle
        // registry's socket pair on BROKER_FD before exec, and nothing else
        // in this process owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(BROKER_FD) };
        cfg.limits.ipc = Some(Arc::new(crate::ipc::Broker::Remote(std::sync::Mutex::new(fd))));
    }
    cfg.limits.checkpoint = Some(nudge);
    // This process serves one session: its frontend may know where its
    // shared memory lies here.
    cfg.same_address = true;
    // Everything this process holds on the device is the session's.
    cfg.limits.footprint = true;
    let cfg = &cfg;
    let opened = open_connection(handover, cfg, session).map(|o| match scope {
        Some(s) => o.owned_by(crate::image_cache::Owner(s.to_string())),
        None => o,
    });
    let ended = match opened {
        Err(ended) => ended,
        Ok(opened) => {
            // The supervisor marks a Xen device `Connected` on this.
            if let Some(f) = &mut report {
                let _ = writeln!(f, "{}", crate::spawn::REPORT_READY);
            }
            // Confined once the GPU is open and the connection mapped (Xen:
            // the grants and the event channel), before the first request.
            match (exec.kind, prepared) {
                (_, Some(Prepared::Cuda(e, made))) => {
                    confine_once(confinement).map_err(WorkerError::Sandbox)?;
                    serve_opened(e, opened, cfg, session, &stop, made)
                }
                (_, Some(Prepared::Host(e, made))) => {
                    confine_once(confinement).map_err(WorkerError::Sandbox)?;
                    serve_opened(e, opened, cfg, session, &stop, made)
                }
                (ExecutorKind::Cuda, None) => {
                    let e = prepare_cuda(exec.device_memory)?;
                    confine_once(confinement).map_err(WorkerError::Sandbox)?;
                    serve_opened(e, opened, cfg, session, &stop, None)
                }
                (ExecutorKind::Host, None) => {
                    crate::session::reserve_copy_buffer();
                    let e = Arc::new(HostExecutor::with_devices(exec.host_mem, exec.host_devices));
                    confine_once(confinement).map_err(WorkerError::Sandbox)?;
                    serve_opened(e, opened, cfg, session, &stop, None)
                }
            }
        }
    };
    report_end(report, &ended);
    Ok(())
}

/// The connection the supervisor handed over: on fd 3 (`local`, with its
/// hello and memfd; `tcp`; `tls` and `rdma`, relayed), or guest `xen`'s
/// device.
fn handover(
    conn: &str,
    xen: Option<(u16, u32)>,
    xen_ring: Option<&str>,
    peer: Option<&str>,
    local_hello: Option<&str>,
) -> Result<Handover, WorkerError> {
    let bad = || WorkerError::Conn(conn.to_string());
    match (conn, xen) {
        ("xen", Some((domid, devid))) => {
            let ring = xen_ring.and_then(crate::xen::XenRing::from_arg).ok_or_else(bad)?;
            Ok(Handover::Xen { domid, devid, ring })
        }
        ("local" | "tcp" | "tls" | "rdma", None) => {
            // SAFETY: the backend placed this session's socket on WORKER_FD
            // before exec (spawn::ProcessSpawner) and nothing else in this
            // process owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(WORKER_FD) };
            Ok(match conn {
                "local" => {
                    // SAFETY: as above, the frontend's memfd on MEMFD_FD.
                    let memfd = unsafe { OwnedFd::from_raw_fd(MEMFD_FD) };
                    let hello = local_hello.and_then(|h| parse_hello(h, memfd)).ok_or_else(bad)?;
                    let sock = std::os::unix::net::UnixStream::from(fd);
                    let uid = nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::PeerCredentials).map_or(u32::MAX, |c| c.uid());
                    Handover::Local { sock, hello, uid }
                }
                "tcp" => Handover::Tcp(fd.into()),
                relayed => {
                    let transport = if relayed == "rdma" { Transport::Rdma } else { Transport::Tls };
                    Handover::Relayed { sock: fd.into(), peer: peer.unwrap_or("tcp").to_string(), transport }
                }
            })
        }
        _ => Err(bad()),
    }
}

fn report_end(report: Option<std::fs::File>, ended: &Ended) {
    match report {
        Some(mut f) => {
            let _ = write!(f, "{}", ended.report().replace('\n', " "));
        }
        None => ended.log(0, 0.0),
    }
}
