//! `HostCallWait`: the program waits while the host nodes of its launched
//! graphs come due. Each due call goes to the program as a host-call
//! message, one at a time; the program runs the function and answers
//! `HostCallDone`. Until then it may only keep its mirrored memory coherent
//! (`HostMirrorPull`, `HostMirrorWrite`), which is served here. The wait
//! ends when no launch that runs host nodes is under way.

use super::{Broken, Ended};
use crate::conn::Conn;
use crate::exec::Executor;
use crate::exec::host_call::HostCall;
use crate::session::{Outcome, Session};
use pvgpu_ring::proto::{self, Body, HEADER_LEN, Header, HostCallMsg, Opcode};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use zerocopy::IntoBytes;

/// How long the loop sleeps between looks at the launches when no call is
/// due (a call coming due wakes it at once).
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// The buffers of one wait.
#[derive(Default)]
pub(super) struct Buffers {
    msg: Vec<u8>,
    out: Vec<u8>,
}

fn broken(what: &'static str) -> Ended {
    Broken::Session(crate::session::Broken::Protocol(what)).into()
}

/// Runs the session's host calls in the program until its launches with
/// host nodes are done.
pub(super) fn serve<E: Executor>(session: &mut Session<E>, conn: &mut dyn Conn, b: &mut Buffers, stop: &AtomicBool) -> Result<(), Ended> {
    let calls = session.host_calls().clone();
    let mut queued: VecDeque<HostCall> = VecDeque::new();
    let mut waiting: Option<u64> = None;
    loop {
        queued.extend(calls.take_due());
        if waiting.is_none() {
            if let Some(c) = queued.pop_front() {
                let msg = HostCallMsg { id: c.id.into(), func: c.func.into(), data: c.data.into() };
                conn.send(&Header::host_call(), msg.as_bytes(), stop)?;
                waiting = Some(c.id);
            }
        }
        if let Some(id) = waiting {
            if answer(session, conn, b, stop)? == Some(id) {
                if !calls.finish(id) {
                    return Err(broken("HostCallDone of a call never sent"));
                }
                waiting = None;
            }
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

/// Receives the program's next message during the wait: the call id of a
/// `HostCallDone`, or `None` after serving a mirror request.
fn answer<E: Executor>(session: &mut Session<E>, conn: &mut dyn Conn, b: &mut Buffers, stop: &AtomicBool) -> Result<Option<u64>, Ended> {
    conn.recv(&mut b.msg, stop)?;
    let msg = conn.received(&b.msg);
    let h = Header::parse(msg).map_err(Broken::Header)?;
    let payload = msg.get(HEADER_LEN..).unwrap_or(&[]);
    match Opcode::try_from(h.opcode.get()) {
        Ok(Opcode::HostCallDone) => {
            let done = proto::HostCallDone::decode(Opcode::HostCallDone, payload).map_err(|_| broken("malformed HostCallDone"))?;
            conn.release()?;
            Ok(Some(done.id.get()))
        }
        Ok(Opcode::HostMirrorPull | Opcode::HostMirrorWrite) => {
            let outcome = session.process(&h, payload, conn.area(), &mut b.out);
            conn.release()?;
            if let (Outcome::Reply(status), true) = (outcome.map_err(Broken::Session)?, h.wants_reply()) {
                let staged = session.staged_reply();
                conn.send_staged(&h.reply(status, b.out.len() + staged), &b.out, staged, stop)?;
            }
            Ok(None)
        }
        _ => Err(broken("only HostCallDone and mirror requests may come during HostCallWait")),
    }
}
