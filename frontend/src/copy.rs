//! Copies between host and device, and page-locked host memory.
//!
//! Host-to-device copies are split into chunks the transport can stage
//! (a quarter of the data area on the ring, 8 MiB on TCP), sent back to
//! back; only the last chunk of a synchronous copy waits. Device-to-host
//! copies keep a few chunk requests in flight, each into a region reserved
//! in the data area, and copy each region out when its reply arrives.
//! Memory from [`Client::host_alloc`] lives in the data area itself, so
//! copies from and to it name it directly and need no staging.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::handles::Stream;
use crate::rpc::Conn;
use crate::transport::Staged;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{
    COPY_2D_DTOD, COPY_2D_DTOH, COPY_2D_HTOD, COPY_ASYNC, COPY_PINNED, DataAreaDevice, DataRef, FLAG_REPLY, HtoDHead, Memcpy2D,
    Memcpy2DHead, MemcpyDtoH, MemcpyHtoD, Opcode,
};
use std::collections::VecDeque;

/// Copy flags for a copy that is (or is not) asynchronous.
fn flags(is_async: bool, pinned: bool) -> u32 {
    (if is_async { COPY_ASYNC } else { 0 }) | if pinned { COPY_PINNED } else { 0 }
}

impl Client {
    /// Host-to-device copy from raw memory. With `is_async` it is ordered on
    /// `stream` and sent without waiting.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes. Pageable memory is captured
    /// before this returns; memory from [`Client::host_alloc`] copied with
    /// `is_async` is read later, and must stay valid and unchanged until the
    /// stream is synchronised (as with CUDA's own page-locked memory).
    pub unsafe fn memcpy_htod_raw(&self, dst: u64, src: *const u8, len: usize, stream: Stream, is_async: bool) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let wait = !is_async || self.waits();
        let mut c = self.conn();
        if let Some(data) = c.t.pinned(src, len) {
            // One request per piece a data reference may name; only the
            // last waits.
            return for_pieces(data, |piece, off, last| {
                let head = HtoDHead {
                    dst: (dst + off).into(),
                    stream: stream.0.into(),
                    flags: flags(is_async, true).into(),
                    reserved: 0.into(),
                    data: piece,
                };
                send_copy(&mut c, &MemcpyHtoD { head, data: &[] }, wait && last)
            });
        }
        // SAFETY: the caller guarantees `src` is readable for `len` bytes.
        let src = unsafe { std::slice::from_raw_parts(src, len) };
        let chunk = c.t.max_chunk();
        let n = src.len().div_ceil(chunk);
        for (i, part) in src.chunks(chunk).enumerate() {
            let staged = match c.t.stage(part) {
                Ok(s) => s,
                Err(e) => return c.fail(e),
            };
            let head = HtoDHead {
                dst: (dst + (i * chunk) as u64).into(),
                stream: stream.0.into(),
                flags: flags(is_async, false).into(),
                reserved: 0.into(),
                data: staged.dref,
            };
            let req = MemcpyHtoD { head, data: if staged.inline { part } else { &[] } };
            send_copy(&mut c, &req, wait && i + 1 == n)?;
        }
        Ok(())
    }

    /// `cuMemcpyHtoD`: complete (or failed) when it returns.
    pub fn memcpy_htod(&self, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: a live slice, read before this returns (synchronous copy).
        unsafe { self.memcpy_htod_raw(dst, src.as_ptr(), src.len(), Stream::DEFAULT, false) }
    }

    /// `cuMemcpyHtoDAsync`: the bytes are captured before it returns, so
    /// `src` may be reused at once; the copy is ordered on `stream` and sent
    /// without waiting.
    pub fn memcpy_htod_async(&self, dst: u64, src: &[u8], stream: Stream) -> Result<()> {
        // Always staged: a slice's borrow ends at return, so nothing may read
        // it later (use memcpy_htod_raw for zero-copy page-locked sources).
        let staged: Vec<u8>;
        let src = if self.is_pinned(src.as_ptr(), src.len()) {
            staged = src.to_vec();
            &staged[..]
        } else {
            src
        };
        // SAFETY: a live slice of pageable memory, captured before return.
        unsafe { self.memcpy_htod_raw(dst, src.as_ptr(), src.len(), stream, true) }
    }

    /// Device-to-host copy into raw memory.
    ///
    /// # Safety
    /// `dst` must be writable for `len` bytes. The copy is complete when this
    /// returns, except into memory from [`Client::host_alloc`] with
    /// `is_async`: then it is ordered on `stream`, sent without waiting, and
    /// `dst` must stay valid until the stream is synchronised.
    pub unsafe fn memcpy_dtoh_raw(&self, dst: *mut u8, len: usize, src: u64, stream: Stream, is_async: bool) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let mut c = self.conn();
        if let Some(data) = c.t.pinned(dst, len) {
            let wait = !is_async || self.waits();
            return for_pieces(data, |piece, off, last| {
                let req = MemcpyDtoH {
                    src: (src + off).into(),
                    stream: stream.0.into(),
                    flags: flags(is_async, true).into(),
                    reserved: 0.into(),
                    data: piece,
                };
                send_copy(&mut c, &req, wait && last)
            });
        }
        // SAFETY: the caller guarantees `dst` is writable for `len` bytes,
        // and nothing else touches it during this synchronous copy.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        dtoh_pipelined(&mut c, dst, src, stream, is_async)
    }

    /// `cuMemcpyDtoH`.
    pub fn memcpy_dtoh(&self, dst: &mut [u8], src: u64) -> Result<()> {
        // SAFETY: a live, exclusively borrowed slice; synchronous copy.
        unsafe { self.memcpy_dtoh_raw(dst.as_mut_ptr(), dst.len(), src, Stream::DEFAULT, false) }
    }

    /// `cuMemcpyDtoHAsync` into a slice: ordered on `stream`, complete when
    /// it returns (as CUDA does for pageable destinations).
    pub fn memcpy_dtoh_async(&self, dst: &mut [u8], src: u64, stream: Stream) -> Result<()> {
        // A slice into page-locked memory is still complete on return, as the
        // borrow promises: copy it as a synchronous copy ordered on `stream`.
        let is_async = !self.is_pinned(dst.as_ptr(), dst.len());
        // SAFETY: a live, exclusively borrowed slice; the copy completes
        // before return.
        unsafe { self.memcpy_dtoh_raw(dst.as_mut_ptr(), dst.len(), src, stream, is_async) }
    }

    /// Allocates `len` bytes of page-locked host memory in the shared data
    /// area (`cuMemAllocHost`): copies from and to it need no staging copy,
    /// and asynchronous ones are truly asynchronous. `None` when the
    /// transport has no data area (TCP) or it is full.
    pub fn host_alloc(&self, len: usize) -> Option<*mut u8> {
        let mut c = self.conn();
        let p = c.t.host_alloc(len)?;
        if std::mem::take(&mut c.pool_unannounced) || c.area_device.is_none() {
            // Asking the area's device address has the backend page-lock
            // the pool (and map it for the device) before the program uses
            // it; 0 while it has no context to map it through.
            let offset = c.t.pinned(p, 1).map(|r| r.offset.get());
            match (c.call(&DataAreaDevice {}), offset) {
                (Ok(r), Some(offset)) if r.value.get() != 0 => {
                    let base = r.value.get();
                    c.area_device = Some(if base + offset == p as u64 { 0 } else { base });
                }
                (Ok(_), _) => {}
                (Err(e), _) => tracing::debug!(error = %e, "the page-locked pool was not announced to the backend"),
            }
        }
        Some(p)
    }

    /// Whether the device reaches the data area elsewhere than at the
    /// program's addresses, as known so far (then
    /// [`Client::area_pointer_for_device`] answers).
    pub fn area_elsewhere(&self) -> bool {
        self.conn().area_device.is_some_and(|b| b != 0)
    }

    /// The device address of page-locked memory at `ptr` where the device
    /// reaches the data area at other addresses than the program's (the
    /// backend serves sessions in one process, or its worker had the
    /// program's addresses taken); `None` where the program's own address
    /// is the device's (unified addressing, as natively), or `ptr` is not
    /// such memory. The library rewrites kernel arguments with it.
    pub fn area_pointer_for_device(&self, ptr: u64) -> Option<u64> {
        let c = self.conn();
        let base = c.area_device.filter(|&b| b != 0)?;
        let r = c.t.pinned(ptr as *const u8, 1)?;
        Some(base + r.offset.get())
    }

    /// Frees memory from [`Client::host_alloc`]; false if `ptr` is not one.
    pub fn host_free(&self, ptr: *mut u8) -> bool {
        let mut c = self.conn();
        c.t.host_free(ptr) || c.retired.iter_mut().any(|t| t.host_free(ptr))
    }

    /// Whether `[ptr, ptr+len)` lies inside one [`Client::host_alloc`]
    /// allocation.
    pub fn is_pinned(&self, ptr: *const u8, len: usize) -> bool {
        self.conn().t.pinned(ptr, len).is_some()
    }

    /// The device address of [`Client::host_alloc`] memory at `ptr`, when
    /// the backend mapped the data area for the device (`None`: not such
    /// memory, or the device cannot reach it). On the local transport the
    /// backend maps the area at the program's address where it can, so the
    /// device address is then `ptr` itself, as with unified addressing.
    pub fn host_device_pointer(&self, ptr: *const u8) -> Result<Option<u64>> {
        let Some(r) = self.conn().t.pinned(ptr, 1) else { return Ok(None) };
        let base = self.call(&DataAreaDevice {})?.value.get();
        Ok((base != 0).then(|| base + r.offset.get()))
    }
}

