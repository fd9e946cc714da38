//! Interprocess handles: memory and events shared with another process of
//! the same guest. The 64 bytes of a handle are the backend's, opaque here.

use crate::PhysMem;
use crate::client::Client;
use crate::error::Result;
use crate::handles::*;
use pvgpu_ring::proto::*;
use zerocopy::{FromBytes, IntoBytes};

/// `CU_EVENT_INTERPROCESS`.
pub(crate) const EVENT_INTERPROCESS: u32 = 0x4;

/// A handle's 64 bytes, as the program holds them.
fn bytes(h: &IpcHandle) -> [u8; 64] {
    let mut out = [0u8; 64];
    out.copy_from_slice(h.as_bytes());
    out
}

fn parse(bytes: &[u8; 64]) -> IpcHandle {
    // Any 64 bytes are an `IpcHandle`; the backend judges them.
    IpcHandle::read_from_bytes(bytes).unwrap_or_default()
}

impl Client {
    /// `cuIpcGetMemHandle` of the allocation holding `ptr`.
    pub fn ipc_get_mem_handle(&self, ctx: Context, ptr: u64) -> Result<[u8; 64]> {
        let r = self.call(&IpcGetMemHandle { ctx: ctx.0.into(), ptr: ptr.into() })?;
        Ok(bytes(&r.handle))
    }

    /// `cuIpcOpenMemHandle`: the address the memory is mapped at in `ctx`,
    /// and its size.
    pub fn ipc_open_mem_handle(&self, ctx: Context, handle: &[u8; 64], flags: u32) -> Result<(u64, u64)> {
        let r = self.call(&IpcOpenMemHandle { ctx: ctx.0.into(), handle: parse(handle), flags: flags.into(), reserved: 0.into() })?;
        Ok((r.ptr.get(), r.size.get()))
    }

    /// `cuIpcCloseMemHandle`.
    pub fn ipc_close_mem_handle(&self, ctx: Context, ptr: u64) -> Result<()> {
        self.call(&IpcCloseMemHandle { ctx: ctx.0.into(), ptr: ptr.into() })
    }

    /// `cuIpcGetEventHandle` of an event made with `CU_EVENT_INTERPROCESS`.
    pub fn ipc_get_event_handle(&self, e: Event) -> Result<[u8; 64]> {
        let r = self.call(&IpcGetEventHandle { event: e.0.into() })?;
        Ok(bytes(&r.handle))
    }

    /// `cuIpcOpenEventHandle`: the other process's event, as an event of
    /// `ctx`.
    pub fn ipc_open_event_handle(&self, ctx: Context, handle: &[u8; 64]) -> Result<Event> {
        let e = Event(self.call(&IpcOpenEventHandle { ctx: ctx.0.into(), handle: parse(handle) })?.handle.get());
        self.interprocess.lock().unwrap_or_else(|p| p.into_inner()).insert(e.0);
        Ok(e)
    }
}

/// Physical memory as `MemCreateWith` or `MemImport` gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhysInfo {
    /// Its handle.
    pub mem: PhysMem,
    /// Bytes.
    pub size: u64,
    /// `MEM_COMPRESSIBLE`, `MEM_SHAREABLE`, as the device gave them.
    pub flags: u32,
}

impl From<MemCreateRep> for PhysInfo {
    fn from(r: MemCreateRep) -> Self {
        PhysInfo { mem: PhysMem(r.handle.get()), size: r.size.get(), flags: r.flags.get() }
    }
}

impl Client {
    /// `cuMemCreate` with `flags` (`MEM_COMPRESSIBLE`, `MEM_SHAREABLE`).
    pub fn mem_create_with(&self, ctx: Context, size: u64, flags: u32) -> Result<PhysInfo> {
        Ok(self.call(&MemCreateWith { ctx: ctx.0.into(), size: size.into(), flags: flags.into(), reserved: 0.into() })?.into())
    }

