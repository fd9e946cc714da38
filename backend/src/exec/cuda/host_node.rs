//! Host nodes on the GPU: the driver runs each as a function of the
//! backend ([`run_host_node`]) whose data names the program's function and
//! data; that function hands the call to the session's queue and holds the
//! graph until the program has run it ([`crate::exec::host_call`]).
//!
//! A node's data is a [`HostTarget`] the context keeps, one per distinct
//! (function, data) pair and at most [`MAX_TARGETS`], for the context's
//! life: graphs copied by the driver (clones, instantiations, child
//! graphs) keep pointing at it. The context is destroyed before its
//! targets are freed (field order after `Drop`), and the session closes
//! its queue before that, so no node waits on a freed target.

use super::driver::{entry, ok};
use super::graph::CudaNode;
use super::{CudaContext, CudaEvent, CudaStream, raw_stream};
use crate::exec::CuRes;
use crate::exec::ExecContext;
use crate::exec::graph::ExecGraph;
use crate::exec::host_call::HostCalls;
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// Most distinct host functions (function and data) one context keeps.
pub const MAX_TARGETS: usize = 65536;

/// What one host node runs in the program.
struct HostTarget {
    calls: Arc<HostCalls>,
    func: u64,
    data: u64,
}

/// A context's host-node targets and the launches that run host nodes.
#[derive(Default)]
pub(super) struct HostNodes {
    calls: Option<Arc<HostCalls>>,
    targets: HashMap<(u64, u64), Box<HostTarget>>,
    /// Events recorded after launches with host nodes, not yet reached.
    fences: Vec<CudaEvent>,
}

/// The function the driver runs for every host node of this backend.
///
/// # Safety
/// `user` is a [`HostTarget`] of a live context's [`HostNodes`] (the only
/// data the backend gives its host nodes).
unsafe extern "C" fn run_host_node(user: *mut c_void) {
    // SAFETY: the caller's contract; targets live as long as the context.
    let t = unsafe { &*(user as *const HostTarget) };
    t.calls.call(t.func, t.data);
}

impl CudaContext {
    /// The driver's parameters of a host node running `func(data)`.
    pub(super) fn host_params(&mut self, func: u64, data: u64) -> CuRes<CUDA_HOST_NODE_PARAMS> {
        let calls = self.host.calls.clone().ok_or(CuError::NOT_INITIALIZED)?;
        if !self.host.targets.contains_key(&(func, data)) && self.host.targets.len() >= MAX_TARGETS {
            return Err(CuError::OUT_OF_MEMORY);
        }
        let t = self.host.targets.entry((func, data)).or_insert_with(|| Box::new(HostTarget { calls, func, data }));
        Ok(CUDA_HOST_NODE_PARAMS { fn_: Some(run_host_node), userData: (&**t as *const HostTarget).cast_mut().cast() })
    }

    pub(super) fn attach_host(&mut self, calls: Arc<HostCalls>) {
        self.host.calls = Some(calls);
    }

    pub(super) fn launch_host(&mut self, s: CudaStream, func: u64, data: u64) -> CuRes<()> {
        let p = self.host_params(func, data)?;
        // SAFETY: a live stream of this context; the target outlives the
        // context's graphs (module docs).
        ok(unsafe { entry(self.drv.cuLaunchHostFunc)?(raw_stream(Some(s)).cast(), p.fn_, p.userData) })
    }

    pub(super) fn host_get(&mut self, n: CudaNode) -> CuRes<(u64, u64)> {
        let mut p = CUDA_HOST_NODE_PARAMS { fn_: None, userData: std::ptr::null_mut() };
        // SAFETY: a live node of this session (the driver checks its type);
        // a valid out-pointer.
        ok(unsafe { entry(self.drv.cuGraphHostNodeGetParams)?(n.0, &mut p) })?;
        let user = p.userData as *const HostTarget;
        // Only pointers this context handed out are read.
        let t = self.host.targets.values().find(|t| std::ptr::eq(&***t, user)).ok_or(CuError::INVALID_VALUE)?;
        Ok((t.func, t.data))
    }

    pub(super) fn host_set(&mut self, n: CudaNode, func: u64, data: u64) -> CuRes<()> {
        let p = self.host_params(func, data)?;
        // SAFETY: a live node of this session (the driver checks its type).
        ok(unsafe { entry(self.drv.cuGraphHostNodeSetParams)?(n.0, &p) })
    }

    pub(super) fn fence(&mut self, s: Option<CudaStream>) -> CuRes<()> {
        let e = self.event_create(CU_EVENT_DISABLE_TIMING.0)?;
        if let Err(err) = self.event_record(e, s) {
            let _ = self.event_destroy(e);
            return Err(err);
        }
        self.host.fences.push(e);
        Ok(())
    }

    /// Forgets the fences reached; whether any is left. The queries run in
    /// relaxed capture mode: the program may be capturing in global mode,
    /// where the driver would take them for its own illegal calls.
    pub(super) fn fences_pending(&mut self) -> CuRes<bool> {
        if self.host.fences.is_empty() {
            return Ok(false);
        }
        let old = self.exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED.0)?;
        let mut result = Ok(());
        let mut fences = std::mem::take(&mut self.host.fences);
        fences.retain(|&e| match self.event_query(e) {
            Ok(false) => true,
            Ok(true) => {
                let _ = self.event_destroy(e);
                false
            }
            Err(err) => {
                result = Err(err);
                let _ = self.event_destroy(e);
                false
            }
        });
        self.host.fences = fences;
        self.exchange_capture_mode(old)?;
        result.map(|_| !self.host.fences.is_empty())
    }
}
