//! Layout of a pvgpu shared region: a control page, the request channel, the
//! response channel and the data area.
//!
//! ```text
//! offset 0      control page (4 KiB)
//!               0x000  magic "PVGPURG1" (u64), layout version (u32)
//!               0x010  req_size (u32), rsp_size (u32), data_size (u64)
//!               0x020  frontend alive (u8), backend alive (u8),
//!                      leave wanted (u8)
//!               0x100  request channel indices  (4 cache lines: prod, cons,
//!                      prod_event, cons_event)
//!               0x200  response channel indices (the same)
//! 4096          request channel buffer  (req_size bytes, power of two)
//! +req_size     response channel buffer (rsp_size bytes, power of two)
//! page-aligned  data area (data_size bytes, multiple of 4 KiB)
//! ```
//!
//! The frontend (guest) owns the memory and writes the control page before it
//! hands the region over; the backend checks the magic and that the sizes
//! match the geometry negotiated out of band (Unix-socket handshake or
//! XenStore), then uses its own copy of the geometry for the rest of the
//! session. Nothing in the control page is re-read after that.

use crate::region::{DataArea, RegionChannel, RegionError, SharedRegion};

/// Bytes of control page.
pub const CTRL_LEN: usize = 4096;
/// Magic at offset 0.
pub const LAYOUT_MAGIC: u64 = u64::from_le_bytes(*b"PVGPURG1");
/// Layout version at offset 8.
pub const LAYOUT_VERSION: u64 = 2;
const REQ_IDX: usize = 0x100;
const RSP_IDX: usize = 0x200;
/// Control-page byte the frontend keeps at 1 while it lives. On Xen the
/// guest kernel clears it when the frontend's grants go away (gntalloc's
/// unmap notification), so the backend sees a dead frontend.
pub const FRONTEND_ALIVE: usize = 0x20;
/// Control-page byte the backend keeps at 1 while it lives; cleared by
/// Dom0's kernel when the backend's mapping goes away (gntdev's unmap
/// notification).
pub const BACKEND_ALIVE: usize = 0x21;
/// Control-page byte the backend sets to 1 when a checkpoint is ordered
/// for a session that makes no call: the frontend clears it and makes a
/// call that waits for a reply, where the checkpoint is taken. A frontend
/// that never looks leaves such a session to the checkpoint's timeout.
pub const LEAVE_WANTED: usize = 0x22;

/// Largest record carried by a ring channel: the ring carries commands and
/// small replies; bulk data goes through the data area.
pub const MAX_RING_RECORD: u32 = 64 * 1024;

const PAGE: u64 = 4096;

/// Sizes of a region's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Request channel buffer, bytes (power of two).
    pub req_size: u32,
    /// Response channel buffer, bytes (power of two).
    pub rsp_size: u32,
    /// Data area, bytes (multiple of 4 KiB).
    pub data_size: u64,
}

impl Default for Geometry {
    fn default() -> Self {
        Geometry { req_size: 256 * 1024, rsp_size: 128 * 1024, data_size: 64 << 20 }
    }
}

