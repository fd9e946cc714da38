//! Host functions in graphs: host nodes, and host functions captured on a
//! stream, run in this process at every launch of their graph.
//!
//! The backend's driver holds a graph at each host node until the program
//! has run the function. After launching an executable graph that has
//! host nodes, the connection sends `HostCallWait` before anything else;
//! while it waits, the backend sends each function as it comes due, which
//! runs here, on the waiting thread, and is answered with `HostCallDone`.
//! The wait ends when the launches that run host nodes have finished: work
//! sent after such a launch is sent after its host functions have run.
//!
//! Mirrored memory (page-locked memory over TCP, and ordinary memory a
//! graph copies from or to) is pulled before each function runs and pushed
//! after, so the function sees the graph's copies and they see what it
//! wrote.
//!
//! Only functions this process gave as host nodes are called (the
//! registry of [`HostCallState`]); anything else a backend names is
//! answered without being called.

use crate::error::Result;
use crate::graph::wire_ids;
use crate::rpc::Conn;
use crate::{Client, Graph, GraphExec, GraphNode, Stream};
use pvgpu_ring::proto::{self, FLAG_REPLY, HostCallDone, HostCallMsg, Opcode};
use std::collections::HashSet;
use std::ffi::c_void;
use zerocopy::{FromBytes, IntoBytes};

/// A host function (`CUhostFn`).
pub type HostFn = unsafe extern "C" fn(*mut c_void);

/// What the connection knows of host functions.
#[derive(Default)]
pub(crate) struct HostCallState {
    /// Functions and data given as host nodes.
    fns: HashSet<(u64, u64)>,
    /// Executable graphs that run host nodes.
    pub(crate) execs: HashSet<u64>,
    /// A launch with host nodes was sent: wait for them before the next
    /// command.
    pub(crate) pending: bool,
}

/// Whether `op` may go out while host calls are pending (the wait itself
/// and what it sends).
pub(crate) fn passes_pending(op: u16) -> bool {
    op == Opcode::HostCallWait as u16 || op == Opcode::HostCallDone as u16
}

impl Conn {
    /// Waits in `HostCallWait` for the pending launches' host functions.
    pub(crate) fn wait_host_calls(&mut self) -> Result<()> {
        self.host.pending = false;
        let kept = std::mem::take(&mut self.buf);
        let r = self.send_raw(Opcode::HostCallWait as u16, FLAG_REPLY, &[]).and_then(|id| self.reply(Opcode::HostCallWait as u16, id));
        self.buf = kept;
        r.map(drop)
    }

    /// Runs the host call in `self.buf` (a host-call message) and answers
    /// it.
    pub(crate) fn run_host_call(&mut self) -> Result<()> {
        let Ok(msg) = HostCallMsg::read_from_bytes(&self.buf) else {
            return self.fail(crate::error::TransportError::Protocol(crate::error::ProtocolError::BadHostCall));
        };
        let (func, data) = (msg.func.get(), msg.data.get());
        // The function sees what the graph's copies wrote into mirrored
        // memory; what it writes there goes back before the answer (sent
        // ahead of any command).
        if !self.mirrors.is_empty() {
            self.pull_mirrors()?;
        }
        if self.host.fns.contains(&(func, data)) {
            // SAFETY: the program gave `func` as a host function taking
            // `data` (`graph_add_host_node` and its kin, whose callers
            // vouch for them); it runs once per launch reaching its node,
            // as the driver runs it.
            unsafe {
                let f: HostFn = std::mem::transmute::<usize, HostFn>(func as usize);
                f(data as usize as *mut c_void);
            }
        } else {
            tracing::error!(func, data, "the backend named a host function this program never gave; not called");
        }
        let done = HostCallDone { id: msg.id };
        self.send_raw(Opcode::HostCallDone as u16, 0, &[done.as_bytes()]).map(drop)
    }
}

