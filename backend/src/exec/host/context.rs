//! The host test double's [`ExecContext`]: each command on host memory
//! and the kernels of the Rust registry.

use super::graph::Op;
use super::*;
use crate::exec::ExecContext;
use crate::exec::graph::{Copy3D, CopySide};

impl ExecContext for HostContext {
    type Module = HostModule;
    type Function = HostFunction;
    type Stream = u64;
    type Event = u64;

    fn make_current(&mut self) -> CuRes<()> {
        Ok(())
    }

    fn peer_id(&self) -> u64 {
        0
    }

    fn peer_access(&mut self, _peer: u64, _enable: bool, _flags: u32) -> CuRes<()> {
        // One device: every context is on it (the session refuses a peer
        // on the same device first).
        Err(CuError::INVALID_DEVICE)
    }

    unsafe fn register_host(&mut self, ptr: *mut u8, len: usize) -> CuRes<Option<u64>> {
        // Refused during a capture that forbids unsafe calls, as the
        // driver refuses it.
        self.graphs.refuse_unsafe()?;
        let (start, end) = (ptr as u64, (ptr as u64).checked_add(len as u64).ok_or(CuError::INVALID_VALUE)?);
        let overlaps = self.mem.host.range(..end).next_back().is_some_and(|(&a, &l)| a + l as u64 > start)
            || self.mem.allocs.range(..end).next_back().is_some_and(|(&a, v)| a + v.len() as u64 > start);
        if len == 0 || overlaps {
            return Err(CuError::HOST_MEMORY_ALREADY_REGISTERED);
        }
        // Kernels reach it at its own address, as with unified addressing.
        self.mem.host.insert(start, len);
        Ok(Some(start))
    }

    fn unregister_host(&mut self, ptr: *mut u8) -> CuRes<()> {
        self.graphs.refuse_unsafe()?;
        self.mem.host.remove(&(ptr as u64)).map(drop).ok_or(CuError::HOST_MEMORY_NOT_REGISTERED)
    }

    // SAFETY: nothing is read or written through `ptr` here.
    unsafe fn pin_host(&mut self, ptr: *mut u8, len: usize) -> CuRes<()> {
        // As the driver: once per range in the process; kernels cannot reach it.
        let mut pinned = self.pinned.lock().map_err(|_| CuError::UNKNOWN)?;
        if len == 0 || pinned.contains_key(&(ptr as u64)) {
            return Err(CuError::HOST_MEMORY_ALREADY_REGISTERED);
        }
        pinned.insert(ptr as u64, len);
        Ok(())
    }

    fn unpin_host(&mut self, ptr: *mut u8) -> CuRes<()> {
        let mut pinned = self.pinned.lock().map_err(|_| CuError::UNKNOWN)?;
        pinned.remove(&(ptr as u64)).map(drop).ok_or(CuError::HOST_MEMORY_NOT_REGISTERED)
    }

    fn synchronize(&mut self) -> CuRes<()> {
        self.graphs.refuse_sync()?;
        self.ok()
    }

    fn mem_alloc(&mut self, size: u64) -> CuRes<u64> {
        self.graphs.refuse_unsafe()?;
        self.alloc_unchecked(size)
    }

    fn mem_free(&mut self, dptr: u64) -> CuRes<()> {
        self.graphs.refuse_unsafe()?;
        if self.host_work.graph_mem.contains_key(&dptr) {
            self.graph_free(dptr);
            return Ok(());
        }
        self.free_unchecked(dptr)
    }

    fn mem_get_info(&mut self) -> CuRes<(u64, u64)> {
        self.ok()?;
        Ok((self.free_bytes(), self.total))
    }

    fn memset(&mut self, dptr: u64, value: u32, elem_size: u32, count: u64, s: Option<u64>) -> CuRes<()> {
        self.ok()?;
        let rect = Rect { ptr: dptr, pitch: count.saturating_mul(elem_size as u64), width: count, height: 1 };
        if self.captured(s, || Op::Memset { rect, value, elem: elem_size })? {
            return Ok(());
        }
        let len = count.checked_mul(elem_size as u64).ok_or(CuError::INVALID_VALUE)?;
        let len = usize::try_from(len).map_err(|_| CuError::INVALID_VALUE)?;
        let b = self.mem.bytes_mut(dptr, len).map_err(|_| CuError::INVALID_VALUE)?;
        let pat = value.to_le_bytes();
        for chunk in b.chunks_exact_mut(elem_size as usize) {
            chunk.copy_from_slice(&pat[..elem_size as usize]);
        }
        Ok(())
    }

