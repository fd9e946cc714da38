//! Stream capture and graphs on the GPU: every call forwarded to the
//! driver through the typed table ([`super::driver`]). The driver records
//! work issued on a capturing stream (the session issues it on its own
//! thread), checks what is illegal while capturing, and runs executable
//! graphs.

use super::driver::{entry, ok};
use super::{CudaContext, CudaEvent, CudaStream, raw_stream};
use crate::exec::graph::{CaptureInfo, Copy3D, ExecGraph, NodeParams, NodeSpec};
use crate::exec::{CuRes, LaunchDims, Param};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::ffi::c_void;
use std::ptr;

/// Declares a driver graph object as a `Send` handle.
macro_rules! graph_handle {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name(pub(super) *mut c_void);
        // SAFETY: driver graph objects are identifiers the driver resolves
        // on any thread; the session uses each from one thread at a time.
        unsafe impl Send for $name {}
    };
}

graph_handle!(
    /// A graph.
    CudaGraph
);
graph_handle!(
    /// A node of a graph.
    CudaNode
);
graph_handle!(
    /// An executable graph.
    CudaGraphExec
);

fn stream(s: Option<CudaStream>) -> CUstream {
    raw_stream(s).cast()
}

fn nodes(n: &[CudaNode]) -> Vec<CUgraphNode> {
    n.iter().map(|n| n.0).collect()
}

/// Argument pointers into `params`, one per parameter of `layout`.
fn arg_pointers(params: &[u8], layout: &[Param]) -> CuRes<Vec<*mut c_void>> {
    layout
        .iter()
        .map(|p| {
            let end = p.offset as usize + p.size as usize;
            if end > params.len() {
                return Err(CuError::INVALID_VALUE);
            }
            // SAFETY: the offset lies inside `params` (checked just above).
            Ok(unsafe { params.as_ptr().add(p.offset as usize) } as *mut c_void)
        })
        .collect()
}

/// `CUDA_KERNEL_NODE_PARAMS` of a kernel spec; `args` must outlive its use.
fn kernel_params(f: *mut c_void, d: &LaunchDims, args: &mut [*mut c_void]) -> CUDA_KERNEL_NODE_PARAMS {
    CUDA_KERNEL_NODE_PARAMS {
        func: f,
        gridDimX: d.grid[0],
        gridDimY: d.grid[1],
        gridDimZ: d.grid[2],
        blockDimX: d.block[0],
        blockDimY: d.block[1],
        blockDimZ: d.block[2],
        sharedMemBytes: d.shared_mem,
        kernelParams: args.as_mut_ptr(),
        extra: ptr::null_mut(),
        kern: ptr::null_mut(),
        ctx: ptr::null_mut(),
    }
}

/// Calls `f(params)` with the driver's view of a kernel spec.
pub(super) fn with_kernel(spec: NodeSpec<'_, CudaContext>, f: impl FnOnce(&CUDA_KERNEL_NODE_PARAMS) -> CuRes<()>) -> CuRes<()> {
    let NodeSpec::Kernel { f: func, dims, params, layout } = spec else { return Err(CuError::INVALID_VALUE) };
    let mut args = arg_pointers(params, layout)?;
    // The driver copies the arguments when it takes the parameters.
    f(&kernel_params(func.0.cast(), &dims, &mut args))
}

/// Reads a list the driver fills after telling its length.
fn list<T: Copy>(mut get: impl FnMut(*mut T, *mut usize) -> CUresult, zero: T) -> CuRes<Vec<T>> {
    let mut n = 0usize;
    ok(get(ptr::null_mut(), &mut n))?;
    if n == 0 {
        // The driver refuses a list buffer for nothing.
        return Ok(Vec::new());
    }
    let mut v = vec![zero; n];
    ok(get(v.as_mut_ptr(), &mut n))?;
    v.truncate(n);
    Ok(v)
}

impl ExecGraph for CudaContext {
    type Graph = CudaGraph;
    type Node = CudaNode;
    type GraphExec = CudaGraphExec;

