//! Requests with a tail: module images, symbol names, inline bytes, kernel
//! parameters, launch attributes.

use super::{Body, check_name, inline_len, with_tail};
use crate::proto::wire::*;
use crate::proto::{DecodeError, MAX_PARAM_BYTES, MAX_PAYLOAD, Opcode};
use zerocopy::{FromBytes, IntoBytes};

/// `cuModuleLoadData` / `cuModuleLoadFatBinary`: PTX, cubin or fatbin bytes,
/// inline (empty when the image is in the data area).
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleLoad<'a> {
    /// Context and where the image is.
    pub head: ModuleLoadHead,
    /// Inline image bytes.
    pub image: &'a [u8],
}

impl<'a> Body<'a> for ModuleLoad<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.image
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, image) = with_tail::<ModuleLoadHead, _>(op, p, |r| inline_len(&r.image))?;
        Ok(ModuleLoad { head, image })
    }
}

/// Declares a request that names a symbol of a module.
macro_rules! symbol_request {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name<'a> {
            /// Module id and name length.
            pub head: SymbolHead,
            /// The name (checked: non-empty, bounded, NUL-free UTF-8).
            pub name: &'a str,
        }

        impl<'a> $name<'a> {
            /// The request for `name` in `module`.
            pub fn new(module: u64, name: &'a str) -> Self {
                $name { head: SymbolHead { module: module.into(), name_len: (name.len() as u32).into(), reserved: 0.into() }, name }
            }

            /// The module id.
            pub fn module(&self) -> u64 {
                self.head.module.get()
            }
        }

        impl<'a> Body<'a> for $name<'a> {
            fn head(&self) -> &[u8] {
                self.head.as_bytes()
            }
            fn tail(&self) -> &[u8] {
                self.name.as_bytes()
            }
            fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
                let (head, tail) = with_tail::<SymbolHead, _>(op, p, |r| Ok(r.name_len.get() as usize))?;
                Ok($name { head, name: check_name(tail)? })
            }
        }
    };
}

symbol_request! {
    /// `cuModuleGetFunction`; the reply carries the parameter layout
    /// (`cuFuncGetParamInfo`).
    ModuleGetFunction
}

symbol_request! {
    /// `cuModuleGetGlobal`.
    ModuleGetGlobal
}

/// `cuMemcpyHtoD` / `cuMemcpyHtoDAsync`, with inline bytes (empty when they
/// are in the data area).
#[derive(Debug, Clone, PartialEq)]
pub struct MemcpyHtoD<'a> {
    /// Destination, stream, flags and where the bytes are.
    pub head: HtoDHead,
    /// Inline bytes.
    pub data: &'a [u8],
}

impl<'a> Body<'a> for MemcpyHtoD<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.data
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, data) = with_tail::<HtoDHead, _>(op, p, |r| inline_len(&r.data))?;
        Ok(MemcpyHtoD { head, data })
    }
}

/// `cuLaunchKernel`, with the packed parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchKernel<'a> {
    /// Function, geometry and stream.
    pub head: LaunchHead,
    /// Packed parameters, `param_bytes` of the function long.
    pub params: &'a [u8],
}

impl<'a> Body<'a> for LaunchKernel<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.params
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, params) = with_tail::<LaunchHead, _>(op, p, |r| {
            let n = r.param_len.get() as usize;
            if n > MAX_PARAM_BYTES { Err(DecodeError::TooLarge(n)) } else { Ok(n) }
        })?;
        Ok(LaunchKernel { head, params })
    }
}

/// Largest number of launch attributes in one launch.
pub const MAX_LAUNCH_ATTRS: usize = 16;

/// Splits a tail into `count` launch attributes and the rest.
fn launch_attrs(tail: &[u8], count: usize) -> Result<(&[LaunchAttr], &[u8]), DecodeError> {
    if count > MAX_LAUNCH_ATTRS {
        return Err(DecodeError::TooLarge(count));
    }
    let n = count * core::mem::size_of::<LaunchAttr>();
    let (a, rest) = tail.split_at_checked(n).ok_or(DecodeError::Truncated)?;
    let attrs = <[LaunchAttr]>::ref_from_bytes(a).map_err(|_| DecodeError::Truncated)?;
    Ok((attrs, rest))
}

