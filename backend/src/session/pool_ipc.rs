//! Memory pools shared between processes of one guest
//! (`cuMemPoolCreate` with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`,
//! `cuMemPoolExportToShareableHandle`, `cuMemPoolImportFromShareableHandle`,
//! `cuMemPoolExportPointer`, `cuMemPoolImportPointer`), as NVIDIA's
//! streamOrderedAllocationIPC sample and RAPIDS use them: one process
//! makes a shareable pool and allocates from it; another imports the pool
//! and then each allocation it is told of.
//!
//! Both the pool's handle and an allocation's export data are the
//! registry's tokens ([`crate::ipc`]): the driver's descriptor and export
//! data stay in the backend, reach only a session of the same guest, and
//! the driver sees only what it made. An export is withdrawn when its pool
//! is destroyed or its allocation freed (or their context goes); an
//! imported allocation is freed by the importer as any allocation is and
//! counts in the exporter's quota.

use super::pool::{PoolEntry, adopt, create};
use super::{Alloc, AllocKind, Io, Session};
use crate::exec::{CuRes, ExecContext, Executor};
use pvgpu_ring::CuError;
use pvgpu_ring::proto::{self, HandleRep, IPC_POOL, IPC_POOL_POINTER, IpcHandleRep, IpcOpenRep, MEM_SHAREABLE};

pub(super) fn mem_pool_create_with<E: Executor>(s: &mut Session<E>, r: proto::MemPoolCreateWith, _: &mut Io<'_>) -> CuRes<HandleRep> {
    if r.flags.get() & !MEM_SHAREABLE != 0 {
        return Err(CuError::INVALID_VALUE);
    }
    create(s, r.ctx.get(), r.max_size.get(), r.flags.get() & MEM_SHAREABLE != 0)
}

pub(super) fn mem_pool_export<E: Executor>(s: &mut Session<E>, r: proto::MemPoolExport, _: &mut Io<'_>) -> CuRes<IpcHandleRep> {
    let id = r.pool.get();
    let (ctx, raw) = match s.pools.get(id) {
        // Made without a shareable handle type (or imported), as the
        // driver refuses it.
        Some(p) if p.shareable => (p.ctx, p.raw),
        Some(_) => return Err(CuError::INVALID_VALUE),
        None => return Err(CuError::INVALID_HANDLE),
    };
    super::ipc::export(s, IPC_POOL, id, 0, |s| s.enter(ctx)?.pool_export(raw))
}

pub(super) fn mem_pool_import<E: Executor>(s: &mut Session<E>, r: proto::MemPoolImport, _: &mut Io<'_>) -> CuRes<HandleRep> {
    let broker = super::ipc::broker(s)?;
    let ctx = r.ctx.get();
    s.enter(ctx)?;
    if s.pools.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let token = r.handle.token(IPC_POOL).ok_or(CuError::INVALID_VALUE)?;
    let (_, object) = broker.import(IPC_POOL, &token)?;
    let raw = s.enter(ctx)?.pool_import(&object)?;
    adopt(s, PoolEntry { ctx, raw, shareable: false, imported: true, made: Default::default() })
}

pub(super) fn mem_pool_export_pointer<E: Executor>(
    s: &mut Session<E>,
    r: proto::MemPoolExportPointer,
    _: &mut Io<'_>,
) -> CuRes<IpcHandleRep> {
    let ptr = r.ptr.get();
    // The whole allocation holding `ptr`, of a pool of the session's own
    // (the executor checks the pool is shareable).
    let (&base, &a) = s.allocs.range(..=ptr).next_back().filter(|(b, a)| ptr < *b + a.len).ok_or(CuError::INVALID_VALUE)?;
    if !matches!(a.kind, AllocKind::Pooled(_)) {
        return Err(CuError::INVALID_VALUE);
    }
    super::ipc::export(s, IPC_POOL_POINTER, base, a.len, |s| s.enter(a.ctx)?.pool_export_pointer(base))
}

pub(super) fn mem_pool_import_pointer<E: Executor>(
    s: &mut Session<E>,
    r: proto::MemPoolImportPointer,
    _: &mut Io<'_>,
) -> CuRes<IpcOpenRep> {
    let broker = super::ipc::broker(s)?;
    let (ctx, raw) = match s.pools.get(r.pool.get()) {
        Some(p) if p.imported => (p.ctx, p.raw),
        Some(_) => return Err(CuError::INVALID_VALUE),
        None => return Err(CuError::INVALID_HANDLE),
    };
    if s.allocs.len() >= s.limits.max_objects {
        return Err(CuError::OUT_OF_MEMORY);
    }
    let token = r.handle.token(IPC_POOL_POINTER).ok_or(CuError::INVALID_VALUE)?;
    let (size, object) = broker.import(IPC_POOL_POINTER, &token)?;
    let ptr = s.enter(ctx)?.pool_import_pointer(raw, &object, size)?;
    if s.allocs.contains_key(&ptr) {
        // Imported twice: the driver maps it once, and the first import's
        // free unmaps it.
        return Ok(IpcOpenRep { ptr: ptr.into(), size: size.into() });
    }
    s.allocs.insert(ptr, Alloc { len: size, ctx, kind: AllocKind::PoolImported });
    Ok(IpcOpenRep { ptr: ptr.into(), size: size.into() })
}