    fn begin_capture(&mut self, s: CudaStream, mode: u32) -> CuRes<()> {
        let begin = entry(self.drv.cuStreamBeginCapture_v2)?;
        // SAFETY: a live stream of this context; the mode was decoded.
        ok(unsafe { begin(stream(Some(s)), CUstreamCaptureMode(mode)) })?;
        self.capture_began(s);
        Ok(())
    }

    fn begin_capture_to_graph(&mut self, s: CudaStream, g: CudaGraph, deps: &[CudaNode], mode: u32) -> CuRes<()> {
        let begin = entry(self.drv.cuStreamBeginCaptureToGraph)?;
        let deps = nodes(deps);
        // SAFETY: a live stream and graph of this context, `deps.len()` of
        // its nodes, default edges (no edge data).
        ok(unsafe { begin(stream(Some(s)), g.0, deps.as_ptr(), ptr::null(), deps.len(), CUstreamCaptureMode(mode)) })?;
        self.capture_began(s);
        Ok(())
    }

    fn end_capture(&mut self, s: CudaStream) -> CuRes<CudaGraph> {
        let end = entry(self.drv.cuStreamEndCapture)?;
        let mut g = ptr::null_mut();
        // SAFETY: a live stream; a valid out-pointer.
        let ended = ok(unsafe { end(stream(Some(s)), &mut g) });
        self.capture_ended(s);
        ended.map(|()| CudaGraph(g))
    }

    fn update_capture_deps(&mut self, s: CudaStream, deps: &[CudaNode], flags: u32) -> CuRes<()> {
        let update = entry(self.drv.cuStreamUpdateCaptureDependencies)?;
        let mut deps = nodes(deps);
        // SAFETY: a live stream and `deps.len()` nodes of its capture's graph;
        // flags checked by the session.
        ok(unsafe { update(stream(Some(s)), deps.as_mut_ptr(), deps.len(), flags) })
    }

    fn invalidate_capture(&mut self, s: CudaStream) {
        // Querying a capturing stream is illegal: the driver refuses it
        // and invalidates the capture, which is what is wanted here.
        let _ = crate::exec::ExecContext::stream_query(self, s);
    }

    fn capture_info(&mut self, s: Option<CudaStream>) -> CuRes<CaptureInfo<Self>> {
        let get = entry(self.drv.cuStreamGetCaptureInfo_v3)?;
        let (mut status, mut id, mut graph, mut deps, mut n) = (CU_STREAM_CAPTURE_STATUS_NONE, 0u64, ptr::null_mut(), ptr::null(), 0usize);
        // SAFETY: valid out-pointers; the driver points `deps` at `n` nodes
        // it owns, valid until the next capture call on the stream (read
        // at once below).
        ok(unsafe { get(stream(s), &mut status, &mut id, &mut graph, &mut deps, ptr::null_mut(), &mut n) })?;
        let deps = if deps.is_null() || n == 0 {
            Vec::new()
        } else {
            // SAFETY: `n` nodes at `deps`, as just returned.
            unsafe { std::slice::from_raw_parts(deps, n) }.iter().map(|&d| CudaNode(d)).collect()
        };
        let graph = (!graph.is_null()).then_some(CudaGraph(graph));
        Ok(CaptureInfo { status: status.0, id, graph, deps })
    }

    fn exchange_capture_mode(&mut self, mode: u32) -> CuRes<u32> {
        let exchange = entry(self.drv.cuThreadExchangeStreamCaptureMode)?;
        let mut m = CUstreamCaptureMode(mode);
        // SAFETY: a valid in-out pointer.
        ok(unsafe { exchange(&mut m) })?;
        Ok(m.0)
    }

    fn graph_create(&mut self) -> CuRes<CudaGraph> {
        let mut g = ptr::null_mut();
        // SAFETY: a valid out-pointer, no flags.
        ok(unsafe { entry(self.drv.cuGraphCreate)?(&mut g, 0) })?;
        Ok(CudaGraph(g))
    }

    fn graph_destroy(&mut self, g: CudaGraph) -> CuRes<()> {
        // SAFETY: a graph of this session, destroyed once.
        ok(unsafe { entry(self.drv.cuGraphDestroy)?(g.0) })
    }

