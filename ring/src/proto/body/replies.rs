//! Replies with lists and names: device properties, a function's
//! parameter layout, a module's kernel names.

use super::{Reply, check_name, with_list, with_tail};
use crate::proto::wire::*;
use crate::proto::{DecodeError, MAX_ATTRS, MAX_NAMES, MAX_PARAMS, Opcode};
use zerocopy::IntoBytes;

/// `DeviceGetProperties` reply: name, UUID, memory and every attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct DevicePropsRep {
    /// Memory, UUID, name and the attribute count.
    pub head: DevicePropsHead,
    /// `attr_count` attributes.
    pub attrs: Vec<AttrPair>,
}

impl Reply for DevicePropsRep {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.head.as_bytes());
        out.extend_from_slice(self.attrs.as_bytes());
    }
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
        let (head, attrs) = with_list(op, p, |h: &DevicePropsHead| h.attr_count.get() as usize, MAX_ATTRS)?;
        Ok(DevicePropsRep { head, attrs })
    }
}

/// `ModuleGetFunction` reply: the function and its parameter layout.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionRep {
    /// Function id, parameter count and packed size.
    pub head: FunctionHead,
    /// `param_count` parameters, in order.
    pub params: Vec<ParamInfo>,
}

impl Reply for FunctionRep {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.head.as_bytes());
        out.extend_from_slice(self.params.as_bytes());
    }
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
        let (head, params) = with_list(op, p, |h: &FunctionHead| h.param_count.get() as usize, MAX_PARAMS)?;
        Ok(FunctionRep { head, params })
    }
}

/// `ModuleFunctionNames` reply: a page of the names of a module's kernels.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NamesRep {
    /// The names (each checked: non-empty, bounded, NUL-free UTF-8).
    pub names: Vec<String>,
    /// How many names the module has in all.
    pub total: u32,
}

impl Reply for NamesRep {
    fn encode(&self, out: &mut Vec<u8>) {
        let bytes: usize = self.names.iter().map(|n| n.len() + 1).sum();
        let head = NamesHead {
            count: (self.names.len() as u32).into(),
            bytes: (bytes as u32).into(),
            total: self.total.into(),
            reserved: 0.into(),
        };
        out.extend_from_slice(head.as_bytes());
        for n in &self.names {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
        }
    }
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
        let (head, tail) = with_tail::<NamesHead, _>(op, p, |h| Ok(h.bytes.get() as usize))?;
        let count = head.count.get() as usize;
        if head.reserved.get() != 0 {
            return Err(DecodeError::BadField("reserved"));
        }
        if count > MAX_NAMES || head.total.get() as usize > MAX_NAMES {
            return Err(DecodeError::TooLarge(count));
        }
        let names = if count == 0 && tail.is_empty() {
            Vec::new()
        } else {
            let body = tail.strip_suffix(&[0]).ok_or(DecodeError::BadName)?;
            body.split(|&b| b == 0).map(|n| check_name(n).map(str::to_string)).collect::<Result<Vec<_>, _>>()?
        };
        if names.len() != count {
            return Err(DecodeError::BadField("count"));
        }
        Ok(NamesRep { names, total: head.total.get() })
    }
}
