//! Graphs launched from the device in the host test double: an executable
//! graph instantiated with `CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH` and
//! uploaded (by an upload or a launch) may be launched by a kernel
//! (`cudaGraphLaunch` in device code, the registry's
//! `pvgpu_graph_launch`); its handle is its number. The graph runs after
//! the work before it: after the launching kernel, or after the rest of
//! the launching graph (a tail launch's order; a fire-and-forget launch
//! may run at any time, so this order is one of its own).

use super::HostContext;
use crate::exec::CuRes;
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH;

impl HostContext {
    /// Executable graph `e` was instantiated with `flags`.
    pub(super) fn device_instantiated(&mut self, e: u64, flags: u64) {
        if flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64 != 0 {
            self.graphs.device.insert(e);
        }
    }

    /// `e` was uploaded or launched from the host: kernels may launch it.
    pub(super) fn device_uploaded(&mut self, e: u64) {
        if self.graphs.device.contains(&e) {
            self.mem.device_graphs.insert(e);
        }
    }

    /// `e` was destroyed.
    pub(super) fn device_gone(&mut self, e: u64) {
        self.graphs.device.remove(&e);
        self.mem.device_graphs.remove(&e);
    }

    /// The handle kernels launch `e` by.
    pub(super) fn device_handle(&self, e: u64) -> CuRes<u64> {
        if self.graphs.device.contains(&e) { Ok(e) } else { Err(CuError::INVALID_VALUE) }
    }

    /// Runs the graphs kernels launched: queued after the held work, which
    /// runs now unless it is being run already.
    pub(super) fn run_device_launches(&mut self) -> CuRes<()> {
        let launched = std::mem::take(&mut self.mem.device_launches);
        if launched.is_empty() {
            return Ok(());
        }
        for e in launched {
            let Some(&g) = self.graphs.execs.get(&e) else { continue };
            let mut ops = Vec::new();
            self.unroll(g, &mut ops)?;
            self.hold(ops);
        }
        if self.advancing() { Ok(()) } else { self.advance().map(drop) }
    }
}