    fn graph_clone(&mut self, g: CudaGraph) -> CuRes<CudaGraph> {
        let mut c = ptr::null_mut();
        // SAFETY: a live graph; a valid out-pointer.
        ok(unsafe { entry(self.drv.cuGraphClone)?(&mut c, g.0) })?;
        Ok(CudaGraph(c))
    }

    fn graph_nodes(&mut self, g: CudaGraph, roots: bool) -> CuRes<Vec<CudaNode>> {
        let get = entry(if roots { self.drv.cuGraphGetRootNodes } else { self.drv.cuGraphGetNodes })?;
        // SAFETY: a live graph; the buffer holds `n` nodes when not null.
        let v = list(|p, n| unsafe { get(g.0, p, n) }, ptr::null_mut())?;
        Ok(v.into_iter().map(CudaNode).collect())
    }

    fn graph_edges(&mut self, g: CudaGraph) -> CuRes<Vec<(CudaNode, CudaNode)>> {
        let get = entry(self.drv.cuGraphGetEdges_v2)?;
        let mut n = 0usize;
        // SAFETY: a live graph; null buffers ask for the count.
        ok(unsafe { get(g.0, ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), &mut n) })?;
        if n == 0 {
            // The driver refuses list buffers for nothing.
            return Ok(Vec::new());
        }
        let (mut from, mut to) = (vec![ptr::null_mut(); n], vec![ptr::null_mut(); n]);
        // SAFETY: buffers of `n` nodes each.
        ok(unsafe { get(g.0, from.as_mut_ptr(), to.as_mut_ptr(), ptr::null_mut(), &mut n) })?;
        Ok(from.into_iter().zip(to).take(n).map(|(a, b)| (CudaNode(a), CudaNode(b))).collect())
    }

    fn node_info(&mut self, n: CudaNode) -> CuRes<(u32, Option<CudaGraph>)> {
        let mut t = CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: a live node; a valid out-pointer.
        ok(unsafe { entry(self.drv.cuGraphNodeGetType)?(n.0, &mut t) })?;
        if t != CU_GRAPH_NODE_TYPE_GRAPH {
            return Ok((t.0, None));
        }
        let mut g = ptr::null_mut();
        // SAFETY: a live child-graph node; a valid out-pointer.
        ok(unsafe { entry(self.drv.cuGraphChildGraphNodeGetGraph)?(n.0, &mut g) })?;
        Ok((t.0, Some(CudaGraph(g))))
    }

    fn node_edges(&mut self, n: CudaNode, dependents: bool) -> CuRes<Vec<CudaNode>> {
        let get = entry(if dependents { self.drv.cuGraphNodeGetDependentNodes_v2 } else { self.drv.cuGraphNodeGetDependencies_v2 })?;
        // SAFETY: a live node; the buffer holds `len` nodes when not null.
        let v = list(|p, len| unsafe { get(n.0, p, ptr::null_mut(), len) }, ptr::null_mut())?;
        Ok(v.into_iter().map(CudaNode).collect())
    }

    fn graph_edges_change(&mut self, g: CudaGraph, from: &[CudaNode], to: &[CudaNode], remove: bool) -> CuRes<()> {
        let call = entry(if remove { self.drv.cuGraphRemoveDependencies_v2 } else { self.drv.cuGraphAddDependencies_v2 })?;
        let (from, to) = (nodes(from), nodes(to));
        // SAFETY: nodes of `g`, as many on both sides.
        ok(unsafe { call(g.0, from.as_ptr(), to.as_ptr(), ptr::null(), from.len().min(to.len())) })
    }

    fn node_destroy(&mut self, n: CudaNode) -> CuRes<()> {
        // SAFETY: a live node, destroyed once.
        ok(unsafe { entry(self.drv.cuGraphDestroyNode)?(n.0) })
    }

    fn graph_dot(&mut self, g: CudaGraph, flags: u32) -> CuRes<Vec<u8>> {
        // The driver writes to a path: a memfd's, read back here.
        let fd =
            nix::sys::memfd::memfd_create(c"pvgpu-dot", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).map_err(|_| CuError::OPERATING_SYSTEM)?;
        let path = std::ffi::CString::new(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)))
            .map_err(|_| CuError::OPERATING_SYSTEM)?;
        // SAFETY: a live graph; a NUL-terminated path.
        ok(unsafe { entry(self.drv.cuGraphDebugDotPrint)?(g.0, path.as_ptr(), flags) })?;
        let mut file = std::fs::File::from(fd);
        let mut out = Vec::new();
        use std::io::{Read, Seek};
        file.seek(std::io::SeekFrom::Start(0)).map_err(|_| CuError::OPERATING_SYSTEM)?;
        file.read_to_end(&mut out).map_err(|_| CuError::OPERATING_SYSTEM)?;
        Ok(out)
    }

    fn graph_add_node(&mut self, g: CudaGraph, deps: &[CudaNode], spec: NodeSpec<'_, Self>) -> CuRes<CudaNode> {
        let deps = nodes(deps);
        let (d, n) = (deps.as_ptr(), deps.len());
        let mut node = ptr::null_mut();
        let out = &mut node as *mut CUgraphNode;
        let drv = self.drv;
        let ctx: CUcontext = self.raw.cast();
        match spec {
            spec @ NodeSpec::Kernel { .. } => {
                let add = entry(drv.cuGraphAddKernelNode_v2)?;
                // SAFETY: a live graph, `n` of its nodes, parameters whose
                // argument pointers live through the call (the driver copies
                // them).
                with_kernel(spec, |p| ok(unsafe { add(out, g.0, d, n, p) }))?;
            }
            NodeSpec::Copy(c) => {
                let p = copy_params(&c);
                // SAFETY: as above; device ranges the session checked, host
                // memory of this process that lives as long as the session.
                ok(unsafe { entry(drv.cuGraphAddMemcpyNode)?(out, g.0, d, n, &p, ctx) })?;
            }
            NodeSpec::Memset { dst, pitch, width, height, value, elem_size } => {
                let p = memset_params(dst, pitch, width, height, value, elem_size);
                // SAFETY: as above.
                ok(unsafe { entry(drv.cuGraphAddMemsetNode)?(out, g.0, d, n, &p, ctx) })?;
            }
            NodeSpec::Empty => {
                // SAFETY: a live graph and `n` of its nodes.
                ok(unsafe { entry(drv.cuGraphAddEmptyNode)?(out, g.0, d, n) })?;
            }
            NodeSpec::Child(c) => {
                // SAFETY: as above, and a live graph of this session.
                ok(unsafe { entry(drv.cuGraphAddChildGraphNode)?(out, g.0, d, n, c.0) })?;
            }
            NodeSpec::EventRecord(e) => {
                // SAFETY: as above, and a live event of this session.
                ok(unsafe { entry(drv.cuGraphAddEventRecordNode)?(out, g.0, d, n, event(e)) })?;
            }
            NodeSpec::EventWait(e) => {
                // SAFETY: as above.
                ok(unsafe { entry(drv.cuGraphAddEventWaitNode)?(out, g.0, d, n, event(e)) })?;
            }
            NodeSpec::Host { func, data } => {
                let p = self.host_params(func, data)?;
                // SAFETY: as above; the target outlives the graph.
                ok(unsafe { entry(drv.cuGraphAddHostNode)?(out, g.0, d, n, &p) })?;
            }
            NodeSpec::MemOps(ops) => return self.add_mem_op_node(g, &deps, ops),
            NodeSpec::MemFree { dptr } => {
                // SAFETY: as above; the driver checks the address is graph
                // memory.
                ok(unsafe { entry(drv.cuGraphAddMemFreeNode)?(out, g.0, d, n, dptr) })?;
            }
        }
        Ok(CudaNode(node))
    }

    fn node_set(&mut self, n: CudaNode, spec: NodeSpec<'_, Self>) -> CuRes<()> {
        self.set_node(n, spec)
    }

    fn node_params(&mut self, n: CudaNode) -> CuRes<NodeParams<Self>> {
        self.params_of(n)
    }

    fn node_enabled(&mut self, e: CudaGraphExec, n: CudaNode) -> CuRes<bool> {
        self.enabled(e, n)
    }

    fn kernel_node_attr(&mut self, n: CudaNode, attr: u32, value: Option<&[u8; 64]>) -> CuRes<[u8; 64]> {
        self.node_attr(n, attr, value)
    }

    fn kernel_node_copy_attrs(&mut self, dst: CudaNode, src: CudaNode) -> CuRes<()> {
        self.copy_node_attrs(dst, src)
    }

    fn node_in_clone(&mut self, clone: CudaGraph, n: CudaNode) -> CuRes<CudaNode> {
        self.in_clone(clone, n)
    }

    fn graph_instantiate(&mut self, g: CudaGraph, flags: u64) -> CuRes<CudaGraphExec> {
        let mut e = ptr::null_mut();
        // SAFETY: a live graph; a valid out-pointer; the driver checks flags.
        ok(unsafe { entry(self.drv.cuGraphInstantiateWithFlags)?(&mut e, g.0, flags) })?;
        Ok(CudaGraphExec(e))
    }

    fn graph_launch(&mut self, e: CudaGraphExec, s: Option<CudaStream>, upload: bool) -> CuRes<()> {
        let call = entry(if upload { self.drv.cuGraphUpload } else { self.drv.cuGraphLaunch })?;
        // SAFETY: a live executable graph and a stream of this context.
        ok(unsafe { call(e.0, stream(s)) })
    }

    fn graph_device_handle(&mut self, e: CudaGraphExec) -> CuRes<u64> {
        Ok(e.0 as u64)
    }

    fn graph_exec_destroy(&mut self, e: CudaGraphExec) -> CuRes<()> {
        // SAFETY: an executable graph of this session, destroyed once.
        ok(unsafe { entry(self.drv.cuGraphExecDestroy)?(e.0) })
    }

    fn exec_node_set(&mut self, e: CudaGraphExec, n: CudaNode, spec: NodeSpec<'_, Self>) -> CuRes<()> {
        let (drv, ctx): (_, CUcontext) = (self.drv, self.raw.cast());
        match spec {
            spec @ NodeSpec::Kernel { .. } => {
                let set = entry(drv.cuGraphExecKernelNodeSetParams_v2)?;
                // SAFETY: a live executable graph and a node of its graph;
                // argument pointers live through the call.
                with_kernel(spec, |p| ok(unsafe { set(e.0, n.0, p) }))
            }
            NodeSpec::Copy(c) => {
                let p = copy_params(&c);
                // SAFETY: as above; ranges as for adding the node.
                ok(unsafe { entry(drv.cuGraphExecMemcpyNodeSetParams)?(e.0, n.0, &p, ctx) })
            }
            NodeSpec::Memset { dst, pitch, width, height, value, elem_size } => {
                let p = memset_params(dst, pitch, width, height, value, elem_size);
                // SAFETY: as above.
                ok(unsafe { entry(drv.cuGraphExecMemsetNodeSetParams)?(e.0, n.0, &p, ctx) })
            }
            NodeSpec::Child(g) => {
                // SAFETY: as above, and a live graph of this session.
                ok(unsafe { entry(drv.cuGraphExecChildGraphNodeSetParams)?(e.0, n.0, g.0) })
            }
            NodeSpec::Host { func, data } => {
                let p = self.host_params(func, data)?;
                // SAFETY: as above; the target outlives the graph.
                ok(unsafe { entry(drv.cuGraphExecHostNodeSetParams)?(e.0, n.0, &p) })
            }
            NodeSpec::EventRecord(ev) => {
                // SAFETY: as above, and a live event of this session.
                ok(unsafe { entry(drv.cuGraphExecEventRecordNodeSetEvent)?(e.0, n.0, event(ev)) })
            }
            NodeSpec::EventWait(ev) => {
                // SAFETY: as above.
                ok(unsafe { entry(drv.cuGraphExecEventWaitNodeSetEvent)?(e.0, n.0, event(ev)) })
            }
            NodeSpec::MemOps(ops) => self.mem_op_node_set(Some(e), n, ops),
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    fn node_enable(&mut self, e: CudaGraphExec, n: CudaNode, enabled: bool) -> CuRes<()> {
        // SAFETY: a live executable graph and a node of its graph.
        ok(unsafe { entry(self.drv.cuGraphNodeSetEnabled)?(e.0, n.0, u32::from(enabled)) })
    }

    fn exec_update(&mut self, e: CudaGraphExec, g: CudaGraph) -> CuRes<(u32, Option<CudaNode>)> {
        let update = entry(self.drv.cuGraphExecUpdate_v2)?;
        // SAFETY: plain values and null node handles.
        let mut info: CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
        // SAFETY: a live executable graph and graph; a valid out-pointer.
        let r = unsafe { update(e.0, g.0, &mut info) };
        let node = (!info.errorNode.is_null()).then_some(CudaNode(info.errorNode));
        match r.result() {
            Ok(()) | Err(CuError::GRAPH_EXEC_UPDATE_FAILURE) => Ok((info.result.0, node)),
            Err(other) => Err(other),
        }
    }

    fn attach_host_calls(&mut self, calls: std::sync::Arc<crate::exec::host_call::HostCalls>) {
        self.attach_host(calls);
    }

    fn launch_host_func(&mut self, s: CudaStream, func: u64, data: u64) -> CuRes<()> {
        self.launch_host(s, func, data)
    }

    fn host_node_get(&mut self, n: CudaNode) -> CuRes<(u64, u64)> {
        self.host_get(n)
    }

    fn host_node_set(&mut self, n: CudaNode, func: u64, data: u64) -> CuRes<()> {
        self.host_set(n, func, data)
    }

    fn host_fence(&mut self, s: Option<CudaStream>) -> CuRes<()> {
        self.fence(s)
    }

    fn host_work_pending(&mut self) -> CuRes<bool> {
        self.fences_pending()
    }

    fn graph_add_mem_alloc(&mut self, g: CudaGraph, deps: &[CudaNode], size: u64) -> CuRes<(CudaNode, u64)> {
        self.add_mem_alloc(g, &nodes(deps), size)
    }

    fn mem_node_get(&mut self, n: CudaNode) -> CuRes<(u64, u64)> {
        self.mem_node(n)
    }

    fn graph_mem(&mut self, attr: u32, op: u32) -> CuRes<u64> {
        self.graph_mem_op(attr, op)
    }

    fn cond_handle_create(&mut self, g: CudaGraph, default: u32, flags: u32) -> CuRes<u64> {
        self.cond_handle(g, default, flags)
    }

    fn graph_add_conditional(
        &mut self,
        g: CudaGraph,
        deps: &[CudaNode],
        handle: u64,
        kind: u32,
        size: u32,
    ) -> CuRes<(CudaNode, Vec<CudaGraph>)> {
        self.add_conditional(g, &nodes(deps), handle, kind, size)
    }
}

fn event(e: CudaEvent) -> CUevent {
    e.0.cast()
}

/// A memset as `CUDA_MEMSET_NODE_PARAMS`.
pub(super) fn memset_params(dst: u64, pitch: u64, width: u64, height: u64, value: u32, elem_size: u32) -> CUDA_MEMSET_NODE_PARAMS {
    CUDA_MEMSET_NODE_PARAMS { dst, pitch: pitch as usize, value, elementSize: elem_size, width: width as usize, height: height as usize }
}

/// A copy as `CUDA_MEMCPY3D`: device to device, or with one side in host
/// memory of this process.
pub(super) fn copy_params(c: &Copy3D) -> CUDA_MEMCPY3D {
    // SAFETY: plain integers and null pointers: zero is "nothing" for each.
    let mut p: CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
    let kind = |host: bool| if host { CU_MEMORYTYPE_HOST } else { CU_MEMORYTYPE_DEVICE };
    (p.srcMemoryType, p.srcPitch, p.srcHeight) = (kind(c.src.host), c.src.pitch as usize, c.src.rows as usize);
    if c.src.host {
        p.srcHost = c.src.addr as usize as *const c_void;
    } else {
        p.srcDevice = c.src.addr;
    }
    (p.dstMemoryType, p.dstPitch, p.dstHeight) = (kind(c.dst.host), c.dst.pitch as usize, c.dst.rows as usize);
    if c.dst.host {
        p.dstHost = c.dst.addr as usize as *mut c_void;
    } else {
        p.dstDevice = c.dst.addr;
    }
    (p.WidthInBytes, p.Height, p.Depth) = (c.width as usize, c.height as usize, c.depth as usize);
    p
}
