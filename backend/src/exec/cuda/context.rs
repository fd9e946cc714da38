//! The GPU executor's [`ExecContext`]: each command of a session as the
//! driver call (or calls) that runs it, in the context made for the
//! session.

use super::driver::{entry, ok};
use super::*;
use crate::exec::ExecContext;
use pvgpu_ring::cuda::api::{CUfunction_attribute, CUlimit};

impl ExecContext for CudaContext {
    type Module = CudaModule;
    type Function = CudaFunction;
    type Stream = CudaStream;
    type Event = CudaEvent;

    fn make_current(&mut self) -> CuRes<()> {
        // SAFETY: the context is alive (owned by self).
        ck(unsafe { sys::cuCtxSetCurrent(self.raw) })
    }

    fn peer_id(&self) -> u64 {
        self.raw as usize as u64
    }

    fn peer_access(&mut self, peer: u64, enable: bool, flags: u32) -> CuRes<()> {
        let peer = peer as usize as sys::CUcontext;
        // SAFETY: `peer` is the raw handle of another live context of the
        // session (`peer_id`); this one is current.
        ck(unsafe { if enable { sys::cuCtxEnablePeerAccess(peer, flags) } else { sys::cuCtxDisablePeerAccess(peer) } })
    }

    unsafe fn register_host(&mut self, ptr: *mut u8, len: usize) -> CuRes<Option<u64>> {
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the caller keeps the range mapped while this context
        // lives; PORTABLE makes it pinned for every context of the process,
        // DEVICEMAP gives it a device address.
        if ck(unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, flags) }).is_err() {
            // SAFETY: as above, without the device mapping.
            ck(unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, sys::CU_MEMHOSTREGISTER_PORTABLE) })?;
            return Ok(None);
        }
        let mut d = 0;
        // SAFETY: valid out-pointer; `ptr` was registered with DEVICEMAP.
        Ok(ck(unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, ptr.cast(), 0) }).ok().map(|_| d))
    }

    fn unregister_host(&mut self, ptr: *mut u8) -> CuRes<()> {
        // SAFETY: the driver checks that `ptr` is a registered range.
        ck(unsafe { sys::cuMemHostUnregister(ptr.cast()) })
    }

    // SAFETY: the caller keeps the range mapped while it is pinned
    // (`ExecContext::pin_host`).
    unsafe fn pin_host(&mut self, ptr: *mut u8, len: usize) -> CuRes<()> {
        // SAFETY: mapped while pinned (above); PORTABLE pins it for every
        // context of the process, and without DEVICEMAP it gets no device
        // address.
        ck(unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, sys::CU_MEMHOSTREGISTER_PORTABLE) })
    }

    fn unpin_host(&mut self, ptr: *mut u8) -> CuRes<()> {
        // SAFETY: the driver checks that `ptr` is a registered range.
        ck(unsafe { sys::cuMemHostUnregister(ptr.cast()) })
    }

    // SAFETY: the caller keeps the range mapped while it is pinned
    // (`ExecContext::pin_read_only`).
    unsafe fn pin_read_only(&mut self, ptr: *const u8, len: usize) -> CuRes<bool> {
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_READ_ONLY;
        // SAFETY: mapped while pinned (above); READ_ONLY: the device only
        // reads it, so a mapping without write access can be pinned.
        ck(unsafe { sys::cuMemHostRegister_v2(ptr.cast_mut().cast(), len, flags) }).map(|()| true)
    }

    fn synchronize(&mut self) -> CuRes<()> {
        // SAFETY: no arguments; acts on the current context.
        ck(unsafe { sys::cuCtxSynchronize() })
    }

    fn mem_alloc(&mut self, size: u64) -> CuRes<u64> {
        if let Some(placed) = self.placed.as_mut() {
            return placed.alloc_now(size);
        }
        let mut p = 0;
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuMemAlloc_v2(&mut p, size as usize) })?;
        Ok(p)
    }

    fn mem_free(&mut self, dptr: u64) -> CuRes<()> {
        if let Some(placed) = self.placed.as_mut().filter(|p| p.owns(dptr)) {
            return placed.free(dptr);
        }
        // SAFETY: the session only frees addresses this context allocated.
        ck(unsafe { sys::cuMemFree_v2(dptr) })
    }

    /// Only with placed memory (`--device-memory placed`): the driver's
    /// `cuMemAlloc` heap has addresses another process cannot reserve
    /// ([`crate::exec::Executor::restores_addresses`]).
    fn restore_memory(&mut self, ranges: &[(u64, u64)], handed: Vec<crate::exec::HandedPiece>) -> CuRes<()> {
        self.placed.as_mut().ok_or(CuError::NOT_SUPPORTED)?.restore(ranges, handed)
    }

    fn hand_over(&mut self, ranges: &[(u64, u64)]) -> CuRes<Vec<crate::exec::HandedPiece>> {
        self.placed.as_mut().ok_or(CuError::NOT_SUPPORTED)?.hand_over(ranges)
    }

    fn mem_get_info(&mut self) -> CuRes<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        ck(unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
        Ok((free as u64, total as u64))
    }

    fn memset(&mut self, dptr: u64, value: u32, elem_size: u32, count: u64, stream: Option<CudaStream>) -> CuRes<()> {
        let n = count as usize;
        let s = raw_stream(stream);
        // SAFETY: the session checked the range lies in this session's
        // allocations; the stream belongs to this context.
        ck(unsafe {
            match elem_size {
                1 => sys::cuMemsetD8Async(dptr, value as u8, n, s),
                2 => sys::cuMemsetD16Async(dptr, value as u16, n, s),
                _ => sys::cuMemsetD32Async(dptr, value, n, s),
            }
        })
    }

    unsafe fn htod(&mut self, dst: u64, src: *const u8, len: usize, stream: Option<CudaStream>, wait: bool) -> CuRes<()> {
        match stream {
            // SAFETY: the caller guarantees src is readable for len bytes;
            // the device range was checked.
            None => ck(unsafe { sys::cuMemcpyHtoD_v2(dst, src.cast(), len) }),
            Some(s) => {
                // SAFETY: as above; the stream belongs to this context.
                ck(unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, s.0) })?;
                if wait {
                    // The source may be reused once we return (CUDA stages
                    // pageable sources the same way).
                    // SAFETY: the stream is alive.
                    ck(unsafe { sys::cuStreamSynchronize(s.0) })?;
                }
                Ok(())
            }
        }
    }

    unsafe fn dtoh(&mut self, dst: *mut u8, src: u64, len: usize, stream: Option<CudaStream>, wait: bool) -> CuRes<()> {
        match stream {
            // SAFETY: the caller guarantees dst is writable for len bytes;
            // the device range was checked.
            None => ck(unsafe { sys::cuMemcpyDtoH_v2(dst.cast(), src, len) }),
            Some(s) => {
                // SAFETY: as above; the stream belongs to this context.
                ck(unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, s.0) })?;
                if wait {
                    // SAFETY: the stream is alive.
                    ck(unsafe { sys::cuStreamSynchronize(s.0) })?;
                }
                Ok(())
            }
        }
    }

    fn dtod(&mut self, dst: u64, src: u64, len: u64, stream: Option<CudaStream>, is_async: bool) -> CuRes<()> {
        if is_async {
            // SAFETY: both ranges were checked; the stream belongs here.
            ck(unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len as usize, raw_stream(stream)) })
        } else {
            // SAFETY: both ranges were checked.
            ck(unsafe { sys::cuMemcpyDtoD_v2(dst, src, len as usize) })
        }
    }

    fn module_load(&mut self, image: &[u8]) -> CuRes<CudaModule> {
        if image.last() != Some(&0) {
            return Err(CuError::INVALID_IMAGE);
        }
        let mut m = ptr::null_mut();
        // SAFETY: the image is NUL-terminated (so PTX text ends in bounds)
        // and cubin/fatbin headers were bounds-checked by the session.
        ck(unsafe { sys::cuModuleLoadData(&mut m, image.as_ptr().cast()) })?;
        Ok(CudaModule(m))
    }

    fn link(&mut self, spec: &pvgpu_ring::proto::LinkSpec<'_>) -> crate::exec::Linked {
        self.link_on_driver(spec)
    }

    fn module_unload(&mut self, m: CudaModule) -> CuRes<()> {
        // SAFETY: the module was loaded in this context and is unloaded once.
        ck(unsafe { sys::cuModuleUnload(m.0) })
    }

    fn function(&mut self, m: &CudaModule, name: &str) -> CuRes<(CudaFunction, Vec<Param>)> {
        let cname = std::ffi::CString::new(name).map_err(|_| CuError::INVALID_VALUE)?;
        let mut f = ptr::null_mut();
        // SAFETY: valid out-pointer, NUL-terminated name, live module.
        ck(unsafe { sys::cuModuleGetFunction(&mut f, m.0, cname.as_ptr()) })?;
        let mut params = Vec::new();
        for i in 0..pvgpu_ring::proto::MAX_PARAMS {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: valid out-pointers; an index past the last parameter
            // returns CUDA_ERROR_INVALID_VALUE.
            if unsafe { sys::cuFuncGetParamInfo(f, i, &mut off, &mut size) } as u32 != 0 {
                break;
            }
            params.push(Param { offset: off as u32, size: size as u32 });
        }
        Ok((CudaFunction(f), params))
    }

    fn function_names(&mut self, m: &CudaModule) -> CuRes<Vec<String>> {
        let mut n = 0u32;
        // SAFETY: valid out-pointer, live module.
        ck(unsafe { sys::cuModuleGetFunctionCount(&mut n, m.0) })?;
        let n = (n as usize).min(pvgpu_ring::proto::MAX_NAMES);
        let mut fns = vec![ptr::null_mut(); n];
        // SAFETY: room for `n` handles, live module.
        ck(unsafe { sys::cuModuleEnumerateFunctions(fns.as_mut_ptr(), n as u32, m.0) })?;
        let mut names = Vec::with_capacity(n);
        for f in fns {
            let mut p = ptr::null();
            // SAFETY: valid out-pointer; `f` is a function of the live module.
            ck(unsafe { sys::cuFuncGetName(&mut p, f) })?;
            // SAFETY: the driver returns a NUL-terminated name it owns.
            names.push(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn global(&mut self, m: &CudaModule, name: &str) -> CuRes<(u64, u64)> {
        let cname = std::ffi::CString::new(name).map_err(|_| CuError::INVALID_VALUE)?;
        let (mut p, mut size) = (0u64, 0usize);
        // SAFETY: valid out-pointers, NUL-terminated name, live module.
        ck(unsafe { sys::cuModuleGetGlobal_v2(&mut p, &mut size, m.0, cname.as_ptr()) })?;
        Ok((p, size as u64))
    }

    fn is_managed(&mut self, dptr: u64) -> bool {
        let mut managed: u32 = 0;
        // SAFETY: a 4-byte out-value, as the attribute is; the address of
        // a global of this context's module.
        let r = unsafe {
            sys::cuPointerGetAttribute((&mut managed as *mut u32).cast(), sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED, dptr)
        };
        r == sys::CUresult::CUDA_SUCCESS && managed != 0
    }

    fn launch(
        &mut self,
        f: CudaFunction,
        d: LaunchDims,
        params: &[u8],
        layout: &[Param],
        attrs: &[LaunchAttr],
        stream: Option<CudaStream>,
    ) -> CuRes<()> {
        // Most kernels take few parameters: no allocation for those.
        let mut small = [ptr::null_mut::<c_void>(); 16];
        let mut big: Vec<*mut c_void> = Vec::new();
        let args: &mut [*mut c_void] = if layout.len() <= small.len() {
            &mut small[..layout.len()]
        } else {
            big.resize(layout.len(), ptr::null_mut());
            &mut big
        };
        for (slot, p) in args.iter_mut().zip(layout) {
            let end = p.offset as usize + p.size as usize;
            if end > params.len() {
                return Err(CuError::INVALID_VALUE);
            }
            // SAFETY: offset is within `params` (checked just above).
            *slot = unsafe { params.as_ptr().add(p.offset as usize) } as *mut c_void;
        }
        if !attrs.is_empty() {
            return self.launch_with(f, d, args, attrs, stream);
        }
        // SAFETY: one pointer per kernel parameter, each to at least `size`
        // bytes of `params`, which outlives the call; the driver copies the
        // values before returning.
        ck(unsafe {
            sys::cuLaunchKernel(
                f.0,
                d.grid[0],
                d.grid[1],
                d.grid[2],
                d.block[0],
                d.block[1],
                d.block[2],
                d.shared_mem,
                raw_stream(stream),
                args.as_mut_ptr(),
                ptr::null_mut(),
            )
        })
    }

    fn stream_create(&mut self, flags: u32, priority: i32) -> CuRes<CudaStream> {
        let mut s = ptr::null_mut();
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuStreamCreateWithPriority(&mut s, flags, priority) })?;
        Ok(CudaStream(s))
    }

    fn stream_destroy(&mut self, s: CudaStream) -> CuRes<()> {
        // A capture it had ends with it.
        self.capture_ended(s);
        // SAFETY: the stream was created here and is destroyed once.
        ck(unsafe { sys::cuStreamDestroy_v2(s.0) })
    }

    fn stream_synchronize(&mut self, s: CudaStream) -> CuRes<()> {
        // SAFETY: live stream.
        ck(unsafe { sys::cuStreamSynchronize(s.0) })
    }

    fn stream_query(&mut self, s: CudaStream) -> CuRes<bool> {
        // SAFETY: live stream.
        match ck(unsafe { sys::cuStreamQuery(s.0) }) {
            Ok(()) => Ok(true),
            Err(CuError::NOT_READY) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn event_create(&mut self, flags: u32) -> CuRes<CudaEvent> {
        let mut e = ptr::null_mut();
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuEventCreate(&mut e, flags) })?;
        Ok(CudaEvent(e))
    }

    fn event_destroy(&mut self, e: CudaEvent) -> CuRes<()> {
        // SAFETY: the event was created here and is destroyed once.
        ck(unsafe { sys::cuEventDestroy_v2(e.0) })
    }

    fn event_record(&mut self, e: CudaEvent, s: Option<CudaStream>) -> CuRes<()> {
        // SAFETY: live event and stream of this context.
        ck(unsafe { sys::cuEventRecord(e.0, raw_stream(s)) })
    }

    fn event_query(&mut self, e: CudaEvent) -> CuRes<bool> {
        // SAFETY: live event.
        match ck(unsafe { sys::cuEventQuery(e.0) }) {
            Ok(()) => Ok(true),
            Err(CuError::NOT_READY) => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn event_synchronize(&mut self, e: CudaEvent) -> CuRes<()> {
        // SAFETY: live event.
        ck(unsafe { sys::cuEventSynchronize(e.0) })
    }

    fn event_elapsed(&mut self, a: CudaEvent, b: CudaEvent) -> CuRes<f32> {
        let mut ms = 0f32;
        // SAFETY: valid out-pointer, live events.
        ck(unsafe { sys::cuEventElapsedTime_v2(&mut ms, a.0, b.0) })?;
        Ok(ms)
    }

    fn stream_wait_event(&mut self, s: Option<CudaStream>, e: CudaEvent) -> CuRes<()> {
        // SAFETY: live stream (or the default stream) and event.
        ck(unsafe { sys::cuStreamWaitEvent(raw_stream(s), e.0, 0) })
    }

    fn stream_wait_foreign_event(&mut self, s: Option<CudaStream>, e: CudaEvent) -> CuRes<()> {
        // An event is the driver's, whichever context made it.
        self.stream_wait_event(s, e)
    }

    fn stream_attr(&mut self, s: Option<CudaStream>, attr: u32, set: Option<&[u8; 64]>) -> CuRes<[u8; 64]> {
        self.stream_attribute(s, attr, set)
    }

    fn stream_copy_attrs(&mut self, dst: Option<CudaStream>, src: Option<CudaStream>) -> CuRes<()> {
        // SAFETY: two streams of this context (or its default stream).
        ok(unsafe { entry(self.drv.cuStreamCopyAttributes)?(raw_stream(dst) as _, raw_stream(src) as _) })
    }

    fn func_get_attribute(&mut self, f: CudaFunction, attr: i32) -> CuRes<i32> {
        let mut v = 0;
        let get = entry(self.drv.cuFuncGetAttribute)?;
        // SAFETY: valid out-pointer, live function; the attribute is passed
        // as the guest sent it (an unknown one is an error status).
        ok(unsafe { get(&mut v, CUfunction_attribute(attr as u32), f.0.cast()) })?;
        Ok(v)
    }

    fn func_set_attribute(&mut self, f: CudaFunction, attr: i32, value: i32) -> CuRes<()> {
        let set = entry(self.drv.cuFuncSetAttribute)?;
        // SAFETY: live function; the attribute as above.
        ok(unsafe { set(f.0.cast(), CUfunction_attribute(attr as u32), value) })
    }

    fn info(&mut self) -> CuRes<CtxInfo> {
        let (mut least, mut greatest, mut flags, mut version) = (0, 0, 0u32, 0u32);
        // SAFETY: valid out-pointers; acts on the current context (this one).
        ck(unsafe { sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) })?;
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuCtxGetFlags(&mut flags) })?;
        // SAFETY: valid out-pointer, live context.
        ck(unsafe { sys::cuCtxGetApiVersion(self.raw, &mut version) })?;
        Ok(CtxInfo { api_version: version, flags, least_priority: least, greatest_priority: greatest })
    }

    fn get_limit(&mut self, limit: u32) -> CuRes<u64> {
        let mut v = 0usize;
        let get = entry(self.drv.cuCtxGetLimit)?;
        // SAFETY: valid out-pointer; the limit as the guest sent it.
        ok(unsafe { get(&mut v, CUlimit(limit)) })?;
        Ok(v as u64)
    }

    fn occupancy(&mut self, f: CudaFunction, kind: u32, block_size: i32, limit: i32, dyn_smem: u64, flags: u32) -> CuRes<(i64, i64)> {
        match kind {
            0 => {
                let mut n = 0;
                // SAFETY: valid out-pointer, live function.
                ck(unsafe {
                    sys::cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&mut n, f.0, block_size, dyn_smem as usize, flags)
                })?;
                Ok((n as i64, 0))
            }
            1 => {
                let (mut grid, mut block) = (0, 0);
                // SAFETY: valid out-pointers, live function, no callback.
                ck(unsafe {
                    sys::cuOccupancyMaxPotentialBlockSizeWithFlags(&mut grid, &mut block, f.0, None, dyn_smem as usize, limit, flags)
                })?;
                Ok((grid as i64, block as i64))
            }
            _ => {
                let mut size = 0usize;
                // SAFETY: valid out-pointer, live function.
                ck(unsafe { sys::cuOccupancyAvailableDynamicSMemPerBlock(&mut size, f.0, limit, block_size) })?;
                Ok((size as i64, 0))
            }
        }
    }

    fn set_limit(&mut self, limit: u32, value: u64) -> CuRes<()> {
        let set = entry(self.drv.cuCtxSetLimit)?;
        // SAFETY: the limit as the guest sent it; acts on the current context.
        ok(unsafe { set(CUlimit(limit), value as usize) })
    }

    fn occupancy_clusters(&mut self, f: CudaFunction, dims: LaunchDims, attrs: &[LaunchAttr], kind: u32) -> CuRes<i32> {
        self.clusters(f, dims, attrs, kind)
    }

    fn mem_alloc_async(&mut self, size: u64, stream: Option<CudaStream>) -> CuRes<u64> {
        self.alloc_async(size, stream)
    }

    fn mem_free_async(&mut self, dptr: u64, stream: Option<CudaStream>) -> CuRes<()> {
        self.free_async(dptr, stream)
    }

    fn mem_pool_attribute(&mut self, attr: u32, set: Option<u64>) -> CuRes<u64> {
        self.pool_attribute(attr, set)
    }

    fn pool(&mut self, op: crate::exec::pool::PoolOp<CudaStream>) -> CuRes<u64> {
        self.pool_op(op)
    }

    fn pool_export(&mut self, pool: u64) -> CuRes<crate::ipc::IpcObject> {
        self.pool_export_fd(pool)
    }

    fn pool_import(&mut self, o: &crate::ipc::IpcObject) -> CuRes<u64> {
        self.pool_import_fd(o)
    }

    fn pool_export_pointer(&mut self, ptr: u64) -> CuRes<crate::ipc::IpcObject> {
        self.pool_export_ptr(ptr)
    }

    fn pool_import_pointer(&mut self, pool: u64, o: &crate::ipc::IpcObject, _size: u64) -> CuRes<u64> {
        self.pool_import_ptr(pool, o)
    }

    unsafe fn copy_2d(&mut self, c: Copy2D, width: u64, height: u64, stream: Option<CudaStream>, wait: bool) -> CuRes<()> {
        // SAFETY: the same contract.
        unsafe { self.copy2d(c, width, height, stream, wait) }
    }

    fn memset_2d(&mut self, rect: Rect, value: u32, elem: u32, s: Option<CudaStream>) -> CuRes<()> {
        self.memset2d(rect, value, elem, s)
    }

    fn reset_persisting_l2(&mut self) -> CuRes<()> {
        // SAFETY: no arguments; acts on the current context (this one).
        ok(unsafe { entry(self.drv.cuCtxResetPersistingL2Cache)?() })
    }

    fn array_create(&mut self, shape: &crate::exec::ArrayShape, levels: u32) -> CuRes<u64> {
        self.array_new(shape, levels)
    }

    fn array_destroy(&mut self, raw: u64, mipmapped: bool) -> CuRes<()> {
        self.array_free(raw, mipmapped)
    }

    fn mipmap_level(&mut self, raw: u64, level: u32) -> CuRes<u64> {
        self.level(raw, level)
    }

    unsafe fn array_copy(&mut self, c: &crate::exec::ArrayCopy, s: Option<CudaStream>, wait: bool) -> CuRes<()> {
        // SAFETY: the same contract.
        unsafe { self.copy_array(c, s, wait) }
    }

    fn tex_object_create(&mut self, res: &crate::exec::Resource, sampling: Option<&crate::exec::Sampling>) -> CuRes<u64> {
        self.object_new(res, sampling)
    }

    fn tex_object_destroy(&mut self, object: u64, surface: bool) -> CuRes<()> {
        self.object_free(object, surface)
    }

    fn ipc_export_mem(&mut self, ptr: u64) -> CuRes<crate::ipc::IpcObject> {
        self.ipc_mem_export(ptr)
    }

    fn ipc_open_mem(&mut self, o: &crate::ipc::IpcObject, size: u64, flags: u32) -> CuRes<(u64, u64)> {
        self.ipc_mem_open(o, size, flags)
    }

    fn ipc_close_mem(&mut self, ptr: u64) -> CuRes<()> {
        self.ipc_mem_close(ptr)
    }

    fn ipc_export_event(&mut self, e: CudaEvent) -> CuRes<crate::ipc::IpcObject> {
        self.ipc_event_export(e)
    }

    fn ipc_open_event(&mut self, o: &crate::ipc::IpcObject) -> CuRes<CudaEvent> {
        self.ipc_event_open(o)
    }

    fn stream_mem_ops(&mut self, ops: &[crate::exec::MemOp], s: Option<CudaStream>) -> CuRes<()> {
        self.mem_ops(ops, s)
    }

    fn tensor_map_encode(&mut self, r: &TensorMapEncode) -> CuRes<[u8; 128]> {
        self.tensor_map(r)
    }

    fn vmm_reserve(&mut self, size: u64, alignment: u64, addr: u64) -> CuRes<u64> {
        self.reserve(size, alignment, addr)
    }

    fn vmm_free(&mut self, ptr: u64, size: u64) -> CuRes<()> {
        self.address_free(ptr, size)
    }

    fn vmm_create(&mut self, size: u64, flags: u32) -> CuRes<(u64, u32)> {
        self.create(size, flags)
    }

    fn vmm_export(&mut self, handle: u64) -> CuRes<crate::ipc::IpcObject> {
        self.export(handle)
    }

    fn vmm_import(&mut self, o: &crate::ipc::IpcObject, _size: u64) -> CuRes<u64> {
        self.import(o)
    }

    fn vmm_release(&mut self, handle: u64) -> CuRes<()> {
        self.release(handle)
    }

    fn vmm_map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64) -> CuRes<()> {
        self.map(ptr, size, offset, handle)
    }

    fn vmm_unmap(&mut self, ptr: u64, size: u64) -> CuRes<()> {
        self.unmap(ptr, size)
    }

    fn vmm_set_access(&mut self, ptr: u64, size: u64, flags: u32) -> CuRes<()> {
        self.set_access(ptr, size, flags)
    }

    fn take_output(&mut self, out: &mut crate::exec::Printed) {
        output::drain(out);
    }
}