    unsafe fn htod(&mut self, dst: u64, src: *const u8, len: usize, s: Option<u64>, wait: bool) -> CuRes<()> {
        self.ok()?;
        let copy = || Op::Copy(Copy3D::linear(CopySide::linear(dst, false), CopySide::linear(src as u64, true), len as u64));
        if self.captured(s, copy)? {
            return Ok(());
        }
        if s.is_none() && wait {
            self.graphs.refuse_unsafe()?;
        }
        let b = self.mem.bytes_mut(dst, len).map_err(|_| CuError::INVALID_VALUE)?;
        // SAFETY: the caller guarantees `src` is readable for `len` bytes;
        // `b` is our own private buffer of exactly `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src, b.as_mut_ptr(), len) };
        Ok(())
    }

    unsafe fn dtoh(&mut self, dst: *mut u8, src: u64, len: usize, s: Option<u64>, wait: bool) -> CuRes<()> {
        self.ok()?;
        let copy = || Op::Copy(Copy3D::linear(CopySide::linear(dst as u64, true), CopySide::linear(src, false), len as u64));
        if self.captured(s, copy)? {
            return Ok(());
        }
        if s.is_none() && wait {
            self.graphs.refuse_unsafe()?;
        }
        let b = self.mem.bytes(src, len).map_err(|_| CuError::INVALID_VALUE)?;
        // SAFETY: the caller guarantees `dst` is writable for `len` bytes;
        // `b` is our own buffer of exactly `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), dst, len) };
        Ok(())
    }

    fn dtod(&mut self, dst: u64, src: u64, len: u64, s: Option<u64>, _is_async: bool) -> CuRes<()> {
        self.ok()?;
        if self.captured(s, || Op::Copy(Copy3D::linear(CopySide::linear(dst, false), CopySide::linear(src, false), len)))? {
            return Ok(());
        }
        let len = usize::try_from(len).map_err(|_| CuError::INVALID_VALUE)?;
        let tmp = self.mem.bytes(src, len).map_err(|_| CuError::INVALID_VALUE)?.to_vec();
        self.mem.bytes_mut(dst, len).map_err(|_| CuError::INVALID_VALUE)?.copy_from_slice(&tmp);
        Ok(())
    }

    fn module_load(&mut self, img: &[u8]) -> CuRes<HostModule> {
        self.ok()?;
        let info = image::parse(img)?;
        let mut globals = HashMap::new();
        for (name, g) in &info.globals {
            let addr = self.mem.alloc_global(g.size.max(1)).ok_or(CuError::OUT_OF_MEMORY)?;
            if let Ok(b) = self.mem.bytes_mut(addr, g.init.len()) {
                b.copy_from_slice(&g.init);
            }
            globals.insert(name.clone(), addr);
        }
        let id = self.next_module;
        self.next_module += 1;
        self.modules.insert(id, ModuleState { info, globals });
        self.recount_reserved();
        Ok(HostModule { id })
    }

    /// The host double links PTX only, by joining the texts: its kernels
    /// are found by name, so one text holding every input's entries is
    /// what a linked image is to it.
    fn link(&mut self, spec: &pvgpu_ring::proto::LinkSpec<'_>) -> crate::exec::Linked {
        let ptx = pvgpu_ring::cuda::api::CU_JIT_INPUT_PTX.0;
        let mut image = Vec::new();
        let mut error_log = Vec::new();
        for i in &spec.inputs {
            if i.kind != ptx {
                error_log.extend_from_slice(format!("host executor: input '{}' is not PTX; only PTX links here\n", i.name).as_bytes());
                continue;
            }
            let text = i.data.strip_suffix(&[0]).unwrap_or(i.data);
            image.extend_from_slice(text);
            image.push(b'\n');
        }
        // A PTX image is a C string: the program finds its end by its NUL.
        image.push(0);
        let info_log = format!("host executor: joined {} PTX inputs", spec.inputs.len()).into_bytes();
        let image =
            if !error_log.is_empty() || image.len() <= 1 { Err(CuError::INVALID_IMAGE) } else { image::parse(&image).map(|_| image) };
        if image.is_err() && error_log.is_empty() {
            error_log.extend_from_slice(b"host executor: the inputs do not parse as PTX\n");
        }
        crate::exec::Linked { image, info_log, error_log, wall_ms: 0.0 }
    }