/// Why a geometry or control page was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// A channel size is not a power of two in range.
    #[error("Channel size {0} must be a power of two from 4 KiB to 16 MiB")]
    ChannelSize(u32),
    /// The data area size is not a multiple of 4 KiB in range.
    #[error("Data area size {size} must be a multiple of 4 KiB and at most {max}")]
    DataSize {
        /// Size asked for.
        size: u64,
        /// Largest allowed.
        max: u64,
    },
    /// The region is smaller than the geometry needs.
    #[error("Shared region is {got} bytes; the geometry needs {need}")]
    RegionTooSmall {
        /// Region length.
        got: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The control page does not hold the expected magic and sizes.
    #[error("Control page does not match the negotiated geometry ({0})")]
    BadControlPage(&'static str),
    /// Carving the region failed.
    #[error(transparent)]
    Region(#[from] RegionError),
}

impl Geometry {
    /// Checks sizes against fixed bounds and `max_data` (the backend's
    /// advertised limit).
    pub fn validate(&self, max_data: u64) -> Result<(), LayoutError> {
        for s in [self.req_size, self.rsp_size] {
            if !s.is_power_of_two() || !(4096..=16 << 20).contains(&s) {
                return Err(LayoutError::ChannelSize(s));
            }
        }
        if self.data_size % PAGE != 0 || self.data_size > max_data {
            return Err(LayoutError::DataSize { size: self.data_size, max: max_data });
        }
        Ok(())
    }

    /// Offset of the request channel buffer.
    pub fn req_offset(&self) -> usize {
        CTRL_LEN
    }

    /// Offset of the response channel buffer.
    pub fn rsp_offset(&self) -> usize {
        CTRL_LEN + self.req_size as usize
    }

    /// Offset of the data area.
    pub fn data_offset(&self) -> usize {
        let end = (CTRL_LEN + self.req_size as usize + self.rsp_size as usize) as u64;
        end.div_ceil(PAGE) as usize * PAGE as usize
    }

    /// Total bytes of the region.
    pub fn total_len(&self) -> usize {
        self.data_offset() + self.data_size as usize
    }

    /// Number of 4 KiB pages of the region.
    pub fn pages(&self) -> usize {
        self.total_len() / PAGE as usize
    }
}

/// The three parts of a region, ready for a producer/consumer pair.
pub struct Endpoints {
    /// Request channel (frontend produces, backend consumes).
    pub req: RegionChannel,
    /// Response channel (backend produces, frontend consumes).
    pub rsp: RegionChannel,
    /// Bulk data area.
    pub data: DataArea,
}

fn carve(region: &SharedRegion, g: &Geometry) -> Result<Endpoints, LayoutError> {
    if region.len() < g.total_len() {
        return Err(LayoutError::RegionTooSmall { got: region.len(), need: g.total_len() });
    }
    Ok(Endpoints {
        req: region.channel(REQ_IDX, g.req_offset(), g.req_size)?,
        rsp: region.channel(RSP_IDX, g.rsp_offset(), g.rsp_size)?,
        data: region.area(g.data_offset(), g.data_size as usize)?,
    })
}

/// Frontend side: writes the control page of a fresh (zeroed) region and
/// returns its parts.
pub fn init_region(region: &SharedRegion, g: &Geometry) -> Result<Endpoints, LayoutError> {
    let ep = carve(region, g)?;
    // The channel buffers start zeroed (a zero header word is an empty
    // slot, see [`crate::channel`]), whatever memory the region was made
    // from. The frontend calls this before its first request.
    region.zero(g.req_offset(), g.req_size as usize)?;
    region.zero(g.rsp_offset(), g.rsp_size as usize)?;
    region.write_u64(0, LAYOUT_MAGIC)?;
    region.write_u64(8, LAYOUT_VERSION)?;
    region.write_u64(16, (g.req_size as u64) | ((g.rsp_size as u64) << 32))?;
    region.write_u64(24, g.data_size)?;
    Ok(ep)
}

/// Backend side: checks the control page written by the frontend against
/// the negotiated geometry and returns the region's parts.
pub fn attach_region(region: &SharedRegion, g: &Geometry) -> Result<Endpoints, LayoutError> {
    let ep = carve(region, g)?;
    if region.read_u64(0)? != LAYOUT_MAGIC {
        return Err(LayoutError::BadControlPage("magic"));
    }
    if region.read_u64(8)? != LAYOUT_VERSION {
        return Err(LayoutError::BadControlPage("layout version"));
    }
    if region.read_u64(16)? != (g.req_size as u64) | ((g.rsp_size as u64) << 32) || region.read_u64(24)? != g.data_size {
        return Err(LayoutError::BadControlPage("sizes"));
    }
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_geometry_is_valid_and_page_aligned() {
        let g = Geometry::default();
        g.validate(u64::MAX).unwrap();
        assert_eq!(g.data_offset() % 4096, 0);
        assert_eq!(g.total_len() % 4096, 0);
    }

    #[test]
    fn bad_sizes_are_refused() {
        let g = Geometry { req_size: 5000, ..Geometry::default() };
        assert!(g.validate(u64::MAX).is_err());
        let g = Geometry { data_size: 4097, ..Geometry::default() };
        assert!(g.validate(u64::MAX).is_err());
        let g = Geometry::default();
        assert!(g.validate(1 << 20).is_err());
    }

    #[test]
    fn attach_checks_the_control_page() {
        let g = Geometry { req_size: 4096, rsp_size: 4096, data_size: 8192 };
        let r = SharedRegion::heap(g.total_len());
        assert!(matches!(attach_region(&r, &g), Err(LayoutError::BadControlPage("magic"))));
        init_region(&r, &g).unwrap();
        assert!(attach_region(&r, &g).is_ok());
        let other = Geometry { data_size: 4096, ..g };
        assert!(matches!(attach_region(&r, &other), Err(LayoutError::BadControlPage("sizes"))));
        let small = SharedRegion::heap(4096);
        assert!(matches!(attach_region(&small, &g), Err(LayoutError::RegionTooSmall { .. })));
    }
}
