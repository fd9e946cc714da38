//! `HostCallWait`: the program waits while the host nodes of its launched
//! graphs come due. Each due call goes to the program as a host-call
//! message; the program runs the function and answers `HostCallDone`, the
//! only message it may send until the wait's reply. The wait ends when no
//! launch that runs host nodes is under way.

use super::{Broken, Ended};
use crate::conn::Conn;
use crate::exec::Executor;
use crate::session::Session;
use pvgpu_ring::proto::{self, Body, HEADER_LEN, Header, HostCallMsg, Opcode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use zerocopy::IntoBytes;

/// How long the loop sleeps between looks at the launches when no call is
/// due (a call coming due wakes it at once).
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// Runs the session's host calls in the program until its launches with
/// host nodes are done; `buf` receives the program's answers.
pub(super) fn serve<E: Executor>(session: &mut Session<E>, conn: &mut dyn Conn, buf: &mut Vec<u8>, stop: &AtomicBool) -> Result<(), Ended> {
    let calls = session.host_calls().clone();
    let mut unanswered = 0usize;
    loop {
        for c in calls.take_due() {
            let msg = HostCallMsg { id: c.id.into(), func: c.func.into(), data: c.data.into() };
            conn.send(&Header::host_call(), msg.as_bytes(), stop)?;
            unanswered += 1;
        }
        if unanswered > 0 {
            conn.recv(buf, stop)?;
            conn.release()?;
            let id =
                answer(buf).ok_or(Broken::Session(crate::session::Broken::Protocol("only HostCallDone may come during HostCallWait")))?;
            if !calls.finish(id) {
                return Err(Broken::Session(crate::session::Broken::Protocol("HostCallDone of a call never sent")).into());
            }
            unanswered -= 1;
            continue;
        }
        if stop.load(Ordering::Relaxed) {
            return Err(Ended::Shutdown);
        }
        if !session.host_work_pending() {
            return Ok(());
        }
        calls.wait_due(LOOK_EVERY);
    }
}

/// The call id a `HostCallDone` message in `buf` answers.
fn answer(buf: &[u8]) -> Option<u64> {
    let h = Header::parse(buf).ok()?;
    if h.opcode.get() != Opcode::HostCallDone as u16 {
        return None;
    }
    let done = proto::HostCallDone::decode(Opcode::HostCallDone, buf.get(HEADER_LEN..)?).ok()?;
    Some(done.id.get())
}
