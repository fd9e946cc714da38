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
use std::sync::mpsc;

/// Bytes moved between device memory and the connection at a time: one
/// piece crosses the connection while the next crosses the device's link.
const PIECE: usize = 8 << 20;

/// The session's copies under way.
#[derive(Default)]
pub(super) struct PeerCopies {
    /// Opened to receive: ticket, device address, bytes.
    receive: Option<(Token, u64, u64)>,
    /// Connected to send: ticket, bytes, connection.
    send: Option<(Token, u64, OwnedFd)>,
    /// The host memory they pass through, and the context it is
    /// page-locked through.
    region: Option<(u64, Region)>,
}

/// Context `id` is going: the copies' host memory page-locked through it
/// is released first (the page-locking is the process's, and must not
/// outlive the mapping).
pub(super) fn context_going<E: Executor>(s: &mut Session<E>, id: u64) {
    if s.copies.region.as_ref().is_some_and(|(c, _)| *c == id) {
        release(s);
    }
}

/// Releases the copies' host memory (the session is ending, or its
/// context is going).
pub(super) fn release<E: Executor>(s: &mut Session<E>) {
    if let Some((c, r)) = s.copies.region.take() {
        r.release(s, c);
    }
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
    let mut region = Region::take(s, ctx)?;
    let sent = send_pieces(s, ctx, &mut conn, src, len, region.pieces(len)).and_then(|()| {
        let mut taken = [1u8];
        conn.read_exact(&mut taken).map_err(lost)?;
        if taken[0] != 0 {
            return Err(lost("the receiving backend did not take the bytes"));
        }
        Ok(())
    });
    region.keep(s, ctx);
    sent?;
    s.count_copy(Direction::DeviceToHost, len);
    Ok(())
}

/// Reads `len` bytes at `src` piece by piece into `pieces` and writes
/// them to `conn`, on a thread of its own, while the next is read.
fn send_pieces<E: Executor>(s: &mut Session<E>, ctx: u64, conn: &mut File, src: u64, len: u64, mut pieces: Vec<&mut [u8]>) -> CuRes<()> {
    if let [p, ..] = &mut pieces[..]
        && len <= p.len() as u64
    {
        // One piece: nothing to overlap.
        let n = len as usize;
        // SAFETY: `p` holds `n` writable bytes, which nothing else touches
        // during this synchronous copy.
        unsafe { s.enter(ctx)?.dtoh(p.as_mut_ptr(), src, n, None, true)? };
        return conn.write_all(&p[..n]).map_err(lost);
    }
    let (full_tx, full_rx) = mpsc::channel::<(&mut [u8], usize)>();
    let (free_tx, free_rx) = mpsc::channel::<&mut [u8]>();
    for p in pieces {
        let _ = free_tx.send(p);
    }
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || -> std::io::Result<()> {
            for (p, n) in full_rx {
                conn.write_all(&p[..n])?;
                // The device side may have stopped.
                let _ = free_tx.send(p);
            }
            Ok(())
        });
        let mut done = 0u64;
        let mut read = Ok(());
        while done < len {
            // None left: the writer stopped, and says why below.
            let Ok(p) = free_rx.recv() else { break };
            let n = p.len().min((len - done) as usize);
            // SAFETY: `p` holds `n` writable bytes, which nothing else
            // touches during this synchronous copy.
            read = s.enter(ctx).and_then(|c| unsafe { c.dtoh(p.as_mut_ptr(), src + done, n, None, true) });
            if read.is_err() || full_tx.send((p, n)).is_err() {
                break;
            }
            done += n as u64;
        }
        drop(full_tx);
        let wrote = writer.join().unwrap_or_else(|_| Err(std::io::Error::other("the writer stopped")));
        read?;
        wrote.map_err(lost)
    })
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
    let mut region = Region::take(s, ctx)?;
    let received = receive_pieces(s, ctx, &mut conn, dst, len, region.pieces(len));
    region.keep(s, ctx);
    let _ = conn.write_all(&[u8::from(received.is_err())]);
    received?;
    s.count_copy(Direction::HostToDevice, len);
    Ok(())
}

