//! `pvgpu-ctl migrate` as an operator runs it: a program's live session
//! moved from one backend to another, the program going on there with its
//! handles, addresses and bytes, never told.

use super::*;
use pvgpu_ctl::api::MoveRecord;
use pvgpu_ctl::client::CtlError;

/// What the tests of sessions that move carry across: MatSum's inputs in
/// device memory and its result, computed on a stream of the program's
/// own.
pub(crate) struct MatSumState {
    x: Vec<f32>,
    y: Vec<f32>,
    /// Inputs `x`, `y` and the result.
    d: [u64; 3],
    stream: Stream,
    matsum: pvgpu_frontend::Function,
}

impl MatSumState {
    /// Allocates, uploads `n` elements of each input and launches MatSum on
    /// a new stream, without waiting.
    pub(crate) fn launch(c: &Client, g: &Gpu<'_>, n: usize) -> Self {
        let (x, y) = matsum_inputs(n);
        let bytes = (n * 4) as u64;
        let d = [0; 3].map(|_| c.mem_alloc(g.ctx, bytes).unwrap());
        c.memcpy_htod(d[0], &f32_bytes(&x)).unwrap();
        c.memcpy_htod(d[1], &f32_bytes(&y)).unwrap();
        let stream = c.stream_create(g.ctx, 1, 0).unwrap();
        let state = MatSumState { x, y, d, stream, matsum: g.func("mat_sum").unwrap() };
        state.run(c, [d[0], d[1], d[2]]);
        state
    }

    /// Bytes of each allocation.
    pub(crate) fn bytes(&self) -> u64 {
        (self.x.len() * 4) as u64
    }

    fn run(&self, c: &Client, [a, b, out]: [u64; 3]) {
        let (n32, blocks) = (self.x.len() as i32, (self.x.len() as u32).div_ceil(256));
        c.launch(&self.matsum, [blocks, 1, 1], [256, 1, 1], 0, self.stream, &[arg(&a), arg(&b), arg(&out), arg(&n32)]).unwrap();
    }

    /// After `what`: the result computed before it, then MatSum again on
    /// the stream, over the memory, as they came through.
    pub(crate) fn check_and_go_on(&self, c: &Client, what: &str) {
        let [dx, dy, dz] = self.d;
        let mut out = vec![0u8; self.bytes() as usize];
        c.memcpy_dtoh(&mut out, dz).unwrap();
        assert_same(&bytes_f32(&out), &matsum_cpu(&self.x, &self.y), &format!("MatSum computed before {what}"));
        self.run(c, [dz, dy, dx]);
        c.stream_synchronize(self.stream).unwrap();
        c.memcpy_dtoh(&mut out, dx).unwrap();
        let twice: Vec<f32> = matsum_cpu(&self.x, &self.y).iter().zip(&self.y).map(|(s, y)| s + y).collect();
        assert_same(&bytes_f32(&out), &twice, &format!("MatSum on the stream and over the memory after {what}"));
    }

    pub(crate) fn free(self, c: &Client) {
        for p in self.d {
            c.mem_free(p).unwrap();
        }
    }
}

