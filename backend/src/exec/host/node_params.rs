//! Node parameters of the host test double: read back from a node's
//! operation, set by replacing it with one of the same kind; the queries
//! of an executable graph's nodes and of clones; kernel node attributes,
//! kept with the node (an attribute never set reads as zero, as the
//! driver's do).

use super::HostContext;
use super::graph::Op;
use crate::exec::CuRes;
use crate::exec::graph::{KernelArgs, NodeParams, NodeSpec};
use pvgpu_ring::CuError;

impl HostContext {
    pub(super) fn set_node(&mut self, n: u64, spec: NodeSpec<'_, Self>) -> CuRes<()> {
        let new = Self::op(spec);
        let op = self.graphs.op_mut(n)?;
        let same_kind = matches!(
            (&*op, &new),
            (Op::Kernel { .. }, Op::Kernel { .. })
                | (Op::Memset { .. }, Op::Memset { .. })
                | (Op::Copy(_), Op::Copy(_))
                | (Op::EventRecord(_), Op::EventRecord(_))
                | (Op::EventWait(_), Op::EventWait(_))
                | (Op::MemOps(_), Op::MemOps(_))
        );
        if !same_kind {
            return Err(CuError::INVALID_VALUE);
        }
        // New parameters keep the node's attributes, as the driver's do.
        let kept = match &*op {
            Op::Kernel { attrs, .. } => attrs.clone(),
            _ => Vec::new(),
        };
        *op = new;
        if let Op::Kernel { attrs, .. } = op {
            *attrs = kept;
        }
        Ok(())
    }

    pub(super) fn params_of(&mut self, n: u64) -> CuRes<NodeParams<Self>> {
        Ok(match self.graphs.op_mut(n)?.clone() {
            Op::Kernel { f, dims, params, .. } => NodeParams::Kernel { f, dims, args: KernelArgs::Packed(params) },
            Op::Memset { rect, value, elem } => {
                NodeParams::Memset { dst: rect.ptr, pitch: rect.pitch, width: rect.width, height: rect.height, value, elem_size: elem }
            }
            Op::Copy(c) => NodeParams::Copy(c),
            Op::EventRecord(event) => NodeParams::Event { wait: false, event },
            Op::EventWait(event) => NodeParams::Event { wait: true, event },
            Op::MemOps(ops) => NodeParams::MemOps(ops),
            _ => return Err(CuError::NOT_SUPPORTED),
        })
    }

    /// The attributes of kernel node `n`.
    fn attrs_mut(&mut self, n: u64) -> CuRes<&mut Vec<(u32, [u8; 64])>> {
        match self.graphs.op_mut(n)? {
            Op::Kernel { attrs, .. } => Ok(attrs),
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    pub(super) fn node_attr(&mut self, n: u64, attr: u32, value: Option<&[u8; 64]>) -> CuRes<[u8; 64]> {
        let attrs = self.attrs_mut(n)?;
        if let Some(v) = value {
            attrs.retain(|(id, _)| *id != attr);
            attrs.push((attr, *v));
        }
        Ok(attrs.iter().find(|(id, _)| *id == attr).map_or([0; 64], |(_, v)| *v))
    }

    pub(super) fn copy_node_attrs(&mut self, dst: u64, src: u64) -> CuRes<()> {
        let from = self.attrs_mut(src)?.clone();
        *self.attrs_mut(dst)? = from;
        Ok(())
    }

    pub(super) fn in_clone(&self, clone: u64, n: u64) -> CuRes<u64> {
        self.graphs.clones.get(&(clone, n)).copied().ok_or(CuError::INVALID_VALUE)
    }
}