    fn module_load_placed(&mut self, img: &[u8], placed: &[(String, u64)]) -> CuRes<HostModule> {
        let m = self.module_load(img)?;
        self.place_globals(m, placed)
    }

    fn restore_memory(&mut self, ranges: &[(u64, u64)], handed: Vec<crate::exec::HandedPiece>) -> CuRes<()> {
        self.place_ranges(ranges, handed)
    }

    fn hand_over(&mut self, ranges: &[(u64, u64)]) -> CuRes<Vec<crate::exec::HandedPiece>> {
        self.hand_over_mem(ranges)
    }

    fn module_unload(&mut self, m: HostModule) -> CuRes<()> {
        let st = self.modules.remove(&m.id).ok_or(CuError::INVALID_HANDLE)?;
        for addr in st.globals.values() {
            self.mem.allocs.remove(addr);
        }
        self.recount_reserved();
        Ok(())
    }

    fn function(&mut self, m: &HostModule, name: &str) -> CuRes<(HostFunction, Vec<Param>)> {
        self.ok()?;
        let st = self.modules.get(&m.id).ok_or(CuError::INVALID_HANDLE)?;
        let entry = st.info.entries.get(name).ok_or(CuError::NOT_FOUND)?;
        let (_, kernel) = KERNELS.iter().find(|(n, _)| *n == name).ok_or_else(|| {
            tracing::warn!(kernel = name, "the host executor has no implementation of this kernel");
            CuError::NOT_FOUND
        })?;
        Ok((HostFunction { module: m.id, kernel: *kernel }, entry.params.clone()))
    }

    fn function_names(&mut self, m: &HostModule) -> CuRes<Vec<String>> {
        self.ok()?;
        let st = self.modules.get(&m.id).ok_or(CuError::INVALID_HANDLE)?;
        let mut names: Vec<String> = st.info.entries.keys().cloned().collect();
        names.sort();
        Ok(names)
    }

    fn global(&mut self, m: &HostModule, name: &str) -> CuRes<(u64, u64)> {
        self.ok()?;
        let st = self.modules.get(&m.id).ok_or(CuError::INVALID_HANDLE)?;
        let addr = *st.globals.get(name).ok_or(CuError::NOT_FOUND)?;
        Ok((addr, st.info.globals[name].size))
    }

    fn launch(
        &mut self,
        f: HostFunction,
        dims: LaunchDims,
        params: &[u8],
        layout: &[Param],
        attrs: &[LaunchAttr],
        s: Option<u64>,
    ) -> CuRes<()> {
        self.ok()?;
        if dims.grid.contains(&0) || dims.block.contains(&0) || dims.block.iter().map(|&b| b as u64).product::<u64>() > 1024 {
            return Err(CuError::INVALID_VALUE);
        }
        let attrs = || attrs.iter().map(|a| (a.id.get(), a.value)).collect();
        if self.captured(s, || Op::Kernel { f, dims, params: params.to_vec(), layout: layout.to_vec(), attrs: attrs() })? {
            return Ok(());
        }
        let st = self.modules.get(&f.module).ok_or(CuError::INVALID_HANDLE)?;
        let globals = st.globals.clone();
        let mut call = Call {
            dims,
            args: Args { buf: params, layout },
            mem: &mut self.mem,
            globals: &globals,
            out: &mut self.output,
            err: &mut self.errors,
            asserted: false,
        };
        if (f.kernel)(&mut call).is_err() {
            // A GPU reports a fault asynchronously and poisons the context;
            // do the same.
            self.sticky = Some(if call.asserted { CuError::ASSERT } else { CuError::ILLEGAL_ADDRESS });
            return Ok(());
        }
        self.run_device_launches()
    }

