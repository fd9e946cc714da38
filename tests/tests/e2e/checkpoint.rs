//! Checkpoint and restore as an operator runs them: a program's session
//! written to a file at one of its calls, its backend restarted, the file
//! restored, and the program going on with the same handles, addresses
//! and bytes, as if nothing had happened.

use super::*;
use pvgpu_ctl::api::{CheckpointRequest, RestoreRequest};
use pvgpu_ctl::client::CtlError;

/// Keeps making calls that wait until `done` (the call that finds a
/// checkpoint ordered takes it). Callers end it also when the checkpoint's
/// thread has finished, so a checkpoint that fails reports its error
/// instead of a timeout.
pub(crate) fn call_while(c: &Client, ctx: pvgpu_frontend::Context, done: impl Fn() -> bool) {
    calls_while(done, || c.ctx_synchronize(ctx).unwrap());
}

/// As [`call_while`], with calls that let no device work finish: after a
/// synchronising call whose reply says the session left, a program with
/// mirrored memory pulls what the device wrote at once, and so waits in
/// that call for its session to come back.
fn quiet_call_while(c: &Client, ctx: pvgpu_frontend::Context, done: impl Fn() -> bool) {
    calls_while(done, || {
        c.mem_get_info(ctx).unwrap();
    });
}

fn calls_while(done: impl Fn() -> bool, call: impl Fn()) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "the session was not checkpointed within 30 s");
        call();
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub(crate) fn checkpoint_through_a_backend_restart(t: Transport) {
    let mut h = Harness::start();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let (matsum_f, scale_f) = (g.func("mat_sum").unwrap(), g.func("scale_by_global").unwrap());
    if h.exec == ExecKind::Cuda {
        return a_gpu_session_does_not_leave(&h, &c, g.ctx);
    }
    let (scale, _) = c.module_get_global(g.module, "pvgpu_scale").unwrap();
    c.memcpy_htod(scale, &2.5f32.to_le_bytes()).unwrap();
    let n = 3000usize;
    let (a, b) = matsum_inputs(n);
    let bytes = (n * 4) as u64;
    let (da, db, dc) = (c.mem_alloc(g.ctx, bytes).unwrap(), c.mem_alloc(g.ctx, bytes).unwrap(), c.mem_alloc(g.ctx, bytes).unwrap());
    let small = c.mem_alloc(g.ctx, 64).unwrap();
    // Large enough that the backend checks the snapshot's digest on
    // several threads.
    let large_bytes: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    let large = c.mem_alloc(g.ctx, large_bytes.len() as u64).unwrap();
    c.memcpy_htod(da, &f32_bytes(&a)).unwrap();
    c.memcpy_htod(db, &f32_bytes(&b)).unwrap();
    c.memcpy_htod(small, &[7u8; 64]).unwrap();
    c.memcpy_htod(large, &large_bytes).unwrap();
    let stream = c.stream_create(g.ctx, 1, 0).unwrap();
    let event = c.event_create(g.ctx, 0).unwrap();
    let n32 = n as i32;
    let blocks = (n as u32).div_ceil(256);
    c.launch(&matsum_f, [blocks, 1, 1], [256, 1, 1], 0, stream, &[arg(&da), arg(&db), arg(&dc), arg(&n32)]).unwrap();

    // A checkpoint the session cannot take yet is refused by name; the
    // session goes on.
    let ctl = h.control().unwrap();
    let id = ctl.sessions().unwrap()[0].id;
    let dir = TempDir::new("checkpoint");
    let file = dir.0.join("session.pvgpu");
    let req =
        |stay| CheckpointRequest { file: file.display().to_string(), leave_running: stay, timeout_seconds: Some(30), ..Default::default() };
    let graph = c.graph_create(g.ctx).unwrap();
    let launchable = c.graph_instantiate(graph, pvgpu_ring::cuda::api::CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64).unwrap();
    std::thread::scope(|s| {
        let refused = s.spawn(|| ctl.checkpoint(id, &req(false)));
        while !refused.is_finished() {
            c.ctx_synchronize(g.ctx).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        match refused.join().unwrap() {
            Err(CtlError::Refused { status: 409, message }) => assert!(message.contains("launches from the device"), "{message}"),
            other => panic!("a checkpoint of a session with a graph made for launches from the device: {other:?}"),
        }
    });
    assert!(!file.exists(), "a refused checkpoint leaves no file");
    assert!(!c.detached());
    c.graph_exec_destroy(launchable).unwrap();
    c.graph_destroy(graph).unwrap();

    // Page-locked memory mirrored in the backend (what the drop-in library
    // makes of mapped page-locked memory over TCP), written by a kernel,
    // then by the program just before the checkpoint (sent with the call
    // that takes it). No work is left in flight: the library's thread that
    // keeps mirrors fresh would otherwise wait, holding the connection, for
    // the session to come back, and this test restores it from here.
    let mirror = Mirror::new(&c, &g, 1024);
    assert_eq!(mirror.is_some(), !h.is_embedded(), "a mirror where the backend is another process");
    if let Some(m) = &mirror {
        m.set_x(3.0);
    }

    // Page-locked memory in the data area (local): it stays the program's
    // after the session leaves that connection.
    let pinned = c.host_alloc(64);
    assert_eq!(pinned.is_some(), t == Transport::Local);

    // The checkpoint, at the program's next call that waits.
    let report = std::thread::scope(|s| {
        let taken = s.spawn(|| ctl.checkpoint(id, &req(false)));
        quiet_call_while(&c, g.ctx, || c.detached() || taken.is_finished());
        taken.join().unwrap().expect("the checkpoint")
    });
    assert!(report.state_bytes >= 3 * bytes + 64, "{report:?}");
    assert!(!report.left_running);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600, "a snapshot is its owner's only");

    // The backend goes and comes back; the snapshot is handed to it.
    h.restart();
    let ctl = h.control().unwrap();
    assert!(ctl.sessions().unwrap().is_empty());
    let mut corrupt = std::fs::read(&file).unwrap();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 1;
    let bad = dir.0.join("corrupt.pvgpu");
    std::fs::write(&bad, &corrupt).unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
    match ctl.restore(&RestoreRequest { file: bad.display().to_string(), handed_from: None }) {
        Err(CtlError::Refused { status: 422, message }) => assert!(message.contains("checksum"), "{message}"),
        other => panic!("a corrupt snapshot: {other:?}"),
    }
    // The GPU its program saw is drained here now: refused when handed
    // over, the file kept, not when the program comes back.
    let _: serde_json::Value = ctl.call("POST", "/v1/devices/0/drain").unwrap();
    match ctl.restore(&RestoreRequest { file: file.display().to_string(), handed_from: None }) {
        Err(CtlError::Refused { status: 422, message }) => assert!(message.contains("gets [] here now"), "{message}"),
        other => panic!("a snapshot whose GPU is drained: {other:?}"),
    }
    assert!(file.exists(), "kept");
    let _: serde_json::Value = ctl.call("DELETE", "/v1/devices/0/drain").unwrap();
    let restored = ctl.restore(&RestoreRequest { file: file.display().to_string(), handed_from: None }).unwrap();
    assert_eq!((restored.session, restored.state_bytes), (id, report.state_bytes));
    let waiting = ctl.waiting().unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0].file, file.display().to_string());

    // The program goes on. Its first call copies into the page-locked
    // memory of the connection its session left: the session is taken back
    // on a new connection before the request is made, so that the backend
    // writes the program's memory, not a place in the new connection's area.
    if let Some(p) = pinned {
        // SAFETY: 64 bytes of page-locked memory the client allocated,
        // used by nothing else.
        unsafe { c.memcpy_dtoh_raw(p, 64, small, Stream::DEFAULT, false) }.unwrap();
        // SAFETY: as above; the copy is complete.
        assert_eq!(unsafe { std::slice::from_raw_parts(p, 64) }, &[7u8; 64], "a copy into page-locked memory after the resume");
    }
    let mut out = vec![0u8; bytes as usize];
    c.memcpy_dtoh(&mut out, dc).unwrap();
    assert!(!c.detached());
    assert_same(&bytes_f32(&out), &matsum_cpu(&a, &b), "MatSum computed before the checkpoint");
    let mut seven = [0u8; 64];
    c.memcpy_dtoh(&mut seven, small).unwrap();
    assert_eq!(seven, [7u8; 64]);
    let mut large_back = vec![0u8; large_bytes.len()];
    c.memcpy_dtoh(&mut large_back, large).unwrap();
    assert!(large_back == large_bytes, "3 MiB of device memory through the checkpoint");
    let m = 100i32;
    c.launch(&scale_f, [1, 1, 1], [128, 1, 1], 0, stream, &[arg(&da), arg(&m)]).unwrap();
    c.event_record(event, stream).unwrap();
    c.event_synchronize(event).unwrap();
    c.memcpy_dtoh(&mut out[..400], da).unwrap();
    let want: Vec<f32> = a[..100].iter().map(|x| x * 2.5).collect();
    assert_same(&bytes_f32(&out[..400]), &want, "a kernel reading the restored global, on the restored stream");
    c.launch(&matsum_f, [blocks, 1, 1], [256, 1, 1], 0, Stream::DEFAULT, &[arg(&da), arg(&db), arg(&dc), arg(&n32)]).unwrap();
    c.ctx_synchronize(g.ctx).unwrap();
    for p in [da, db, dc, small, large] {
        c.mem_free(p).unwrap();
    }
    let again = c.mem_alloc(g.ctx, 1 << 20).unwrap();
    c.mem_free(again).unwrap();
    if let Some(m) = mirror {
        // At its address in the new backend process, with its bytes: the
        // pending writes reach the program, and a kernel reaches it again.
        m.check_y(|i| 2.0 * i as f32 + 1.0, "the kernel's writes of before the checkpoint");
        m.launch_saxpy();
        c.ctx_synchronize(g.ctx).unwrap();
        m.check_y(|i| 2.0 * 3.0 + (2.0 * i as f32 + 1.0), "a kernel on the restored mirror, with what the program wrote");
        m.unmap();
    }
    let live = ctl.sessions().unwrap();
    assert_eq!(live.len(), 1, "the program's session is back: {live:?}");
    assert!(ctl.waiting().unwrap().is_empty(), "taken back once");
    assert_eq!(live[0].devices, [0]);
}

