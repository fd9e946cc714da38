//! Conditional nodes of the host test double: handles whose values live
//! with the context's memory (kernels set them, as on a GPU), and if,
//! while and switch nodes that a launch evaluates when it reaches them:
//! the body that runs is put before the rest of the launch (a while node
//! after its body again).

use super::HostContext;
use super::graph::Op;
use crate::exec::CuRes;
use pvgpu_ring::cuda::api::*;

/// `CU_GRAPH_COND_ASSIGN_DEFAULT` (a `#define` of cuda.h).
const ASSIGN_DEFAULT: u32 = 1;

impl HostContext {
    /// `cuGraphConditionalHandleCreate`: the value starts at `default`.
    pub(super) fn cond_create(&mut self, g: u64, default: u32, flags: u32) -> CuRes<u64> {
        self.ok()?;
        let assign = flags & ASSIGN_DEFAULT != 0;
        let h = self.graphs.cond_handle(g, assign.then_some(default))?;
        self.mem.conds.insert(h, default);
        Ok(h)
    }

    /// Whether root graph `g` has a conditional handle no node of it (or
    /// of its bodies) uses: the driver then refuses to instantiate it
    /// (`CUDA_ERROR_INVALID_VALUE`, measured on the H200).
    pub(super) fn cond_unused(&self, g: u64) -> CuRes<bool> {
        if self.graphs.graph(g)?.root != g {
            return Ok(false);
        }
        let mut used = std::collections::HashSet::new();
        let mut stack = vec![g];
        while let Some(b) = stack.pop() {
            for op in self.graphs.graph(b)?.ops.values() {
                if let Op::Cond { root, handle, bodies, .. } = op {
                    used.insert((*root, *handle));
                    stack.extend(bodies);
                }
            }
        }
        Ok(self.graphs.cond_handles.keys().any(|&(root, v)| root == g && !used.contains(&(root, v))))
    }

    /// A launch of graph `g` starts: the handles its conditional nodes
    /// use (in child graphs and bodies too) that assign a default take it.
    pub(super) fn cond_defaults(&mut self, g: u64) -> CuRes<()> {
        let mut stack = vec![g];
        while let Some(g) = stack.pop() {
            for op in self.graphs.graph(g)?.ops.values() {
                match op {
                    Op::Child(c) => stack.push(*c),
                    Op::Cond { root, handle, bodies, .. } => {
                        if let Some(d) = self.graphs.cond_handles.get(&(*root, *handle)).and_then(|h| h.default) {
                            self.mem.conds.insert(*handle, d);
                        }
                        stack.extend(bodies);
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The work a conditional node puts before the rest of its launch now:
    /// the body its handle's value chooses (if any), unrolled, and for a
    /// while node that runs its body, the node again after it.
    pub(super) fn cond_run(&self, root: u64, handle: u64, kind: u32, bodies: &[u64]) -> CuRes<Vec<Op>> {
        let v = self.mem.conds.get(&handle).copied().unwrap_or(0);
        let kind = CUgraphConditionalNodeType(kind);
        let body = match kind {
            CU_GRAPH_COND_TYPE_IF if v != 0 => bodies.first(),
            CU_GRAPH_COND_TYPE_IF => bodies.get(1),
            CU_GRAPH_COND_TYPE_WHILE if v != 0 => bodies.first(),
            CU_GRAPH_COND_TYPE_SWITCH => bodies.get(v as usize),
            _ => None,
        };
        let mut ops = Vec::new();
        if let Some(&b) = body {
            self.unroll(b, &mut ops)?;
            if kind == CU_GRAPH_COND_TYPE_WHILE {
                ops.push(Op::Cond { root, handle, kind: kind.0, bodies: bodies.to_vec() });
            }
        }
        Ok(ops)
    }
}
