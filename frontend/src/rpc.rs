//! Requests and replies over one transport: request ids, the match of each
//! reply to its request, and typed calls from the protocol's command table.

use crate::error::{Error, ProtocolError, Result, TransportError};
use crate::mirror::Mirrors;
use crate::stats::CallStats;
use crate::transport::Transport;
use pvgpu_ring::CuResult;
use pvgpu_ring::proto::{Command, FLAG_REPLY, Header, HostMirrorPull, MirrorPullRep, MirrorWriteHead, Opcode, Reply};

/// The connection as the client uses it: one request at a time, matched to
/// its reply by id. After a transport failure every call fails at once.
pub(crate) struct Conn {
    pub(crate) t: Box<dyn Transport>,
    next_id: u64,
    pub(crate) dead: bool,
    /// The backend checkpointed the session and it left this connection:
    /// the next request goes on a new one ([`crate::reattach`]).
    pub(crate) detached: bool,
    /// How to open that new connection (clients made by
    /// [`crate::Client::connect`]).
    pub(crate) reattach: Option<crate::reattach::Reattach>,
    /// Connections left behind, kept for the page-locked memory the
    /// program holds in them.
    pub(crate) retired: Vec<Box<dyn Transport>>,
    /// The session's token, from its hello.
    pub(crate) token: [u8; 16],
    /// The backend page-locks the data area's pool on demand and has not
    /// been told yet that the program allocates from it.
    pub(crate) pool_unannounced: bool,
    /// Where the device reaches the data area, once known: `Some(0)` at
    /// the program's own addresses (the backend mapped the area at them),
    /// else the device address of its first byte
    /// ([`crate::Client::area_pointer_for_device`]).
    pub(crate) area_device: Option<u64>,
    /// Payload of the last reply.
    pub(crate) buf: Vec<u8>,
    /// Counts by command, when asked for ([`crate::Options::stats`]).
    pub(crate) stats: Option<Box<CallStats>>,
    /// Mirrored host memory kept coherent around calls.
    pub(crate) mirrors: Mirrors,
    /// Requests sent with `FLAG_REPLY` whose reply has not been read.
    awaiting: usize,
    /// Host functions of graphs ([`crate::host_call`]).
    pub(crate) host: crate::host_call::HostCallState,
    /// How long the reply of a call that may synchronise with the device
    /// is spun for ([`crate::Options::sync_spin`]); `None`: the
    /// transport's own spin (the program asked for blocking
    /// synchronisation).
    pub(crate) sync_spin: Option<std::time::Duration>,
    /// Work was posted since the last context synchronisation: the device
    /// may still write mirrored memory ([`crate::mirror_keeper`]).
    pub(crate) in_flight: bool,
    /// Captures under way and the backend thread's capture mode
    /// ([`crate::capture_mode`]).
    pub(crate) capture_modes: crate::capture_mode::CaptureModes,
}

/// Whether `op` is one of the mirror commands (sent without pushing
/// first).
fn mirror_op(op: u16) -> bool {
    [Opcode::HostMirrorMap, Opcode::HostMirrorUnmap, Opcode::HostMirrorWrite, Opcode::HostMirrorPull, Opcode::Goodbye]
        .iter()
        .any(|o| *o as u16 == op)
}

/// Whether `op` is the library's own housekeeping or the capture-mode
/// exchange itself, sent whatever the calling thread's capture mode (see
/// [`crate::capture_mode`]).
fn mode_free(op: u16) -> bool {
    mirror_op(op)
        || [
            Opcode::Hello,
            Opcode::Resume,
            Opcode::Nop,
            Opcode::CaptureModeExchange,
            Opcode::HostFnEvent,
            Opcode::HostCallWait,
            Opcode::HostCallDone,
        ]
        .iter()
        .any(|o| *o as u16 == op)
}

/// Whether `op` may let a graph read the program's pageable memory: a
/// launch, or the answer to a host call (the rest of the graph runs then).
fn reads_pageable(op: u16) -> bool {
    op == Opcode::GraphLaunch as u16 || op == Opcode::HostCallDone as u16
}

/// Whether device work may have finished when the reply to `op` came: a
/// call that may synchronise, or a query that may find work done.
fn settles(op: u16) -> bool {
    Opcode::try_from(op).is_ok_and(|o| o.may_print() || matches!(o, Opcode::StreamQuery | Opcode::EventQuery))
}

