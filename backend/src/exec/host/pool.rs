//! Stream-ordered allocation in the test double: from the default pool
//! (plain allocations, or graph memory in a capture), and from pools of
//! the program's own: plain allocations with
//! a pool's bookkeeping (its attributes, the bytes in use and their
//! high-water mark, its size limit, which devices may use it), so that
//! programs and the session's checks run the same path as on the GPU.
//! The double caches nothing: a pool reserves what it has in use.

use super::HostContext;
use super::graph::Op;
use crate::exec::CuRes;
use crate::exec::pool::PoolOp;
use pvgpu_ring::CuError;
use std::collections::{BTreeMap, HashMap};

/// The pools of one context.
#[derive(Default)]
pub(super) struct HostPools {
    /// The context's device.
    device: usize,
    pools: HashMap<u64, HostPool>,
}

#[derive(Default)]
struct HostPool {
    max_size: u64,
    /// Made with a shareable handle type: it and its allocations may be
    /// exported.
    shareable: bool,
    /// Imported from another session: allocations come from it only by
    /// import.
    imported: bool,
    /// Reuse policies (1-3) and release threshold (4) as set.
    attrs: HashMap<u32, u64>,
    /// Live allocations: address and length.
    allocs: BTreeMap<u64, u64>,
    /// Most bytes in use since created or reset.
    high: u64,
}

impl HostPools {
    /// No pools yet, on `device`.
    pub(super) fn on(device: usize) -> HostPools {
        HostPools { device, pools: HashMap::new() }
    }
}

/// Read and write (`CU_MEM_ACCESS_FLAGS_PROT_READWRITE`).
const READ_WRITE: u32 = 3;

/// Device `peer`'s access to a pool of device `device` (a default pool or
/// one of the program's), asked or set: the pool's own device reads and
/// writes it, and cannot lose that; other devices are no peers here
/// (`can_access_peer`).
pub(super) fn access(device: usize, peer: usize, set: Option<u32>) -> CuRes<u32> {
    match set {
        None => Ok(if device == peer { READ_WRITE } else { 0 }),
        Some(READ_WRITE) if device == peer => Ok(READ_WRITE),
        Some(0 | 1 | READ_WRITE) => Err(CuError::INVALID_DEVICE),
        Some(_) => Err(CuError::INVALID_VALUE),
    }
}

impl HostContext {
    pub(super) fn alloc_async(&mut self, size: u64, s: Option<u64>) -> CuRes<u64> {
        if self.graphs.capturing(s) {
            // In a capture the memory is the graph's (allocated here at once).
            let dptr = self.graph_alloc(size)?;
            self.captured(s, || Op::MemAlloc { dptr })?;
            return Ok(dptr);
        }
        self.alloc_unchecked(size)
    }

    pub(super) fn free_async(&mut self, dptr: u64, s: Option<u64>) -> CuRes<()> {
        if self.captured(s, || Op::MemFree { dptr })? {
            return Ok(());
        }
        if self.host_work.graph_mem.contains_key(&dptr) {
            self.graph_free(dptr);
            return Ok(());
        }
        self.free_unchecked(dptr)
    }

    pub(super) fn pool_op(&mut self, op: PoolOp<u64>) -> CuRes<u64> {
        self.ok()?;
        match op {
            PoolOp::Create { max_size, shareable } => {
                let id = self.handle();
                self.pools.pools.insert(id, HostPool { max_size, shareable, ..HostPool::default() });
                Ok(id)
            }
            PoolOp::Destroy(pool) => self.pools.pools.remove(&pool).map(|_| 0).ok_or(CuError::INVALID_VALUE),
            PoolOp::Alloc { pool, size, stream } => self.alloc_from(pool, size, stream),
            PoolOp::Attribute { pool, attr, set } => {
                let used = self.in_use(pool)?;
                let p = self.pools.pools.get_mut(&pool).ok_or(CuError::INVALID_VALUE)?;
                match (attr, set) {
                    (1..=4, Some(v)) => {
                        p.attrs.insert(attr, v);
                        Ok(v)
                    }
                    (6 | 8, Some(0)) => {
                        p.high = used;
                        Ok(0)
                    }
                    (1..=3, None) => Ok(*p.attrs.get(&attr).unwrap_or(&1)),
                    (4, None) => Ok(*p.attrs.get(&attr).unwrap_or(&0)),
                    (5 | 7, None) => Ok(used),
                    (6 | 8, None) => Ok(p.high),
                    _ => Err(CuError::INVALID_VALUE),
                }
            }
            PoolOp::Access { pool, device, set } => {
                self.pools.pools.get(&pool).ok_or(CuError::INVALID_VALUE)?;
                access(self.pools.device, device, set).map(u64::from)
            }
            PoolOp::Adopt { pool, dptr, size } => {
                let used = self.in_use(pool)?;
                let p = self.pools.pools.get_mut(&pool).ok_or(CuError::INVALID_VALUE)?;
                p.allocs.insert(dptr, size);
                p.high = p.high.max(used + size);
                Ok(0)
            }
            PoolOp::Trim { pool, .. } => match pool {
                Some(p) if !self.pools.pools.contains_key(&p) => Err(CuError::INVALID_VALUE),
                _ => Ok(0),
            },
        }
    }

