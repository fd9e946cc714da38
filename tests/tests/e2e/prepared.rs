//! Workers prepared before a migration's pause: the target makes the
//! session's contexts and modules from its skeleton while the program
//! runs, and rebuilds only the rest at the pause. Where the session changed
//! since its skeleton, or another program of its peer comes first, the
//! session is rebuilt from nothing, as without one.

use super::migrate::MatSumState;
use super::*;
use pvgpu_ctl::api::{CheckpointRequest, PrepareRequest};

/// Two backends and a program on the first with MatSum's state; the
/// session's number there.
struct Setup {
    a: Harness,
    b: Harness,
    c: Client,
    id: u64,
    dir: TempDir,
}

fn setup(t: Transport) -> Option<(Setup, MatSumState, pvgpu_frontend::Context)> {
    let a = Harness::start();
    if a.exec == ExecKind::Cuda {
        return None; // tests/migrate/run.sh prepares GPU workers on the H200.
    }
    let b = Harness::with(HarnessOptions { tcp_key_from: Some(a.tcp_key.clone()), ..HarnessOptions::default() });
    let c = a.client(t);
    let g = Gpu::new(&c).unwrap();
    let state = MatSumState::launch(&c, &g, 4000);
    let ctx = g.ctx;
    let id = a.control().unwrap().sessions().unwrap()[0].id;
    Some((Setup { a, b, c, id, dir: TempDir::new("prepared") }, state, ctx))
}

/// Writes the session's skeleton and prepares a worker of `b` from it.
fn prepare_by_hand(s: &Setup) -> Result<(), pvgpu_ctl::client::CtlError> {
    let file = s.dir.0.join("session.skeleton");
    let req = CheckpointRequest { file: file.display().to_string(), leave_running: true, skeleton: true, ..Default::default() };
    let written = s.a.control().unwrap().checkpoint(s.id, &req).expect("the skeleton");
    assert_eq!(written.state_bytes, 0, "a skeleton holds no device bytes");
    assert!(written.left_running);
    // No backend restores a skeleton as a session.
    match s.b.control().unwrap().restore(&pvgpu_ctl::api::RestoreRequest { file: file.display().to_string(), handed_from: None }) {
        Err(pvgpu_ctl::client::CtlError::Refused { status: 422, message }) => assert!(message.contains("skeleton"), "{message}"),
        other => panic!("a skeleton restored: {other:?}"),
    }
    let r = s.b.control().unwrap().prepare(&PrepareRequest { file: file.display().to_string(), timeout_seconds: Some(30) });
    std::fs::remove_file(&file).unwrap();
    r.map(drop)
}

/// Moves the session to `b` without preparing there; how its rebuild went.
fn migrate_cold(s: &Setup, t: Transport) -> pvgpu_ctl::migrate::MigrateReport {
    let (from, to) = (s.a.control().unwrap(), s.b.control().unwrap());
    let how = pvgpu_ctl::migrate::How { upload: false, copy: false, cold: true, unchecked: false };
    let r = pvgpu_ctl::migrate::migrate(&from, &to, s.id, &s.b.addr(t).to_string(), &s.dir.0, 30, how).expect("the migration");
    assert!(!r.prepared && r.not_prepared.is_none(), "{r:?}");
    r
}

/// The target's session serving the program now, and whether a prepared
/// worker rebuilt it.
fn rebuilt_prepared(s: &Setup) -> bool {
    let live = s.b.control().unwrap().sessions().unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
    live[0].restored.as_ref().expect("a restored session").prepared
}

/// A migration on one host prepares a worker at the target from the
/// session's skeleton (where sessions run in worker processes), and the
/// session goes on there with its memory, module and stream.
pub(crate) fn a_prepared_worker_takes_its_session(t: Transport) {
    let Some((s, state, _)) = setup(t) else { return };
    let (from, to) = (s.a.control().unwrap(), s.b.control().unwrap());
    let how = pvgpu_ctl::migrate::How { upload: false, copy: false, cold: false, unchecked: false };
    let report = pvgpu_ctl::migrate::migrate(&from, &to, s.id, &s.b.addr(t).to_string(), &s.dir.0, 30, how).expect("the migration");
    if t == Transport::Tcp {
        // Its modules lie after its connection's copy staging on the GPU.
        let why = report.not_prepared.as_deref().unwrap_or_default();
        assert!(!report.prepared && why.contains("over tcp"), "{report:?}");
    } else if s.b.is_process() {
        assert!(report.prepared && report.prepare_seconds > 0.0, "{report:?}");
    } else {
        let why = report.not_prepared.as_deref().unwrap_or_default();
        assert!(!report.prepared && why.contains("--isolation thread"), "{report:?}");
    }
    assert!(std::fs::read_dir(&s.dir.0).unwrap().next().is_none(), "the skeleton and the snapshot are gone");
    state.check_and_go_on(&s.c, "a move into a prepared worker");
    assert_eq!(rebuilt_prepared(&s), report.prepared);
    state.free(&s.c);
}

/// A session that changed since its skeleton in a way the prepared worker
/// cannot go on from (a stream destroyed) is rebuilt by a fresh worker;
/// one that only grew (a new stream) goes to the prepared worker, which
/// rebuilds it from what it made over the ring (and afresh over TCP).
pub(crate) fn a_session_that_changed_since_its_skeleton_is_rebuilt_afresh(t: Transport) {
    for destroy in [true, false] {
        let Some((s, state, ctx)) = setup(t) else { return };
        if !s.b.is_process() {
            assert!(prepare_by_hand(&s).is_err(), "no worker to prepare under thread isolation");
            return;
        }
        let extra = s.c.stream_create(ctx, 1, 0).unwrap();
        prepare_by_hand(&s).expect("a prepared worker");
        if destroy {
            s.c.stream_destroy(extra).unwrap();
        } else {
            let _more = s.c.stream_create(ctx, 1, 0).unwrap();
        }
        migrate_cold(&s, t);
        state.check_and_go_on(&s.c, "a move after the skeleton");
        // A worker prepared by hand for a session over TCP is routed its
        // connection all the same, and rebuilds it afresh.
        assert_eq!(rebuilt_prepared(&s), !destroy && t == Transport::Local, "a stream destroyed since the skeleton: {destroy}");
        state.free(&s.c);
    }
}

/// Another program of the session's peer that reaches the target first is
/// served there as by any worker (what was made ahead dropped); the moved
/// session then gets a fresh worker.
pub(crate) fn another_program_first_gets_the_prepared_worker(t: Transport) {
    let Some((s, state, _)) = setup(t) else { return };
    if !s.b.is_process() {
        return;
    }
    prepare_by_hand(&s).expect("a prepared worker");
    migrate_cold(&s, t);
    let other = s.b.client(t);
    let g = Gpu::new(&other).unwrap();
    let d = other.mem_alloc(g.ctx, 4096).unwrap();
    other.memset(d, 7, 1, 4096, Stream::DEFAULT).unwrap();
    let mut back = vec![0u8; 4096];
    other.memcpy_dtoh(&mut back, d).unwrap();
    assert!(back.iter().all(|&b| b == 7), "the other program is served");
    state.check_and_go_on(&s.c, "a move whose prepared worker served another program");
    let live = s.b.control().unwrap().sessions().unwrap();
    let restored: Vec<_> = live.iter().filter_map(|l| l.restored.as_ref()).collect();
    assert!(restored.len() == 1 && !restored[0].prepared, "{live:?}");
    state.free(&s.c);
}
