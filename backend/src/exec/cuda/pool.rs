//! Memory pools: attributes of the device's default pool, and pools of the
//! program's own ([`PoolOp`]). A pool value the session holds is the
//! driver's `CUmemoryPool` of a pool this context made; the guest only
//! ever sees the session's id for it.

use super::driver::{entry, ok};
use super::ext::capturing;
use super::{CudaContext, CudaStream, ck, raw_stream};
use crate::exec::CuRes;
use crate::exec::pool::PoolOp;
use crate::ipc::IpcObject;
use cudarc::driver::sys;
use pvgpu_ring::cuda::api::{
    CU_MEM_LOCATION_TYPE_DEVICE, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, CUmemAccess_flags, CUmemAccessDesc, CUmemLocation, CUmemPool_attribute,
    Driver,
};
use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;
use std::sync::Arc;

/// The driver's pool a session's pool value is.
fn raw(pool: u64) -> sys::CUmemoryPool {
    pool as usize as sys::CUmemoryPool
}

impl CudaContext {
    fn default_pool(&self) -> CuRes<sys::CUmemoryPool> {
        let mut pool = ptr::null_mut();
        // SAFETY: valid out-pointer; the context's device.
        ck(unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, self.dev) })?;
        Ok(pool)
    }

    /// An attribute of the device's default pool.
    pub(super) fn pool_attribute(&mut self, attr: u32, set: Option<u64>) -> CuRes<u64> {
        let pool = self.default_pool()?;
        self.attribute_of(pool, attr, set)
    }

    fn attribute_of(&mut self, pool: sys::CUmemoryPool, attr: u32, set: Option<u64>) -> CuRes<u64> {
        // The reuse policies are ints, the rest 64-bit values.
        let attr = CUmemPool_attribute(attr);
        let wide = attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        let mut v = set.unwrap_or(0);
        let mut narrow = v as c_int;
        let p: *mut c_void = if wide { (&mut v as *mut u64).cast() } else { (&mut narrow as *mut c_int).cast() };
        let call = entry(if set.is_some() { self.drv.cuMemPoolSetAttribute } else { self.drv.cuMemPoolGetAttribute })?;
        // SAFETY: a pool of this context's device, an attribute the
        // session allowed, storage of the attribute's width.
        ok(unsafe { call(pool.cast(), attr, p) })?;
        Ok(if wide { v } else { narrow as u32 as u64 })
    }

    /// A pool of the program's own, or the default pool's trim.
    pub(super) fn pool_op(&mut self, op: PoolOp<CudaStream>) -> CuRes<u64> {
        match op {
            PoolOp::Create { max_size, shareable } => {
                let pool = self.pool_create(max_size, shareable)?;
                if let Some(placed) = self.placed.as_mut().filter(|_| !shareable) {
                    placed.pool_made(pool, max_size);
                }
                Ok(pool)
            }
            PoolOp::Destroy(pool) => {
                if let Some(placed) = self.placed.as_mut() {
                    placed.pool_gone(pool);
                }
                // SAFETY: a pool this context made and the session has not
                // destroyed; allocations from it stay valid until freed.
                ck(unsafe { sys::cuMemPoolDestroy(raw(pool)) }).map(|()| 0)
            }
            PoolOp::Alloc { pool, size, stream } if self.placed.as_ref().is_some_and(|p| p.has_pool(pool)) && !capturing(stream)? => {
                self.placed.as_mut().ok_or(pvgpu_ring::CuError::INVALID_VALUE)?.pool_alloc(pool, size)
            }
            PoolOp::Adopt { pool, dptr, size } => {
                self.placed.as_mut().ok_or(pvgpu_ring::CuError::NOT_SUPPORTED)?.pool_adopt(pool, dptr, size).map(|()| 0)
            }
            PoolOp::Alloc { pool, size, stream } => {
                let mut p = 0;
                // SAFETY: valid out-pointer, a live pool of the session, a
                // stream of this context.
                ck(unsafe { sys::cuMemAllocFromPoolAsync(&mut p, size as usize, raw(pool), raw_stream(stream)) })?;
                Ok(p)
            }
            PoolOp::Attribute { pool, attr, set } => match self.placed.as_mut().and_then(|p| p.pool_attribute(pool, attr, set)) {
                Some(answer) => answer,
                None => self.attribute_of(raw(pool), attr, set),
            },
            PoolOp::Access { pool, device, set } => self.access_of(raw(pool), device, set).map(u64::from),
            PoolOp::Trim { pool, keep } => {
                let pool = match pool {
                    Some(p) => raw(p),
                    None => self.default_pool()?,
                };
                // SAFETY: a live pool of this context's device.
                ck(unsafe { sys::cuMemPoolTrimTo(pool, keep as usize) }).map(|()| 0)
            }
        }
    }

    fn pool_create(&mut self, max_size: u64, shareable: bool) -> CuRes<u64> {
        use sys::CUmemAllocationHandleType as Handles;
        let props = sys::CUmemPoolProps {
            allocType: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            handleTypes: if shareable { Handles::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR } else { Handles::CU_MEM_HANDLE_TYPE_NONE },
            location: sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: self.dev },
            win32SecurityAttributes: ptr::null_mut(),
            maxSize: max_size as usize,
            usage: 0,
            reserved: [0; 54],
        };
        let mut pool = ptr::null_mut();
        // SAFETY: valid out-pointer and properties: device memory of this
        // context's device, file descriptors as the only shareable handles.
        ck(unsafe { sys::cuMemPoolCreate(&mut pool, &props) })?;
        Ok(pool as usize as u64)
    }

    /// The descriptor of a pool made shareable, for the registry.
    pub(super) fn pool_export_fd(&mut self, pool: u64) -> CuRes<IpcObject> {
        let mut fd: c_int = -1;
        // SAFETY: a POSIX descriptor is an int, written to `fd`; a live pool
        // of the session made shareable (the session checked; the driver
        // refuses one that is not).
        ck(unsafe {
            sys::cuMemPoolExportToShareableHandle(
                (&raw mut fd).cast(),
                raw(pool),
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        if fd < 0 {
            return Err(pvgpu_ring::CuError::UNKNOWN);
        }
        // SAFETY: the driver just opened this descriptor for us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(IpcObject { bytes: [0; 64], fd: Some(Arc::new(fd)) })
    }

    /// Another session's pool, from its descriptor.
    pub(super) fn pool_import_fd(&mut self, o: &IpcObject) -> CuRes<u64> {
        let fd = o.fd.as_ref().ok_or(pvgpu_ring::CuError::INVALID_VALUE)?;
        let mut pool = ptr::null_mut();
        // SAFETY: valid out-pointer; a POSIX handle is the descriptor as a
        // pointer-sized value; the descriptor is one the driver made in
        // another session's worker (the registry's, never the guest's),
        // open during the call.
        ck(unsafe {
            sys::cuMemPoolImportFromShareableHandle(
                &mut pool,
                fd.as_raw_fd() as usize as *mut c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        Ok(pool as usize as u64)
    }

    /// The driver's export data of an allocation from a shareable pool.
    pub(super) fn pool_export_ptr(&mut self, dptr: u64) -> CuRes<IpcObject> {
        let mut data = sys::CUmemPoolPtrExportData { reserved: [0; 64] };
        // SAFETY: valid out-pointer; an allocation of the session's (the
        // driver refuses one not from a shareable pool).
        ck(unsafe { sys::cuMemPoolExportPointer(&mut data, dptr) })?;
        Ok(IpcObject { bytes: data.reserved, fd: None })
    }

    /// Another session's allocation, from `pool` (imported here).
    pub(super) fn pool_import_ptr(&mut self, pool: u64, o: &IpcObject) -> CuRes<u64> {
        let mut data = sys::CUmemPoolPtrExportData { reserved: o.bytes };
        let mut p = 0;
        // SAFETY: valid out-pointer; a pool this context imported; export
        // data the driver made in another session's worker (the
        // registry's, never the guest's).
        ck(unsafe { sys::cuMemPoolImportPointer(&mut p, raw(pool), &mut data) })?;
        Ok(p)
    }
    fn access_of(&mut self, pool: sys::CUmemoryPool, device: usize, set: Option<u32>) -> CuRes<u32> {
        let mut peer = 0;
        // SAFETY: valid out-pointer; the session checked the ordinal.
        ck(unsafe { sys::cuDeviceGet(&mut peer, device as c_int) })?;
        access(self.drv, pool, peer, set)
    }
}

/// Sets (`set`: the `CUmemAccess_flags`) or asks device `peer`'s access to
/// `pool`, a pool of a device of this driver (a default pool, or one of a
/// session); returns the flags.
pub(super) fn access(drv: &Driver, pool: sys::CUmemoryPool, peer: sys::CUdevice, set: Option<u32>) -> CuRes<u32> {
    let mut location = CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: peer };
    match set {
        Some(flags) => {
            let desc = CUmemAccessDesc { location, flags: CUmemAccess_flags(flags) };
            // SAFETY: a live pool of this driver, one descriptor of a device
            // of it; the driver checks the flags.
            ok(unsafe { entry(drv.cuMemPoolSetAccess)?(pool.cast(), &desc, 1) })?;
            Ok(flags)
        }
        None => {
            let mut flags = CUmemAccess_flags(0);
            // SAFETY: valid out-pointers; a live pool of this driver.
            ok(unsafe { entry(drv.cuMemPoolGetAccess)?(&mut flags, pool.cast(), &mut location) })?;
            Ok(flags.0)
        }
    }
}
