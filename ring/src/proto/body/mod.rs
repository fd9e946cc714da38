//! How each payload decodes and encodes.
//!
//! A request payload is a [`Body`]: a fixed head (its bytes) and maybe a
//! tail. Decoding checks that the payload is exactly the head plus the tail
//! the head declares, and that fields with a closed domain hold a value of
//! it. Replies are [`Reply`]s: owned values the frontend decodes the same
//! way.

mod array;
mod graph;
mod link;
mod memop;
mod mirror;
mod replies;
mod tails;

pub use array::*;
pub use graph::*;
pub use link::*;
pub use memop::*;
pub use mirror::*;
pub use replies::{DevicePropsRep, FunctionRep, NamesRep};
pub use tails::*;

use super::wire::*;
use super::{DecodeError, MAX_NAME_LEN, MAX_PAYLOAD, Opcode};
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
    Hello, Goodbye, Nop, Init, DriverGetVersion, DeviceGetCount, DataAreaDevice, AreaPinOnDemand, DeviceStatus, DeviceGet, DeviceGetProperties, DeviceGetAttribute,
    PrimaryCtxRetain, PrimaryCtxRelease, CtxCreate, CtxDestroy, CtxSynchronize, CtxGetInfo, CtxLimit,
    ModuleUnload, ModuleLoadCached, ModuleFunctionNames, FuncGetAttribute, FuncSetAttribute,
    MemAlloc, MemFree, MemGetInfo, MemcpyDtoD, MemAllocAsync, MemFreeAsync, MemPoolAttribute, MemPoolAccess,
    MemAddressReserve, MemAddressFree, MemCreate, MemRelease, MemMap, MemUnmap,
    StreamCreate, StreamDestroy, StreamSynchronize, StreamQuery, StreamWaitEvent,
    EventCreate, EventRecord, EventQuery, EventSynchronize, EventElapsedTime, EventDestroy,
}

fixed! { checked requests:
    Memset, Occupancy, MemcpyDtoH, Memset2D, TensorMapEncode, MemGranularity, MemSetAccess, StreamBeginCapture, CaptureModeExchange,
    GraphNodes, GraphNodeEdges, GraphLaunch, GraphNodeEnable, HostFnEvent,
}

fixed! { requests: HostMirrorUnmap, HostMirrorPull, LinkRead, LinkDestroy, HostCallWait, HostCallDone }

fixed! { checked requests: HostMirrorMap }

fixed! { requests: MipmapLevel, CtxResetL2, Resume }

fixed! { requests: IpcGetMemHandle, IpcCloseMemHandle, IpcGetEventHandle, IpcOpenEventHandle, MemExport, MemImport }
fixed! { requests: MemPoolCreateWith, MemPoolExport, MemPoolImport, MemPoolExportPointer, MemPoolImportPointer }

fixed! { requests: MemPoolCreate, MemPoolDestroy, MemAllocFromPool, MemPoolAttributeOf, MemPoolAccessOf, MemPoolTrim }

fixed! { checked requests: IpcOpenMemHandle, MemCreateWith, PeerAccess }

fixed! { replies: IpcHandleRep, IpcOpenRep, MemCreateRep, PeerTicketRep }

fixed! { requests: PeerCopyOpen, PeerCopySend, PeerCopyReceive }

fixed! { checked requests: PeerCopyConnect }

impl Validate for PeerCopyConnect {
    fn validate(&self) -> Result<(), DecodeError> {
        if self.reserved.get() != 0 || self.address().is_none() {
            return Err(DecodeError::BadField("address"));
        }
        Ok(())
    }
}

impl Validate for PeerAccess {
    fn validate(&self) -> Result<(), DecodeError> {
        if self.op.get() > PEER_ATTRIBUTE || self.reserved.get() != 0 {
            return Err(DecodeError::BadField("op"));
        }
        Ok(())
    }
}

