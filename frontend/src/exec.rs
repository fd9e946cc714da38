//! Streams, events, kernels (attributes, occupancy, launches) and tensor
//! maps.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::handles::*;
use pvgpu_ring::CuError;
use pvgpu_ring::proto::*;

impl Client {
    /// `cuStreamCreateWithPriority`.
    pub fn stream_create(&self, ctx: Context, flags: u32, priority: i32) -> Result<Stream> {
        let r = self.call(&StreamCreate { ctx: ctx.0.into(), flags: flags.into(), priority: priority.into() })?;
        Ok(Stream(r.handle.get()))
    }

    /// `cuStreamDestroy` (sent without waiting).
    pub fn stream_destroy(&self, s: Stream) -> Result<()> {
        self.post(&StreamDestroy { stream: s.0.into() })
    }

    /// `cuStreamSynchronize`.
    pub fn stream_synchronize(&self, s: Stream) -> Result<()> {
        self.call(&StreamSynchronize { stream: s.0.into() })
    }

    /// `cuStreamQuery`: `Ok(true)` when idle, `Ok(false)` for
    /// `CUDA_ERROR_NOT_READY`.
    pub fn stream_query(&self, s: Stream) -> Result<bool> {
        ready(self.call(&StreamQuery { stream: s.0.into() }))
    }

    /// `cuStreamWaitEvent` (sent without waiting).
    pub fn stream_wait_event(&self, s: Stream, e: Event) -> Result<()> {
        self.post(&StreamWaitEvent { stream: s.0.into(), event: e.0.into(), flags: 0.into(), reserved: 0.into() })
    }

    /// `cuStreamGetAttribute`, or `cuStreamSetAttribute` with `value`, of
    /// stream `s` of context `ctx`: the value (after a set, what the stream
    /// now holds), as `CUstreamAttrValue` lays it out.
    pub fn stream_attr(&self, ctx: Context, s: Stream, attr: u32, value: Option<[u8; 64]>) -> Result<[u8; 64]> {
        let op = if value.is_some() { NODE_ATTR_SET } else { NODE_ATTR_GET };
        let r = StreamAttr {
            ctx: ctx.0.into(),
            stream: s.0.into(),
            src: 0.into(),
            attr: attr.into(),
            op: op.into(),
            value: value.unwrap_or([0; 64]),
        };
        Ok(self.call(&r)?.value)
    }

    /// `cuStreamCopyAttributes`: every attribute of stream `src` to stream
    /// `dst`, both of context `ctx`.
    pub fn stream_copy_attrs(&self, ctx: Context, dst: Stream, src: Stream) -> Result<()> {
        let r = StreamAttr {
            ctx: ctx.0.into(),
            stream: dst.0.into(),
            src: src.0.into(),
            attr: 0.into(),
            op: NODE_ATTR_COPY.into(),
            value: [0; 64],
        };
        self.call(&r).map(|_| ())
    }

    /// `cuEventCreate`.
    pub fn event_create(&self, ctx: Context, flags: u32) -> Result<Event> {
        let e = Event(self.call(&EventCreate { ctx: ctx.0.into(), flags: flags.into(), reserved: 0.into() })?.handle.get());
        if flags & crate::ipc::EVENT_INTERPROCESS != 0 {
            self.interprocess.lock().unwrap_or_else(|p| p.into_inner()).insert(e.0);
        }
        Ok(e)
    }

    /// `cuEventRecord`: sent without waiting, but for an interprocess
    /// event, which another process may wait for once this call returns
    /// (the record, and the work before it, must have reached the backend
    /// by then, as they reach the GPU natively).
    pub fn event_record(&self, e: Event, s: Stream) -> Result<()> {
        let r = EventRecord { event: e.0.into(), stream: s.0.into() };
        if self.interprocess.lock().unwrap_or_else(|p| p.into_inner()).contains(&e.0) { self.call(&r) } else { self.post(&r) }
    }

