//! CUDA arrays and texture and surface objects in the test double: an
//! array is a host buffer of its elements, row by row and slice by slice;
//! an object is a number naming its resource. Kernels of the registry read
//! float textures texel by texel (point sampling, unnormalised coordinates,
//! clamped) and read and write float surfaces: enough to show the objects
//! reach kernels, not a texture unit.

use super::HostContext;
use super::kernels::{Fault, Mem};
use crate::exec::CuRes;
use crate::exec::array::{ArrayCopy, ArrayShape, CopySide, Resource, Sampling};
use pvgpu_ring::CuError;
use std::collections::HashMap;

/// An array's shape and elements.
pub(super) struct HostArray {
    shape: ArrayShape,
    data: Vec<u8>,
    /// The mipmapped array it is a level of.
    level_of: Option<u64>,
}

/// Arrays, mipmapped arrays (their levels' handles) and objects of a
/// context.
#[derive(Default)]
pub(super) struct Arrays {
    arrays: HashMap<u64, HostArray>,
    mipmaps: HashMap<u64, Vec<u64>>,
    /// Object to whether it is a surface object.
    objects: HashMap<u64, (Resource, bool)>,
}

/// Largest array the double makes (its memory is the host's).
const MAX_ARRAY_BYTES: u64 = 1 << 30;

impl HostContext {
    fn new_array(&mut self, shape: &ArrayShape, level_of: Option<u64>) -> CuRes<u64> {
        let bytes = shape.bytes().filter(|&b| b > 0 && b <= MAX_ARRAY_BYTES).ok_or(CuError::INVALID_VALUE)?;
        let h = self.handle();
        self.mem.arrays.arrays.insert(h, HostArray { shape: *shape, data: vec![0; bytes as usize], level_of });
        Ok(h)
    }

    pub(super) fn array_new(&mut self, shape: &ArrayShape, levels: u32) -> CuRes<u64> {
        self.ok()?;
        if levels == 0 {
            return self.new_array(shape, None);
        }
        let most = 64 - shape.width.max(shape.height).max(shape.depth).leading_zeros();
        if levels > most {
            return Err(CuError::INVALID_VALUE);
        }
        let h = self.handle();
        let mut made = Vec::new();
        for l in 0..levels {
            match self.new_array(&shape.level(l), Some(h)) {
                Ok(a) => made.push(a),
                Err(e) => {
                    made.iter().for_each(|a| drop(self.mem.arrays.arrays.remove(a)));
                    return Err(e);
                }
            }
        }
        self.mem.arrays.mipmaps.insert(h, made);
        Ok(h)
    }

    pub(super) fn array_free(&mut self, raw: u64, mipmapped: bool) -> CuRes<()> {
        self.ok()?;
        if mipmapped {
            let levels = self.mem.arrays.mipmaps.remove(&raw).ok_or(CuError::INVALID_HANDLE)?;
            levels.iter().for_each(|a| drop(self.mem.arrays.arrays.remove(a)));
            return Ok(());
        }
        match self.mem.arrays.arrays.get(&raw) {
            Some(a) if a.level_of.is_none() => {
                self.mem.arrays.arrays.remove(&raw);
                Ok(())
            }
            _ => Err(CuError::INVALID_HANDLE),
        }
    }

    pub(super) fn level(&mut self, raw: u64, level: u32) -> CuRes<u64> {
        self.ok()?;
        let levels = self.mem.arrays.mipmaps.get(&raw).ok_or(CuError::INVALID_HANDLE)?;
        levels.get(level as usize).copied().ok_or(CuError::INVALID_VALUE)
    }

    /// Reads one row of `len` bytes of `side` (row `y`, slice `z` of the
    /// copy) into `row`.
    ///
    /// # Safety
    /// A host side holds the copy's packed rows.
    unsafe fn read_row(&self, side: CopySide, c: &ArrayCopy, y: u64, z: u64, row: &mut [u8]) -> CuRes<()> {
        let len = row.len();
        match side {
            CopySide::Device { ptr, pitch, rows } => {
                let at = ptr + (z * rows + y) * pitch;
                row.copy_from_slice(self.mem.bytes(at, len).map_err(|_| CuError::INVALID_VALUE)?);
            }
            CopySide::Host(p) => {
                let off = ((z * c.height + y) * c.width) as usize;
                // SAFETY: the caller's contract: the packed rows are
                // readable.
                row.copy_from_slice(unsafe { std::slice::from_raw_parts(p.add(off), len) });
            }
            CopySide::Array { raw, x, y: y0, z: z0 } => {
                let a = self.mem.arrays.arrays.get(&raw).ok_or(CuError::INVALID_HANDLE)?;
                let off = element_offset(&a.shape, x, y0 + y, z0 + z, len as u64)?;
                row.copy_from_slice(&a.data[off..off + len]);
            }
        }
        Ok(())
    }

    /// # Safety
    /// As [`HostContext::read_row`], writable.
    unsafe fn write_row(&mut self, side: CopySide, c: &ArrayCopy, y: u64, z: u64, row: &[u8]) -> CuRes<()> {
        let len = row.len();
        match side {
            CopySide::Device { ptr, pitch, rows } => {
                let at = ptr + (z * rows + y) * pitch;
                self.mem.bytes_mut(at, len).map_err(|_| CuError::INVALID_VALUE)?.copy_from_slice(row);
            }
            CopySide::Host(p) => {
                let off = ((z * c.height + y) * c.width) as usize;
                // SAFETY: the caller's contract: the packed rows are
                // writable.
                unsafe { std::slice::from_raw_parts_mut(p.add(off), len) }.copy_from_slice(row);
            }
            CopySide::Array { raw, x, y: y0, z: z0 } => {
                let a = self.mem.arrays.arrays.get_mut(&raw).ok_or(CuError::INVALID_HANDLE)?;
                let off = element_offset(&a.shape, x, y0 + y, z0 + z, len as u64)?;
                a.data[off..off + len].copy_from_slice(row);
            }
        }
        Ok(())
    }

