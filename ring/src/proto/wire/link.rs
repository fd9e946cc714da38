//! Linking (`cuLinkCreate` .. `cuLinkComplete`): the program's inputs go
//! to the backend in one request, the backend's driver links them, and the
//! image and its logs come back in pieces, as a copy to the host does.

use super::*;
use zerocopy::little_endian::{I32, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

wire_structs! {
    /// Head of `LinkModule`: the link's description (a [`LinkBlobHead`],
    /// its options and its inputs) follows inline, or is in the data area.
    pub struct LinkModuleHead {
        /// Context id (the link targets its device).
        pub ctx: U64,
        /// The description.
        pub blob: DataRef,
    }
    /// Start of a link's description.
    pub struct LinkBlobHead {
        /// [`LinkOption`]s that follow.
        pub option_count: U32,
        /// Inputs that follow the options, each a [`LinkInputHead`], its
        /// name and its bytes.
        pub input_count: U32,
    }
    /// A JIT option with a plain value (`CUjit_option`).
    pub struct LinkOption {
        /// The option.
        pub option: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// Its value, as the driver reads it from the `void *` slot.
        pub value: U64,
    }
    /// One input of a link: `name_len` bytes of name, then `len` bytes.
    pub struct LinkInputHead {
        /// `CUjitInputType`.
        pub kind: U32,
        /// Bytes of name (may be 0).
        pub name_len: U32,
        /// Bytes of the input.
        pub len: U64,
    }
    /// The `LinkModule` reply. The image and its logs wait in the backend,
    /// as one run of `size + info_len + error_len` bytes, for `LinkRead`
    /// (also after a failed link: the error log says why).
    pub struct LinkRep {
        /// The link's result: `CUDA_SUCCESS`, or the driver's error (the
        /// logs say why).
        pub status: I32,
        /// Milliseconds the driver spent (`CU_JIT_WALL_TIME`), as `f32` bits.
        pub wall_ms: U32,
        /// The link's handle, to read and destroy.
        pub link: U64,
        /// The linked image's size in bytes.
        pub size: U64,
        /// Bytes of info log.
        pub info_len: U32,
        /// Bytes of error log.
        pub error_len: U32,
    }
    /// `LinkRead`: bytes of a linked image and its logs (the image, then
    /// the info log, then the error log, as one run) from `offset`.
    pub struct LinkRead {
        /// The link.
        pub link: U64,
        /// Where in the run to read from.
        pub offset: U64,
        /// Where the bytes go: inline in the reply, or the data area.
        pub data: DataRef,
    }
    /// `cuLinkDestroy`: forgets a linked image.
    pub struct LinkDestroy {
        /// The link.
        pub link: U64,
    }
}