impl Conn {
    pub(crate) fn new(t: Box<dyn Transport>) -> Self {
        Conn {
            t,
            next_id: 0,
            dead: false,
            detached: false,
            reattach: None,
            retired: Vec::new(),
            token: [0; 16],
            pool_unannounced: false,
            area_device: None,
            buf: Vec::new(),
            stats: None,
            mirrors: Mirrors::default(),
            awaiting: 0,
            host: Default::default(),
            sync_spin: None,
            in_flight: false,
            capture_modes: Default::default(),
        }
    }

    /// Marks the connection broken and returns the error.
    pub(crate) fn fail<T>(&mut self, e: TransportError) -> Result<T> {
        // Which backend, for a program that uses several.
        let backend = self.reattach.as_ref().map(|r| r.addr.to_string()).unwrap_or_default();
        tracing::error!(%backend, error = %crate::error::Chain(&e), "pvgpu connection lost");
        self.dead = true;
        Err(e.into())
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead
    }

    fn check(&mut self) -> Result<()> {
        if self.dead { Err(TransportError::BackendGone.into()) } else { Ok(()) }
    }

    /// Sends a request made of `parts` under `opcode`; returns its id.
    pub(crate) fn send_raw(&mut self, opcode: u16, flags: u32, parts: &[&[u8]]) -> Result<u64> {
        if self.detached {
            self.reattach()?;
        }
        self.check()?;
        if self.host.pending && !crate::host_call::passes_pending(opcode) && !mirror_op(opcode) {
            self.wait_host_calls()?;
        }
        if !self.mirrors.is_empty() && !mirror_op(opcode) {
            self.push_mirrors(reads_pageable(opcode))?;
        }
        if !mode_free(opcode)
            && let Some(mode) = self.capture_modes.change_for_call()
        {
            self.call(&pvgpu_ring::proto::CaptureModeExchange { mode: mode.into(), reserved: 0.into() })?;
            self.capture_modes.backend_holds(mode);
        }
        self.next_id += 1;
        let len = parts.iter().map(|p| p.len()).sum();
        let mut h = Header::request(Opcode::Nop, self.next_id, flags, len);
        h.opcode = opcode.into();
        if let Some(s) = &mut self.stats {
            s.sent(opcode, flags & pvgpu_ring::proto::FLAG_REPLY != 0);
        }
        match self.t.send(&h, parts) {
            Ok(()) => {
                if flags & FLAG_REPLY != 0 {
                    self.awaiting += 1;
                } else if !mirror_op(opcode) {
                    self.in_flight = true;
                }
                Ok(self.next_id)
            }
            Err(e) => self.fail(e),
        }
    }

    /// Sends what the program changed in its mirrored memory (pageable
    /// mirrors with `pageable`).
    fn push_mirrors(&mut self, pageable: bool) -> Result<()> {
        let piece = self.t.max_inline().saturating_sub(std::mem::size_of::<MirrorWriteHead>());
        for (head, bytes) in self.mirrors.changes(piece, pageable) {
            use zerocopy::IntoBytes;
            self.send_raw(Opcode::HostMirrorWrite as u16, 0, &[head.as_bytes(), &bytes])?;
        }
        Ok(())
    }

    /// Sends what the program changed in page-locked mirrors and pulls
    /// what the device changed, between calls ([`crate::mirror_keeper`]):
    /// whether either side changed anything. Nothing is done while a reply
    /// is owed or host calls are under way.
    pub(crate) fn refresh_mirrors(&mut self) -> Result<bool> {
        if self.dead || self.awaiting > 0 || self.host.pending {
            return Ok(false);
        }
        let piece = self.t.max_inline().saturating_sub(std::mem::size_of::<MirrorWriteHead>());
        let writes = self.mirrors.changes(piece, false);
        let pushed = !writes.is_empty();
        for (head, bytes) in writes {
            use zerocopy::IntoBytes;
            self.send_raw(Opcode::HostMirrorWrite as u16, 0, &[head.as_bytes(), &bytes])?;
        }
        Ok(self.pull_mirrors()? || pushed)
    }