    fn alloc_from(&mut self, pool: u64, size: u64, stream: Option<u64>) -> CuRes<u64> {
        if self.graphs.capturing(stream) {
            // Graph memory from a pool of the program's own is not
            // modelled by the double.
            return Err(CuError::NOT_SUPPORTED);
        }
        let used = self.in_use(pool)?;
        let p = self.pools.pools.get(&pool).ok_or(CuError::INVALID_VALUE)?;
        if p.imported {
            // As the driver: an imported pool gives no new allocations.
            return Err(CuError::INVALID_VALUE);
        }
        let max = p.max_size;
        if max != 0 && used.saturating_add(size) > max {
            return Err(CuError::OUT_OF_MEMORY);
        }
        let dptr = self.alloc_unchecked(size)?;
        let p = self.pools.pools.get_mut(&pool).ok_or(CuError::INVALID_VALUE)?;
        p.allocs.insert(dptr, size);
        p.high = p.high.max(used + size);
        Ok(dptr)
    }

    /// Bytes of `pool` in use, forgetting what was freed since.
    fn in_use(&mut self, pool: u64) -> CuRes<u64> {
        let live = &self.mem.allocs;
        let p = self.pools.pools.get_mut(&pool).ok_or(CuError::INVALID_VALUE)?;
        p.allocs.retain(|dptr, _| live.contains_key(dptr));
        Ok(p.allocs.values().sum())
    }

    /// A shareable pool's export: the double's pools hold no memory of
    /// their own, so what goes to the registry is only that it may be
    /// imported.
    pub(super) fn pool_export_object(&mut self, pool: u64) -> CuRes<crate::ipc::IpcObject> {
        self.ok()?;
        match self.pools.pools.get(&pool) {
            Some(p) if p.shareable => Ok(crate::ipc::IpcObject::default()),
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    /// Another session's pool, as an imported pool of this context.
    pub(super) fn pool_import_object(&mut self, _o: &crate::ipc::IpcObject) -> CuRes<u64> {
        self.ok()?;
        let id = self.handle();
        self.pools.pools.insert(id, HostPool { imported: true, ..HostPool::default() });
        Ok(id)
    }

    /// An allocation from a shareable pool: its bytes move to a memfd,
    /// which the importing session maps.
    pub(super) fn pool_export_ptr(&mut self, dptr: u64) -> CuRes<crate::ipc::IpcObject> {
        let live = &self.mem.allocs;
        let shareable = self.pools.pools.values().any(|p| p.shareable && p.allocs.contains_key(&dptr) && live.contains_key(&dptr));
        if !shareable {
            return Err(CuError::INVALID_VALUE);
        }
        self.export_mem(dptr)
    }

    /// Another session's allocation, from imported pool `pool`, mapped
    /// here (the double does not check that it came from that pool; the
    /// driver does).
    pub(super) fn pool_import_ptr(&mut self, pool: u64, o: &crate::ipc::IpcObject, size: u64) -> CuRes<u64> {
        if !self.pools.pools.get(&pool).is_some_and(|p| p.imported) {
            return Err(CuError::INVALID_VALUE);
        }
        self.open_mem(o, size)
    }
}
