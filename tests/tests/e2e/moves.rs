//! The two ways a test moves a program's session: to a second backend
//! (`pvgpu-ctl migrate`), and through a checkpoint, a restart of its own
//! backend and a restore; each while the program keeps calling, as a busy
//! program would.

use super::*;
use pvgpu_ctl::api::{CheckpointRequest, RestoreRequest};
use pvgpu_ctl::migrate::MigrateReport;
use pvgpu_ctl::snapshot::Meta;

/// Moves the session of the program `c` (context `ctx`) from backend `a` to
/// a second backend, which is returned (the program is served there) with
/// the migration's report, which waited for the session to serve the
/// program there ([`pvgpu_ctl::migrate::wait_back`]: the program's next
/// call takes it back). `what` names the session in a failure.
pub(crate) fn move_to_another_backend(
    a: &Harness,
    c: &Client,
    ctx: pvgpu_frontend::Context,
    t: Transport,
    what: &str,
) -> (Harness, MigrateReport) {
    let b = Harness::with(HarnessOptions { tcp_key_from: Some(a.tcp_key.clone()), ..HarnessOptions::default() });
    let (from, to) = (a.control().unwrap(), b.control().unwrap());
    let id = from.sessions().unwrap()[0].id;
    let dir = TempDir::new("move");
    let address = b.addr(t).to_string();
    let report = std::thread::scope(|s| {
        let moving = s.spawn(|| {
            let how = pvgpu_ctl::migrate::How { upload: t == Transport::Tcp, copy: false, cold: false, unchecked: false };
            let mut r = pvgpu_ctl::migrate::migrate(&from, &to, id, &address, &dir.0, 30, how)?;
            pvgpu_ctl::migrate::wait_back(&to, &mut r, Duration::from_secs(30));
            Ok::<_, pvgpu_ctl::migrate::MigrateError>(r)
        });
        call_while(c, ctx, || c.detached() || moving.is_finished());
        if c.detached() {
            // Waits for the move to be recorded, then takes the session back
            // at the target.
            c.ctx_synchronize(ctx).unwrap();
        }
        moving.join().unwrap().unwrap_or_else(|e| panic!("the migration of a session {what}: {e}"))
    });
    // The whole pause, with the target's rebuild in its parts.
    let back = report.back.as_ref().unwrap_or_else(|| panic!("the session {what} back at work at the target: {report:?}"));
    assert_eq!(back.rebuild.from_session, id);
    let r = &back.rebuild;
    let parts = r.contexts_seconds + r.memory_seconds + r.modules_seconds + r.graphs_seconds;
    assert!(r.rebuild_seconds > 0.0 && parts <= r.rebuild_seconds + 1e-3, "{r:?}");
    // The room made for the snapshot while the session still ran is not
    // part of the pause.
    assert!(report.room_seconds > 0.0 && report.room_seconds < report.checkpoint_seconds, "{report:?}");
    // The pause counts from the call the session was taken at: the
    // source held it for part of the checkpoint, not for its way there.
    let checkpoint = report.checkpoint_seconds - report.room_seconds;
    assert!(report.held_seconds > 0.0 && report.held_seconds <= checkpoint, "{report:?}");
    let before = report.held_seconds + report.restore_seconds + report.record_seconds;
    assert!((back.pause_seconds - before - back.after_move_seconds).abs() < 1e-6, "{back:?}");
    let listed = to.sessions().unwrap();
    assert!(listed.iter().any(|s| s.restored.as_ref().is_some_and(|x| x.from_session == id)), "{listed:?}");
    (b, report)
}

/// A test of state that goes with its session to another backend: the
/// program makes what `hold` makes, its session moves while it calls
/// ([`move_to_another_backend`]), and `go_on` checks that it goes on
/// there with it (given the migration's report); the target serves it
/// after. On the GPU, where the suite's backend keeps the driver's
/// memory, the session does not leave (checked instead).
pub(crate) fn moves_with_its_session<H>(
    t: Transport,
    what: &str,
    hold: impl FnOnce(&Client, &Gpu<'_>) -> H,
    go_on: impl FnOnce(&Client, &Gpu<'_>, &H, &MigrateReport),
) {
    let a = Harness::start();
    let c = a.client(t);
    let g = Gpu::new(&c).unwrap();
    if a.exec == ExecKind::Cuda {
        return a_gpu_session_does_not_leave(&a, &c, g.ctx);
    }
    let held = hold(&c, &g);
    let (b, report) = move_to_another_backend(&a, &c, g.ctx, t, what);
    go_on(&c, &g, &held, &report);
    assert_eq!(b.control().unwrap().sessions().unwrap().len(), 1, "the target serves the program");
}

/// The same through a checkpoint, a restart of the backend and a restore
/// ([`through_a_restart`]): `go_on` also gets what the snapshot described.
pub(crate) fn survives_a_restart<H>(
    t: Transport,
    what: &str,
    hold: impl FnOnce(&Client, &Gpu<'_>) -> H,
    go_on: impl FnOnce(&Client, &Gpu<'_>, &H, Meta),
) {
    let mut h = Harness::start();
    let c = h.client(t);
    let g = Gpu::new(&c).unwrap();
    if h.exec == ExecKind::Cuda {
        return a_gpu_session_does_not_leave(&h, &c, g.ctx);
    }
    let held = hold(&c, &g);
    let meta = through_a_restart(&mut h, &c, g.ctx, what);
    go_on(&c, &g, &held, meta);
}

/// Checkpoints the session of the program `c` (context `ctx`) into a file,
/// restarts its backend `h` and restores the file there; returns what the
/// snapshot described.
pub(crate) fn through_a_restart(h: &mut Harness, c: &Client, ctx: pvgpu_frontend::Context, what: &str) -> Meta {
    let ctl = h.control().unwrap();
    let id = ctl.sessions().unwrap()[0].id;
    let dir = TempDir::new("checkpoint");
    let file = dir.0.join("session.pvgpu");
    detach_into(&ctl, id, c, ctx, &file, what);
    let meta = pvgpu_ctl::snapshot::decode(&std::fs::read(&file).unwrap()).unwrap().0;
    h.restart();
    h.control().unwrap().restore(&RestoreRequest { file: file.display().to_string(), handed_from: None }).unwrap();
    meta
}

/// Checkpoints session `id` (the program `c`'s, context `ctx`) into `file`
/// at the program's next call that waits, which the session leaves.
pub(crate) fn detach_into(
    ctl: &pvgpu_ctl::client::Control,
    id: u64,
    c: &Client,
    ctx: pvgpu_frontend::Context,
    file: &std::path::Path,
    what: &str,
) -> pvgpu_ctl::api::CheckpointReport {
    let req = CheckpointRequest { file: file.display().to_string(), leave_running: false, timeout_seconds: Some(30), ..Default::default() };
    detach_as(ctl, id, c, ctx, &req, what)
}

/// [`detach_into`] as `req` asks.
pub(crate) fn detach_as(
    ctl: &pvgpu_ctl::client::Control,
    id: u64,
    c: &Client,
    ctx: pvgpu_frontend::Context,
    req: &CheckpointRequest,
    what: &str,
) -> pvgpu_ctl::api::CheckpointReport {
    std::thread::scope(|s| {
        let taken = s.spawn(|| ctl.checkpoint(id, req));
        call_while(c, ctx, || c.detached() || taken.is_finished());
        taken.join().unwrap().unwrap_or_else(|e| panic!("the checkpoint of a session {what}: {e}"))
    })
}