    /// `cuEventQuery`: `Ok(true)` when complete.
    pub fn event_query(&self, e: Event) -> Result<bool> {
        ready(self.call(&EventQuery { event: e.0.into() }))
    }

    /// A query of the event behind a host function, from the thread that
    /// runs them: it leaves a capture of another thread intact.
    pub fn host_fn_event_query(&self, e: Event) -> Result<bool> {
        ready(self.call(&HostFnEvent { event: e.0.into(), destroy: 0.into(), reserved: 0.into() }))
    }

    /// Destroys the event behind a host function, as
    /// [`Client::host_fn_event_query`] queries it.
    pub fn host_fn_event_destroy(&self, e: Event) -> Result<()> {
        self.call(&HostFnEvent { event: e.0.into(), destroy: 1.into(), reserved: 0.into() })
    }

    /// `cuEventSynchronize`.
    pub fn event_synchronize(&self, e: Event) -> Result<()> {
        self.call(&EventSynchronize { event: e.0.into() })
    }

    /// `cuEventElapsedTime`, in milliseconds.
    pub fn event_elapsed(&self, start: Event, end: Event) -> Result<f32> {
        Ok(self.call(&EventElapsedTime { start: start.0.into(), end: end.0.into() })?.ms.get())
    }

    /// `cuEventDestroy` (sent without waiting).
    pub fn event_destroy(&self, e: Event) -> Result<()> {
        self.interprocess.lock().unwrap_or_else(|p| p.into_inner()).remove(&e.0);
        self.post(&EventDestroy { event: e.0.into() })
    }

    /// `cuFuncGetAttribute`.
    pub fn func_get_attribute(&self, f: &Function, attr: i32) -> Result<i32> {
        if let Some(v) = self.memo().func_attr(f.id, attr) {
            return Ok(v);
        }
        let v = self.call(&FuncGetAttribute { function: f.id.into(), attr: attr.into(), reserved: 0.into() })?.value.get();
        self.memo().set_func_attr(f.id, attr, v);
        Ok(v)
    }

    /// `cuFuncSetAttribute`.
    pub fn func_set_attribute(&self, f: &Function, attr: i32, value: i32) -> Result<()> {
        // Setting what it already is changes nothing (frameworks set the
        // dynamic shared memory size before every launch of some kernels).
        if self.memo().func_attr_is(f.id, attr, value) {
            return Ok(());
        }
        match self.call(&FuncSetAttribute { function: f.id.into(), attr: attr.into(), value: value.into() }) {
            Ok(()) => {
                self.memo().func_was_set(f.id, attr, value);
                Ok(())
            }
            Err(e) => {
                self.memo().forget_func(f.id);
                Err(e)
            }
        }
    }

    /// `cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`.
    pub fn occupancy_max_active_blocks(&self, f: &Function, block_size: i32, dyn_smem: u64, flags: u32) -> Result<i32> {
        Ok(self.occupancy(f, 0, block_size, 0, dyn_smem, flags)?.0 as i32)
    }

    /// `cuOccupancyMaxPotentialBlockSizeWithFlags` without a block-size to
    /// shared-memory callback: (minimum grid size, block size).
    pub fn occupancy_max_potential_block_size(&self, f: &Function, dyn_smem: u64, limit: i32, flags: u32) -> Result<(i32, i32)> {
        let (a, b) = self.occupancy(f, 1, 0, limit, dyn_smem, flags)?;
        Ok((a as i32, b as i32))
    }

    /// `cuOccupancyAvailableDynamicSMemPerBlock`.
    pub fn occupancy_available_dynamic_smem(&self, f: &Function, num_blocks: i32, block_size: i32) -> Result<u64> {
        Ok(self.occupancy(f, 2, block_size, num_blocks, 0, 0)?.0 as u64)
    }

