//! `pvgpu-ctl migrate` as an operator runs it: a program's live session
//! moved from one backend to another, the program going on there with its
//! handles, addresses and bytes, never told.

use super::*;
use pvgpu_ctl::api::MoveRecord;
use pvgpu_ctl::client::CtlError;

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
    let matsum = g.func("mat_sum").unwrap();
    let n = 5000usize;
    let (x, y) = matsum_inputs(n);
    let bytes = (n * 4) as u64;
    let (dx, dy, dz) = (c.mem_alloc(g.ctx, bytes).unwrap(), c.mem_alloc(g.ctx, bytes).unwrap(), c.mem_alloc(g.ctx, bytes).unwrap());
    c.memcpy_htod(dx, &f32_bytes(&x)).unwrap();
    c.memcpy_htod(dy, &f32_bytes(&y)).unwrap();
    let stream = c.stream_create(g.ctx, 1, 0).unwrap();
    let (n32, blocks) = (n as i32, (n as u32).div_ceil(256));
    c.launch(&matsum, [blocks, 1, 1], [256, 1, 1], 0, stream, &[arg(&dx), arg(&dy), arg(&dz), arg(&n32)]).unwrap();

    let (from, to) = (a.control().unwrap(), b.control().unwrap());
    let id = from.sessions().unwrap()[0].id;
    let dir = TempDir::new("migrate");
    let address = b.addr(t).to_string();
    let report = std::thread::scope(|s| {
        // Over TCP the snapshot is uploaded, as to a backend on another host.
        let moving = s.spawn(|| pvgpu_ctl::migrate::migrate(&from, &to, id, &address, &dir.0, 30, t == Transport::Tcp));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !c.detached() && !moving.is_finished() {
            assert!(Instant::now() < deadline, "the session was not checkpointed within 30 s");
            c.ctx_synchronize(g.ctx).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        moving.join().unwrap().expect("the migration")
    });
    assert!(report.state_bytes >= 3 * bytes, "{report:?}");
    assert_eq!(report.left_file, None);
    assert_eq!(report.uploaded, t == Transport::Tcp);
    assert!(std::fs::read_dir(&dir.0).unwrap().next().is_none(), "the snapshot's name is gone once the target holds it");
    // A worker process takes a moment to go once its session has left.
    assert!(eventually(Duration::from_secs(10), || from.sessions().unwrap().is_empty()), "the session left the source");

    // The program's next call follows the session to the other backend.
    let mut out = vec![0u8; bytes as usize];
    c.memcpy_dtoh(&mut out, dz).unwrap();
    assert_same(&bytes_f32(&out), &matsum_cpu(&x, &y), "MatSum computed before the move");
    c.launch(&matsum, [blocks, 1, 1], [256, 1, 1], 0, stream, &[arg(&dz), arg(&dy), arg(&dx), arg(&n32)]).unwrap();
    c.stream_synchronize(stream).unwrap();
    c.memcpy_dtoh(&mut out, dx).unwrap();
    let twice: Vec<f32> = matsum_cpu(&x, &y).iter().zip(&y).map(|(s, y)| s + y).collect();
    assert_same(&bytes_f32(&out), &twice, "MatSum on the moved stream, over the moved memory");
    let live = to.sessions().unwrap();
    assert_eq!(live.len(), 1, "the target serves the program now: {live:?}");
    assert!(to.waiting().unwrap().is_empty(), "taken back once");
    for p in [dx, dy, dz] {
        c.mem_free(p).unwrap();
    }

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
