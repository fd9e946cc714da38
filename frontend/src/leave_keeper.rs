//! A session asked to leave while its program makes no call. A checkpoint
//! is taken at a call that waits for a reply; a program that makes none
//! (waiting for its user, or busy on the CPU) would hold its session
//! until the checkpoint's timeout. The backend asks for a call instead:
//! over a shared-memory ring with the control page's byte
//! ([`pvgpu_ring::layout::LEAVE_WANTED`]), over TCP, TLS and RDMA with a
//! message of its own ([`pvgpu_ring::proto::FLAG_LEAVE_WANTED`], sent to
//! frontends that announce [`pvgpu_ring::proto::FEATURE_LEAVE_FRAMES`]). A
//! thread of the library looks a few times a second and, while no call is
//! under way, makes one (`Nop`), at which the checkpoint is taken. The
//! program learns at its next call that its session left, as after any
//! checkpoint.

use crate::rpc::Conn;
use std::sync::{Mutex, Weak};
use std::time::Duration;

/// How often the thread looks at the connection's byte or socket.
pub const LOOK_EVERY: Duration = Duration::from_millis(100);

/// Starts the thread for the connection `conn` when its transport can be
/// asked; it ends with the connection.
pub(crate) fn start(conn: Weak<Mutex<Conn>>) {
    let spawned = std::thread::Builder::new().name("pvgpu-leave".into()).spawn(move || keep(conn));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the thread that answers checkpoints of an idle program");
    }
}

fn keep(conn: Weak<Mutex<Conn>>) {
    loop {
        std::thread::sleep(LOOK_EVERY);
        let Some(conn) = conn.upgrade() else { return };
        // A call under way is where the checkpoint is taken anyway.
        let Ok(mut c) = conn.try_lock() else { continue };
        if c.is_dead() {
            return;
        }
        // Host functions of graphs waiting for the program are the
        // program's own threads' to run; the checkpoint waits for its call.
        if c.detached || c.host.pending || !c.t.leave_wanted() {
            continue;
        }
        tracing::debug!("the backend asks for a call (a checkpoint is ordered)");
        // Its outcome is the program's to see at its next call (the session
        // left, or goes on).
        if let Err(e) = c.call(&pvgpu_ring::proto::Nop {}) {
            tracing::debug!(error = %e, "the call asked for failed");
        }
    }
}
