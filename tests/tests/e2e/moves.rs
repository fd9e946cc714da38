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
/// the migration's report. `what` names the session in a failure.
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
        let moving = s.spawn(|| pvgpu_ctl::migrate::migrate(&from, &to, id, &address, &dir.0, 30, t == Transport::Tcp));
        call_while(c, ctx, || c.detached() || moving.is_finished());
        moving.join().unwrap().unwrap_or_else(|e| panic!("the migration of a session {what}: {e}"))
    });
    (b, report)
}

/// Checkpoints the session of the program `c` (context `ctx`) into a file,
/// restarts its backend `h` and restores the file there; returns what the
/// snapshot described.
pub(crate) fn through_a_restart(h: &mut Harness, c: &Client, ctx: pvgpu_frontend::Context, what: &str) -> Meta {
    let ctl = h.control().unwrap();
    let id = ctl.sessions().unwrap()[0].id;
    let dir = TempDir::new("checkpoint");
    let file = dir.0.join("session.pvgpu");
    let req = CheckpointRequest { file: file.display().to_string(), leave_running: false, timeout_seconds: Some(30) };
    std::thread::scope(|s| {
        let taken = s.spawn(|| ctl.checkpoint(id, &req));
        call_while(c, ctx, || c.detached() || taken.is_finished());
        taken.join().unwrap().unwrap_or_else(|e| panic!("the checkpoint of a session {what}: {e}"))
    });
    let meta = pvgpu_ctl::snapshot::decode(&std::fs::read(&file).unwrap()).unwrap().0;
    h.restart();
    h.control().unwrap().restore(&RestoreRequest { file: file.display().to_string() }).unwrap();
    meta
}
