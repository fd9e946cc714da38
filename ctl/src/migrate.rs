//! `pvgpu-ctl migrate`: a live session moved from one backend to another,
//! on this host or another, its program never told. It runs on the
//! source's host (the source writes the snapshot where it names).
//!
//! 0. Where the target's control socket is on this host, the source first
//!    writes the session's skeleton while it runs (its contexts, module
//!    images, streams and events in their order: no device bytes, no
//!    drain), and the target prepares a worker from it: contexts made,
//!    modules loaded (`POST /v1/prepare`). The program runs on meanwhile;
//!    the snapshot of step 1 is then rebuilt in that worker, which has
//!    only the rest to do ([`How::cold`] leaves this out).
//! 1. The source checkpoints the session at its next call that waits and
//!    detaches it (the program's next call waits for its session). Where
//!    the target is on this host with the session's very GPUs (their
//!    UUIDs), the session's device memory stays on the GPU: the source
//!    hands it over in place as the driver's descriptors, which the target
//!    fetches beside the snapshot, and only the rest is written
//!    ([`How::copy`] copies it all).
//! 2. The target takes the snapshot: by its path when the target's
//!    control socket is on this host (`POST /v1/restore`), else uploaded
//!    as a request's body over its HTTPS control API (`POST
//!    /v1/restore/upload`, into the target's memory). The file is removed
//!    once the target holds it, so a migration through `/dev/shm` leaves
//!    no copy behind.
//! 3. The source records where the session went (`POST /v1/moves`): the
//!    program's next `Resume` there is answered with the target's address,
//!    and it presents its token to the target, which rebuilds the session
//!    and answers as a hello.
//!
//! The pause the program sees is the sum of the three (less the room the
//! source makes for the snapshot before it asks the session, which runs on
//! meanwhile), plus the rebuild in
//! the target's worker and the program's way to it (a try waits at the
//! backend up to 500 ms for the move to be recorded, and is sent on at
//! once). [`wait_back`] waits for the session to serve its
//! program at the target, and reports the whole pause with the rebuild's
//! parts, as the target's worker measured them.

use crate::api::{CheckpointReport, CheckpointRequest, Gpu, MoveRecord, PrepareRequest, RestoreRequest};
use crate::client::{Control, CtlError};
use crate::snapshot;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a migration stopped; the backend's answer it stopped at is its
/// source ([`MigrateError::report`] says both on one line).
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The target answered the session's skeleton that the session cannot
    /// run there (HTTP 422: its GPUs, their models, its executor, its
    /// quotas), or could not be reached: the migration stopped before the
    /// session was paused.
    #[error("the target backend cannot take the session (it was not paused and goes on running at the source)")]
    Refused(#[source] CtlError),
    /// The source did not checkpoint the session (it goes on there).
    #[error("the source backend did not checkpoint the session (it goes on running there)")]
    Checkpoint(#[source] CtlError),
    /// The snapshot the source wrote cannot be read back.
    #[error("the snapshot {file} cannot be read: {reason}; the session waits for it to be restored")]
    Snapshot {
        /// Where it is.
        file: PathBuf,
        /// Why.
        reason: String,
    },
    /// The target refused the snapshot (or could not be reached), and the
    /// source took the session back from it: its program goes on there.
    #[error("the target backend did not take the session, which went back to the source backend, where its program goes on")]
    Back(#[source] CtlError),
    /// The target did not take the snapshot, and the session is not back
    /// at the source either: it waits, detached, and the file is kept for
    /// `pvgpu-ctl restore`.
    #[error(
        "the target backend did not take the snapshot; {back}; it is kept at {file}: `pvgpu-ctl restore {file}` at {where_} lets the program go on"
    )]
    Restore {
        /// Where it is kept.
        file: PathBuf,
        /// Which backends can restore it.
        where_: &'static str,
        /// Why the source did not take the session back.
        back: String,
        /// The target's answer.
        #[source]
        answer: CtlError,
    },
    /// The source could not record the move: the target holds the session,
    /// but the program still asks the source for it.
    #[error(
        "the target holds the session but the source could not record the move; point the program at the target's address (PVGPU_BACKEND) or restore the snapshot at the source"
    )]
    Record(#[source] CtlError),
}

impl MigrateError {
    /// The error and the answer it stopped at, on one line (as `pvgpu-ctl`
    /// prints it, and the control API answers it).
    pub fn report(&self) -> String {
        let mut line = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            line.push_str(": ");
            line.push_str(&c.to_string());
            cause = c.source();
        }
        line
    }
}