/// One side of a pitched (2D) copy.
#[derive(Debug, Clone, Copy)]
pub enum Pitched {
    /// Host memory: rows `pitch` bytes apart.
    Host {
        /// First byte.
        ptr: *const u8,
        /// Bytes between rows.
        pitch: usize,
    },
    /// Device memory: rows `pitch` bytes apart.
    Device {
        /// First byte.
        ptr: u64,
        /// Bytes between rows.
        pitch: u64,
    },
}

impl Client {
    /// `cuMemcpy2D[Async]` between host and device memory or within the
    /// device: `height` rows of `width` bytes. Host rows are gathered into
    /// (or scattered from) the staging area in chunks of whole rows, so a
    /// copy takes one request per chunk; a row wider than a chunk is copied
    /// row by row. Device-to-host and synchronous copies are complete when
    /// this returns; the others are ordered on `stream`.
    ///
    /// # Safety
    /// A host side must be valid for `height` rows of `width` bytes at its
    /// pitch (writable for a destination).
    pub unsafe fn memcpy_2d(&self, dst: Pitched, src: Pitched, width: usize, height: usize, stream: Stream, is_async: bool) -> Result<()> {
        if width == 0 || height == 0 {
            return Ok(());
        }
        let wait = !is_async || self.waits();
        let mut c = self.conn();
        match (dst, src) {
            (Pitched::Device { ptr: d, pitch: dp }, Pitched::Device { ptr: s, pitch: sp }) => {
                let req = copy_2d_head(COPY_2D_DTOD, (d, dp), (s, sp), width, height, stream, is_async, DataRef::default());
                send_copy(&mut c, &Memcpy2D { head: req, data: &[] }, wait)
            }
            (Pitched::Device { ptr: d, pitch: dp }, Pitched::Host { ptr: s, pitch: sp }) => {
                // SAFETY: the caller's contract for the host rows.
                unsafe { htod_2d(&mut c, (d, dp), (s, sp), width, height, stream, is_async, wait) }
            }
            (Pitched::Host { ptr: d, pitch: dp }, Pitched::Device { ptr: s, pitch: sp }) => {
                // SAFETY: the caller's contract for the host rows.
                unsafe { dtoh_2d(&mut c, (d as *mut u8, dp), (s, sp), width, height, stream, is_async) }
            }
            (Pitched::Host { ptr: d, pitch: dp }, Pitched::Host { ptr: s, pitch: sp }) => {
                for y in 0..height {
                    // SAFETY: both host sides hold `height` rows of `width`
                    // bytes at their pitches, per the caller; `copy` allows
                    // overlap.
                    unsafe { std::ptr::copy(s.add(y * sp), (d as *mut u8).add(y * dp), width) };
                }
                Ok(())
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn copy_2d_head(
    kind: u32,
    dst: (u64, u64),
    src: (u64, u64),
    w: usize,
    h: usize,
    stream: Stream,
    is_async: bool,
    data: DataRef,
) -> Memcpy2DHead {
    Memcpy2DHead {
        kind: kind.into(),
        flags: flags(is_async, false).into(),
        dst: dst.0.into(),
        dst_pitch: dst.1.into(),
        src: src.0.into(),
        src_pitch: src.1.into(),
        width: (w as u64).into(),
        height: (h as u64).into(),
        stream: stream.0.into(),
        data,
    }
}

/// Host rows to the device, a chunk of whole rows per request.
///
/// # Safety
/// `src` holds `h` rows of `w` bytes, `src.1` bytes apart.
#[allow(clippy::too_many_arguments)]
unsafe fn htod_2d(
    c: &mut Conn,
    dst: (u64, u64),
    src: (*const u8, usize),
    w: usize,
    h: usize,
    stream: Stream,
    is_async: bool,
    wait: bool,
) -> Result<()> {
    let rows = (c.t.max_chunk() / w).max(1);
    let mut packed = Vec::with_capacity(rows.min(h) * w);
    let mut y = 0;
    while y < h {
        let n = rows.min(h - y);
        packed.clear();
        for r in y..y + n {
            // SAFETY: row `r` of the caller's source.
            packed.extend_from_slice(unsafe { std::slice::from_raw_parts(src.0.add(r * src.1), w) });
        }
        let staged = match c.t.stage(&packed) {
            Ok(s) => s,
            Err(e) => return c.fail(e),
        };
        let head = copy_2d_head(COPY_2D_HTOD, (dst.0 + y as u64 * dst.1, dst.1), (0, 0), w, n, stream, is_async, staged.dref);
        let data: &[u8] = if staged.inline { &packed } else { &[] };
        send_copy(c, &Memcpy2D { head, data }, wait && y + n == h)?;
        y += n;
    }
    Ok(())
}

/// Device rows to the host, a chunk of whole rows per request, each
/// scattered to its rows when its reply arrives.
///
/// # Safety
/// `dst` is writable for `h` rows of `w` bytes, `dst.1` bytes apart.
#[allow(clippy::too_many_arguments)]
unsafe fn dtoh_2d(c: &mut Conn, dst: (*mut u8, usize), src: (u64, u64), w: usize, h: usize, stream: Stream, is_async: bool) -> Result<()> {
    let rows = (c.t.max_chunk() / w).max(1);
    let mut packed = Vec::new();
    let mut y = 0;
    while y < h {
        let n = rows.min(h - y);
        let staged = match c.t.reserve(n * w) {
            Ok(s) => s,
            Err(e) => return c.fail(e),
        };
        let head = copy_2d_head(COPY_2D_DTOH, (0, 0), (src.0 + y as u64 * src.1, src.1), w, n, stream, is_async, staged.dref);
        let id = c.send(&Memcpy2D { head, data: &[] }, FLAG_REPLY)?;
        if let Err(e) = c.reply(Opcode::Memcpy2D as u16, id)?.result() {
            c.t.discard(&staged);
            return Err(Error::Cuda(e));
        }
        packed.resize(n * w, 0);
        let Conn { t, buf, .. } = &mut *c;
        if let Err(e) = t.fetch(&staged, buf, &mut packed) {
            return c.fail(e);
        }
        for (i, row) in packed.chunks_exact(w).enumerate() {
            // SAFETY: row `y + i` of the caller's destination.
            unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), dst.0.add((y + i) * dst.1), w) };
        }
        y += n;
    }
    Ok(())
}

/// Calls `f` for each piece of at most [`PIECE`] bytes of `data` (a range
/// of the data area), with its offset into the range and whether it is the
/// last; stops at the first error.
fn for_pieces(data: DataRef, mut f: impl FnMut(DataRef, u64, bool) -> Result<()>) -> Result<()> {
    let (start, len) = (data.offset.get(), data.len.get());
    let mut off = 0;
    loop {
        let n = PIECE.min(len - off);
        f(DataRef::area(start + off, n as usize), off, off + n == len)?;
        off += n;
        if off == len {
            return Ok(());
        }
    }
}

/// Most bytes one copy request names in the data area (the protocol's
/// limit on a data reference).
const PIECE: u64 = 64 << 20;

/// Sends one copy request, waiting for its reply or not.
fn send_copy<'a, C: pvgpu_ring::proto::Command<'a>>(c: &mut Conn, req: &C, wait: bool) -> Result<()> {
    if wait { c.call_raw(req) } else { c.send(req, 0).map(drop) }
}

/// A pageable device-to-host copy: up to the transport's pipeline depth of
/// chunk requests in flight, each copied out as its reply arrives. The
/// first failure is returned once every chunk in flight is accounted for.
fn dtoh_pipelined(c: &mut Conn, dst: &mut [u8], src: u64, stream: Stream, is_async: bool) -> Result<()> {
    let chunk = c.t.max_chunk();
    let depth = c.t.pipeline_depth();
    let mut inflight: VecDeque<(u64, Staged, usize, usize)> = VecDeque::new();
    let mut first_err: Option<Error> = None;
    let total = dst.len();
    let mut next = 0usize;
    while next < total || !inflight.is_empty() {
        if next < total && inflight.len() < depth {
            let len = chunk.min(total - next);
            let staged = match c.t.reserve(len) {
                Ok(s) => s,
                Err(e) => return c.fail(e),
            };
            let req = MemcpyDtoH {
                src: (src + next as u64).into(),
                stream: stream.0.into(),
                flags: flags(is_async, false).into(),
                reserved: 0.into(),
                data: staged.dref,
            };
            let id = c.send(&req, FLAG_REPLY)?;
            inflight.push_back((id, staged, next, len));
            next += len;
            continue;
        }
        let Some((id, staged, at, len)) = inflight.pop_front() else { break };
        // Over a stream the chunk is read straight into the program's
        // memory; from a shared data area it is copied out of it.
        let (status, direct) = c.reply_to(Opcode::MemcpyDtoH as u16, id, Some(&mut dst[at..at + len]))?;
        match status.result() {
            Ok(()) if direct => c.t.discard(&staged),
            Ok(()) if first_err.is_none() => {
                let Conn { t, buf, .. } = &mut *c;
                if let Err(e) = t.fetch(&staged, buf, &mut dst[at..at + len]) {
                    return c.fail(e);
                }
            }
            r => {
                c.t.discard(&staged);
                first_err.get_or_insert(Error::Cuda(r.err().unwrap_or(CuError::UNKNOWN)));
            }
        }
    }
    first_err.map_or(Ok(()), Err)
}