    /// Writes what the device changed in the mirrors into the program's
    /// memory (the last reply's payload is kept); whether it had changed
    /// anything.
    pub(crate) fn pull_mirrors(&mut self) -> Result<bool> {
        let kept = std::mem::take(&mut self.buf);
        let mut changed = false;
        let r = (|| loop {
            let id = self.send(&HostMirrorPull {}, FLAG_REPLY)?;
            self.reply(Opcode::HostMirrorPull as u16, id)?.result()?;
            let rep = MirrorPullRep::decode(Opcode::HostMirrorPull, &self.buf).map_err(|e| Error::Transport(TransportError::Decode(e)))?;
            changed |= !rep.ranges.is_empty();
            self.mirrors.apply(&rep);
            if !rep.more {
                return Ok(changed);
            }
        })();
        self.buf = kept;
        r
    }

    /// Sends a command; with `FLAG_REPLY` in `flags` the backend answers it.
    pub(crate) fn send<'a, C: Command<'a>>(&mut self, req: &C, flags: u32) -> Result<u64> {
        debug_assert!(C::POSTED || flags & pvgpu_ring::proto::FLAG_REPLY != 0, "{:?} is waited for, by the command table", C::OP);
        self.send_raw(C::OP as u16, flags, &[req.head(), req.tail()])
    }

    /// Waits for the reply to request `id` of `opcode`; returns its status
    /// and leaves the payload in `self.buf`.
    /// Program output the backend sends before a reply is passed to the
    /// output handler ([`crate::set_output_handler`]).
    pub(crate) fn reply(&mut self, opcode: u16, id: u64) -> Result<CuResult> {
        self.reply_to(opcode, id, None).map(|(r, _)| r)
    }

    /// As [`Conn::reply`]; with `dst`, a successful reply's bulk data of
    /// `dst.len()` bytes may be read straight into it (then `true`, and
    /// `self.buf` is not the payload).
    pub(crate) fn reply_to(&mut self, opcode: u16, id: u64, mut dst: Option<&mut [u8]>) -> Result<(CuResult, bool)> {
        // A call that may wait for the device spins for its reply as the
        // driver spins in it.
        let spin = self.sync_spin.filter(|_| Opcode::try_from(opcode).is_ok_and(|o| o.may_print()));
        let (h, direct) = loop {
            let mut buf = std::mem::take(&mut self.buf);
            let r = match (dst.as_deref_mut(), spin) {
                (Some(d), spin) => self.t.recv_into(&mut buf, d, spin),
                (None, Some(spin)) => self.t.recv_spinning(&mut buf, spin).map(|h| (h, false)),
                (None, None) => self.t.recv(&mut buf).map(|h| (h, false)),
            };
            self.buf = buf;
            match r {
                Ok((h, _)) if h.is_stderr() => crate::output::write_err(&self.buf),
                Ok((h, _)) if h.is_output() => crate::output::write(&self.buf),
                Ok((h, _)) if h.is_host_call() => self.run_host_call()?,
                Ok(r) => break r,
                Err(e) => return self.fail(e),
            }
        };
        if let Some(s) = &mut self.stats {
            s.replied(opcode);
        }
        if h.request_id.get() != id || h.opcode.get() != opcode {
            let e = ProtocolError::Mismatch { got: h.request_id.get(), got_op: h.opcode.get(), want: id, want_op: opcode };
            return self.fail(TransportError::Protocol(e));
        }
        self.awaiting = self.awaiting.saturating_sub(1);
        if h.is_detached() {
            self.detached = true;
            // Nothing comes on this connection any more.
            self.t.retire();
        }
        if opcode == Opcode::CtxSynchronize as u16 && h.status.get() == 0 {
            self.in_flight = false;
        }
        if self.awaiting == 0 && !self.mirrors.is_empty() && settles(opcode) {
            self.pull_mirrors()?;
        }
        Ok((CuResult(h.status.get()), direct))
    }

    /// Sends a command and waits for its reply; on success the payload is
    /// in `self.buf`.
    pub(crate) fn call_raw<'a, C: Command<'a>>(&mut self, req: &C) -> Result<()> {
        let id = self.send(req, FLAG_REPLY)?;
        self.reply(C::OP as u16, id)?.result()?;
        Ok(())
    }

    /// Sends a command, waits for its reply and decodes it.
    pub(crate) fn call<'a, C: Command<'a>>(&mut self, req: &C) -> Result<C::Reply> {
        self.call_raw(req)?;
        C::Reply::decode(C::OP, &self.buf).map_err(|e| Error::Transport(TransportError::Decode(e)))
    }
}