pub(crate) fn session_moves_to_another_backend(t: Transport) {
    let a = Harness::start();
    let b = Harness::with(HarnessOptions { tcp_key_from: Some(a.tcp_key.clone()), ..HarnessOptions::default() });
    let c = a.client(t);
    let g = Gpu::new(&c).unwrap();
    if a.exec == ExecKind::Cuda {
        // The harness's GPU backend keeps device memory where the driver
        // puts it: the session may not leave (tests/migrate/run.sh moves
        // GPU sessions with --device-memory placed).
        return a_gpu_session_does_not_leave(&a, &c, g.ctx);
    }
    let state = MatSumState::launch(&c, &g, 5000);

    let (from, to) = (a.control().unwrap(), b.control().unwrap());
    let id = from.sessions().unwrap()[0].id;
    let dir = TempDir::new("migrate");
    let address = b.addr(t).to_string();
    // The program makes no call while its session moves: its library
    // answers the backend's request for one (over the ring and TCP alike).
    // Over TCP the snapshot is uploaded, as to a backend on another host.
    // On one host (the ring), the session's device memory stays where it
    // is: handed over in place, not copied.
    let how = pvgpu_ctl::migrate::How { upload: t == Transport::Tcp, copy: false, cold: false, unchecked: false };
    let report = pvgpu_ctl::migrate::migrate(&from, &to, id, &address, &dir.0, 30, how).expect("the migration");
    assert!(c.detached(), "the library's own call took the reply that says the session left");
    if t == Transport::Tcp {
        assert!(report.state_bytes >= 3 * state.bytes() && report.handed_bytes == 0, "{report:?}");
    } else {
        assert!(report.handed_bytes >= 3 * state.bytes() && report.state_bytes < state.bytes(), "{report:?}");
    }
    assert_eq!(report.left_file, None);
    assert_eq!(report.uploaded, t == Transport::Tcp);
    // Only a target on this host is prepared (tests/e2e/prepared.rs).
    assert_eq!(report.prepared, t != Transport::Tcp && b.is_process(), "{report:?}");
    assert!(std::fs::read_dir(&dir.0).unwrap().next().is_none(), "the snapshot's name is gone once the target holds it");
    // A worker process takes a moment to go once its session has left.
    assert!(eventually(Duration::from_secs(10), || from.sessions().unwrap().is_empty()), "the session left the source");

    // The program's next call follows the session to the other backend.
    state.check_and_go_on(&c, "the move");
    let live = to.sessions().unwrap();
    assert_eq!(live.len(), 1, "the target serves the program now: {live:?}");
    assert!(to.waiting().unwrap().is_empty(), "taken back once");
    state.free(&c);

    // A guest is only ever sent to an address a program can reach.
    let bad = MoveRecord { token: "00".repeat(16), peer: live[0].peer.clone(), to: "file:/etc/passwd".into() };
    match from.record_move(&bad) {
        Err(CtlError::Refused { status: 400, message }) => assert!(message.contains("not an address"), "{message}"),
        other => panic!("a move to a bad address: {other:?}"),
    }
    let long = MoveRecord { to: format!("local:/{}", "x".repeat(80)), ..bad };
    assert!(matches!(from.record_move(&long), Err(CtlError::Refused { status: 400, .. })));

    // An upload that is not a whole snapshot is refused by its checksum.
    let junk = dir.0.join("junk.pvgpu");
    std::fs::write(&junk, vec![7u8; 5000]).unwrap();
    match to.restore_upload(&junk) {
        Err(CtlError::Refused { status: 422, message }) => assert!(message.contains("uploaded snapshot"), "{message}"),
        other => panic!("a junk upload: {other:?}"),
    }
}