impl Validate for MemCreateWith {
    fn validate(&self) -> Result<(), DecodeError> {
        if self.flags.get() & !(MEM_COMPRESSIBLE | MEM_SHAREABLE) != 0 || self.reserved.get() != 0 {
            return Err(DecodeError::BadField("flags"));
        }
        Ok(())
    }
}

impl Validate for IpcOpenMemHandle {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.flags.get(), "flags")?;
        if self.reserved.get() != 0 {
            return Err(DecodeError::BadField("reserved"));
        }
        Ok(())
    }
}

fixed! { checked requests: ArrayCreate, ArrayDestroy, TexObjectCreate, TexObjectDestroy }

impl Validate for HostMirrorMap {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.pageable.get(), "pageable")
    }
}

fixed! { checked requests: HostNodeParams, LaunchHostFunc, GraphMemAttr, GraphCondHandle }

impl Validate for GraphCondHandle {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.flags.get(), "flags")
    }
}

fixed! { requests: MemNodeParams, GraphNodeParams, GraphEventNodeSet, GraphNodeEnabled, GraphNodeFindInClone }

fixed! { requests: GraphCopyNodeSet, GraphDeviceHandle }

fixed! { checked requests: KernelNodeAttr }

fixed! { replies: AttrValueRep }

impl Validate for StreamAttr {
    fn validate(&self) -> Result<(), DecodeError> {
        if self.op.get() <= NODE_ATTR_COPY { Ok(()) } else { Err(DecodeError::BadField("op")) }
    }
}

fixed! { checked requests: StreamAttr }

impl Validate for KernelNodeAttr {
    fn validate(&self) -> Result<(), DecodeError> {
        if self.op.get() <= NODE_ATTR_COPY { Ok(()) } else { Err(DecodeError::BadField("op")) }
    }
}

fixed! { replies: GraphMemNodeRep, MemNodeRep }

impl Validate for GraphMemAttr {
    fn validate(&self) -> Result<(), DecodeError> {
        if self.attr.get() > 3 {
            return Err(DecodeError::BadField("attr"));
        }
        if self.op.get() > 2 { Err(DecodeError::BadField("op")) } else { Ok(()) }
    }
}

impl Validate for LaunchHostFunc {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.callback.get(), "callback")
    }
}

impl Validate for HostNodeParams {
    fn validate(&self) -> Result<(), DecodeError> {
        if self.op.get() <= 2 { Ok(()) } else { Err(DecodeError::BadField("op")) }
    }
}

fixed! { replies: LinkRep, HostNodeRep, InstantiateRep }

fixed! { requests:
    StreamEndCapture, StreamCaptureInfo, GraphCreate, GraphDestroy, GraphClone, GraphEdges, GraphNodeInfo, GraphNodeDestroy, GraphDot,
    GraphInstantiate, GraphExecDestroy, GraphExecUpdate, GraphExecMemsetSet, GraphExecMemcpySet, GraphExecChildSet,
}

/// A field that holds 0 or 1.
fn flag(v: u32, name: &'static str) -> Result<(), DecodeError> {
    if v <= 1 { Ok(()) } else { Err(DecodeError::BadField(name)) }
}

impl Validate for GraphNodes {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.roots.get(), "roots")
    }
}

impl Validate for GraphNodeEdges {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.dependents.get(), "dependents")
    }
}

impl Validate for GraphLaunch {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.upload.get(), "upload")
    }
}

impl Validate for HostFnEvent {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.destroy.get(), "destroy")
    }
}

impl Validate for GraphNodeEnable {
    fn validate(&self) -> Result<(), DecodeError> {
        flag(self.enabled.get(), "enabled")
    }
}

fixed! { replies: NodeInfoRep, ExecUpdateRep }

impl Validate for StreamBeginCapture {
    fn validate(&self) -> Result<(), DecodeError> {
        capture_mode(self.mode.get()).map(drop)
    }
}

impl Validate for CaptureModeExchange {
    fn validate(&self) -> Result<(), DecodeError> {
        capture_mode(self.mode.get()).map(drop)
    }
}

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
