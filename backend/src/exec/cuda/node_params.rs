//! Node parameters on the GPU, read back and set in a graph: kernel,
//! memset, copy and event nodes (`cuGraph*NodeGetParams`,
//! `cuGraph*NodeSetParams`, `cuGraphEvent*NodeGetEvent/SetEvent`), and the
//! queries of an executable graph's nodes and of clones; kernel node
//! attributes.

use super::driver::{entry, ok};
use super::graph::{CudaGraph, CudaGraphExec, CudaNode};
use super::{CudaContext, CudaEvent, CudaFunction};
use crate::exec::graph::{Copy3D, CopySide, KernelArgs, NodeParams, NodeSpec};
use crate::exec::{CuRes, LaunchDims};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::ptr;

/// How many parameters kernel `f` takes.
fn param_count(f: CudaFunction) -> usize {
    (0..pvgpu_ring::proto::MAX_PARAMS)
        .take_while(|&i| {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: a live function; valid out-pointers; an index past the
            // last parameter answers an error.
            unsafe { cudarc::driver::sys::cuFuncGetParamInfo(f.0, i, &mut off, &mut size) as u32 == 0 }
        })
        .count()
}

/// A copy node's parameters as the session names them: offsets folded
/// into each side's address. Arrays (which the session never puts in a
/// node) are not answered.
fn copy_of(p: &CUDA_MEMCPY3D) -> CuRes<Copy3D> {
    let side = |t: CUmemorytype, dev: u64, host: u64, x: usize, y: usize, z: usize, pitch: usize, rows: usize| {
        let base = match t {
            CU_MEMORYTYPE_HOST => host,
            CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_UNIFIED => dev,
            _ => return Err(CuError::NOT_SUPPORTED),
        };
        let (x, y, z, pitch, rows) = (x as u64, y as u64, z as u64, pitch as u64, rows as u64);
        Ok(CopySide { addr: base + (z * rows + y) * pitch + x, pitch, rows, host: t == CU_MEMORYTYPE_HOST })
    };
    let src = side(p.srcMemoryType, p.srcDevice, p.srcHost as u64, p.srcXInBytes, p.srcY, p.srcZ, p.srcPitch, p.srcHeight)?;
    let dst = side(p.dstMemoryType, p.dstDevice, p.dstHost as u64, p.dstXInBytes, p.dstY, p.dstZ, p.dstPitch, p.dstHeight)?;
    Ok(Copy3D { dst, src, width: p.WidthInBytes as u64, height: p.Height.max(1) as u64, depth: p.Depth.max(1) as u64 })
}

impl CudaContext {
    pub(super) fn params_of(&mut self, n: CudaNode) -> CuRes<NodeParams<Self>> {
        let drv = self.drv;
        let mut kind = CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: a live node; a valid out-pointer.
        ok(unsafe { entry(drv.cuGraphNodeGetType)?(n.0, &mut kind) })?;
        match kind {
            CU_GRAPH_NODE_TYPE_KERNEL => {
                // SAFETY: plain integers and null pointers.
                let mut p: CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
                // SAFETY: a live kernel node; a valid out-pointer.
                ok(unsafe { entry(drv.cuGraphKernelNodeGetParams_v2)?(n.0, &mut p) })?;
                let f = CudaFunction(if p.func.is_null() { p.kern.cast() } else { p.func.cast() });
                let count = param_count(f);
                if count > 0 && p.kernelParams.is_null() {
                    return Err(CuError::NOT_SUPPORTED);
                }
                // SAFETY: the driver's array of one pointer per parameter,
                // alive while the node is unchanged.
                let args = (0..count).map(|i| unsafe { *p.kernelParams.add(i) } as usize).collect();
                let dims = LaunchDims {
                    grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
                    block: [p.blockDimX, p.blockDimY, p.blockDimZ],
                    shared_mem: p.sharedMemBytes,
                };
                Ok(NodeParams::Kernel { f, dims, args: KernelArgs::Pointers(args) })
            }
            CU_GRAPH_NODE_TYPE_MEMSET => {
                // SAFETY: plain integers.
                let mut p: CUDA_MEMSET_NODE_PARAMS = unsafe { std::mem::zeroed() };
                // SAFETY: a live memset node; a valid out-pointer.
                ok(unsafe { entry(drv.cuGraphMemsetNodeGetParams)?(n.0, &mut p) })?;
                let (dst, pitch, width, height) = (p.dst, p.pitch as u64, p.width as u64, p.height as u64);
                Ok(NodeParams::Memset { dst, pitch, width, height, value: p.value, elem_size: p.elementSize })
            }
            CU_GRAPH_NODE_TYPE_MEMCPY => {
                // SAFETY: plain integers and null pointers.
                let mut p: CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
                // SAFETY: a live copy node; a valid out-pointer.
                ok(unsafe { entry(drv.cuGraphMemcpyNodeGetParams)?(n.0, &mut p) })?;
                Ok(NodeParams::Copy(copy_of(&p)?))
            }
            CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => Ok(NodeParams::MemOps(self.mem_op_node_get(n)?)),
            CU_GRAPH_NODE_TYPE_EVENT_RECORD | CU_GRAPH_NODE_TYPE_WAIT_EVENT => {
                let wait = kind == CU_GRAPH_NODE_TYPE_WAIT_EVENT;
                let get = entry(if wait { drv.cuGraphEventWaitNodeGetEvent } else { drv.cuGraphEventRecordNodeGetEvent })?;
                let mut e = ptr::null_mut();
                // SAFETY: a live event node; a valid out-pointer.
                ok(unsafe { get(n.0, &mut e) })?;
                Ok(NodeParams::Event { wait, event: CudaEvent(e.cast()) })
            }
            _ => Err(CuError::NOT_SUPPORTED),
        }
    }

