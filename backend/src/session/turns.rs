//! The session's side of GPU turns ([`crate::share`]): a request that
//! enters a context waits for its device's turn, and gives the turn back,
//! its queued work finished first, when the supervisor asks.

use super::Session;
use crate::exec::graph::ExecGraph;
use crate::exec::{ExecContext, Executor};

impl<E: Executor> Session<E> {
    /// Waits for the turn on `device` (the first context this request
    /// enters), giving back a turn held elsewhere or asked back.
    pub(super) fn take_turn(&mut self, device: usize) {
        let Some(meter) = self.limits.meter.clone() else { return };
        let turn = meter.turn();
        turn.enter(device, &|| false, &mut |d| self.drain_device(d));
        self.turn = Some(device);
    }

    /// The request is done, whatever it entered contexts for (its
    /// commands, host calls it waited for, a checkpoint or restore taken
    /// with it): its turn is no longer busy, and if the request was a
    /// synchronisation while others wait for the GPU, the turn goes back.
    /// The serving loop calls it once per request.
    pub fn leave_turn(&mut self) {
        let synced = std::mem::take(&mut self.synced);
        if self.turn.take().is_none() {
            return;
        }
        let Some(meter) = self.limits.meter.clone() else { return };
        let turn = meter.turn();
        if synced {
            turn.leave_synced(&mut |d| self.drain_device(d));
        } else {
            turn.leave();
        }
    }

    /// Waits for the work the session queued on `device` to finish, so
    /// that it does not run into the next session's turn.
    fn drain_device(&mut self, device: usize) {
        let ids: Vec<u64> = self.ctxs.iter().filter(|(_, e)| e.device == device).map(|(id, _)| id).collect();
        for id in ids {
            let Some(e) = self.ctxs.get_mut(id) else { continue };
            let entered = e.ctx.make_current().is_ok();
            // A launch whose host nodes wait for the program cannot finish
            // while this thread waits here: left running (it overlaps the
            // next turn).
            if entered && !e.ctx.host_work_pending().unwrap_or(true) {
                if let Err(err) = e.ctx.synchronize() {
                    // The context's error stays with it; the program's own
                    // next synchronising call reports it.
                    tracing::debug!(session = self.id, device, error = ?err, "draining before giving back the GPU turn");
                }
            }
            self.current = entered.then_some(id);
        }
    }
}
