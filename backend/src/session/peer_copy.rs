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
use std::sync::Mutex;

/// Bytes moved between device memory and the connection at a time (the
/// connection's socket buffers hold two, [`crate::peer_copy`]).
const PIECE: usize = 4 << 20;

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
    let mut held = Buffer::take(s, ctx, len)?;
    let buf = held.bytes();
    let mut done = 0u64;
    while done < len {
        let n = buf.len().min((len - done) as usize);
        // SAFETY: `buf` holds `n` writable bytes, which nothing else touches
        // during this synchronous copy.
        unsafe { s.enter(ctx)?.dtoh(buf.as_mut_ptr(), src + done, n, None, true)? };
        conn.write_all(&buf[..n]).map_err(lost)?;
        done += n as u64;
    }
    let mut taken = [1u8];
    conn.read_exact(&mut taken).map_err(lost)?;
    if taken[0] != 0 {
        return Err(lost("the receiving backend did not take the bytes"));
    }
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
    let received = ctx.and_then(|ctx| {
        let mut held = Buffer::take(s, ctx, len)?;
        let buf = held.bytes();
        let mut done = 0u64;
        while done < len {
            let n = buf.len().min((len - done) as usize);
            conn.read_exact(&mut buf[..n]).map_err(lost)?;
            // SAFETY: `buf` holds the `n` bytes just read; the copy is
            // synchronous.
            unsafe { s.enter(ctx)?.htod(dst + done, buf.as_ptr(), n, None, true)? };
            done += n as u64;
        }
        Ok(())
    });
    // The sender's reply waits for this byte: 0 when all of it is in device
    // memory (a range freed since it opened fails here too).
    let _ = conn.write_all(&[u8::from(received.is_err())]);
    received?;
    s.count_copy(Direction::HostToDevice, len);
    Ok(())
}

/// The worker's host memory for copies, mapped once when it starts
/// ([`reserve`]), and the context it was last page-locked through.
static RESERVED: std::sync::OnceLock<Mutex<(memmap2::MmapMut, Option<u64>)>> = std::sync::OnceLock::new();

/// Maps the host memory copies between backends pass through, a piece at
/// a time. A worker process calls it when it starts, before the driver:
/// its mappings decide where the driver places modules' globals, which a
/// restore must find where they were ([`super::restore`]), so a copy maps
/// and starts nothing of its own (no thread either) that would stay after
/// it. The pages are touched, and page-locked, when the first copy runs.
pub fn reserve() {
    if RESERVED.get().is_none()
        && let Ok(m) = memmap2::MmapMut::map_anon(PIECE)
    {
        let _ = RESERVED.set(Mutex::new((m, None)));
    }
}

/// Host memory a copy passes through: the worker's own, or (with sessions
/// in threads, or while another session's copy holds it) a mapping for
/// this copy. The connection's socket buffers, wider than a piece, let one
/// piece cross the connection while the next crosses the device's link.
enum Buffer {
    Reserved(std::sync::MutexGuard<'static, (memmap2::MmapMut, Option<u64>)>),
    Own(memmap2::MmapMut),
}

impl Buffer {
    /// A buffer for a copy of `len` bytes through context `ctx`.
    fn take<E: Executor>(s: &mut Session<E>, ctx: u64, len: u64) -> CuRes<Buffer> {
        if let Some(m) = RESERVED.get()
            && let Ok(mut g) = m.try_lock()
        {
            if g.1 != Some(ctx) {
                let p = g.0.as_mut_ptr();
                // The page-locking is never undone: the driver drops it
                // with the context, or the process.
                // SAFETY: the mapping is the process's for its whole life.
                let r = unsafe { s.enter(ctx)?.pin_host(p, PIECE) };
                if matches!(r, Ok(()) | Err(CuError::HOST_MEMORY_ALREADY_REGISTERED)) {
                    g.1 = Some(ctx);
                }
            }
            return Ok(Buffer::Reserved(g));
        }
        let size = usize::try_from(len).unwrap_or(PIECE).clamp(1, PIECE);
        memmap2::MmapMut::map_anon(size).map(Buffer::Own).map_err(|_| CuError::OUT_OF_MEMORY)
    }

    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Buffer::Reserved(g) => &mut g.0[..],
            Buffer::Own(m) => &mut m[..],
        }
    }
}