/// `cuLaunchKernelEx`: a launch with attributes (cooperative, clusters,
/// priority...). The tail is the attributes, then the packed parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchKernelEx<'a> {
    /// Function, geometry, stream and counts.
    pub head: LaunchExHead,
    /// Attributes then parameters.
    pub tail: &'a [u8],
}

impl<'a> LaunchKernelEx<'a> {
    /// The attributes.
    pub fn attrs(&self) -> &'a [LaunchAttr] {
        launch_attrs(self.tail, self.head.attr_count.get() as usize).map(|(a, _)| a).unwrap_or(&[])
    }
    /// The packed parameters.
    pub fn params(&self) -> &'a [u8] {
        launch_attrs(self.tail, self.head.attr_count.get() as usize).map(|(_, p)| p).unwrap_or(&[])
    }
}

impl<'a> Body<'a> for LaunchKernelEx<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.tail
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, tail) = with_tail::<LaunchExHead, _>(op, p, |h| {
            let (n, a) = (h.param_len.get() as usize, h.attr_count.get() as usize);
            if n > MAX_PARAM_BYTES || a > MAX_LAUNCH_ATTRS {
                return Err(DecodeError::TooLarge(n.max(a)));
            }
            Ok(n + a * core::mem::size_of::<LaunchAttr>())
        })?;
        Ok(LaunchKernelEx { head, tail })
    }
}

/// `cuOccupancyMaxActiveClusters` / `cuOccupancyMaxPotentialClusterSize`
/// for a launch configuration with attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct OccupancyClusters<'a> {
    /// Function, geometry, kind and count.
    pub head: OccupancyClustersHead,
    /// The attributes.
    pub attrs: &'a [LaunchAttr],
}

impl<'a> Body<'a> for OccupancyClusters<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.attrs.as_bytes()
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, tail) = with_tail::<OccupancyClustersHead, _>(op, p, |h| {
            let a = h.attr_count.get() as usize;
            if a > MAX_LAUNCH_ATTRS { Err(DecodeError::TooLarge(a)) } else { Ok(a * core::mem::size_of::<LaunchAttr>()) }
        })?;
        if head.kind.get() > 1 {
            return Err(DecodeError::BadField("kind"));
        }
        let (attrs, _) = launch_attrs(tail, head.attr_count.get() as usize)?;
        Ok(OccupancyClusters { head, attrs })
    }
}

/// A 2D copy, with the host side's bytes inline when they go to the
/// device over TCP.
#[derive(Debug, Clone, PartialEq)]
pub struct Memcpy2D<'a> {
    /// Kind, addresses, pitches, extent, stream and the host data.
    pub head: Memcpy2DHead,
    /// Inline host bytes (host to device, inline only).
    pub data: &'a [u8],
}

/// `Memcpy2D` kind: host to device.
pub const COPY_2D_HTOD: u32 = 1;
/// `Memcpy2D` kind: device to host.
pub const COPY_2D_DTOH: u32 = 2;
/// `Memcpy2D` kind: device to device.
pub const COPY_2D_DTOD: u32 = 3;

impl<'a> Body<'a> for Memcpy2D<'a> {
    fn head(&self) -> &[u8] {
        self.head.as_bytes()
    }
    fn tail(&self) -> &[u8] {
        self.data
    }
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
        let (head, data) = with_tail::<Memcpy2DHead, _>(op, p, |h| {
            let bytes = h.width.get().checked_mul(h.height.get()).ok_or(DecodeError::TooLarge(usize::MAX))?;
            match h.kind.get() {
                COPY_2D_DTOD => Ok(0),
                COPY_2D_HTOD | COPY_2D_DTOH => {
                    if bytes > MAX_PAYLOAD as u64 || h.data.len.get() != bytes {
                        return Err(DecodeError::BadDataRef(h.data.loc.get()));
                    }
                    if h.kind.get() == COPY_2D_HTOD { inline_len(&h.data) } else { h.data.location().map(|_| 0) }
                }
                _ => Err(DecodeError::BadField("kind")),
            }
        })?;
        Ok(Memcpy2D { head, data })
    }
}