    /// `cuMemExportToShareableHandle`: what the shareable handle's file
    /// holds.
    pub fn mem_export(&self, mem: PhysMem) -> Result<[u8; 64]> {
        let r = self.call(&MemExport { handle: mem.0.into() })?;
        Ok(bytes(&r.handle))
    }

    /// `cuMemImportFromShareableHandle`, in `ctx`.
    pub fn mem_import(&self, ctx: Context, handle: &[u8; 64]) -> Result<PhysInfo> {
        Ok(self.call(&MemImport { ctx: ctx.0.into(), handle: parse(handle) })?.into())
    }

    /// `cuMemPoolCreate` on `ctx`'s device with `flags` (`MEM_SHAREABLE`:
    /// exportable to another process of the guest).
    pub fn mem_pool_create_with(&self, ctx: Context, max_size: u64, flags: u32) -> Result<MemPool> {
        let r = MemPoolCreateWith { ctx: ctx.0.into(), max_size: max_size.into(), flags: flags.into(), reserved: 0.into() };
        Ok(MemPool(self.call(&r)?.handle.get()))
    }

    /// `cuMemPoolExportToShareableHandle`: what the shareable handle's
    /// file holds.
    pub fn mem_pool_export(&self, pool: MemPool) -> Result<[u8; 64]> {
        Ok(bytes(&self.call(&MemPoolExport { pool: pool.0.into() })?.handle))
    }

    /// `cuMemPoolImportFromShareableHandle`, as a pool of `ctx`.
    pub fn mem_pool_import(&self, ctx: Context, handle: &[u8; 64]) -> Result<MemPool> {
        Ok(MemPool(self.call(&MemPoolImport { ctx: ctx.0.into(), handle: parse(handle) })?.handle.get()))
    }

    /// `cuMemPoolExportPointer`: what `CUmemPoolPtrExportData` holds.
    pub fn mem_pool_export_pointer(&self, ptr: u64) -> Result<[u8; 64]> {
        Ok(bytes(&self.call(&MemPoolExportPointer { ptr: ptr.into() })?.handle))
    }

    /// `cuMemPoolImportPointer` from imported `pool`: the address and size
    /// of the allocation (freed with [`Client::mem_free`] or
    /// [`Client::mem_free_async`]).
    pub fn mem_pool_import_pointer(&self, pool: MemPool, data: &[u8; 64]) -> Result<(u64, u64)> {
        let r = self.call(&MemPoolImportPointer { pool: pool.0.into(), handle: parse(data) })?;
        Ok((r.ptr.get(), r.size.get()))
    }
}

impl Client {
    fn peer(&self, r: PeerAccess) -> Result<i32> {
        Ok(self.call(&r)?.value.get())
    }

    /// `cuDeviceCanAccessPeer`.
    pub fn can_access_peer(&self, dev: i32, peer: i32) -> Result<bool> {
        Ok(self.peer(PeerAccess { op: PEER_CAN_ACCESS.into(), dev: dev.into(), peer: peer.into(), ..Default::default() })? != 0)
    }

    /// `cuDeviceGetP2PAttribute` of the link from `src` to `dst`.
    pub fn p2p_attribute(&self, attr: u32, src: i32, dst: i32) -> Result<i32> {
        self.peer(PeerAccess { op: PEER_ATTRIBUTE.into(), attr: attr.into(), dev: src.into(), peer: dst.into(), ..Default::default() })
    }

    /// `cuCtxEnablePeerAccess` (`enable`) or `cuCtxDisablePeerAccess`:
    /// `ctx` reaching `peer`'s memory.
    pub fn peer_access(&self, ctx: Context, peer: Context, enable: bool, flags: u32) -> Result<()> {
        let op = if enable { PEER_ENABLE } else { PEER_DISABLE };
        let r = PeerAccess { op: op.into(), ctx: ctx.0.into(), peer_ctx: peer.0.into(), flags: flags.into(), ..Default::default() };
        self.peer(r).map(|_| ())
    }
}
