//! Requests of CUDA arrays, texture and surface objects: arrays and
//! mipmapped arrays made and destroyed, copies with an array on one side or
//! both, and the objects kernels sample or write through.

use super::*;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `ArrayCopy` side kind: device memory, rows `pitch` bytes apart and
/// slices `rows` rows apart.
pub const SIDE_DEVICE: u32 = 1;
/// `ArrayCopy` side kind: the program's memory, sent as packed rows in
/// the request's data.
pub const SIDE_HOST: u32 = 2;
/// `ArrayCopy` side kind: a CUDA array of the session, from byte `x` of
/// row `y` of slice (or layer) `z`.
pub const SIDE_ARRAY: u32 = 3;

/// `ResourceDesc` kind: a CUDA array (`CU_RESOURCE_TYPE_ARRAY`).
pub const RESOURCE_ARRAY: u32 = 0;
/// `ResourceDesc` kind: a mipmapped array.
pub const RESOURCE_MIPMAPPED: u32 = 1;
/// `ResourceDesc` kind: linear device memory.
pub const RESOURCE_LINEAR: u32 = 2;
/// `ResourceDesc` kind: pitched device memory.
pub const RESOURCE_PITCH2D: u32 = 3;

/// `CUDA_ARRAY3D_LAYERED`: `depth` counts layers.
pub const ARRAY_LAYERED: u32 = 0x01;
/// `CUDA_ARRAY3D_SURFACE_LDST`: surface objects may be made of it.
pub const ARRAY_SURFACE_LDST: u32 = 0x02;
/// `CUDA_ARRAY3D_CUBEMAP`: six faces (or six per layer).
pub const ARRAY_CUBEMAP: u32 = 0x04;
/// `CUDA_ARRAY3D_TEXTURE_GATHER`.
pub const ARRAY_TEXTURE_GATHER: u32 = 0x08;
/// Array flags pvgpu offers; sparse, deferred-mapping and depth-texture
/// arrays are not.
pub const ARRAY_FLAGS: u32 = ARRAY_LAYERED | ARRAY_SURFACE_LDST | ARRAY_CUBEMAP | ARRAY_TEXTURE_GATHER;

/// Bytes of one channel of `CUarray_format` `f`: the plain integer and
/// floating-point formats pvgpu offers (`None` for block-compressed and
/// packed video formats).
pub fn array_format_bytes(f: u32) -> Option<u64> {
    match f {
        0x01 | 0x08 => Some(1),        // unsigned and signed 8-bit
        0x02 | 0x09 | 0x10 => Some(2), // 16-bit integers, half
        0x03 | 0x0a | 0x20 => Some(4), // 32-bit integers, float
        _ => None,
    }
}

/// The extent of mipmap level `level` of an array of `[width, height,
/// depth]` with `flags`: each dimension halved per level (at least 1; 0
/// stays 0), layers and faces kept.
pub fn mipmap_extent(extent: [u64; 3], flags: u32, level: u32) -> [u64; 3] {
    let half = |v: u64| if v == 0 { 0 } else { (v >> level.min(63)).max(1) };
    let depth = if flags & (ARRAY_LAYERED | ARRAY_CUBEMAP) != 0 { extent[2] } else { half(extent[2]) };
    [half(extent[0]), half(extent[1]), depth]
}

/// A CUDA array's shape and format (`CUDA_ARRAY3D_DESCRIPTOR`), as the
/// library, the client and the backend hold it: a height or depth of 0
/// means fewer dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ArrayShape {
    /// Elements per row.
    pub width: u64,
    /// Rows (0: one-dimensional).
    pub height: u64,
    /// Slices or layers (0: fewer than three dimensions).
    pub depth: u64,
    /// `CUarray_format`.
    pub format: u32,
    /// Channels per element.
    pub channels: u32,
    /// `CUDA_ARRAY3D_*` flags.
    pub flags: u32,
}