/// Reads `len` bytes from `conn` piece by piece into `pieces`, on a
/// thread of its own, and writes each at `dst` while the next is read.
fn receive_pieces<E: Executor>(s: &mut Session<E>, ctx: u64, conn: &mut File, dst: u64, len: u64, mut pieces: Vec<&mut [u8]>) -> CuRes<()> {
    if let [p, ..] = &mut pieces[..]
        && len <= p.len() as u64
    {
        // One piece: nothing to overlap.
        let n = len as usize;
        conn.read_exact(&mut p[..n]).map_err(lost)?;
        // SAFETY: `p` holds the `n` bytes just read; the copy is synchronous.
        return unsafe { s.enter(ctx)?.htod(dst, p.as_ptr(), n, None, true) };
    }
    let (full_tx, full_rx) = mpsc::channel::<(&mut [u8], usize)>();
    let (free_tx, free_rx) = mpsc::channel::<&mut [u8]>();
    for p in pieces {
        let _ = free_tx.send(p);
    }
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || -> std::io::Result<()> {
            let mut done = 0u64;
            while done < len {
                // None left: the device side stopped.
                let Ok(p) = free_rx.recv() else { return Ok(()) };
                let n = p.len().min((len - done) as usize);
                conn.read_exact(&mut p[..n])?;
                if full_tx.send((p, n)).is_err() {
                    return Ok(());
                }
                done += n as u64;
            }
            Ok(())
        });
        let mut done = 0u64;
        let mut wrote = Ok(());
        for (p, n) in &full_rx {
            // SAFETY: `p` holds the `n` bytes just read; the copy is
            // synchronous.
            wrote = s.enter(ctx).and_then(|c| unsafe { c.htod(dst + done, p.as_ptr(), n, None, true) });
            if wrote.is_err() {
                break;
            }
            done += n as u64;
            let _ = free_tx.send(p);
        }
        drop(free_tx);
        drop(full_rx);
        let read = reader.join().unwrap_or_else(|_| Err(std::io::Error::other("the reader stopped")));
        wrote?;
        read.map_err(lost)?;
        if done < len {
            return Err(lost("the connection ended early"));
        }
        Ok(())
    })
}

/// Host memory copies pass through: two pieces, page-locked through the
/// copies' context. A session keeps it between copies of one context
/// (mapped, faulted in and page-locked once).
pub(super) struct Region {
    map: memmap2::MmapMut,
    pinned: bool,
}

impl Region {
    /// The session's region for a copy through `ctx`: the one it kept, or
    /// a new one.
    fn take<E: Executor>(s: &mut Session<E>, ctx: u64) -> CuRes<Region> {
        match s.copies.region.take() {
            Some((c, r)) if c == ctx => return Ok(r),
            Some((c, r)) => r.release(s, c),
            None => {}
        }
        let mut map = memmap2::MmapMut::map_anon(2 * PIECE).map_err(|_| CuError::OUT_OF_MEMORY)?;
        let p = map.as_mut_ptr();
        // SAFETY: the mapping outlives the page-locking: `release` undoes
        // it before the region is dropped (when its context goes, or the
        // session ends: `context_going`, `release`).
        let pinned = unsafe { s.enter(ctx)?.pin_host(p, 2 * PIECE) }.is_ok();
        Ok(Region { map, pinned })
    }

    /// Kept for the session's next copy through `ctx`.
    fn keep<E: Executor>(self, s: &mut Session<E>, ctx: u64) {
        s.copies.region = Some((ctx, self));
    }

    /// Its two pieces, for a copy of `len` bytes.
    fn pieces(&mut self, len: u64) -> Vec<&mut [u8]> {
        let piece = usize::try_from(len).unwrap_or(PIECE).clamp(1, PIECE);
        self.map.chunks_mut(piece).take(2).collect()
    }

    /// Undoes the page-locking (before the mapping goes).
    fn release<E: Executor>(mut self, s: &mut Session<E>, ctx: u64) {
        if self.pinned
            && let Ok(c) = s.enter(ctx)
        {
            let _ = c.unpin_host(self.map.as_mut_ptr());
        }
    }
}
