//! Requests of memory: allocations, copies, memsets, pools, 2D copies,
//! virtual memory management.

use super::*;
use zerocopy::little_endian::{I32, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

// Requests: memory.
wire_structs! {
    /// `cuMemAllocAsync`: from the device's default pool, ordered on a
    /// stream.
    pub struct MemAllocAsync {
        /// Context id.
        pub ctx: U64,
        /// Bytes.
        pub size: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// `cuMemFreeAsync`.
    pub struct MemFreeAsync {
        /// Device address from `MemAllocAsync` (or `MemAlloc`).
        pub dptr: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// `cuMemPoolGetAttribute` / `cuMemPoolSetAttribute` of the default
    /// pool of a context's device.
    pub struct MemPoolAttribute {
        /// Context id.
        pub ctx: U64,
        /// `CUmemPool_attribute`.
        pub attr: U32,
        /// 1 to set, 0 to get.
        pub set: U32,
        /// Value to set.
        pub value: U64,
    }
    /// `cuMemPoolSetAccess` / `cuMemPoolGetAccess`: another device's access
    /// to the default pool of a context's device.
    pub struct MemPoolAccess {
        /// Context id, on the pool's device.
        pub ctx: U64,
        /// The device whose access is set or asked (the program's ordinal).
        pub dev: I32,
        /// 1 to set, 0 to get.
        pub set: U32,
        /// `CUmemAccess_flags` to set: none, or read and write.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuMemPoolCreate`: a pool of the program's own on a context's
    /// device, page-locked device memory, no shareable handle types.
    pub struct MemPoolCreate {
        /// Context id, on the pool's device.
        pub ctx: U64,
        /// `CUmemPoolProps::maxSize`: the most the pool may reserve, 0 for
        /// the driver's default.
        pub max_size: U64,
    }
    /// `cuMemPoolDestroy`.
    pub struct MemPoolDestroy {
        /// Pool id from `MemPoolCreate`.
        pub pool: U64,
    }
    /// `cuMemAllocFromPoolAsync` from a pool of the program's own.
    pub struct MemAllocFromPool {
        /// Context id of the stream.
        pub ctx: U64,
        /// Pool id from `MemPoolCreate`.
        pub pool: U64,
        /// Bytes.
        pub size: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// `cuMemPoolGetAttribute` / `cuMemPoolSetAttribute` of a pool of the
    /// program's own.
    pub struct MemPoolAttributeOf {
        /// Pool id from `MemPoolCreate`.
        pub pool: U64,
        /// `CUmemPool_attribute`.
        pub attr: U32,
        /// 1 to set, 0 to get.
        pub set: U32,
        /// Value to set.
        pub value: U64,
    }
    /// `cuMemPoolSetAccess` / `cuMemPoolGetAccess` of a pool of the
    /// program's own, for a device.
    pub struct MemPoolAccessOf {
        /// Pool id from `MemPoolCreate`.
        pub pool: U64,
        /// The device whose access is set or asked (the program's ordinal).
        pub dev: I32,
        /// 1 to set, 0 to get.
        pub set: U32,
        /// `CUmemAccess_flags` to set: none, or read and write.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuMemPoolTrimTo`: a pool of the program's own, or the default pool
    /// of a context's device.
    pub struct MemPoolTrim {
        /// Context id, on the pool's device.
        pub ctx: U64,
        /// Pool id from `MemPoolCreate`, 0 for the default pool.
        pub pool: U64,
        /// Bytes the pool keeps at least.
        pub keep: U64,
    }
    /// Head of `Memcpy2D`: a 2D copy of `height` rows of `width` bytes.
    /// The host side (kinds 1 and 2) is `data`, rows packed; inline bytes
    /// follow when it is inline and the copy goes to the device.
    pub struct Memcpy2DHead {
        /// 1: host to device; 2: device to host; 3: device to device.
        pub kind: U32,
        /// `COPY_ASYNC`, `COPY_PINNED`.
        pub flags: U32,
        /// Destination device address (kinds 1, 3).
        pub dst: U64,
        /// Destination pitch in bytes.
        pub dst_pitch: U64,
        /// Source device address (kinds 2, 3).
        pub src: U64,
        /// Source pitch in bytes.
        pub src_pitch: U64,
        /// Bytes per row.
        pub width: U64,
        /// Rows.
        pub height: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// The host side's bytes, `width * height` of them.
        pub data: DataRef,
    }
    /// `cuMemsetD2D8/16/32` and their `Async` forms.
    pub struct Memset2D {
        /// Device address.
        pub dptr: U64,
        /// Pitch in bytes.
        pub pitch: U64,
        /// The value; the low `elem_size` bytes are used.
        pub value: U32,
        /// 1, 2 or 4.
        pub elem_size: U32,
        /// Elements per row.
        pub width: U64,
        /// Rows.
        pub height: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// `cuMemAlloc`.
    pub struct MemAlloc {
        /// Context id.
        pub ctx: U64,
        /// Bytes to allocate.
        pub size: U64,
    }
    /// `cuMemFree`.
    pub struct MemFree {
        /// Device address returned by `MemAlloc`.
        pub dptr: U64,
    }
    /// `cuMemGetInfo`.
    pub struct MemGetInfo {
        /// Context id.
        pub ctx: U64,
    }
    /// `cuMemsetD8/D16/D32` and their `Async` forms.
    pub struct Memset {
        /// Device address.
        pub dptr: U64,
        /// Number of elements.
        pub count: U64,
        /// The value; the low `elem_size` bytes are used.
        pub value: U32,
        /// 1, 2 or 4.
        pub elem_size: U32,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
    }
    /// Head of `MemcpyHtoD`: inline data follows when `data` is inline.
    pub struct HtoDHead {
        /// Device address.
        pub dst: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// `COPY_ASYNC`, `COPY_PINNED`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// Source bytes.
        pub data: DataRef,
    }
    /// `cuMemcpyDtoH` / `cuMemcpyDtoHAsync`.
    pub struct MemcpyDtoH {
        /// Device address.
        pub src: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// `COPY_ASYNC`, `COPY_PINNED`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// Where the bytes go: inline in the reply, or the data area.
        pub data: DataRef,
    }
    /// `cuMemcpyDtoD` / `cuMemcpyDtoDAsync`.
    pub struct MemcpyDtoD {
        /// Destination device address.
        pub dst: U64,
        /// Source device address.
        pub src: U64,
        /// Bytes.
        pub len: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// `COPY_ASYNC`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}

// Requests: virtual memory management (`cuMemAddressReserve`, `cuMemCreate`,
// `cuMemMap`, ...). Reservations, physical allocations and mappings belong
// to the context they were made in.
wire_structs! {
    /// `cuMemGetAllocationGranularity` for device memory of a device (no
    /// context needed, as with the driver).
    pub struct MemGranularity {
        /// Device ordinal.
        pub device: I32,
        /// 0: minimum; 1: recommended.
        pub option: U32,
    }
    /// `cuMemAddressReserve`: a range of device addresses, no memory.
    pub struct MemAddressReserve {
        /// Context id.
        pub ctx: U64,
        /// Bytes.
        pub size: U64,
        /// Alignment, 0 for the granularity.
        pub alignment: U64,
        /// Address wanted (a hint), 0 for any.
        pub addr: U64,
    }
    /// `cuMemAddressFree` of a whole reservation.
    pub struct MemAddressFree {
        /// Start of the reservation.
        pub ptr: U64,
        /// Its size.
        pub size: U64,
    }
    /// `cuMemCreate`: physical device memory on a context's device.
    pub struct MemCreate {
        /// Context id.
        pub ctx: U64,
        /// Bytes, a multiple of the granularity.
        pub size: U64,
    }
    /// `cuMemRelease` of a physical allocation.
    pub struct MemRelease {
        /// Handle from `MemCreate`.
        pub handle: U64,
    }
    /// `cuMemMap`: `size` bytes of a physical allocation from `offset`, at
    /// `ptr` inside a reservation.
    pub struct MemMap {
        /// Device address.
        pub ptr: U64,
        /// Bytes.
        pub size: U64,
        /// Offset in the physical allocation.
        pub offset: U64,
        /// Handle from `MemCreate`.
        pub handle: U64,
    }
    /// `cuMemUnmap` of whole mappings.
    pub struct MemUnmap {
        /// Device address.
        pub ptr: U64,
        /// Bytes.
        pub size: U64,
    }
    /// `cuMemSetAccess` from the context's device to whole mappings.
    pub struct MemSetAccess {
        /// Device address.
        pub ptr: U64,
        /// Bytes.
        pub size: U64,
        /// `CUmemAccess_flags`: 0 none, 1 read, 3 read and write.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}