/// The backend a session leaves: its control API as `pvgpu-ctl` reaches
/// it ([`Control`]), or the backend itself when it moves a session on its
/// operator's request (`POST /v1/sessions/{id}/migrate`).
pub trait Source {
    /// Checkpoints `session` as `req` says and waits for it.
    fn checkpoint(&self, session: u64, req: &CheckpointRequest) -> Result<CheckpointReport, CtlError>;
    /// Records where a session this backend checkpointed lives now.
    fn record_move(&self, req: &MoveRecord) -> Result<(), CtlError>;
    /// The backend's GPUs.
    fn gpus(&self) -> Result<Vec<Gpu>, CtlError>;
    /// A live session.
    fn session(&self, id: u64) -> Result<crate::api::Session, CtlError>;
    /// Takes back a session this backend checkpointed, from its snapshot
    /// (a migration the target refused).
    fn restore(&self, req: &RestoreRequest) -> Result<crate::api::RestoreReport, CtlError>;
}

impl Source for Control {
    fn gpus(&self) -> Result<Vec<Gpu>, CtlError> {
        self.call("GET", "/v1/devices")
    }

    fn session(&self, id: u64) -> Result<crate::api::Session, CtlError> {
        Control::session(self, id)
    }

    fn checkpoint(&self, session: u64, req: &CheckpointRequest) -> Result<CheckpointReport, CtlError> {
        Control::checkpoint(self, session, req)
    }

    fn record_move(&self, req: &MoveRecord) -> Result<(), CtlError> {
        Control::record_move(self, req).map(drop)
    }

    fn restore(&self, req: &RestoreRequest) -> Result<crate::api::RestoreReport, CtlError> {
        Control::restore(self, req)
    }
}

/// What a migration did and how long each part took.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MigrateReport {
    /// The session's number at the source.
    pub session: u64,
    /// Where its program finds it now.
    pub to: String,
    /// Bytes of device state moved.
    pub state_bytes: u64,
    /// Bytes of the snapshot.
    pub file_bytes: u64,
    /// Bytes of device memory handed over in place (it stayed on the GPU),
    /// besides those moved.
    #[serde(default)]
    pub handed_bytes: u64,
    /// Seconds spent, before the pause, on the skeleton, the target's
    /// check of it and its worker prepared from it (0 where none of it
    /// was done).
    #[serde(default)]
    pub prepare_seconds: f64,
    /// Whether the target prepared a worker before the pause.
    #[serde(default)]
    pub prepared: bool,
    /// Why no worker was prepared, where one was tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_prepared: Option<String>,
    /// Seconds from the request to the session detached and written.
    pub checkpoint_seconds: f64,
    /// Of those, seconds the source spent making room for the snapshot
    /// before it asked the session (which ran on meanwhile).
    #[serde(default)]
    pub room_seconds: f64,
    /// Of those, seconds the session was held for the checkpoint, from
    /// the call it was taken at (0 from a source that does not say): the
    /// rest it ran on, up to that call.
    #[serde(default)]
    pub held_seconds: f64,
    /// Seconds for the target to check and take the snapshot.
    pub restore_seconds: f64,
    /// Whether it went to the target as an upload (another host), not by
    /// its path.
    pub uploaded: bool,
    /// Seconds for the source to record the move.
    pub record_seconds: f64,
    /// The snapshot, where its file could not be removed (and why).
    pub left_file: Option<String>,
    /// The session serving its program at the target again, where the
    /// migration waited for it ([`wait_back`]).
    #[serde(default)]
    pub back: Option<Back>,
}

/// A moved session back at work at the target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Back {
    /// Seconds from the call the session was taken at (where the source
    /// does not say: from the checkpoint's order, less the room made for
    /// the snapshot while the session ran) to the target listing the
    /// session rebuilt, as this side's clock sees them (to within its
    /// 10 ms looks): the session's pause. The program's own is at most
    /// this, and less where it works between the call it was taken at
    /// and its next call, which the target serves; plus the first
    /// launches of its kernels in the new process.
    pub pause_seconds: f64,
    /// Of those, seconds after the move was recorded: the program's next
    /// try finding the target, and the rebuild.
    pub after_move_seconds: f64,
    /// The rebuild, as the target's worker measured it.
    pub rebuild: crate::api::Restored,
}

