//! Mirrored host memory: page-locked memory of a program whose transport
//! shares no memory with the backend (TCP), held twice: in the program,
//! and in the backend's worker at the same address, mapped for the device,
//! so that kernels given the program's pointer reach it. The client keeps
//! the two coherent: it sends what the program changed before each call
//! (`HostMirrorWrite`), and after each call that may have let device work
//! finish it asks what the device changed (`HostMirrorPull`).

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

wire_structs! {
    /// Maps `len` bytes at `ptr` (both page-aligned) in the backend, zeroed,
    /// at the same address; the device address comes back (the same). With
    /// `pageable` 0, page-locked memory the device reaches (registered for
    /// it); with 1, ordinary memory graphs copy from or to (kept as the
    /// backend's own ordinary memory: copies name it as host memory).
    pub struct HostMirrorMap {
        /// Address in the program, and in the backend.
        pub ptr: U64,
        /// Bytes.
        pub len: U64,
        /// 0: page-locked; 1: ordinary memory.
        pub pageable: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// Asks what the device changed in the mirrors (no payload).
    pub struct HostMirrorPull {}
    /// Unmaps the mirror at `ptr`.
    pub struct HostMirrorUnmap {
        /// Its address.
        pub ptr: U64,
    }
    /// Head of `HostMirrorWrite`: `len` bytes for `[ptr, ptr+len)`, inside
    /// one mirror, follow.
    pub struct MirrorWriteHead {
        /// Where the bytes go.
        pub ptr: U64,
        /// Bytes that follow.
        pub len: U64,
    }
    /// Head of one range of a `HostMirrorPull` reply: `len` bytes the
    /// device changed at `ptr` follow.
    pub struct MirrorRange {
        /// Where they are.
        pub ptr: U64,
        /// Bytes that follow.
        pub len: U64,
    }
    /// Head of the `HostMirrorPull` reply: `count` ranges follow, each a
    /// [`MirrorRange`] and its bytes.
    pub struct MirrorPullHead {
        /// Ranges that follow.
        pub count: U64,
        /// 1: more changes than fit in one reply; ask again.
        pub more: U64,
    }
}