impl ArrayShape {
    /// Bytes of one element, `None` for a format pvgpu does not offer.
    pub fn element_bytes(&self) -> Option<u64> {
        array_format_bytes(self.format).map(|b| b * u64::from(self.channels))
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> Option<u64> {
        self.element_bytes()?.checked_mul(self.width)
    }

    /// Rows per slice (at least one).
    pub fn rows(&self) -> u64 {
        self.height.max(1)
    }

    /// Slices or layers (at least one).
    pub fn slices(&self) -> u64 {
        self.depth.max(1)
    }

    /// Bytes of the elements (what a session's quota counts; the driver
    /// may round up).
    pub fn bytes(&self) -> Option<u64> {
        self.row_bytes()?.checked_mul(self.rows())?.checked_mul(self.slices())
    }

    /// The shape of mipmap level `level` ([`mipmap_extent`]).
    pub fn level(&self, level: u32) -> ArrayShape {
        let [width, height, depth] = mipmap_extent([self.width, self.height, self.depth], self.flags, level);
        ArrayShape { width, height, depth, ..*self }
    }
}

wire_structs! {
    /// `cuArray3DCreate` (and `cuArrayCreate`) or `cuMipmappedArrayCreate`
    /// on a context's device.
    pub struct ArrayCreate {
        /// Context id.
        pub ctx: U64,
        /// Elements per row.
        pub width: U64,
        /// Rows, 0 for a one-dimensional array.
        pub height: U64,
        /// Slices (or layers), 0 for fewer than three dimensions.
        pub depth: U64,
        /// `CUarray_format`.
        pub format: U32,
        /// Channels per element: 1, 2 or 4.
        pub channels: U32,
        /// `CUDA_ARRAY3D_*` flags.
        pub flags: U32,
        /// 0: an array; `n`: a mipmapped array of `n` levels.
        pub levels: U32,
    }
    /// `cuArrayDestroy` or `cuMipmappedArrayDestroy`.
    pub struct ArrayDestroy {
        /// Array id.
        pub handle: U64,
        /// 1: a mipmapped array.
        pub mipmapped: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// `cuMipmappedArrayGetLevel`: the array of one level, owned by the
    /// mipmapped array.
    pub struct MipmapLevel {
        /// Mipmapped array id.
        pub handle: U64,
        /// The level.
        pub level: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
    /// One side of an `ArrayCopy`.
    pub struct ArraySide {
        /// `SIDE_DEVICE`, `SIDE_HOST` or `SIDE_ARRAY`.
        pub kind: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// Device address of the first byte, or the array id.
        pub addr: U64,
        /// Arrays: first byte of each row.
        pub x: U64,
        /// Arrays: first row.
        pub y: U64,
        /// Arrays: first slice or layer.
        pub z: U64,
        /// Device memory: bytes between rows.
        pub pitch: U64,
        /// Device memory: rows between slices.
        pub rows: U64,
    }
    /// Head of `ArrayCopy`: `depth` slices of `height` rows of `width`
    /// bytes, with a CUDA array on at least one side. A host side is
    /// `data`, rows packed; inline bytes follow when it is inline and the
    /// copy goes to the device.
    pub struct ArrayCopyHead {
        /// Destination.
        pub dst: ArraySide,
        /// Source.
        pub src: ArraySide,
        /// Bytes per row.
        pub width: U64,
        /// Rows per slice.
        pub height: U64,
        /// Slices.
        pub depth: U64,
        /// Stream id, 0 for the default stream.
        pub stream: U64,
        /// `COPY_ASYNC`.
        pub flags: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// The host side's bytes, `width * height * depth` of them.
        pub data: DataRef,
    }
    /// What a texture or surface object reads or writes
    /// (`CUDA_RESOURCE_DESC`).
    pub struct ResourceDesc {
        /// `RESOURCE_ARRAY`, `RESOURCE_MIPMAPPED`, `RESOURCE_LINEAR` or
        /// `RESOURCE_PITCH2D`.
        pub kind: U32,
        /// Linear and pitched memory: `CUarray_format`.
        pub format: U32,
        /// Linear and pitched memory: channels per element.
        pub channels: U32,
        /// The descriptor's flags (zero).
        pub flags: U32,
        /// Array id, or device address of the first byte.
        pub addr: U64,
        /// Pitched memory: elements per row.
        pub width: U64,
        /// Pitched memory: rows.
        pub height: U64,
        /// Linear memory: bytes; pitched memory: bytes between rows.
        pub bytes: U64,
    }
    /// `CUDA_RESOURCE_VIEW_DESC` of a texture object.
    pub struct ResourceView {
        /// `CUresourceViewFormat`.
        pub format: U32,
        /// First mipmap level.
        pub first_level: U32,
        /// Last mipmap level.
        pub last_level: U32,
        /// First layer.
        pub first_layer: U32,
        /// Last layer.
        pub last_layer: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// Width.
        pub width: U64,
        /// Height.
        pub height: U64,
        /// Depth.
        pub depth: U64,
    }
    /// `cuTexObjectCreate` or `cuSurfObjectCreate` in a context.
    pub struct TexObjectCreate {
        /// Context id.
        pub ctx: U64,
        /// 0: a texture object; 1: a surface object.
        pub surface: U32,
        /// 1: `view` is given.
        pub has_view: U32,
        /// The resource.
        pub res: ResourceDesc,
        /// `CUDA_TEXTURE_DESC` without its reserved words, as cuda.h
        /// orders them: three address modes, filter mode, flags, maximum
        /// anisotropy, mipmap filter mode, level bias, minimum and
        /// maximum level clamps (floats), border colour (four floats).
        pub tex: [U32; 13],
        /// The resource view, when `has_view`.
        pub view: ResourceView,
    }
    /// `cuTexObjectDestroy` or `cuSurfObjectDestroy`.
    pub struct TexObjectDestroy {
        /// Context id the object was made in (values are per context).
        pub ctx: U64,
        /// The object, as `TexObjectCreate` answered.
        pub object: U64,
        /// 0: a texture object; 1: a surface object.
        pub surface: U32,
        /// Reserved, zero.
        pub reserved: U32,
    }
}