impl Client {
    /// Remembers `func(data)` as a host function this program gave.
    fn host_fn(&self, func: HostFn, data: *mut c_void) -> (u64, u64) {
        let key = (func as usize as u64, data as usize as u64);
        self.conn().host.fns.insert(key);
        key
    }

    /// `cuGraphAddHostNode`: a node of `g` after `deps` that runs
    /// `func(data)` in this process at every launch.
    ///
    /// # Safety
    /// `func` must be safe to call with `data` on a thread of this process
    /// whenever a launch reaches the node, for as long as the graph or an
    /// executable graph made from it may run.
    pub unsafe fn graph_add_host_node(&self, g: Graph, deps: &[GraphNode], func: HostFn, data: *mut c_void) -> Result<GraphNode> {
        let (f, d) = self.host_fn(func, data);
        let head = proto::GraphHostHead {
            graph: g.0.into(),
            func: f.into(),
            data: d.into(),
            dep_count: (deps.len() as u32).into(),
            reserved: 0.into(),
        };
        let deps = wire_ids(deps);
        Ok(GraphNode(self.call(&proto::GraphAddHostNode { head, deps: &deps })?.handle.get()))
    }

    /// `cuLaunchHostFunc` on `s`, which is capturing: the captured graph
    /// gets a host node.
    ///
    /// # Safety
    /// As [`Client::graph_add_host_node`].
    pub unsafe fn launch_host_func_captured(&self, s: Stream, func: HostFn, data: *mut c_void) -> Result<()> {
        let (f, d) = self.host_fn(func, data);
        self.call(&proto::LaunchHostFunc { stream: s.0.into(), func: f.into(), data: d.into(), callback: 0.into(), reserved: 0.into() })
    }

    /// `cuStreamAddCallback` on `s`, which is capturing: refused with
    /// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, and the capture
    /// invalidated, as the driver does.
    pub fn stream_callback_captured(&self, s: Stream) -> Result<()> {
        self.call(&proto::LaunchHostFunc { stream: s.0.into(), func: 0.into(), data: 0.into(), callback: 1.into(), reserved: 0.into() })
    }

    /// `cuGraphHostNodeGetParams`: the node's function and data, as the
    /// program gave them.
    pub fn host_node_params(&self, n: GraphNode) -> Result<(usize, usize)> {
        let r = self.call(&proto::HostNodeParams {
            node: n.0.into(),
            exec: 0.into(),
            func: 0.into(),
            data: 0.into(),
            op: 0.into(),
            reserved: 0.into(),
        })?;
        Ok((r.func.get() as usize, r.data.get() as usize))
    }

    /// `cuGraphHostNodeSetParams` (`exec` `None`) or
    /// `cuGraphExecHostNodeSetParams` of node `n`.
    ///
    /// # Safety
    /// As [`Client::graph_add_host_node`].
    pub unsafe fn host_node_set(&self, exec: Option<GraphExec>, n: GraphNode, func: HostFn, data: *mut c_void) -> Result<()> {
        let (f, d) = self.host_fn(func, data);
        let op = if exec.is_some() { 2u32 } else { 1 };
        let e = exec.map_or(0, |e| e.0);
        self.call(&proto::HostNodeParams {
            node: n.0.into(),
            exec: e.into(),
            func: f.into(),
            data: d.into(),
            op: op.into(),
            reserved: 0.into(),
        })
        .map(drop)
    }

    /// Runs the host functions of launched graphs now, if any may be due,
    /// and returns once those launches have finished (the connection does
    /// it before its next command anyway).
    pub fn run_host_calls(&self) -> Result<()> {
        let mut c = self.conn();
        if c.host.pending { c.wait_host_calls() } else { Ok(()) }
    }

    /// Whether launches with host nodes were sent and their host functions
    /// not yet waited for.
    pub fn host_calls_pending(&self) -> bool {
        self.conn().host.pending
    }
}
