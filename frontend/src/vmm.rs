//! Virtual memory management: reserve device addresses, create physical
//! memory, map it and make it accessible. Each object belongs to the
//! context it was made in.

use crate::client::Client;
use crate::error::Result;
use crate::handles::Context;
use pvgpu_ring::proto::*;

/// A physical allocation (`CUmemGenericAllocationHandle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PhysMem(pub u64);

/// Who may access a mapping (`CUmemAccess_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No access.
    None = 0,
    /// Read only.
    Read = 1,
    /// Read and write.
    ReadWrite = 3,
}

impl Client {
    /// `cuMemGetAllocationGranularity` of device memory on `device`: the
    /// minimum, or with `recommended` the recommended one.
    pub fn mem_granularity(&self, device: i32, recommended: bool) -> Result<u64> {
        let r = MemGranularity { device: device.into(), option: (recommended as u32).into() };
        Ok(self.call(&r)?.value.get())
    }

    /// `cuMemAddressReserve`: `size` bytes of device addresses, aligned to
    /// `alignment` (0: the granularity), at `addr` if free (0: anywhere).
    pub fn mem_address_reserve(&self, ctx: Context, size: u64, alignment: u64, addr: u64) -> Result<u64> {
        let r = MemAddressReserve { ctx: ctx.0.into(), size: size.into(), alignment: alignment.into(), addr: addr.into() };
        Ok(self.call(&r)?.dptr.get())
    }

    /// `cuMemAddressFree` of a whole reservation with nothing mapped.
    pub fn mem_address_free(&self, ptr: u64, size: u64) -> Result<()> {
        self.call(&MemAddressFree { ptr: ptr.into(), size: size.into() })
    }

    /// `cuMemCreate`: `size` bytes of physical memory on `ctx`'s device.
    pub fn mem_create(&self, ctx: Context, size: u64) -> Result<PhysMem> {
        Ok(PhysMem(self.call(&MemCreate { ctx: ctx.0.into(), size: size.into() })?.handle.get()))
    }

    /// `cuMemRelease`: the memory goes when its last mapping does.
    pub fn mem_release(&self, mem: PhysMem) -> Result<()> {
        self.call(&MemRelease { handle: mem.0.into() })
    }

    /// `cuMemMap`: `size` bytes of `mem` from `offset`, at `ptr` in a
    /// reservation.
    pub fn mem_map(&self, ptr: u64, size: u64, offset: u64, mem: PhysMem) -> Result<()> {
        self.call(&MemMap { ptr: ptr.into(), size: size.into(), offset: offset.into(), handle: mem.0.into() })
    }

    /// `cuMemUnmap` of whole mappings.
    pub fn mem_unmap(&self, ptr: u64, size: u64) -> Result<()> {
        self.call(&MemUnmap { ptr: ptr.into(), size: size.into() })
    }

    /// `cuMemSetAccess` from the mapping's device to whole mappings.
    pub fn mem_set_access(&self, ptr: u64, size: u64, access: Access) -> Result<()> {
        self.call(&MemSetAccess { ptr: ptr.into(), size: size.into(), flags: (access as u32).into(), reserved: 0.into() })
    }
}