/// Device memory a checkpoint hands over in place (it stays on the GPU)
/// restores only where it is: another backend that was not handed it
/// refuses the snapshot, and the backend the session left, which keeps the
/// memory, restores it with its bytes.
pub(crate) fn handed_memory_stays_with_its_backend_until_taken(t: Transport) {
    let a = Harness::start();
    if a.exec == ExecKind::Cuda {
        return; // tests/migrate/run.sh hands GPU memory over on the H200.
    }
    let b = Harness::with(HarnessOptions { tcp_key_from: Some(a.tcp_key.clone()), ..HarnessOptions::default() });
    let c = a.client(t);
    let g = Gpu::new(&c).unwrap();
    let state = MatSumState::launch(&c, &g, 3000);
    let (from, to) = (a.control().unwrap(), b.control().unwrap());
    let id = from.sessions().unwrap()[0].id;
    let dir = TempDir::new("handed");
    let file = dir.0.join("s.pvgpu");
    let req = pvgpu_ctl::api::CheckpointRequest {
        file: file.display().to_string(),
        leave_running: false,
        timeout_seconds: Some(30),
        hand_over: true,
        skeleton: false,
    };
    let report = super::moves::detach_as(&from, id, &c, g.ctx, &req, "whose memory stays on the GPU");
    assert!(report.handed_bytes >= 3 * state.bytes() && report.state_bytes < state.bytes(), "{report:?}");
    assert!(report.handed_from.is_some(), "{report:?}");
    let kept = from.waiting().unwrap();
    assert!(kept.len() == 1 && kept[0].kept && kept[0].handed_bytes == report.handed_bytes, "the source lists what it keeps: {kept:?}");

    let restore = pvgpu_ctl::api::RestoreRequest { file: file.display().to_string(), handed_from: None };
    match to.restore(&restore) {
        Err(CtlError::Refused { status: 409, message }) => assert!(message.contains("handed over in place"), "{message}"),
        other => panic!("a snapshot whose memory another backend holds: {other:?}"),
    }
    assert!(to.waiting().unwrap().is_empty(), "nothing parked there");
    from.restore(&restore).expect("the backend the session left holds its memory");
    let parked = from.waiting().unwrap();
    assert!(parked.len() == 1 && !parked[0].kept && parked[0].handed_bytes == report.handed_bytes, "{parked:?}");
    state.check_and_go_on(&c, "a restore of memory handed over in place");
    assert!(from.waiting().unwrap().is_empty(), "taken back");
    state.free(&c);

    // An operator lets go of memory kept for a session that will not come
    // back: it is freed, and nothing is listed any more.
    let gone = pvgpu_ctl::api::DiscardRequest { file: file.display().to_string() };
    assert!(matches!(from.discard(&gone), Err(CtlError::Refused { status: 404, .. })), "nothing held for it now");
    let again = dir.0.join("again.pvgpu");
    let d = c.mem_alloc(g.ctx, 1 << 20).unwrap();
    let req = pvgpu_ctl::api::CheckpointRequest { file: again.display().to_string(), ..req };
    let report = super::moves::detach_as(&from, from.sessions().unwrap()[0].id, &c, g.ctx, &req, "left for good");
    assert!(report.handed_bytes >= 1 << 20, "{report:?}");
    let freed = from.discard(&pvgpu_ctl::api::DiscardRequest { file: again.display().to_string() }).unwrap();
    assert_eq!((freed.parked, freed.kept_bytes), (false, report.handed_bytes));
    assert!(from.waiting().unwrap().is_empty(), "nothing kept");
    let _ = d;
}

