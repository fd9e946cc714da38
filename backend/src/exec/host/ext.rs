//! The host test double's launches with attributes, cluster occupancy,
//! stream-ordered allocation, memory-pool attributes, 2D copies and
//! memsets, and tensor maps. Streams run in order at once, so
//! stream-ordered operations are plain ones.

use super::HostContext;
use crate::exec::{Copy2D, CuRes, ExecContext, LaunchDims, Rect, TensorMapEncode};
use pvgpu_ring::CuError;
use zerocopy::IntoBytes;

impl HostContext {
    pub(super) fn clusters(&mut self, dims: LaunchDims, kind: u32) -> CuRes<i32> {
        self.ok()?;
        if dims.block.iter().map(|&b| b as u64).product::<u64>() > 1024 {
            return Err(CuError::INVALID_VALUE);
        }
        // One cluster at a time on the host; clusters of up to 8 blocks (the
        // portable limit on a GPU).
        Ok(if kind == 0 { 1 } else { 8 })
    }

    /// A stream waits for an event of another context. Work runs at once
    /// here, so the event is complete; a capture does not take in another
    /// context's work here (it would need that context's graph): refused
    /// by name.
    pub(super) fn wait_foreign(&mut self, s: Option<u64>) -> CuRes<()> {
        self.ok()?;
        if self.graphs.capturing(s) {
            return Err(CuError::STREAM_CAPTURE_ISOLATION);
        }
        Ok(())
    }

    pub(super) fn pool_attribute(&mut self, attr: u32, set: Option<u64>) -> CuRes<u64> {
        self.ok()?;
        match (attr, set) {
            (1..=4, Some(v)) => {
                self.pool_attrs.insert(attr, v);
                Ok(v)
            }
            (6 | 8, Some(0)) => Ok(0),
            (1..=3, None) => Ok(*self.pool_attrs.get(&attr).unwrap_or(&1)),
            (4, None) => Ok(*self.pool_attrs.get(&attr).unwrap_or(&0)),
            (5..=8, None) => Ok(self.held),
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    /// # Safety
    /// As `ExecContext::copy_2d`.
    pub(super) unsafe fn copy2d(&mut self, c: Copy2D, w: u64, h: u64) -> CuRes<()> {
        self.ok()?;
        let row = usize::try_from(w).map_err(|_| CuError::INVALID_VALUE)?;
        for y in 0..h {
            let packed = (y * w) as usize;
            // SAFETY: the caller's contract covers `w * h` bytes of each
            // host side; device rows go through the checked copies.
            unsafe {
                match c {
                    Copy2D::HtoD { dst, dst_pitch, src } => self.htod(dst + y * dst_pitch, src.add(packed), row, None, true)?,
                    Copy2D::DtoH { dst, src, src_pitch } => self.dtoh(dst.add(packed), src + y * src_pitch, row, None, true)?,
                    Copy2D::DtoD { dst, dst_pitch, src, src_pitch } => {
                        self.dtod(dst + y * dst_pitch, src + y * src_pitch, w, None, false)?
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn memset2d(&mut self, r: Rect, value: u32, elem: u32) -> CuRes<()> {
        for y in 0..r.height {
            self.memset(r.ptr + y * r.pitch, value, elem, r.width, None)?;
        }
        Ok(())
    }

    /// A stand-in descriptor: the request's first 128 bytes (a GPU's
    /// descriptor is opaque to programs, which only pass it to kernels).
    pub(super) fn tensor_map(&mut self, r: &TensorMapEncode) -> CuRes<[u8; 128]> {
        self.ok()?;
        let mut out = [0u8; 128];
        out.copy_from_slice(&r.as_bytes()[..128]);
        Ok(out)
    }
}