    fn occupancy(&self, f: &Function, kind: u32, block_size: i32, limit: i32, dyn_smem: u64, flags: u32) -> Result<(i64, i64)> {
        let key = (f.id, kind, block_size, limit, dyn_smem, flags);
        if let Some(v) = self.memo().occupancy(&key) {
            return Ok(v);
        }
        let rep = self.call(&Occupancy {
            function: f.id.into(),
            kind: kind.into(),
            flags: flags.into(),
            block_size: block_size.into(),
            limit: limit.into(),
            dyn_smem: dyn_smem.into(),
        })?;
        let v = (rep.a.get(), rep.b.get());
        self.memo().set_occupancy(key, v);
        Ok(v)
    }

    /// `cuLaunchKernel` with one byte slice per parameter (the values the
    /// `kernelParams` pointers point to). Sizes must match the layout.
    pub fn launch(&self, f: &Function, grid: [u32; 3], block: [u32; 3], shared_mem: u32, stream: Stream, args: &[&[u8]]) -> Result<()> {
        self.launch_packed(f, grid, block, shared_mem, stream, &f.pack(args)?)
    }

    /// `cuLaunchKernel` with an already packed parameter buffer (the `extra`
    /// form). Sent without waiting.
    pub fn launch_packed(
        &self,
        f: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: Stream,
        params: &[u8],
    ) -> Result<()> {
        if params.len() != f.param_bytes {
            return Err(CuError::INVALID_VALUE.into());
        }
        let head = LaunchHead {
            function: f.id.into(),
            grid: grid.map(Into::into),
            block: block.map(Into::into),
            shared_mem: shared_mem.into(),
            param_len: (params.len() as u32).into(),
            stream: stream.0.into(),
        };
        self.post(&LaunchKernel { head, params })
    }

    /// `cuLaunchKernelEx`: a launch with attributes (cooperative, cluster
    /// dimensions, priority...), `params` packed as the function's layout
    /// says. Sent without waiting.
    #[allow(clippy::too_many_arguments)]
    pub fn launch_ex(
        &self,
        f: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: Stream,
        attrs: &[LaunchAttr],
        params: &[u8],
    ) -> Result<()> {
        if params.len() != f.param_bytes || attrs.len() > MAX_LAUNCH_ATTRS {
            return Err(CuError::INVALID_VALUE.into());
        }
        let head = LaunchExHead {
            function: f.id.into(),
            grid: grid.map(Into::into),
            block: block.map(Into::into),
            shared_mem: shared_mem.into(),
            param_len: (params.len() as u32).into(),
            stream: stream.0.into(),
            attr_count: (attrs.len() as u32).into(),
            reserved: 0.into(),
        };
        let tail = [zerocopy::IntoBytes::as_bytes(attrs), params].concat();
        self.post(&LaunchKernelEx { head, tail: &tail })
    }

    /// `cuOccupancyMaxActiveClusters` (kind 0) and
    /// `cuOccupancyMaxPotentialClusterSize` (kind 1) of a launch
    /// configuration.
    pub fn occupancy_clusters(
        &self,
        f: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        attrs: &[LaunchAttr],
        kind: u32,
    ) -> Result<i32> {
        if attrs.len() > MAX_LAUNCH_ATTRS {
            return Err(CuError::INVALID_VALUE.into());
        }
        let head = OccupancyClustersHead {
            function: f.id.into(),
            grid: grid.map(Into::into),
            block: block.map(Into::into),
            shared_mem: shared_mem.into(),
            kind: kind.into(),
            attr_count: (attrs.len() as u32).into(),
            reserved: 0.into(),
        };
        Ok(self.call(&OccupancyClusters { head, attrs })?.value.get())
    }

    /// `cuTensorMapEncodeTiled` / `cuTensorMapEncodeIm2col`, built by the
    /// backend's driver.
    pub fn tensor_map_encode(&self, r: &TensorMapEncode) -> Result<[u8; 128]> {
        Ok(self.call(r)?.bytes)
    }
}

/// `Ok(true)` for success, `Ok(false)` for `CUDA_ERROR_NOT_READY`.
fn ready(r: Result<()>) -> Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(Error::Cuda(CuError::NOT_READY)) => Ok(false),
        Err(e) => Err(e),
    }
}
