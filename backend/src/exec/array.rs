//! What executors are told of CUDA arrays, copies with an array side and
//! texture and surface objects, once the session has checked every handle
//! and range and turned its ids into the executor's own handles.

pub use pvgpu_ring::proto::ArrayShape;

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
