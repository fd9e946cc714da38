//! Checkpoints and resumes as the serving loop sees them: a session
//! checkpointed at a call that waits (the reply then says the session
//! left, unless it stays), and a connection that opens by taking back a
//! parked snapshot ([`crate::checkpoints`]).

use super::{Broken, Ended};
use crate::config::SessionLimits;
use crate::conn::Conn;
use crate::exec::Executor;
use crate::session::Session;
use pvgpu_ctl::snapshot::{self, Reader};
use pvgpu_ring::proto::{Body, Header, Opcode, Resume};
use pvgpu_ring::{CuError, CuResult};
use std::io::{Seek, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Takes the checkpoint ordered for the session, if the supervisor nudged
/// it and an order is there. `Some` when the session leaves this backend:
/// whether its device memory was handed over in place.
pub(super) fn checkpoint_if_ordered<E: Executor>(session: &mut Session<E>, limits: &SessionLimits, peer: &str) -> Option<bool> {
    let nudge = limits.checkpoint.as_ref()?;
    // A plain load on every waited call; the swap only once nudged.
    if !nudge.load(Ordering::Relaxed) || !nudge.swap(false, Ordering::SeqCst) {
        return None;
    }
    let broker = limits.ipc.as_ref()?;
    let (file, kind) = broker.checkpoint_order()?;
    let stay = kind.stay;
    let t = Instant::now();
    let taken = if kind.skeleton { session.skeleton(&file, peer) } else { session.checkpoint(&file, peer, !stay, kind.hand_over) };
    let written = taken.and_then(|n| {
        let written = t.elapsed().as_secs_f64();
        file.sync_all().map_err(|e| crate::session::CheckpointError::File(e.into()))?;
        Ok((n, written))
    });
    // The reason a checkpoint failed travels in the file the supervisor
    // handed over; the session goes on.
    let fail = |mut file: std::fs::File, why: String| {
        tracing::warn!(session = session.id(), why, "checkpoint failed; the session goes on");
        let _ = file.set_len(0).and_then(|()| file.rewind()).and_then(|()| file.write_all(why.as_bytes()));
        broker.checkpoint_report(None);
        None
    };
    match written {
        Ok((taken, written)) => {
            let (handed_bytes, handed_pieces) = (taken.handed_bytes, taken.handed.len());
            if let Err(e) = broker.hand_over(taken.handed) {
                // The supervisor did not take the memory the snapshot leaves
                // on the GPU (the order withdrawn, the supervisor gone): the
                // session keeps it.
                return fail(
                    file,
                    format!("the device memory it leaves on the GPU could not be handed to the backend ({e}); it goes on running"),
                );
            }
            // Closed before the report: a restore that follows at once can
            // hold the file under a read lease (crate::file_guard).
            drop(file);
            let bytes = taken.bytes;
            tracing::info!(
                session = session.id(),
                bytes,
                device_secs = taken.device_secs,
                written_secs = written,
                synced_secs = t.elapsed().as_secs_f64(),
                handed_bytes,
                handed_pieces,
                stay,
                "session checkpointed"
            );
            broker.checkpoint_report(Some(crate::checkpoints::Wrote { bytes, token: session.token(), held: t.elapsed() }));
            (!stay).then_some(handed_pieces > 0)
        }
        Err(e) => fail(file, e.to_string()),
    }
}

/// How long a `Resume` for a session that is not here waits for it to be
/// parked here or its move recorded, before it is answered
/// `CUDA_ERROR_NOT_FOUND` (the guest then tries again): a guest whose
/// session is on its way is answered as soon as it can be, and a pause
/// costs a few connections, not one each 100 ms.
const RESUME_WAIT: std::time::Duration = std::time::Duration::from_millis(500);
/// How often it looks meanwhile.
const RESUME_LOOK: std::time::Duration = std::time::Duration::from_millis(2);

/// Serves a connection's opening `Resume` (header `h`, `payload`): the
/// session parked under its token, rebuilt in `session`, answered as a
/// hello is. A token no parked session of this peer holds, within
/// [`RESUME_WAIT`], is answered `CUDA_ERROR_NOT_FOUND` (the frontend
/// retries while its session is on its way back), or with the other
/// backend's address where the session moved
/// ([`pvgpu_ring::proto::STATUS_MOVED`]); either ends the connection.
pub(super) fn resume<E: Executor>(
    session: &mut Session<E>,
    conn: &mut dyn Conn,
    limits: &SessionLimits,
    h: &Header,
    payload: &[u8],
    stop: &AtomicBool,
) -> Result<(), Ended> {
    let r = Resume::decode(Opcode::Resume, payload).map_err(|e| Broken::Session(e.into()))?;
    let proto = pvgpu_ring::proto::PROTOCOL_VERSION;
    let t = Instant::now();
    let moved_to = || limits.ipc.as_ref().and_then(|b| b.moved_to(&r.token));
    let mut outcome = if r.min_version.get() > proto || r.max_version.get() < proto {
        Err(CuError::NOT_SUPPORTED)
    } else {
        take_back(session, conn, limits, &r.token)
    };
    // A session on its way (its checkpoint being written, handed to the
    // other backend, restored here): the guest is answered once it is
    // parked here or its move is recorded, not at its next try.
    let until = t + RESUME_WAIT;
    let mut moved = None;
    while outcome == Err(CuError::NOT_FOUND) && Instant::now() < until && !stop.load(Ordering::Relaxed) {
        moved = moved_to();
        if moved.is_some() {
            break;
        }
        std::thread::sleep(RESUME_LOOK);
        outcome = take_back(session, conn, limits, &r.token);
    }
    // A session that moved to another backend: the guest is told where.
    if outcome == Err(CuError::NOT_FOUND)
        && let Some(to) = moved.or_else(moved_to)
    {
        let status = CuResult(pvgpu_ring::proto::STATUS_MOVED);
        conn.send(&h.reply(status, to.len()), to.as_bytes(), stop)?;
        tracing::info!(to = %to, "a guest asked for its session, which moved to another backend; sent there");
        return Err(Ended::NotResumed(CuError::NOT_FOUND));
    }
    match outcome {
        Ok(()) => {
            use zerocopy::IntoBytes;
            if r.features.get() & pvgpu_ring::proto::FEATURE_LEAVE_FRAMES != 0 {
                conn.leave_frames_understood();
            }
            let rep = session.hello_rep();
            conn.send(&h.reply(CuResult::SUCCESS, rep.as_bytes().len()), rep.as_bytes(), stop)?;
            tracing::info!(session = session.id(), secs = t.elapsed().as_secs_f64(), "session resumed from its checkpoint");
            Ok(())
        }
        Err(e) => {
            conn.send(&h.reply(e.into(), 0), &[], stop)?;
            Err(Ended::NotResumed(e))
        }
    }
}

fn take_back<E: Executor>(session: &mut Session<E>, conn: &dyn Conn, limits: &SessionLimits, token: &[u8; 16]) -> Result<(), CuError> {
    let broker = limits.ipc.as_ref().ok_or(CuError::NOT_FOUND)?;
    let (mut file, handed) = broker.claim(token).map_err(|_| CuError::NOT_FOUND)?;
    let t = Instant::now();
    let restored = restore_from(session, conn, &mut file, handed);
    // Closed here, then released: the supervisor drops the snapshot last,
    // off this session's way.
    drop(file);
    broker.release_snapshot(token);
    let (from, parts) = restored.map_err(|e| {
        tracing::error!(session = session.id(), error = %e, "restoring a checkpointed session failed; its snapshot file is kept");
        CuError::DEVICE_UNAVAILABLE
    })?;
    // For the operator (`pvgpu-ctl sessions`, `migrate --wait`).
    if let Some(m) = &limits.meter {
        m.restored(from, t.elapsed(), [parts.contexts, parts.memory, parts.modules, parts.graphs], parts.prepared);
    }
    Ok(())
}

/// Rebuilds the session from the snapshot in `file`: the session's number
/// where it was checkpointed, and what the rebuild's parts took.
fn restore_from<E: Executor>(
    session: &mut Session<E>,
    conn: &dyn Conn,
    file: &mut std::fs::File,
    handed: Vec<std::os::fd::OwnedFd>,
) -> Result<(u64, crate::session::Rebuilt), RestoreFailure> {
    let len = file.metadata()?.len();
    file.rewind()?;
    // The supervisor checked the digest when the snapshot was parked. A
    // file kept unchanged since (sealed, or under a lease no writer broke
    // before the end of the read) is read without hashing; another is
    // hashed as it is read, the session rebuilt as the blobs come and
    // handed to the guest only if the digest at the end agrees. A failure
    // drops the half-built session.
    let checked = crate::file_guard::unchanged(file);
    let input = std::io::BufReader::with_capacity(8 << 20, &*file);
    let (mut reader, meta) = if checked { Reader::open_checked(input, len)? } else { Reader::open(input, len)? };
    let parts = session.restore(&meta, &mut reader, conn.area(), Some(&*file), handed)?;
    reader.finish()?;
    if checked && !crate::file_guard::unchanged(file) {
        return Err(RestoreFailure::Changed);
    }
    tracing::info!(session = session.id(), hashed = !checked, "snapshot read");
    Ok((meta.session, parts))
}

/// Why a claimed snapshot could not be restored.
#[derive(Debug, thiserror::Error)]
enum RestoreFailure {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Snapshot(#[from] snapshot::SnapshotError),
    #[error(transparent)]
    Restore(#[from] crate::session::RestoreError),
    #[error("the snapshot file was opened for writing while it was restored; restore it again")]
    Changed,
}