/// Host memory of the test mirrored in the backend: `x` then `y`, `n`
/// floats each, `y = 2i + 1` once made.
struct Mirror<'c> {
    c: &'c Client,
    saxpy: pvgpu_frontend::Function,
    map: std::ptr::NonNull<std::ffi::c_void>,
    n: usize,
}

impl<'c> Mirror<'c> {
    /// `None` where the backend is in this process (it has the address).
    fn new(c: &'c Client, g: &Gpu<'_>, n: usize) -> Option<Self> {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous, munmap};
        let len = std::num::NonZeroUsize::new(2 * n * 4).unwrap();
        // SAFETY: fresh anonymous memory of this test, unmapped in `unmap`.
        let map = unsafe { mmap_anonymous(None, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_PRIVATE) }.unwrap();
        // SAFETY: as above, mapped until unmapped.
        match unsafe { c.mirror_host(map.as_ptr().cast(), len.get()) } {
            Ok(at) => assert_eq!(at, map.as_ptr() as u64),
            Err(_) => {
                // SAFETY: the mapping made above, used by nothing else.
                unsafe { munmap(map, len.get()) }.unwrap();
                return None;
            }
        }
        let m = Mirror { c, saxpy: g.func("saxpy").unwrap(), map, n };
        // SAFETY: 2n floats of the mapping; no kernel runs now.
        unsafe {
            for i in 0..n {
                *m.x().add(i) = i as f32;
                *m.y().add(i) = 1.0;
            }
        }
        m.launch_saxpy();
        c.ctx_synchronize(g.ctx).unwrap();
        m.check_y(|i| 2.0 * i as f32 + 1.0, "saxpy on the mirror");
        Some(m)
    }

    fn x(&self) -> *mut f32 {
        self.map.as_ptr().cast()
    }

    fn y(&self) -> *mut f32 {
        self.x().wrapping_add(self.n)
    }

    /// Sets every `x` to `a`, in the program's memory.
    fn set_x(&self, a: f32) {
        // SAFETY: n floats of the mapping; no kernel runs now.
        unsafe {
            for i in 0..self.n {
                *self.x().add(i) = a;
            }
        }
    }

    /// Launches `y = 2x + y` on the mirror, without waiting.
    fn launch_saxpy(&self) {
        let (dx, dy, n) = (self.x() as u64, self.y() as u64, self.n as i32);
        let grid = [(self.n as u32).div_ceil(256), 1, 1];
        self.c.launch(&self.saxpy, grid, [256, 1, 1], 0, Stream::DEFAULT, &[arg(&2.0f32), arg(&dx), arg(&dy), arg(&n)]).unwrap();
    }

    fn check_y(&self, want: impl Fn(usize) -> f32, what: &str) {
        // SAFETY: n floats of the mapping; the caller synchronised.
        let bad = (0..self.n).find(|&i| unsafe { *self.y().add(i) } != want(i));
        // SAFETY: as above.
        assert!(bad.is_none(), "{what}: y[{0:?}] = {1}", bad, bad.map_or(0.0, |i| unsafe { *self.y().add(i) }));
    }

    fn unmap(self) {
        self.c.unmirror_host(self.map.as_ptr().cast()).unwrap();
        // SAFETY: the mapping made in `new`, no longer mirrored.
        unsafe { nix::sys::mman::munmap(self.map, 2 * self.n * 4) }.unwrap();
    }
}

