//! Device memory put back at the addresses a checkpoint recorded.
//!
//! First as it was made: `cuMemAlloc` of each size, lowest address first;
//! in a worker laid out as the one that made them (`--worker-fixed-layout`)
//! the driver's allocator hands out the same addresses again where the
//! session made them in that order. What comes back elsewhere is freed and
//! made as a virtual-memory mapping instead: a reservation at the recorded
//! address, device
//! memory of the context's device mapped there, read-write access. The
//! driver packs small allocations into one granule (2 MiB on an H100), so
//! allocations whose granules touch share one *group*, reserved and mapped
//! as one range; a group is unmapped and its addresses given back when the
//! last of its allocations is freed (or the context goes).

use super::CudaContext;
use super::vmm::granularity;
use crate::exec::CuRes;
use pvgpu_ring::CuError;
use std::collections::{BTreeMap, BTreeSet};

/// A reserved, mapped range holding restored allocations.
pub(super) struct Group {
    len: u64,
    members: BTreeSet<u64>,
}

/// The context's groups, by start address.
#[derive(Default)]
pub(super) struct Restored {
    groups: BTreeMap<u64, Group>,
}

/// Groups `ranges` (address, length) by the granules they touch.
fn group(ranges: &[(u64, u64)], gran: u64) -> CuRes<Vec<(u64, u64, Vec<u64>)>> {
    let mut sorted: Vec<(u64, u64)> = ranges.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<(u64, u64, Vec<u64>)> = Vec::new();
    for (addr, len) in sorted {
        let start = addr / gran * gran;
        let end = addr.checked_add(len.max(1)).and_then(|e| e.checked_next_multiple_of(gran)).ok_or(CuError::INVALID_VALUE)?;
        match out.last_mut() {
            Some((s, l, m)) if start < *s + *l => {
                *l = end.max(*s + *l) - *s;
                m.push(addr);
            }
            _ => out.push((start, end - start, vec![addr])),
        }
    }
    Ok(out)
}

impl CudaContext {
    /// Maps device memory at each of `ranges`, or nothing: on failure what
    /// was mapped is given back. An address the driver will not give is
    /// `CUDA_ERROR_ALREADY_MAPPED`.
    pub(super) fn restore_ranges(&mut self, ranges: &[(u64, u64)]) -> CuRes<()> {
        let mut sorted = ranges.to_vec();
        sorted.sort_unstable();
        let mut allocated = Vec::new();
        let mut mapped = Vec::new();
        for (addr, len) in sorted {
            match crate::exec::ExecContext::mem_alloc(self, len) {
                Ok(p) if p == addr => allocated.push(p),
                Ok(p) => {
                    let _ = crate::exec::ExecContext::mem_free(self, p);
                    mapped.push((addr, len));
                }
                Err(_) => mapped.push((addr, len)),
            }
        }
        let r = self.map_ranges(&mapped);
        if r.is_err() {
            for p in allocated {
                let _ = crate::exec::ExecContext::mem_free(self, p);
            }
        }
        tracing::debug!(allocated = ranges.len() - mapped.len(), mapped = mapped.len(), "restored device memory");
        r
    }

    fn map_ranges(&mut self, ranges: &[(u64, u64)]) -> CuRes<()> {
        let gran = granularity(self.drv, self.dev, 0)?.max(1);
        let mut made = Vec::new();
        for (start, len, members) in group(ranges, gran)? {
            match self.map_fixed(start, len) {
                Ok(()) => {
                    made.push(start);
                    self.restored.groups.insert(start, Group { len, members: members.into_iter().collect() });
                }
                Err(e) => {
                    for s in made {
                        if let Some(g) = self.restored.groups.remove(&s) {
                            self.unmap_fixed(s, g.len);
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn map_fixed(&mut self, start: u64, len: u64) -> CuRes<()> {
        let got = self.reserve(len, 0, start)?;
        if got != start {
            let _ = self.address_free(got, len);
            return Err(CuError::ALREADY_MAPPED);
        }
        let (handle, _) = match self.create(len, 0) {
            Ok(h) => h,
            Err(e) => {
                let _ = self.address_free(start, len);
                return Err(e);
            }
        };
        let mapped = self.map(start, len, 0, handle).and_then(|()| self.set_access(start, len, 3));
        // The mapping holds the memory from here on.
        let _ = self.release(handle);
        if let Err(e) = mapped {
            let _ = self.unmap(start, len);
            let _ = self.address_free(start, len);
            return Err(e);
        }
        Ok(())
    }

    fn unmap_fixed(&mut self, start: u64, len: u64) {
        let r = self.unmap(start, len).and_then(|()| self.address_free(start, len));
        if let Err(e) = r {
            tracing::warn!(start, len, error = %e, "giving back restored device memory failed");
        }
    }

    /// Frees `dptr` if it is a restored allocation (its group goes with
    /// its last member); `None` if it is not one.
    pub(super) fn free_restored(&mut self, dptr: u64) -> Option<CuRes<()>> {
        let (&start, g) = self.restored.groups.range_mut(..=dptr).next_back()?;
        if !g.members.remove(&dptr) {
            return None;
        }
        if g.members.is_empty() {
            let len = g.len;
            self.restored.groups.remove(&start);
            // Work still reading it must finish first, as cuMemFree waits.
            if let Err(e) = crate::exec::ExecContext::synchronize(self) {
                return Some(Err(e));
            }
            self.unmap_fixed(start, len);
        }
        Some(Ok(()))
    }

    /// Gives back every group (the context is going).
    pub(super) fn drop_restored(&mut self) {
        let groups = std::mem::take(&mut self.restored.groups);
        for (start, g) in groups {
            self.unmap_fixed(start, g.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_sharing_granules_share_a_group() {
        const G: u64 = 2 << 20;
        let base = 0x7f00_0000_0000;
        let ranges = [(base + 512, 256), (base, 256), (base + G - 16, G), (base + 8 * G, 1), (base + 9 * G, G)];
        let groups = group(&ranges, G).unwrap();
        assert_eq!(groups.len(), 3, "{groups:?}");
        assert_eq!(groups[0], (base, 2 * G, vec![base, base + 512, base + G - 16]));
        assert_eq!(groups[1], (base + 8 * G, G, vec![base + 8 * G]), "a neighbour that shares no granule is apart");
        assert_eq!(groups[2], (base + 9 * G, G, vec![base + 9 * G]));
        assert!(group(&[(u64::MAX - 1, 16)], G).is_err());
    }
}
