//! Memory pools of the program's own (`cuMemPoolCreate`): made on a
//! context's device, allocated from on streams, their attributes and
//! devices' access, trimmed and destroyed. The default pool's calls are in
//! [`crate::memory`].

use crate::client::Client;
use crate::error::Result;
use crate::handles::*;
use pvgpu_ring::proto::*;

impl Client {
    /// `cuMemPoolCreate` on `ctx`'s device: device memory, no shareable
    /// handle types; `max_size` 0 for the driver's default.
    pub fn mem_pool_create(&self, ctx: Context, max_size: u64) -> Result<MemPool> {
        Ok(MemPool(self.call(&MemPoolCreate { ctx: ctx.0.into(), max_size: max_size.into() })?.handle.get()))
    }

    /// `cuMemPoolDestroy`: its allocations stay valid until freed.
    pub fn mem_pool_destroy(&self, pool: MemPool) -> Result<()> {
        self.call(&MemPoolDestroy { pool: pool.0.into() })
    }

    /// `cuMemAllocFromPoolAsync` on `stream` of `ctx`; freed with
    /// [`Client::mem_free_async`] or [`Client::mem_free`].
    pub fn mem_alloc_from_pool(&self, ctx: Context, pool: MemPool, size: u64, stream: Stream) -> Result<u64> {
        let r = MemAllocFromPool { ctx: ctx.0.into(), pool: pool.0.into(), size: size.into(), stream: stream.0.into() };
        Ok(self.call(&r)?.dptr.get())
    }

    /// Gets (`set` is `None`) or sets an attribute of `pool`; returns its
    /// value.
    pub fn mem_pool_attribute_of(&self, pool: MemPool, attr: u32, set: Option<u64>) -> Result<u64> {
        let r = MemPoolAttributeOf {
            pool: pool.0.into(),
            attr: attr.into(),
            set: (set.is_some() as u32).into(),
            value: set.unwrap_or(0).into(),
        };
        Ok(self.call(&r)?.value.get())
    }

    /// `cuMemPoolSetAccess` (`set`: the `CUmemAccess_flags`) or
    /// `cuMemPoolGetAccess` of `pool` for device `dev`; returns the flags.
    pub fn mem_pool_access_of(&self, pool: MemPool, dev: i32, set: Option<u32>) -> Result<u32> {
        let r = MemPoolAccessOf {
            pool: pool.0.into(),
            dev: dev.into(),
            set: (set.is_some() as u32).into(),
            flags: set.unwrap_or(0).into(),
            reserved: 0.into(),
        };
        Ok(self.call(&r)?.value.get() as u32)
    }

    /// `cuMemPoolTrimTo` of `pool`, or with `None` of the default pool of
    /// `ctx`'s device: what the pool caches beyond `keep` bytes goes back.
    pub fn mem_pool_trim(&self, ctx: Context, pool: Option<MemPool>, keep: u64) -> Result<()> {
        self.call(&MemPoolTrim { ctx: ctx.0.into(), pool: pool.map_or(0, |p| p.0).into(), keep: keep.into() })
    }
}