/// How a migration moves the session's state.
#[derive(Debug, Clone, Copy, Default)]
pub struct How {
    /// Upload the snapshot to the target even where its control socket is
    /// on this host (always so over HTTPS).
    pub upload: bool,
    /// Copy the device memory into the snapshot even where the target has
    /// the session's GPUs.
    pub copy: bool,
    /// Rebuild the session in a fresh worker at the target, not in one
    /// prepared from its skeleton before the pause.
    pub cold: bool,
    /// Where no worker is prepared, take the session without the target
    /// checking its skeleton first: a refusal then comes after the pause,
    /// and the source takes the session back.
    pub unchecked: bool,
}

/// Moves session `session` of `source` to `target`, whose guests reach it
/// at `to`; the snapshot passes through `dir` (memory under `/dev/shm`),
/// and is uploaded to the target where `how` says so or the target is
/// not on this host.
pub fn migrate(
    source: &dyn Source,
    target: &Control,
    session: u64,
    to: &str,
    dir: &Path,
    timeout: u64,
    how: How,
) -> Result<MigrateReport, MigrateError> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let file = dir.join(format!("pvgpu-migrate-{session}-{}-{nanos}.pvgpu", std::process::id()));
    let uploaded = how.upload || !matches!(target.endpoint(), crate::client::Endpoint::Unix(_));
    let hand_over = !uploaded && !how.copy && same_gpus(source, target, session);
    let t = Instant::now();
    let prepare = !uploaded && !how.cold;
    let prepared = if prepare { Some(prepare_ahead(source, target, session, &file, timeout)) } else { None };
    if !prepare && !how.unchecked {
        if let Err(Unprepared::Refused(e)) = check_ahead(source, target, session, &file, timeout) {
            return Err(MigrateError::Refused(e));
        }
    }
    let prepare_seconds = if prepare || !how.unchecked { t.elapsed().as_secs_f64() } else { 0.0 };
    let prepared = match prepared {
        Some(Err(Unprepared::Refused(e))) => return Err(MigrateError::Refused(e)),
        Some(Err(Unprepared::Why(why))) => Some(Err(why)),
        Some(Ok(())) => Some(Ok(())),
        None => None,
    };
    let t0 = Instant::now();
    let req = CheckpointRequest {
        file: file.display().to_string(),
        leave_running: false,
        timeout_seconds: Some(timeout),
        hand_over,
        skeleton: false,
    };
    let written = source.checkpoint(session, &req).map_err(MigrateError::Checkpoint)?;
    let t1 = Instant::now();
    let meta = read_meta(&file).map_err(|reason| MigrateError::Snapshot { file: file.clone(), reason })?;
    let restored = if uploaded {
        target.restore_upload(&file)
    } else {
        target.restore(&RestoreRequest { file: file.display().to_string(), handed_from: written.handed_from.clone() })
    };
    if let Err(refused) = restored {
        return Err(take_back(source, &file, &written, refused));
    }
    // The target holds the file open, or a copy, and any memory handed
    // over: their names can go.
    let left_file = std::fs::remove_file(&file).err().map(|e| format!("{} ({e})", file.display()));
    if let Some(at) = &written.handed_from {
        let _ = std::fs::remove_file(at);
    }
    let t2 = Instant::now();
    source.record_move(&MoveRecord { token: meta.token, peer: meta.peer, to: to.to_string() }).map_err(MigrateError::Record)?;
    let t3 = Instant::now();
    Ok(MigrateReport {
        session,
        to: to.to_string(),
        state_bytes: written.state_bytes,
        file_bytes: written.file_bytes,
        handed_bytes: written.handed_bytes,
        prepare_seconds,
        prepared: matches!(prepared, Some(Ok(()))),
        not_prepared: prepared.and_then(Result::err),
        checkpoint_seconds: (t1 - t0).as_secs_f64(),
        room_seconds: written.room_seconds,
        held_seconds: written.held_seconds,
        restore_seconds: (t2 - t1).as_secs_f64(),
        uploaded,
        record_seconds: (t3 - t2).as_secs_f64(),
        left_file,
        back: None,
    })
}

