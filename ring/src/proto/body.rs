//! How each payload decodes and encodes.
//!
//! A request payload is a [`Body`]: a fixed head (its bytes) and maybe a
//! tail. Decoding checks that the payload is exactly the head plus the tail
//! the head declares, and that fields with a closed domain hold a value of
//! it. Replies are [`Reply`]s: owned values the frontend decodes the same
//! way.

use super::wire::*;
use super::{DecodeError, MAX_ATTRS, MAX_NAME_LEN, MAX_NAMES, MAX_PARAM_BYTES, MAX_PARAMS, MAX_PAYLOAD, Opcode};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// A request payload: decoded from a private copy of the bytes, borrowing
/// its tail from them.
pub trait Body<'a>: Sized {
    /// The fixed head's bytes.
    fn head(&self) -> &[u8];
    /// The variable tail's bytes (empty for most requests).
    fn tail(&self) -> &[u8] {
        &[]
    }
    /// Decodes a payload of opcode `op` (named in errors).
    fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError>;
    /// Appends the payload to `out`.
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.head());
        out.extend_from_slice(self.tail());
    }
}

/// A reply payload.
pub trait Reply: Sized {
    /// Appends the payload to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Decodes a reply to opcode `op`.
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError>;
}

/// The reply of a copy to the host: its payload is the copied bytes
/// themselves when the request's [`DataRef`] is inline, and empty when the
/// bytes went to the data area. The backend writes them, and the frontend's
/// copy pipeline reads them, without a fixed part; their length is checked
/// against the request there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bulk;

impl Reply for Bulk {
    fn encode(&self, _out: &mut Vec<u8>) {}
    fn decode(_op: Opcode, _p: &[u8]) -> Result<Self, DecodeError> {
        Ok(Bulk)
    }
}

impl Reply for () {
    fn encode(&self, _out: &mut Vec<u8>) {}
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
        if p.is_empty() { Ok(()) } else { Err(DecodeError::Length { opcode: op, got: p.len(), expected: 0 }) }
    }
}

/// Decodes a payload that must be exactly one `T`.
fn exact<T: FromBytes + KnownLayout + Immutable + Unaligned>(op: Opcode, p: &[u8]) -> Result<T, DecodeError> {
    let expected = core::mem::size_of::<T>();
    T::read_from_bytes(p).map_err(|_| DecodeError::Length { opcode: op, got: p.len(), expected })
}

/// Splits `p` into a `T` and a tail that must be exactly `tail_len(&T)` bytes.
fn with_tail<T, F>(op: Opcode, p: &[u8], tail_len: F) -> Result<(T, &[u8]), DecodeError>
where
    T: FromBytes + KnownLayout + Immutable + Unaligned,
    F: FnOnce(&T) -> Result<usize, DecodeError>,
{
    let fixed = core::mem::size_of::<T>();
    let (t, tail) = T::read_from_prefix(p).map_err(|_| DecodeError::Length { opcode: op, got: p.len(), expected: fixed })?;
    let want = tail_len(&t)?;
    if tail.len() != want {
        return Err(DecodeError::Length { opcode: op, got: p.len(), expected: fixed.saturating_add(want) });
    }
    Ok((t, tail))
}

/// Splits `p` into a `T` and `count(&T)` items of `U` (at most `max`).
fn with_list<T, U>(op: Opcode, p: &[u8], count: impl FnOnce(&T) -> usize, max: usize) -> Result<(T, Vec<U>), DecodeError>
where
    T: FromBytes + KnownLayout + Immutable + Unaligned,
    U: FromBytes + KnownLayout + Immutable + Unaligned + Clone,
{
    let (t, tail) = with_tail::<T, _>(op, p, |t| {
        let n = count(t);
        if n > max {
            return Err(DecodeError::TooLarge(n));
        }
        Ok(n * core::mem::size_of::<U>())
    })?;
    let items = <[U]>::ref_from_bytes(tail).map_err(|_| DecodeError::Truncated)?.to_vec();
    Ok((t, items))
}

/// Checks a symbol name: non-empty, bounded, NUL-free UTF-8.
pub fn check_name(bytes: &[u8]) -> Result<&str, DecodeError> {
    if bytes.is_empty() || bytes.len() > MAX_NAME_LEN || bytes.contains(&0) {
        return Err(DecodeError::BadName);
    }
    core::str::from_utf8(bytes).map_err(|_| DecodeError::BadName)
}

/// Length of the inline tail a data reference declares (zero when the data
/// is in the data area).
fn inline_len(d: &DataRef) -> Result<usize, DecodeError> {
    let len = usize::try_from(d.len.get()).map_err(|_| DecodeError::TooLarge(usize::MAX))?;
    if len > MAX_PAYLOAD {
        return Err(DecodeError::TooLarge(len));
    }
    match d.location()? {
        DataLoc::Inline => Ok(len),
        DataLoc::Area { .. } => Ok(0),
    }
}

/// Field checks of fixed requests whose fields have a closed domain.
trait Validate {
    fn validate(&self) -> Result<(), DecodeError> {
        Ok(())
    }
}

