//! Graph replay: a graph of 100 empty kernels, and one of 100 device
//! copies of 64 KiB, each captured once on a stream, instantiated once,
//! then launched and synchronised again and again. Through pvgpu a replay
//! is one command whatever the graph holds, so it should cost what it
//! costs natively (plus one round trip over TCP).

use anyhow::{Context as _, Result};
use cudarc::driver::sys;
use pvgpu_frontend::Client;
use pvgpu_tests::Gpu;
use pvgpu_tests::native::NativeGpu;
use std::ptr;
use std::time::Instant;

/// Nodes of each graph.
pub const NODES: usize = 100;
/// Bytes of each copy of the copy graph.
const COPY: usize = 64 << 10;

/// What a replayed graph holds.
#[derive(Clone, Copy)]
pub enum Kind {
    /// Empty kernels.
    Kernels,
    /// Device-to-device copies.
    Copies,
}

/// Mean microseconds of one launch-and-synchronise of the graph, over
/// `reps` (after a warm-up).
pub trait Replay {
    fn replay_us(&self, kind: Kind, reps: u32) -> Result<f64>;
}

fn timed(reps: u32, mut once: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..reps.div_ceil(10) {
        once()?;
    }
    let s = Instant::now();
    for _ in 0..reps {
        once()?;
    }
    Ok(s.elapsed().as_secs_f64() * 1e6 / reps as f64)
}

impl Replay for Gpu<'_> {
    fn replay_us(&self, kind: Kind, reps: u32) -> Result<f64> {
        let c: &Client = self.c;
        let s = c.stream_create(self.ctx, 1, 0)?;
        let (src, dst) = (c.mem_alloc(self.ctx, (COPY * NODES) as u64)?, c.mem_alloc(self.ctx, (COPY * NODES) as u64)?);
        let null = self.func("pvgpu_null")?;
        c.stream_begin_capture(s, 0)?;
        for i in 0..NODES {
            match kind {
                Kind::Kernels => c.launch(&null, [1, 1, 1], [1, 1, 1], 0, s, &[])?,
                Kind::Copies => c.memcpy_dtod_async(dst + (i * COPY) as u64, src + (i * COPY) as u64, COPY as u64, s)?,
            }
        }
        let g = c.stream_end_capture(s)?;
        let e = c.graph_instantiate(g, 0)?;
        let us = timed(reps, || {
            c.graph_launch(e, s, false)?;
            Ok(c.stream_synchronize(s)?)
        });
        c.graph_exec_destroy(e)?;
        c.graph_destroy(g)?;
        for d in [src, dst] {
            c.mem_free(d)?;
        }
        c.stream_destroy(s)?;
        us.context("graph replay")
    }
}

fn ck(r: sys::CUresult) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { anyhow::bail!("{r:?}") }
}

impl Replay for NativeGpu {
    fn replay_us(&self, kind: Kind, reps: u32) -> Result<f64> {
        use pvgpu_tests::Device;
        let null = self.kernel("pvgpu_null")?;
        let (src, dst) = (self.alloc((COPY * NODES) as u64)?, self.alloc((COPY * NODES) as u64)?);
        let mut s = ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        ck(unsafe { sys::cuStreamCreate(&mut s, 1) })?;
        // SAFETY: a stream of the current context.
        ck(unsafe { sys::cuStreamBeginCapture_v2(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL) })?;
        for i in 0..NODES {
            match kind {
                // SAFETY: a kernel of no parameters, on the capturing stream.
                Kind::Kernels => ck(unsafe { sys::cuLaunchKernel(null.raw(), 1, 1, 1, 1, 1, 1, 0, s, ptr::null_mut(), ptr::null_mut()) })?,
                // SAFETY: both ranges lie in allocations of ours.
                Kind::Copies => ck(unsafe { sys::cuMemcpyDtoDAsync_v2(dst + (i * COPY) as u64, src + (i * COPY) as u64, COPY, s) })?,
            }
        }
        let mut g = ptr::null_mut();
        // SAFETY: the stream that began the capture; valid out-pointer.
        ck(unsafe { sys::cuStreamEndCapture(s, &mut g) })?;
        let mut e = ptr::null_mut();
        // SAFETY: a live graph; valid out-pointer.
        ck(unsafe { sys::cuGraphInstantiateWithFlags(&mut e, g, 0) })?;
        let us = timed(reps, || {
            // SAFETY: a live executable graph and stream.
            ck(unsafe { sys::cuGraphLaunch(e, s) })?;
            // SAFETY: as above.
            ck(unsafe { sys::cuStreamSynchronize(s) })
        });
        // SAFETY: our own objects, destroyed once.
        unsafe {
            sys::cuGraphExecDestroy(e);
            sys::cuGraphDestroy(g);
            sys::cuStreamDestroy_v2(s);
        }
        for d in [src, dst] {
            self.free(d)?;
        }
        us
    }
}