    fn stream_create(&mut self, _flags: u32, _priority: i32) -> CuRes<u64> {
        self.ok()?;
        Ok(self.handle())
    }

    fn stream_destroy(&mut self, _s: u64) -> CuRes<()> {
        Ok(())
    }

    fn stream_synchronize(&mut self, s: u64) -> CuRes<()> {
        self.graphs.refuse_wait(s)?;
        self.ok()
    }

    fn stream_query(&mut self, s: u64) -> CuRes<bool> {
        self.graphs.refuse_wait(s)?;
        self.ok().map(|_| true)
    }

    fn event_create(&mut self, _flags: u32) -> CuRes<u64> {
        self.ok()?;
        let h = self.handle();
        self.events.insert(h, None);
        Ok(h)
    }

    fn event_destroy(&mut self, e: u64) -> CuRes<()> {
        self.events.remove(&e).map(|_| ()).ok_or(CuError::INVALID_HANDLE)
    }

    fn event_record(&mut self, e: u64, s: Option<u64>) -> CuRes<()> {
        self.ok()?;
        self.events.get(&e).ok_or(CuError::INVALID_HANDLE)?;
        if let Some(st) = s.filter(|&st| self.graphs.capturing(Some(st))) {
            // Recorded into the capture: it marks the stream's place.
            return self.graphs.mark(e, st);
        }
        self.graphs.unmark(e);
        let t = self.epoch.elapsed();
        *self.events.get_mut(&e).ok_or(CuError::INVALID_HANDLE)? = Some(t);
        Ok(())
    }

    fn event_query(&mut self, e: u64) -> CuRes<bool> {
        self.ok()?;
        if self.graphs.marked(e) {
            return Err(CuError::CAPTURED_EVENT);
        }
        self.events.get(&e).ok_or(CuError::INVALID_HANDLE)?;
        // Measured on the H100 (driver 580): a query on the capturing
        // thread during a global capture fails and invalidates it; in
        // relaxed thread mode it answers.
        self.graphs.refuse_unsafe()?;
        Ok(true)
    }

    fn event_synchronize(&mut self, e: u64) -> CuRes<()> {
        self.event_query(e).map(|_| ())
    }

    fn event_elapsed(&mut self, a: u64, b: u64) -> CuRes<f32> {
        self.ok()?;
        let ta = self.events.get(&a).ok_or(CuError::INVALID_HANDLE)?.ok_or(CuError::INVALID_HANDLE)?;
        let tb = self.events.get(&b).ok_or(CuError::INVALID_HANDLE)?.ok_or(CuError::INVALID_HANDLE)?;
        Ok((tb.as_secs_f64() - ta.as_secs_f64()) as f32 * 1000.0)
    }

    fn stream_attr(&mut self, s: Option<u64>, attr: u32, set: Option<&[u8; 64]>) -> CuRes<[u8; 64]> {
        self.ok()?;
        let key = (s.unwrap_or(0), attr);
        if let Some(v) = set {
            self.stream_attrs.insert(key, *v);
        }
        Ok(self.stream_attrs.get(&key).copied().unwrap_or([0; 64]))
    }

    fn stream_copy_attrs(&mut self, dst: Option<u64>, src: Option<u64>) -> CuRes<()> {
        self.ok()?;
        let (d, s) = (dst.unwrap_or(0), src.unwrap_or(0));
        let from: Vec<(u32, [u8; 64])> = self.stream_attrs.iter().filter(|((st, _), _)| *st == s).map(|((_, a), v)| (*a, *v)).collect();
        self.stream_attrs.retain(|(st, _), _| *st != d);
        self.stream_attrs.extend(from.into_iter().map(|(a, v)| ((d, a), v)));
        Ok(())
    }

    fn stream_wait_event(&mut self, s: Option<u64>, e: u64) -> CuRes<()> {
        // Streams run in order and at once: the event is already complete,
        // unless it marks a place in a capture, which `s` then joins.
        self.ok()?;
        self.events.get(&e).ok_or(CuError::INVALID_HANDLE)?;
        self.graphs.wait(s, e).map(drop)
    }