/// A migration the target does not take leaves the session at its
/// source. The target checks the session's skeleton before the pause (on
/// one host as it prepares a worker from it; over TCP, as to another host,
/// its description), and a refusal stops the migration there: the session
/// was never paused. Past that point (a migration that asks no check, a
/// target that cannot be reached) the source takes the session back from
/// its snapshot, its memory where it was, and the program goes on there,
/// never told. The target refuses because its GPU is drained.
pub(crate) fn a_refused_migration_leaves_the_session_at_its_source(t: Transport) {
    let a = Harness::start();
    if a.exec == ExecKind::Cuda {
        return; // tests/migrate/run.sh's `refused` case, on the H200.
    }
    let b = Harness::with(HarnessOptions { tcp_key_from: Some(a.tcp_key.clone()), ..HarnessOptions::default() });
    let c = a.client(t);
    let g = Gpu::new(&c).unwrap();
    let state = MatSumState::launch(&c, &g, 4000);
    let (from, to) = (a.control().unwrap(), b.control().unwrap());
    let _: serde_json::Value = to.call("POST", "/v1/devices/0/drain").unwrap();
    let dir = TempDir::new("refused");
    let address = b.addr(t).to_string();
    let upload = t == Transport::Tcp;
    let drained = |message: &str| assert!(message.contains("undrain"), "{message}");
    for cold in [false, true] {
        let how = pvgpu_ctl::migrate::How { upload, copy: false, cold, unchecked: false };
        let id = from.sessions().unwrap()[0].id;
        match pvgpu_ctl::migrate::migrate(&from, &to, id, &address, &dir.0, 30, how) {
            Err(pvgpu_ctl::migrate::MigrateError::Refused(CtlError::Refused { status: 422, message })) => drained(&message),
            other => panic!("a migration to a backend whose GPU is drained: {other:?}"),
        }
        assert!(!c.detached(), "refused before the pause");
        assert!(from.waiting().unwrap().is_empty(), "nothing written");
        assert!(std::fs::read_dir(&dir.0).unwrap().next().is_none(), "no skeleton left behind");
        state.check_and_go_on(&c, "a migration refused before the pause");
    }
    // Refused after the pause: the session goes back.
    let how = pvgpu_ctl::migrate::How { upload, copy: false, cold: true, unchecked: true };
    let id = from.sessions().unwrap()[0].id;
    match pvgpu_ctl::migrate::migrate(&from, &to, id, &address, &dir.0, 30, how) {
        Err(pvgpu_ctl::migrate::MigrateError::Back(CtlError::Refused { status: 422, message })) => drained(&message),
        other => panic!("a migration to a backend whose GPU is drained: {other:?}"),
    }
    assert!(c.detached(), "the session left for its checkpoint");
    assert!(to.waiting().unwrap().is_empty() && to.sessions().unwrap().is_empty(), "nothing at the target");
    let back = from.waiting().unwrap();
    assert!(back.len() == 1 && !back[0].kept, "the source holds the session for its program: {back:?}");
    assert_eq!(back[0].handed_bytes >= 3 * state.bytes(), !upload, "on one host its memory stayed on the GPU: {back:?}");
    assert!(std::fs::read_dir(&dir.0).unwrap().next().is_none(), "the snapshot's name is gone once the source holds it");
    state.check_and_go_on(&c, "a migration the target refused");
    assert!(from.waiting().unwrap().is_empty(), "taken back by the program");
    assert_eq!(from.sessions().unwrap().len(), 1, "the program is served where it was");

    // A target that is not there: nothing is paused where it is asked
    // first, and the source takes the session back where it is not.
    let gone = pvgpu_ctl::client::Control::new(dir.0.join("no-backend.sock"));
    for unchecked in [false, true] {
        let how = pvgpu_ctl::migrate::How { unchecked, ..how };
        let id = from.sessions().unwrap()[0].id;
        match pvgpu_ctl::migrate::migrate(&from, &gone, id, &address, &dir.0, 30, how) {
            Err(pvgpu_ctl::migrate::MigrateError::Refused(CtlError::Connect { .. })) if !unchecked => {}
            Err(pvgpu_ctl::migrate::MigrateError::Back(CtlError::Connect { .. })) if unchecked => {}
            other => panic!("a migration to a backend that is not there: {other:?}"),
        }
        assert_eq!(c.detached(), unchecked, "paused only where the target was not asked first");
        state.check_and_go_on(&c, "a migration to a backend that is not there");
    }
    assert!(to.sessions().unwrap().is_empty(), "nothing at the target");
    state.free(&c);
}