/// `Body` for fixed-layout requests (the payload is exactly the struct,
/// checked by its `Validate` impl; `checked` ones write their own) and
/// `Reply` for fixed-layout replies.
macro_rules! fixed {
    (requests: $($t:ident),* $(,)?) => {
        $( impl Validate for $t {} )*
        fixed! { checked requests: $($t),* }
    };
    (checked requests: $($t:ident),* $(,)?) => {
        $(
            impl<'a> Body<'a> for $t {
                fn head(&self) -> &[u8] {
                    self.as_bytes()
                }
                fn decode(op: Opcode, p: &'a [u8]) -> Result<Self, DecodeError> {
                    let v: $t = exact(op, p)?;
                    v.validate()?;
                    Ok(v)
                }
            }
        )*
    };
    (replies: $($t:ident),* $(,)?) => {
        $(
            impl Reply for $t {
                fn encode(&self, out: &mut Vec<u8>) {
                    out.extend_from_slice(self.as_bytes());
                }
                fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
                    exact(op, p)
                }
            }
        )*
    };
}

fixed! { requests:
    Hello, Goodbye, Nop, Init, DriverGetVersion, DeviceGetCount, DataAreaDevice, DeviceStatus, DeviceGet, DeviceGetProperties, DeviceGetAttribute,
    PrimaryCtxRetain, PrimaryCtxRelease, CtxCreate, CtxDestroy, CtxSynchronize, CtxGetInfo, CtxLimit,
    ModuleUnload, ModuleLoadCached, ModuleFunctionNames, FuncGetAttribute, FuncSetAttribute,
    MemAlloc, MemFree, MemGetInfo, MemcpyDtoD, MemAllocAsync, MemFreeAsync, MemPoolAttribute,
    MemAddressReserve, MemAddressFree, MemCreate, MemRelease, MemMap, MemUnmap,
    StreamCreate, StreamDestroy, StreamSynchronize, StreamQuery, StreamWaitEvent,
    EventCreate, EventRecord, EventQuery, EventSynchronize, EventElapsedTime, EventDestroy,
}

fixed! { checked requests: Memset, Occupancy, MemcpyDtoH, Memset2D, TensorMapEncode, MemGranularity, MemSetAccess }

fixed! { replies:
    HelloRep, DeviceStatusRep, I32Rep, U64Rep, HandleRep, GlobalRep, DptrRep, MemInfoRep, ElapsedRep, CtxInfoRep, OccupancyRep, TensorMapRep,
}

impl Validate for Memset {
    fn validate(&self) -> Result<(), DecodeError> {
        if matches!(self.elem_size.get(), 1 | 2 | 4) { Ok(()) } else { Err(DecodeError::BadField("elem_size")) }
    }
}

impl Validate for MemGranularity {
    fn validate(&self) -> Result<(), DecodeError> {
        if self.option.get() <= 1 { Ok(()) } else { Err(DecodeError::BadField("option")) }
    }
}

impl Validate for MemSetAccess {
    fn validate(&self) -> Result<(), DecodeError> {
        if matches!(self.flags.get(), 0 | 1 | 3) { Ok(()) } else { Err(DecodeError::BadField("flags")) }
    }
}

impl Validate for Occupancy {
    fn validate(&self) -> Result<(), DecodeError> {
        if self.kind.get() <= 2 { Ok(()) } else { Err(DecodeError::BadField("kind")) }
    }
}

impl Validate for Memset2D {
    fn validate(&self) -> Result<(), DecodeError> {
        if matches!(self.elem_size.get(), 1 | 2 | 4) { Ok(()) } else { Err(DecodeError::BadField("elem_size")) }
    }
}

impl Validate for TensorMapEncode {
    fn validate(&self) -> Result<(), DecodeError> {
        if self.kind.get() > 1 {
            return Err(DecodeError::BadField("kind"));
        }
        if !(1..=5).contains(&self.rank.get()) {
            return Err(DecodeError::BadField("rank"));
        }
        Ok(())
    }
}

impl Validate for MemcpyDtoH {
    fn validate(&self) -> Result<(), DecodeError> {
        self.data.location()?;
        if self.data.len.get() > MAX_PAYLOAD as u64 {
            return Err(DecodeError::TooLarge(self.data.len.get() as usize));
        }
        Ok(())
    }
}

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

/// `ModuleFunctionNames` reply: the names of a module's kernels.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NamesRep {
    /// The names (each checked: non-empty, bounded, NUL-free UTF-8).
    pub names: Vec<String>,
}

impl Reply for NamesRep {
    fn encode(&self, out: &mut Vec<u8>) {
        let bytes: usize = self.names.iter().map(|n| n.len() + 1).sum();
        out.extend_from_slice(NamesHead { count: (self.names.len() as u32).into(), bytes: (bytes as u32).into() }.as_bytes());
        for n in &self.names {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
        }
    }
    fn decode(op: Opcode, p: &[u8]) -> Result<Self, DecodeError> {
        let (head, tail) = with_tail::<NamesHead, _>(op, p, |h| Ok(h.bytes.get() as usize))?;
        let count = head.count.get() as usize;
        if count > MAX_NAMES {
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
        Ok(NamesRep { names })
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
