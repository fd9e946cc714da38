//! Requests and replies over one transport: request ids, the match of each
//! reply to its request, and typed calls from the protocol's command table.

use crate::error::{Error, ProtocolError, Result, TransportError};
use crate::stats::CallStats;
use crate::transport::Transport;
use pvgpu_ring::CuResult;
use pvgpu_ring::proto::{Command, FLAG_REPLY, Header, Opcode, Reply};

/// The connection as the client uses it: one request at a time, matched to
/// its reply by id. After a transport failure every call fails at once.
pub(crate) struct Conn {
    pub(crate) t: Box<dyn Transport>,
    next_id: u64,
    dead: bool,
    /// Payload of the last reply.
    pub(crate) buf: Vec<u8>,
    /// Counts by command, when asked for ([`crate::Options::stats`]).
    pub(crate) stats: Option<Box<CallStats>>,
}

impl Conn {
    pub(crate) fn new(t: Box<dyn Transport>) -> Self {
        Conn { t, next_id: 0, dead: false, buf: Vec::new(), stats: None }
    }

    /// Marks the connection broken and returns the error.
    pub(crate) fn fail<T>(&mut self, e: TransportError) -> Result<T> {
        tracing::error!(error = %crate::error::Chain(&e), "pvgpu connection lost");
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
        self.check()?;
        self.next_id += 1;
        let len = parts.iter().map(|p| p.len()).sum();
        let mut h = Header::request(Opcode::Nop, self.next_id, flags, len);
        h.opcode = opcode.into();
        if let Some(s) = &mut self.stats {
            s.sent(opcode, flags & pvgpu_ring::proto::FLAG_REPLY != 0);
        }
        match self.t.send(&h, parts) {
            Ok(()) => Ok(self.next_id),
            Err(e) => self.fail(e),
        }
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
        let h = loop {
            let mut buf = std::mem::take(&mut self.buf);
            let r = self.t.recv(&mut buf);
            self.buf = buf;
            match r {
                Ok(h) if h.is_output() => crate::output::write(&self.buf),
                Ok(h) => break h,
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
        Ok(CuResult(h.status.get()))
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
