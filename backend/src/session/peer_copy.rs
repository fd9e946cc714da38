//! Copies between this session and a session of the same program at
//! another backend, from backend to backend ([`crate::peer_copy`]).
//!
//! The program opens the copy here when this session receives
//! ([`peer_copy_open`]: a ticket), has the other backend connect with it
//! ([`peer_copy_connect`] there), then sends there ([`peer_copy_send`])
//! while this session receives ([`peer_copy_receive`]).
//!
//! Rules enforced here: the range is checked against the session's
//! allocations when the copy opens, and again when its bytes are sent or
//! received (the program may have freed it between); a session holds one
//! copy each way at a time, and a send or receive must name the ticket
//! and length it opened or connected; the connection carries exactly the
//! copy's length, and the receiver's last byte says whether all of it
//! reached device memory.

use super::{Io, Session};
use crate::exec::{CuRes, ExecContext, Executor};
use crate::ipc::Token;
use crate::meter::Direction;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{self, PeerTicketRep};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;

/// Bytes moved between device memory and the connection at a time.
const PIECE: usize = 16 << 20;
/// A buffer this large or larger is page-locked for its copies.
const PIN_FROM: usize = 2 << 20;

/// The session's copies under way.
#[derive(Default)]
pub(super) struct PeerCopies {
    /// Opened to receive: ticket, device address, bytes.
    receive: Option<(Token, u64, u64)>,
    /// Connected to send: ticket, bytes, connection.
    send: Option<(Token, u64, OwnedFd)>,
}

/// The connection broke or the other side did not take the bytes.
fn lost(e: impl std::fmt::Display) -> CuError {
    tracing::debug!(error = %e, "a copy between backends failed");
    CuError::PEER_ACCESS_UNSUPPORTED
}

pub(super) fn peer_copy_open<E: Executor>(s: &mut Session<E>, r: proto::PeerCopyOpen, _: &mut Io<'_>) -> CuRes<PeerTicketRep> {
    let (dst, len) = (r.dst.get(), r.len.get());
    if len == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    s.range(dst, len)?;
    let broker = super::ipc::broker(s)?;
    let ticket = broker.copy_open(len).map_err(|e| {
        tracing::debug!(error = %e, "no ticket for a copy from another backend");
        CuError::PEER_ACCESS_UNSUPPORTED
    })?;
    s.copies.receive = Some((ticket, dst, len));
    Ok(PeerTicketRep { ticket })
}

pub(super) fn peer_copy_connect<E: Executor>(s: &mut Session<E>, r: proto::PeerCopyConnect, _: &mut Io<'_>) -> CuRes<()> {
    s.copies.send = None;
    let len = r.len.get();
    let address = r.address().ok_or(CuError::INVALID_VALUE)?;
    let broker = super::ipc::broker(s)?;
    // Not a peer, or not reachable: the program copies through itself.
    let fd = broker.copy_connect(address, &r.ticket, len).map_err(|_| CuError::PEER_ACCESS_UNSUPPORTED)?;
    s.copies.send = Some((r.ticket, len, fd));
    Ok(())
}

pub(super) fn peer_copy_send<E: Executor>(s: &mut Session<E>, r: proto::PeerCopySend, _: &mut Io<'_>) -> CuRes<()> {
    let (src, len) = (r.src.get(), r.len.get());
    let (fd, ctx) = match s.copies.send.take() {
        Some((t, n, fd)) if t == r.ticket && n == len => (fd, s.range(src, len)?),
        _ => return Err(CuError::INVALID_VALUE),
    };
    let mut conn = File::from(fd);
    let mut buf = Buffer::new(s, ctx, len)?;
    let sent: CuRes<()> = (|| {
        let mut done = 0u64;
        while done < len {
            let n = buf.len().min((len - done) as usize);
            let p = buf.ptr();
            // SAFETY: `buf` holds `n` writable bytes at `p`, which nothing
            // else touches during this synchronous copy.
            unsafe { s.enter(ctx)?.dtoh(p, src + done, n, None, true)? };
            conn.write_all(&buf.bytes()[..n]).map_err(lost)?;
            done += n as u64;
        }
        let mut taken = [1u8];
        conn.read_exact(&mut taken).map_err(lost)?;
        if taken[0] != 0 {
            return Err(lost("the receiving backend did not take the bytes"));
        }
        Ok(())
    })();
    buf.release(s, ctx);
    sent?;
    s.count_copy(Direction::DeviceToHost, len);
    Ok(())
}

pub(super) fn peer_copy_receive<E: Executor>(s: &mut Session<E>, r: proto::PeerCopyReceive, _: &mut Io<'_>) -> CuRes<()> {
    let (ticket, dst, len) = match s.copies.receive.take() {
        Some(c) if c.0 == r.ticket => c,
        _ => return Err(CuError::INVALID_VALUE),
    };
    let broker = super::ipc::broker(s)?;
    let ctx = s.range(dst, len);
    let fd = broker.copy_take(&ticket).map_err(lost)?;
    let mut conn = File::from(fd);
    let ctx = match ctx {
        Ok(c) => c,
        Err(e) => {
            // Freed since it opened: the sender learns the copy failed.
            let _ = conn.write_all(&[1]);
            return Err(e);
        }
    };
    let mut buf = Buffer::new(s, ctx, len)?;
    let received: CuRes<()> = (|| {
        let mut done = 0u64;
        while done < len {
            let n = buf.len().min((len - done) as usize);
            conn.read_exact(&mut buf.bytes_mut()[..n]).map_err(lost)?;
            let p = buf.ptr();
            // SAFETY: `buf` holds the `n` bytes just read at `p`; the copy
            // is synchronous.
            unsafe { s.enter(ctx)?.htod(dst + done, p, n, None, true)? };
            done += n as u64;
        }
        Ok(())
    })();
    buf.release(s, ctx);
    let _ = conn.write_all(&[u8::from(received.is_err())]);
    received?;
    s.count_copy(Direction::HostToDevice, len);
    Ok(())
}

/// Host memory a copy passes through: a piece of the copy, page-locked
/// through the copy's context when large.
struct Buffer {
    map: memmap2::MmapMut,
    pinned: bool,
}

impl Buffer {
    fn new<E: Executor>(s: &mut Session<E>, ctx: u64, len: u64) -> CuRes<Buffer> {
        let size = usize::try_from(len).unwrap_or(PIECE).min(PIECE);
        let mut map = memmap2::MmapMut::map_anon(size).map_err(|_| CuError::OUT_OF_MEMORY)?;
        let mut pinned = false;
        if size >= PIN_FROM {
            let p = map.as_mut_ptr();
            // SAFETY: the mapping outlives the registration: `release`
            // undoes it before the buffer is dropped.
            pinned = unsafe { s.enter(ctx)?.register_host(p, size) }.is_ok();
        }
        Ok(Buffer { map, pinned })
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn ptr(&mut self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    fn bytes(&self) -> &[u8] {
        &self.map
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// Undoes the page-locking (before the mapping goes).
    fn release<E: Executor>(mut self, s: &mut Session<E>, ctx: u64) {
        if self.pinned
            && let Ok(c) = s.enter(ctx)
        {
            let _ = c.unregister_host(self.map.as_mut_ptr());
        }
    }
}
