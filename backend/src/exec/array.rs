//! What executors are told of CUDA arrays, copies with an array side and
//! texture and surface objects, once the session has checked every handle
//! and range and turned its ids into the executor's own handles.

/// A CUDA array's shape and format (`CUDA_ARRAY3D_DESCRIPTOR`): a height
/// or depth of 0 means fewer dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// `CUDA_ARRAY3D_LAYERED`: `depth` counts layers.
pub const ARRAY_LAYERED: u32 = 0x01;
/// `CUDA_ARRAY3D_SURFACE_LDST`: surface objects may be made of it.
pub const ARRAY_SURFACE_LDST: u32 = 0x02;
/// `CUDA_ARRAY3D_CUBEMAP`: six faces (or six per layer).
pub const ARRAY_CUBEMAP: u32 = 0x04;
/// `CUDA_ARRAY3D_TEXTURE_GATHER`.
pub const ARRAY_TEXTURE_GATHER: u32 = 0x08;
/// Flags the session passes on; sparse, deferred-mapping and
/// depth-texture arrays are not offered.
pub const ARRAY_FLAGS: u32 = ARRAY_LAYERED | ARRAY_SURFACE_LDST | ARRAY_CUBEMAP | ARRAY_TEXTURE_GATHER;

impl ArrayShape {
    /// Bytes of one element, `None` for a format the session does not
    /// offer (block-compressed and packed video formats).
    pub fn element_bytes(&self) -> Option<u64> {
        format_bytes(self.format).map(|b| b * u64::from(self.channels))
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

    /// Bytes of the elements (what the session's quota counts; the driver
    /// may round up).
    pub fn bytes(&self) -> Option<u64> {
        self.row_bytes()?.checked_mul(self.rows())?.checked_mul(self.slices())
    }

    /// The shape of mipmap level `level` (each dimension halved per level,
    /// at least 1; layers and faces kept).
    pub fn level(&self, level: u32) -> ArrayShape {
        let [width, height, depth] = pvgpu_ring::proto::mipmap_extent([self.width, self.height, self.depth], self.flags, level);
        ArrayShape { width, height, depth, ..*self }
    }
}

pub use pvgpu_ring::proto::array_format_bytes as format_bytes;

/// One side of a copy with an array, as the executor runs it.
#[derive(Clone, Copy, Debug)]
pub enum CopySide {
    /// Device memory: rows `pitch` bytes apart, slices `rows` rows apart.
    Device {
        /// First byte.
        ptr: u64,
        /// Bytes between rows.
        pitch: u64,
        /// Rows between slices.
        rows: u64,
    },
    /// Host memory of the backend holding the rows packed (the request's
    /// bytes, the data area or the reply buffer).
    Host(*mut u8),
    /// An array (the executor's handle), from byte `x` of row `y` of slice
    /// `z`.
    Array {
        /// The executor's handle.
        raw: u64,
        /// First byte of each row.
        x: u64,
        /// First row.
        y: u64,
        /// First slice or layer.
        z: u64,
    },
}

/// A copy of `depth` slices of `height` rows of `width` bytes.
#[derive(Clone, Copy, Debug)]
pub struct ArrayCopy {
    /// Destination.
    pub dst: CopySide,
    /// Source.
    pub src: CopySide,
    /// Bytes per row.
    pub width: u64,
    /// Rows per slice.
    pub height: u64,
    /// Slices.
    pub depth: u64,
}

/// What a texture or surface object reads or writes, with the executor's
/// handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// An array.
    Array(u64),
    /// A mipmapped array.
    Mipmapped(u64),
    /// Linear device memory.
    Linear {
        /// First byte.
        ptr: u64,
        /// `CUarray_format`.
        format: u32,
        /// Channels per element.
        channels: u32,
        /// Bytes.
        bytes: u64,
    },
    /// Pitched device memory.
    Pitch2D {
        /// First byte.
        ptr: u64,
        /// `CUarray_format`.
        format: u32,
        /// Channels per element.
        channels: u32,
        /// Elements per row.
        width: u64,
        /// Rows.
        height: u64,
        /// Bytes between rows.
        pitch: u64,
    },
}

/// A texture object's sampling (`CUDA_TEXTURE_DESC` without its reserved
/// words, in cuda.h's order) and resource view.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// The descriptor's thirteen words.
    pub tex: [u32; 13],
    /// The view: format, first and last level, first and last layer,
    /// width, height, depth.
    pub view: Option<View>,
}

/// `CUDA_RESOURCE_VIEW_DESC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    /// `CUresourceViewFormat`.
    pub format: u32,
    /// Width, height, depth.
    pub extent: [u64; 3],
    /// First and last mipmap level.
    pub levels: [u32; 2],
    /// First and last layer.
    pub layers: [u32; 2],
}