/// A session the target's quotas would not hold is refused by name before
/// the pause (HTTP 422), not lost when its rebuild there fails; one that
/// asked no check is refused at its snapshot and taken back by the source.
pub(crate) fn a_migration_past_the_target_s_quota_is_refused(t: Transport) {
    let a = Harness::start();
    if a.exec == ExecKind::Cuda {
        return;
    }
    let options = HarnessOptions { tcp_key_from: Some(a.tcp_key.clone()), mem_quota: Some(32 << 10), ..HarnessOptions::default() };
    let b = Harness::with(options);
    let c = a.client(t);
    let g = Gpu::new(&c).unwrap();
    let state = MatSumState::launch(&c, &g, 4000);
    let (from, to) = (a.control().unwrap(), b.control().unwrap());
    let dir = TempDir::new("quota");
    let upload = t == Transport::Tcp;
    for unchecked in [false, true] {
        let how = pvgpu_ctl::migrate::How { upload, copy: false, cold: unchecked, unchecked };
        let id = from.sessions().unwrap()[0].id;
        let moved = pvgpu_ctl::migrate::migrate(&from, &to, id, &b.addr(t).to_string(), &dir.0, 30, how);
        let message = match moved {
            Err(pvgpu_ctl::migrate::MigrateError::Refused(CtlError::Refused { status: 422, message })) if !unchecked => message,
            Err(pvgpu_ctl::migrate::MigrateError::Back(CtlError::Refused { status: 422, message })) if unchecked => message,
            other => panic!("a migration past the target's quota: {other:?}"),
        };
        assert!(message.contains("--mem-quota") && message.contains(&(32 << 10).to_string()), "{message}");
        assert_eq!(c.detached(), unchecked, "paused only where the target was not asked first");
        assert!(to.sessions().unwrap().is_empty() && to.waiting().unwrap().is_empty(), "nothing at the target");
        state.check_and_go_on(&c, "a migration past the target's quota");
    }
    assert_eq!(from.sessions().unwrap().len(), 1, "the program is served where it was");
    state.free(&c);
}

/// A snapshot parked at the target, its program not back yet, counts
/// against its peer's memory there: a second session of the same peer
/// that would pass `--peer-mem-quota` with it is refused before the pause.
pub(crate) fn a_parked_snapshot_counts_against_its_peer_s_quota(t: Transport) {
    let a = Harness::start();
    if a.exec == ExecKind::Cuda {
        return;
    }
    // Each program holds three buffers of 8000 bytes: one fits, two do not.
    let options = HarnessOptions { tcp_key_from: Some(a.tcp_key.clone()), peer_mem_quota: Some(40 << 10), ..HarnessOptions::default() };
    let b = Harness::with(options);
    let (c1, c2) = (a.client(t), a.client(t));
    let (g1, g2) = (Gpu::new(&c1).unwrap(), Gpu::new(&c2).unwrap());
    let (first, second) = (MatSumState::launch(&c1, &g1, 2000), MatSumState::launch(&c2, &g2, 2000));
    let (from, to) = (a.control().unwrap(), b.control().unwrap());
    let dir = TempDir::new("parked-quota");
    let file = dir.0.join("first.pvgpu").display().to_string();
    // The first program's session leaves into a file, parked at the target.
    detach_into(&from, c1.info().session_id, &c1, g1.ctx, std::path::Path::new(&file), "parked at the target");
    to.restore(&pvgpu_ctl::api::RestoreRequest { file: file.clone(), handed_from: None }).unwrap();
    assert_eq!(to.waiting().unwrap().len(), 1, "parked, its program not back");
    let how = pvgpu_ctl::migrate::How { upload: t == Transport::Tcp, copy: false, cold: false, unchecked: false };
    let moved = pvgpu_ctl::migrate::migrate(&from, &to, c2.info().session_id, &b.addr(t).to_string(), &dir.0, 30, how);
    match moved {
        Err(pvgpu_ctl::migrate::MigrateError::Refused(CtlError::Refused { status: 422, message })) => {
            assert!(message.contains("hold 24000 of the 40960"), "{message}")
        }
        other => panic!("a second session past its peer's quota with the parked one: {other:?}"),
    }
    assert!(!c2.detached(), "refused before the pause");
    second.check_and_go_on(&c2, "a migration refused for its peer's parked session");
    // The parked snapshot goes back where it came from.
    to.discard(&pvgpu_ctl::api::DiscardRequest { file: file.clone() }).unwrap();
    from.restore(&pvgpu_ctl::api::RestoreRequest { file, handed_from: None }).unwrap();
    first.check_and_go_on(&c1, "restored where it was after its parked copy was dropped");
    first.free(&c1);
    second.free(&c2);
}