/// On the GPU with device memory where the driver puts it (the default),
/// a new process cannot have its addresses back (the `cuMemAlloc` heap),
/// so a session may not leave: the checkpoint is refused by name, naming
/// `--device-memory placed`, and the session goes on.
pub(crate) fn a_gpu_session_does_not_leave(h: &Harness, c: &Client, ctx: pvgpu_frontend::Context) {
    let ctl = h.control().unwrap();
    let id = ctl.sessions().unwrap()[0].id;
    let dir = TempDir::new("checkpoint");
    let req = CheckpointRequest {
        file: dir.0.join("gone.pvgpu").display().to_string(),
        leave_running: false,
        timeout_seconds: Some(30),
        ..Default::default()
    };
    let r = std::thread::scope(|s| {
        let taken = s.spawn(|| ctl.checkpoint(id, &req));
        while !taken.is_finished() && !c.detached() {
            c.ctx_synchronize(ctx).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        taken.join().unwrap()
    });
    match r {
        Err(CtlError::Refused { status: 409, message }) => assert!(message.contains("--device-memory placed"), "{message}"),
        other => panic!("a GPU session leaving its backend: {other:?}"),
    }
    assert!(!c.detached());
    c.ctx_synchronize(ctx).unwrap();
}

/// A program whose session left takes it back on the try that is waiting
/// when the snapshot is restored: the backend holds a `Resume` for a
/// session not there yet until it is (or for 500 ms), rather than answer
/// it at once and leave the program to find it at its next try. Session
/// numbers count the connections: each try is one.
pub(crate) fn a_waiting_resume_takes_its_session_when_it_comes(t: Transport) {
    let h = Harness::start();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    if h.exec == ExecKind::Cuda {
        return a_gpu_session_does_not_leave(&h, &c, g.ctx);
    }
    let buf = c.mem_alloc(g.ctx, 4096).unwrap();
    c.memcpy_htod(buf, &[9u8; 4096]).unwrap();
    let ctl = h.control().unwrap();
    let id = ctl.sessions().unwrap()[0].id;
    let dir = TempDir::new("checkpoint");
    let file = dir.0.join("waited.pvgpu");
    super::moves::detach_into(&ctl, id, &c, g.ctx, &file, "whose program waits for it");
    assert!(c.detached());
    // The program's next call tries to take its session back; the snapshot
    // comes 300 ms later, while that try waits (backing off from 10 ms, a
    // program answered at once would have tried five or six times by then).
    let mut back = [0u8; 4096];
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            ctl.restore(&RestoreRequest { file: file.display().to_string(), handed_from: None }).unwrap();
        });
        c.memcpy_dtoh(&mut back, buf).unwrap();
    });
    assert_eq!(back, [9u8; 4096]);
    let now = ctl.sessions().unwrap();
    let tries = now.iter().map(|s| s.id).max().unwrap() - id;
    assert!(tries <= 2, "{tries} connections to take one session back");
}