    /// # Safety
    /// As [`crate::exec::ExecContext::array_copy`].
    pub(super) unsafe fn copy_array(&mut self, c: &ArrayCopy, capturing: bool) -> CuRes<()> {
        self.ok()?;
        if capturing {
            // Copies with arrays are not captured by the double.
            return Err(CuError::NOT_SUPPORTED);
        }
        let mut row = vec![0u8; usize::try_from(c.width).map_err(|_| CuError::INVALID_VALUE)?];
        for z in 0..c.depth {
            for y in 0..c.height {
                // SAFETY: the caller's contract for host sides.
                unsafe {
                    self.read_row(c.src, c, y, z, &mut row)?;
                    self.write_row(c.dst, c, y, z, &row)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn object_new(&mut self, res: &Resource, sampling: Option<&Sampling>) -> CuRes<u64> {
        self.ok()?;
        let known = |a: &u64| self.mem.arrays.arrays.contains_key(a);
        match res {
            Resource::Array(a) if !known(a) => return Err(CuError::INVALID_HANDLE),
            Resource::Mipmapped(m) if !self.mem.arrays.mipmaps.contains_key(m) => return Err(CuError::INVALID_HANDLE),
            Resource::Mipmapped(_) | Resource::Linear { .. } | Resource::Pitch2D { .. } if sampling.is_none() => {
                return Err(CuError::INVALID_VALUE);
            }
            _ => {}
        }
        // As the driver numbers them (measured on the H200, driver 580):
        // texture and surface objects of a context share one numbering,
        // from 1, each taking the lowest number free.
        let h = (1..).find(|v| !self.mem.arrays.objects.contains_key(v)).ok_or(CuError::OUT_OF_MEMORY)?;
        self.mem.arrays.objects.insert(h, (*res, sampling.is_none()));
        Ok(h)
    }

    pub(super) fn object_free(&mut self, object: u64, surface: bool) -> CuRes<()> {
        self.ok()?;
        match self.mem.arrays.objects.get(&object) {
            Some(&(_, s)) if s == surface => {
                self.mem.arrays.objects.remove(&object);
                Ok(())
            }
            _ => Err(CuError::INVALID_VALUE),
        }
    }
}

/// The byte offset of `len` bytes from byte `x` of row `y` of slice `z`,
/// all inside the array.
fn element_offset(s: &ArrayShape, x: u64, y: u64, z: u64, len: u64) -> CuRes<usize> {
    let row = s.row_bytes().ok_or(CuError::INVALID_VALUE)?;
    if x.checked_add(len).is_none_or(|e| e > row) || y >= s.rows() || z >= s.slices() {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(((z * s.rows() + y) * row + x) as usize)
}

impl Mem {
    /// The float at element `(x, y)` of a float resource, clamped to it.
    fn resource_f32(&self, res: &Resource, x: u64, y: u64) -> Result<f32, Fault> {
        let (array, ptr, pitch, w, h) = match *res {
            Resource::Array(a) => {
                let a = self.arrays.arrays.get(&a).ok_or(Fault)?;
                (Some(a), 0, 0, a.shape.width, a.shape.rows())
            }
            Resource::Pitch2D { ptr, format: 0x20, channels: 1, width, height, pitch } => (None, ptr, pitch, width, height),
            Resource::Linear { ptr, format: 0x20, channels: 1, bytes } => (None, ptr, bytes, bytes / 4, 1),
            _ => return Err(Fault),
        };
        let (x, y) = (x.min(w.saturating_sub(1)), y.min(h.saturating_sub(1)));
        let b: [u8; 4] = match array {
            Some(a) if a.shape.format == 0x20 && a.shape.channels == 1 => {
                let off = element_offset(&a.shape, x * 4, y, 0, 4).map_err(|_| Fault)?;
                a.data[off..off + 4].try_into().map_err(|_| Fault)?
            }
            Some(_) => return Err(Fault),
            None => self.bytes(ptr + y * pitch + x * 4, 4)?.try_into().map_err(|_| Fault)?,
        };
        Ok(f32::from_le_bytes(b))
    }

    /// `tex2D<float>` of texture object `tex` at texel `(x, y)`.
    pub fn texel(&self, tex: u64, x: u64, y: u64) -> Result<f32, Fault> {
        match self.arrays.objects.get(&tex) {
            Some((res, false)) => self.resource_f32(res, x, y),
            _ => Err(Fault),
        }
    }

    /// Reads (with `None`) or writes the float at element `(x, y)` of
    /// surface object `surf`; outside the surface is a fault, as a
    /// surface access that traps.
    pub fn surface_f32(&mut self, surf: u64, x: u64, y: u64, v: Option<f32>) -> Result<f32, Fault> {
        let Some(&(Resource::Array(a), true)) = self.arrays.objects.get(&surf) else { return Err(Fault) };
        let arr = self.arrays.arrays.get_mut(&a).ok_or(Fault)?;
        if arr.shape.format != 0x20 || arr.shape.channels != 1 {
            return Err(Fault);
        }
        let off = element_offset(&arr.shape, x * 4, y, 0, 4).map_err(|_| Fault)?;
        let cell = &mut arr.data[off..off + 4];
        if let Some(v) = v {
            cell.copy_from_slice(&v.to_le_bytes());
        }
        Ok(f32::from_le_bytes(cell.try_into().map_err(|_| Fault)?))
    }
}
