//! Device memory: allocations (plain and stream-ordered), the default
//! pool's attributes, memsets and device-to-device copies. Host copies are
//! in [`crate::copy`].

use crate::client::Client;
use crate::error::Result;
use crate::handles::*;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::*;

impl Client {
    /// `cuMemAlloc`.
    pub fn mem_alloc(&self, ctx: Context, size: u64) -> Result<u64> {
        Ok(self.call(&MemAlloc { ctx: ctx.0.into(), size: size.into() })?.dptr.get())
    }

    /// `cuMemFree` (sent without waiting).
    pub fn mem_free(&self, dptr: u64) -> Result<()> {
        self.post(&MemFree { dptr: dptr.into() })
    }

    /// `cuMemGetInfo`: (free, total), within the session's quota.
    pub fn mem_get_info(&self, ctx: Context) -> Result<(u64, u64)> {
        let r = self.call(&MemGetInfo { ctx: ctx.0.into() })?;
        Ok((r.free.get(), r.total.get()))
    }

    /// `cuMemsetD8/D16/D32[Async]`: `count` elements of `elem_size` bytes
    /// (1, 2 or 4). Sent without waiting.
    pub fn memset(&self, dptr: u64, value: u32, elem_size: u32, count: u64, stream: Stream) -> Result<()> {
        if !matches!(elem_size, 1 | 2 | 4) {
            return Err(CuError::INVALID_VALUE.into());
        }
        self.post(&Memset {
            dptr: dptr.into(),
            count: count.into(),
            value: value.into(),
            elem_size: elem_size.into(),
            stream: stream.0.into(),
        })
    }

    /// `cuMemcpyDtoD`.
    pub fn memcpy_dtod(&self, dst: u64, src: u64, len: u64) -> Result<()> {
        self.call(&MemcpyDtoD { dst: dst.into(), src: src.into(), len: len.into(), stream: 0.into(), flags: 0.into(), reserved: 0.into() })
    }

    /// `cuMemcpyDtoDAsync` (sent without waiting).
    pub fn memcpy_dtod_async(&self, dst: u64, src: u64, len: u64, stream: Stream) -> Result<()> {
        let flags = COPY_ASYNC.into();
        self.post(&MemcpyDtoD { dst: dst.into(), src: src.into(), len: len.into(), stream: stream.0.into(), flags, reserved: 0.into() })
    }

    /// `cuMemAllocAsync` from the device's default pool, ordered on
    /// `stream`.
    pub fn mem_alloc_async(&self, ctx: Context, size: u64, stream: Stream) -> Result<u64> {
        Ok(self.call(&MemAllocAsync { ctx: ctx.0.into(), size: size.into(), stream: stream.0.into() })?.dptr.get())
    }

    /// `cuMemFreeAsync` (sent without waiting).
    pub fn mem_free_async(&self, dptr: u64, stream: Stream) -> Result<()> {
        self.post(&MemFreeAsync { dptr: dptr.into(), stream: stream.0.into() })
    }

    /// Gets (`set` is `None`) or sets an attribute of the default memory
    /// pool of `ctx`'s device; returns its value.
    pub fn mem_pool_attribute(&self, ctx: Context, attr: u32, set: Option<u64>) -> Result<u64> {
        let r =
            MemPoolAttribute { ctx: ctx.0.into(), attr: attr.into(), set: (set.is_some() as u32).into(), value: set.unwrap_or(0).into() };
        Ok(self.call(&r)?.value.get())
    }

    /// `cuMemPoolSetAccess` (`set`: the `CUmemAccess_flags`) or
    /// `cuMemPoolGetAccess`: device `dev`'s access to the default pool of
    /// `ctx`'s device; returns the flags.
    pub fn mem_pool_access(&self, ctx: Context, dev: i32, set: Option<u32>) -> Result<u32> {
        let r = MemPoolAccess {
            ctx: ctx.0.into(),
            dev: dev.into(),
            set: (set.is_some() as u32).into(),
            flags: set.unwrap_or(0).into(),
            reserved: 0.into(),
        };
        Ok(self.call(&r)?.value.get() as u32)
    }

    /// `cuMemsetD2D8/16/32[Async]`: `height` rows of `width` elements of
    /// `elem_size` bytes (1, 2 or 4), `pitch` bytes apart. Sent without
    /// waiting.
    #[allow(clippy::too_many_arguments)]
    pub fn memset_2d(&self, dptr: u64, pitch: u64, value: u32, elem_size: u32, width: u64, height: u64, stream: Stream) -> Result<()> {
        if !matches!(elem_size, 1 | 2 | 4) {
            return Err(CuError::INVALID_VALUE.into());
        }
        self.post(&Memset2D {
            dptr: dptr.into(),
            pitch: pitch.into(),
            value: value.into(),
            elem_size: elem_size.into(),
            width: width.into(),
            height: height.into(),
            stream: stream.0.into(),
        })
    }

    /// Stream memory operations (`cuStreamBatchMemOp`; one for
    /// `cuStreamWaitValue32` and kin), in order on `stream`. Sent without
    /// waiting.
    pub fn stream_mem_ops(&self, ops: &[MemOp], stream: Stream) -> Result<()> {
        if ops.len() > MAX_MEM_OPS {
            return Err(CuError::INVALID_VALUE.into());
        }
        let head = StreamMemOpsHead { stream: stream.0.into(), count: (ops.len() as u32).into(), reserved: 0.into() };
        self.post(&StreamMemOps { head, ops })
    }
}