/// The session back at `source` from its snapshot `file`, where the target
/// did not take it (`refused`): the target answered with a refusal, or
/// could not be reached, so it holds nothing of the session. Where the
/// target's answer was lost on the way, it may hold the session: the
/// snapshot is then kept for the operator. Either way the migration failed.
fn take_back(source: &dyn Source, file: &Path, written: &CheckpointReport, refused: CtlError) -> MigrateError {
    let where_ = if written.handed_bytes > 0 {
        "the source backend (the session's device memory stayed on the GPU, held there)"
    } else {
        "either backend"
    };
    let back = if matches!(refused, CtlError::Refused { .. } | CtlError::Connect { .. }) {
        let req = RestoreRequest { file: file.display().to_string(), handed_from: None };
        match source.restore(&req) {
            Ok(_) => {
                // The source holds the file open: its name can go, and the
                // socket that served the memory handed over, if it was.
                let _ = std::fs::remove_file(file);
                if let Some(at) = &written.handed_from {
                    let _ = std::fs::remove_file(at);
                }
                return MigrateError::Back(refused);
            }
            Err(e) => format!("the source backend did not take it back either ({e})"),
        }
    } else {
        "the target's answer was lost on the way, so it may hold the session: it was not taken back at the source".to_string()
    };
    MigrateError::Restore { file: file.to_path_buf(), where_, back, answer: refused }
}

/// Why no worker was prepared for a migration.
enum Unprepared {
    /// The migration goes on without: a fresh worker rebuilds the session.
    Why(String),
    /// The target refused the skeleton as a session that cannot run there
    /// (HTTP 422): the migration stops before the pause.
    Refused(CtlError),
}

/// The session's skeleton, written by `source` beside `file` while the
/// session runs, handed to `then` by its path, and removed after.
fn with_skeleton(
    source: &dyn Source,
    session: u64,
    file: &Path,
    timeout: u64,
    then: impl FnOnce(&Path) -> Result<(), Unprepared>,
) -> Result<(), Unprepared> {
    let skeleton = file.with_extension("skeleton");
    let req = CheckpointRequest {
        file: skeleton.display().to_string(),
        leave_running: true,
        timeout_seconds: Some(timeout),
        hand_over: false,
        skeleton: true,
    };
    let done = match source.checkpoint(session, &req) {
        Ok(_) => then(&skeleton),
        Err(e) => Err(Unprepared::Why(format!("the source wrote no skeleton: {e}"))),
    };
    let _ = std::fs::remove_file(&skeleton);
    done
}

/// The target's answer `e` before the pause: a refusal (HTTP 422), or a
/// target that cannot be reached now (it would not take the snapshot
/// after the pause either), stops the migration; anything else is `why`
/// it goes on without.
fn refused(e: CtlError, why: &str) -> Unprepared {
    match e {
        CtlError::Refused { status: 422, .. } | CtlError::Connect { .. } => Unprepared::Refused(e),
        e => Unprepared::Why(format!("{why}: {e}")),
    }
}

/// The target checks the skeleton at `skeleton` by its head alone (`POST
/// /v1/check`: a backend on another host gets no file).
fn check(target: &Control, skeleton: &Path) -> Result<(), Unprepared> {
    let mut meta = read_meta(skeleton).map_err(|e| Unprepared::Why(format!("its skeleton cannot be read: {e}")))?;
    // What the target checks is the description; the objects stay here.
    meta.state = snapshot::State::default();
    target.check(&meta).map(drop).map_err(|e| refused(e, "the target did not check the skeleton"))
}

/// Before the pause, where no worker is to be prepared: the target checks
/// the session's skeleton.
fn check_ahead(source: &dyn Source, target: &Control, session: u64, file: &Path, timeout: u64) -> Result<(), Unprepared> {
    with_skeleton(source, session, file, timeout, |skeleton| check(target, skeleton))
}

/// Before the pause: a worker of `target` prepared from the session's
/// skeleton, which the target checks first. A session over a stream
/// (TCP, TLS, RDMA) is only checked: the driver placed its modules after
/// the connection's page-locked copy staging, which a worker made ahead
/// cannot follow. Why no worker was prepared, where none was.
fn prepare_ahead(source: &dyn Source, target: &Control, session: u64, file: &Path, timeout: u64) -> Result<(), Unprepared> {
    let transport = source.session(session).map(|s| s.transport).unwrap_or_default();
    with_skeleton(source, session, file, timeout, |skeleton| {
        if transport != "local" {
            check(target, skeleton)?;
            return Err(Unprepared::Why(format!(
                "a session over {transport} is rebuilt by a fresh worker (its modules lie after its connection's copy staging)"
            )));
        }
        let req = PrepareRequest { file: skeleton.display().to_string(), timeout_seconds: Some(timeout) };
        target.prepare(&req).map(drop).map_err(|e| refused(e, "the target prepared no worker"))
    })
}