    fn stream_wait_foreign_event(&mut self, s: Option<u64>, _e: u64) -> CuRes<()> {
        self.wait_foreign(s)
    }

    fn func_get_attribute(&mut self, _f: HostFunction, attr: i32) -> CuRes<i32> {
        self.ok()?;
        let shared = self.dyn_shared;
        Ok(match attr {
            0 => 1024,    // MAX_THREADS_PER_BLOCK
            1..=3 => 0,   // static shared, constant, local sizes
            4 => 32,      // NUM_REGS
            5 | 6 => 75,  // PTX and binary versions
            7 => 0,       // CACHE_MODE_CA
            8 => shared,  // MAX_DYNAMIC_SHARED_SIZE_BYTES
            9 => -1,      // PREFERRED_SHARED_MEMORY_CARVEOUT
            10..=15 => 0, // cluster requirements and scheduling: none
            _ => return Err(CuError::INVALID_VALUE),
        })
    }

    fn func_set_attribute(&mut self, _f: HostFunction, attr: i32, value: i32) -> CuRes<()> {
        self.ok()?;
        match attr {
            8 if (0..=64 * 1024).contains(&value) => {
                self.dyn_shared = value;
                Ok(())
            }
            9 if (-1..=100).contains(&value) => Ok(()),
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    fn info(&mut self) -> CuRes<CtxInfo> {
        self.ok()?;
        Ok(CtxInfo { api_version: 13000, flags: 0, least_priority: 0, greatest_priority: 0 })
    }

    fn get_limit(&mut self, limit: u32) -> CuRes<u64> {
        self.ok()?;
        self.limits.get(&limit).copied().ok_or(CuError::INVALID_VALUE)
    }

    fn set_limit(&mut self, limit: u32, value: u64) -> CuRes<()> {
        self.ok()?;
        let slot = self.limits.get_mut(&limit).ok_or(CuError::INVALID_VALUE)?;
        *slot = value;
        self.recount_reserved();
        Ok(())
    }

    fn occupancy(&mut self, _f: HostFunction, kind: u32, block_size: i32, _limit: i32, _dyn_smem: u64, _flags: u32) -> CuRes<(i64, i64)> {
        self.ok()?;
        // One multiprocessor of 2048 threads and 16 blocks, 64 KiB of
        // shared memory: the attributes the double reports.
        match kind {
            0 if (1..=1024).contains(&block_size) => Ok(((2048 / block_size as i64).min(16), 0)),
            1 => Ok((2, 1024)),
            2 => Ok((48 * 1024, 0)),
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    fn occupancy_clusters(&mut self, _f: HostFunction, dims: LaunchDims, _attrs: &[LaunchAttr], kind: u32) -> CuRes<i32> {
        self.clusters(dims, kind)
    }

    fn mem_alloc_async(&mut self, size: u64, s: Option<u64>) -> CuRes<u64> {
        self.alloc_async(size, s)
    }

    fn mem_free_async(&mut self, dptr: u64, s: Option<u64>) -> CuRes<()> {
        self.free_async(dptr, s)
    }

    fn mem_pool_attribute(&mut self, attr: u32, set: Option<u64>) -> CuRes<u64> {
        self.pool_attribute(attr, set)
    }

    fn pool(&mut self, op: crate::exec::pool::PoolOp<u64>) -> CuRes<u64> {
        self.pool_op(op)
    }

    fn pool_export(&mut self, pool: u64) -> CuRes<crate::ipc::IpcObject> {
        self.pool_export_object(pool)
    }

    fn pool_import(&mut self, o: &crate::ipc::IpcObject) -> CuRes<u64> {
        self.pool_import_object(o)
    }

    fn pool_export_pointer(&mut self, ptr: u64) -> CuRes<crate::ipc::IpcObject> {
        self.pool_export_ptr(ptr)
    }

    fn pool_import_pointer(&mut self, pool: u64, o: &crate::ipc::IpcObject, size: u64) -> CuRes<u64> {
        self.pool_import_ptr(pool, o, size)
    }

    unsafe fn copy_2d(&mut self, c: Copy2D, width: u64, height: u64, s: Option<u64>, _wait: bool) -> CuRes<()> {
        if self.graphs.capturing(s) {
            // Pitched copies are not captured by the double.
            return Err(CuError::NOT_SUPPORTED);
        }
        // SAFETY: the same contract.
        unsafe { self.copy2d(c, width, height) }
    }

    fn stream_mem_ops(&mut self, ops: &[crate::exec::MemOp], s: Option<u64>) -> CuRes<()> {
        self.mem_ops(ops, s)
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

    unsafe fn array_copy(&mut self, c: &crate::exec::ArrayCopy, s: Option<u64>, _wait: bool) -> CuRes<()> {
        let capturing = self.graphs.capturing(s);
        // SAFETY: the same contract.
        unsafe { self.copy_array(c, capturing) }
    }

    fn tex_object_create(&mut self, res: &crate::exec::Resource, sampling: Option<&crate::exec::Sampling>) -> CuRes<u64> {
        self.object_new(res, sampling)
    }

    fn tex_object_destroy(&mut self, object: u64, surface: bool) -> CuRes<()> {
        self.object_free(object, surface)
    }

    fn ipc_export_mem(&mut self, ptr: u64) -> CuRes<crate::ipc::IpcObject> {
        self.export_mem(ptr)
    }

    fn ipc_open_mem(&mut self, o: &crate::ipc::IpcObject, size: u64, _flags: u32) -> CuRes<(u64, u64)> {
        // The memfd is checked to hold `size` bytes.
        Ok((self.open_mem(o, size)?, size))
    }

    fn ipc_close_mem(&mut self, ptr: u64) -> CuRes<()> {
        self.close_mem(ptr)
    }

    fn ipc_export_event(&mut self, e: u64) -> CuRes<crate::ipc::IpcObject> {
        self.events.get(&e).ok_or(CuError::INVALID_HANDLE)?;
        Ok(crate::ipc::IpcObject::default())
    }

    fn ipc_open_event(&mut self, _o: &crate::ipc::IpcObject) -> CuRes<u64> {
        self.event_create(0)
    }

    fn memset_2d(&mut self, rect: Rect, value: u32, elem: u32, s: Option<u64>) -> CuRes<()> {
        if self.captured(s, || Op::Memset { rect, value, elem })? {
            return Ok(());
        }
        self.memset2d(rect, value, elem)
    }

    fn tensor_map_encode(&mut self, r: &TensorMapEncode) -> CuRes<[u8; 128]> {
        self.tensor_map(r)
    }

    fn vmm_reserve(&mut self, size: u64, alignment: u64, addr: u64) -> CuRes<u64> {
        self.reserve(size, alignment, addr)
    }

    fn vmm_free(&mut self, ptr: u64, _size: u64) -> CuRes<()> {
        self.unreserve(ptr)
    }

    fn vmm_create(&mut self, size: u64, flags: u32) -> CuRes<(u64, u32)> {
        // Host memory has no compression.
        Ok((self.create(size)?, flags & !pvgpu_ring::proto::MEM_COMPRESSIBLE))
    }

    fn vmm_export(&mut self, handle: u64) -> CuRes<crate::ipc::IpcObject> {
        self.export_phys(handle)
    }

    fn vmm_import(&mut self, o: &crate::ipc::IpcObject, size: u64) -> CuRes<u64> {
        self.import_phys(o, size)
    }

    fn vmm_release(&mut self, handle: u64) -> CuRes<()> {
        self.release(handle)
    }

    fn vmm_map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64) -> CuRes<()> {
        self.map(ptr, size, offset, handle)
    }

    fn vmm_unmap(&mut self, ptr: u64, _size: u64) -> CuRes<()> {
        self.unmap(ptr)
    }

    fn vmm_set_access(&mut self, _ptr: u64, _size: u64, _flags: u32) -> CuRes<()> {
        self.ok()
    }

    fn take_output(&mut self, out: &mut crate::exec::Printed) {
        out.out.append(&mut self.output);
        out.err.append(&mut self.errors);
    }
}