/// `--leave-running`: the snapshot is written and the program never
/// notices, also when it makes no call (over shared memory); a snapshot is
/// taken back only by its own peer, once.
pub(crate) fn checkpoint_leaving_the_session_running(t: Transport) {
    let h = Harness::start();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    let buf = c.mem_alloc(g.ctx, 4096).unwrap();
    c.memcpy_htod(buf, &[3u8; 4096]).unwrap();
    let ctl = h.control().unwrap();
    let id = ctl.sessions().unwrap()[0].id;
    let dir = TempDir::new("checkpoint");
    let file = dir.0.join("kept.pvgpu");
    let req = CheckpointRequest { file: file.display().to_string(), leave_running: true, timeout_seconds: Some(30), ..Default::default() };
    let report = std::thread::scope(|s| {
        let taken = s.spawn(|| ctl.checkpoint(id, &req));
        while !taken.is_finished() {
            c.ctx_synchronize(g.ctx).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        taken.join().unwrap().unwrap()
    });
    assert!(report.left_running && report.state_bytes >= 4096);
    assert!(!c.detached());
    let mut back = [0u8; 4096];
    c.memcpy_dtoh(&mut back, buf).unwrap();
    assert_eq!(back, [3u8; 4096]);
    match ctl.checkpoint(id, &req) {
        Err(CtlError::Refused { status: 409, message }) => assert!(message.contains("Cannot create"), "{message}"),
        other => panic!("a checkpoint over an existing file: {other:?}"),
    }
    // A program making no call: the backend asks its library for one (the
    // control page's `LEAVE_WANTED` over shared memory, a message of its
    // own over TCP and TLS), where the checkpoint is taken.
    let idle = CheckpointRequest {
        file: dir.0.join("idle.pvgpu").display().to_string(),
        leave_running: true,
        timeout_seconds: Some(5),
        ..Default::default()
    };
    match ctl.checkpoint(id, &idle) {
        Ok(r) => assert!(r.left_running && r.state_bytes >= 4096, "{r:?}"),
        other => panic!("a checkpoint of a session making no call over {t:?}: {other:?}"),
    }
    assert!(!c.detached());
    c.memcpy_dtoh(&mut back, buf).unwrap();
    assert_eq!(back, [3u8; 4096]);

    // A program that ends while its session is away does not wait for the
    // session to come back only to say goodbye (its resume would wait
    // minutes for a restore that never comes).
    let away = CheckpointRequest {
        file: dir.0.join("away.pvgpu").display().to_string(),
        leave_running: false,
        timeout_seconds: Some(5),
        ..Default::default()
    };
    ctl.checkpoint(id, &away).expect("a detaching checkpoint of an idle program");
    assert!(eventually(Duration::from_secs(5), || c.detached()), "the library's call took the reply that says the session left");
    let t0 = Instant::now();
    drop(c);
    assert!(t0.elapsed() < Duration::from_secs(30), "ending the program waited {:?} for its session", t0.elapsed());
}

/// The idle checkpoint over TLS as well: the backend's request for a call
/// comes through the supervisor's relay and the library's TLS, which may
/// hold it decrypted where the socket no longer shows it.
#[cfg(not(feature = "xen"))]
#[test]
fn checkpoint_leaving_the_session_running_over_tls() {
    checkpoint_leaving_the_session_running(Transport::Tls)
}