    pub(super) fn set_node(&mut self, n: CudaNode, spec: NodeSpec<'_, Self>) -> CuRes<()> {
        let drv = self.drv;
        match spec {
            spec @ NodeSpec::Kernel { .. } => {
                let set = entry(drv.cuGraphKernelNodeSetParams_v2)?;
                // SAFETY: a live node (the driver checks its type); argument
                // pointers live through the call.
                super::graph::with_kernel(spec, |p| ok(unsafe { set(n.0, p) }))
            }
            NodeSpec::Memset { dst, pitch, width, height, value, elem_size } => {
                let p = super::graph::memset_params(dst, pitch, width, height, value, elem_size);
                // SAFETY: as above; a device range the session checked.
                ok(unsafe { entry(drv.cuGraphMemsetNodeSetParams)?(n.0, &p) })
            }
            NodeSpec::Copy(c) => {
                let p = super::graph::copy_params(&c);
                // SAFETY: as above; ranges as for adding the node.
                ok(unsafe { entry(drv.cuGraphMemcpyNodeSetParams)?(n.0, &p) })
            }
            NodeSpec::EventRecord(e) => {
                // SAFETY: as above, and a live event of the session.
                ok(unsafe { entry(drv.cuGraphEventRecordNodeSetEvent)?(n.0, e.0.cast()) })
            }
            NodeSpec::EventWait(e) => {
                // SAFETY: as above.
                ok(unsafe { entry(drv.cuGraphEventWaitNodeSetEvent)?(n.0, e.0.cast()) })
            }
            NodeSpec::MemOps(ops) => self.mem_op_node_set(None, n, ops),
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    pub(super) fn node_attr(&mut self, n: CudaNode, attr: u32, value: Option<&[u8; 64]>) -> CuRes<[u8; 64]> {
        let drv = self.drv;
        let id = CUlaunchAttributeID(attr);
        if let Some(v) = value {
            // SAFETY: the value union is 64 plain bytes (integers, floats,
            // handles), any of which is valid.
            let v = unsafe { std::mem::transmute::<[u8; 64], CUkernelNodeAttrValue>(*v) };
            // SAFETY: a live node (the driver checks it is a kernel node);
            // the value lives through the call.
            ok(unsafe { entry(drv.cuGraphKernelNodeSetAttribute)?(n.0, id, &v) })?;
        }
        // SAFETY: plain integers, zero for each member.
        let mut out: CUkernelNodeAttrValue = unsafe { std::mem::zeroed() };
        // SAFETY: as above; a valid out-pointer.
        ok(unsafe { entry(drv.cuGraphKernelNodeGetAttribute)?(n.0, id, &mut out) })?;
        // SAFETY: as above, the other way.
        Ok(unsafe { std::mem::transmute::<CUkernelNodeAttrValue, [u8; 64]>(out) })
    }

    pub(super) fn stream_attribute(&mut self, s: Option<super::CudaStream>, attr: u32, value: Option<&[u8; 64]>) -> CuRes<[u8; 64]> {
        let drv = self.drv;
        let (st, id) = (super::raw_stream(s) as CUstream, CUlaunchAttributeID(attr));
        if let Some(v) = value {
            // SAFETY: the value union is 64 plain bytes (integers, floats,
            // pointers the driver only records), any of which is valid.
            let v = unsafe { std::mem::transmute::<[u8; 64], CUstreamAttrValue>(*v) };
            // SAFETY: a stream of this context (or its default stream); the
            // value lives through the call; the driver checks the id.
            ok(unsafe { entry(drv.cuStreamSetAttribute)?(st, id, &v) })?;
        }
        // SAFETY: plain integers, zero for each member.
        let mut out: CUstreamAttrValue = unsafe { std::mem::zeroed() };
        // SAFETY: as above; a valid out-pointer.
        ok(unsafe { entry(drv.cuStreamGetAttribute)?(st, id, &mut out) })?;
        // SAFETY: as above, the other way.
        Ok(unsafe { std::mem::transmute::<CUstreamAttrValue, [u8; 64]>(out) })
    }

    pub(super) fn copy_node_attrs(&mut self, dst: CudaNode, src: CudaNode) -> CuRes<()> {
        // SAFETY: two live nodes of this context (the driver checks they
        // are kernel nodes).
        ok(unsafe { entry(self.drv.cuGraphKernelNodeCopyAttributes)?(dst.0, src.0) })
    }

    pub(super) fn enabled(&mut self, e: CudaGraphExec, n: CudaNode) -> CuRes<bool> {
        let mut on = 0u32;
        // SAFETY: a live executable graph and a node of its graph; a valid
        // out-pointer.
        ok(unsafe { entry(self.drv.cuGraphNodeGetEnabled)?(e.0, n.0, &mut on) })?;
        Ok(on != 0)
    }

    pub(super) fn in_clone(&mut self, clone: CudaGraph, n: CudaNode) -> CuRes<CudaNode> {
        let mut out = ptr::null_mut();
        // SAFETY: a live graph and node; a valid out-pointer.
        ok(unsafe { entry(self.drv.cuGraphNodeFindInClone)?(&mut out, n.0, clone.0) })?;
        Ok(CudaNode(out))
    }
}