/// Waits up to `wait` for the session `report` moved to serve its program
/// at `target` (its program's next call takes it back there), and fills
/// `report.back`; leaves it `None` when the program made no call within
/// `wait` (an idle program comes back at its next call). Call it right
/// after [`migrate`]: the pause counts from the call the session was taken
/// at ([`pause_before_the_move`]).
pub fn wait_back(target: &Control, report: &mut MigrateReport, wait: Duration) {
    let t0 = Instant::now();
    let before = pause_before_the_move(report);
    let deadline = t0 + wait;
    loop {
        // The target's session restored from this one's snapshot, admitted
        // since the migration began (by the target's own clock).
        let since = before + t0.elapsed().as_secs_f64() + 1.0;
        let found = target.sessions().ok().and_then(|live| {
            live.into_iter().filter(|s| s.age_seconds <= since).filter_map(|s| s.restored).find(|r| r.from_session == report.session)
        });
        if let Some(rebuild) = found {
            let after = t0.elapsed().as_secs_f64();
            report.back = Some(Back { pause_seconds: before + after, after_move_seconds: after, rebuild });
            return;
        }
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The part of `report`'s pause before the move was recorded: the session
/// held for its checkpoint, the target's check, the move recorded. From a
/// source that does not say how long it held the session, the whole
/// checkpoint less the room made before the session was asked.
pub fn pause_before_the_move(report: &MigrateReport) -> f64 {
    let held = if report.held_seconds > 0.0 { report.held_seconds } else { report.checkpoint_seconds - report.room_seconds };
    held + report.restore_seconds + report.record_seconds
}

/// Whether the target has each GPU session `session` uses at `source` as
/// the same GPU at the same index (the UUID each backend's executor gives
/// it, whatever `CUDA_VISIBLE_DEVICES` each runs with), so that its device
/// memory can stay where it is. A backend that does not say copies. The
/// target's worker checks the GPU again before it maps any of it.
fn same_gpus(source: &dyn Source, target: &Control, session: u64) -> bool {
    let (Ok(s), Ok(here), Ok(there)) = (source.session(session), source.gpus(), target.call::<Vec<Gpu>>("GET", "/v1/devices")) else {
        return false;
    };
    same_at(&s.devices, &here, &there)
}

/// Whether each of `devices` is the same GPU in `here` and `there`, by the
/// UUID each backend's executor gives it.
fn same_at(devices: &[usize], here: &[Gpu], there: &[Gpu]) -> bool {
    devices.iter().all(|&d| match (here.get(d), there.get(d)) {
        (Some(a), Some(b)) => !a.executor_uuid.is_empty() && a.executor_uuid == b.executor_uuid,
        _ => false,
    })
}

/// The snapshot's description (its token and peer), without reading the
/// blobs (the target checks the whole file).
fn read_meta(file: &Path) -> Result<snapshot::Meta, String> {
    let f = std::fs::File::open(file).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    snapshot::Reader::open(std::io::BufReader::new(f), len).map(|(_, meta)| meta).map_err(|e| e.to_string())
}

/// Where a migration's snapshot passes by default: memory (`/dev/shm`)
/// where there is, else the temporary directory.
pub fn default_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(uuids: &[&str]) -> Vec<Gpu> {
        uuids.iter().map(|u| Gpu { executor_uuid: u.to_string(), uuid: "GPU-nvml-0".into(), ..Gpu::default() }).collect()
    }

    #[test]
    fn a_failed_migration_says_the_answer_it_stopped_at_once() {
        let e = MigrateError::Back(CtlError::Refused { status: 422, message: "its GPU 0 is drained here".into() });
        let line = e.report();
        assert!(line.starts_with("the target backend did not take the session"), "{line}");
        assert_eq!(line.matches("its GPU 0 is drained here").count(), 1, "{line}");
        assert!(!e.to_string().contains("drained"), "the answer is the error's source, not its message");
    }

    #[test]
    fn memory_stays_on_the_gpu_only_where_the_target_has_the_same_gpus() {
        let (a, b) = (gpus(&["aa", "bb"]), gpus(&["aa", "bb"]));
        assert!(same_at(&[0, 1], &a, &b));
        assert!(same_at(&[], &a, &b), "a session with no context has nothing on a GPU");
        // Backends with CUDA_VISIBLE_DEVICES=0 and =1: NVML lists the same
        // first GPU to both, their executors do not.
        assert!(!same_at(&[0], &gpus(&["aa"]), &gpus(&["bb"])));
        assert!(!same_at(&[1], &a, &gpus(&["aa"])), "a GPU the target lacks");
        assert!(!same_at(&[0], &gpus(&[""]), &gpus(&[""])), "a backend that does not say copies");
    }
}
