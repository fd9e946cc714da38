//! Device memory at addresses the backend chooses (`--device-memory
//! placed`), so that a session can leave its backend and come back in
//! another process with every pointer where it was.
//!
//! `cuMemAlloc` gives memory from the driver's heap, whose addresses follow
//! the process's own (randomised) layout: a new process cannot have them
//! back. Reservations of the virtual memory API are different: a new
//! process gets the very range it asks for if nothing holds it (measured on
//! the H100, driver 580). So in this mode each context reserves one slot of
//! [`SLOT`] bytes at a fixed place, and every allocation is physical memory
//! mapped inside it:
//!
//! - an allocation larger than half a granule gets mappings of its own,
//!   rounded up to the granule (2 MiB on the H100);
//! - smaller ones share granules of one size class each (powers of two
//!   from 512 bytes), as a slab allocator does; a granule goes back to the
//!   driver when its last allocation is freed.
//!
//! A restore asks for each allocation at its old address
//! ([`Arena::alloc_at`]): the slot is the old one, large allocations get
//! their old ranges, small ones their old granule and place in it.
//!
//! The bookkeeping here does no driver call itself: it asks a [`Backing`],
//! so it is tested without a GPU.

use crate::exec::CuRes;
use pvgpu_ring::CuError;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

/// Where the slots start: above the drop-in library's private page-locked
/// range (`0x3000_0000_0000`) and below where Linux places position-
/// independent executables and their heaps (`0x5500_0000_0000` and up).
pub const FIRST_SLOT: u64 = 0x4000_0000_0000;
/// Bytes of addresses one context may use: three times the memory of the
/// largest GPUs, so that freed ranges need not be reused at once.
pub const SLOT: u64 = 256 << 30;
/// How many contexts of one process may hold slots at once.
pub const SLOTS: u32 = 64;
/// The smallest size class of shared granules.
const MIN_CLASS: u64 = 512;

/// Slots held in this process (bit n: slot n).
static HELD: Mutex<u64> = Mutex::new(0);

/// What the arena asks of the driver.
pub trait Backing {
    /// Reserves `len` bytes of addresses at `addr` exactly; anything else
    /// (the range is taken) is `CUDA_ERROR_ALREADY_MAPPED`.
    fn reserve_at(&mut self, addr: u64, len: u64) -> CuRes<()>;
    /// Frees a whole reservation made by `reserve_at`.
    fn unreserve(&mut self, addr: u64, len: u64);
    /// Creates `len` bytes of physical memory, maps it at `addr` and makes
    /// it accessible; returns its handle.
    fn map(&mut self, addr: u64, len: u64) -> CuRes<u64>;
    /// Unmaps and releases what `map` made.
    fn unmap(&mut self, addr: u64, len: u64, handle: u64);
}

/// One context's device memory.
#[derive(Debug)]
pub struct Arena {
    granule: u64,
    /// The slot to try first.
    first: u32,
    slot: Option<u32>,
    /// Free address ranges of the slot: start to length.
    free: BTreeMap<u64, u64>,
    /// Mappings by start address.
    maps: BTreeMap<u64, Mapping>,
    /// Shared granules with free places, by size class.
    partial: HashMap<u64, BTreeSet<u64>>,
}

#[derive(Debug)]
struct Mapping {
    len: u64,
    handle: u64,
    /// Set for a granule shared by small allocations.
    shared: Option<Shared>,
}

#[derive(Debug)]
struct Shared {
    class: u64,
    used: Vec<u64>,
    count: u64,
}

impl Shared {
    fn places(&self, granule: u64) -> u64 {
        granule / self.class
    }
    fn is_used(&self, i: u64) -> bool {
        self.used[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
    fn set(&mut self, i: u64, on: bool) {
        let w = &mut self.used[(i / 64) as usize];
        if on {
            *w |= 1 << (i % 64);
            self.count += 1;
        } else {
            *w &= !(1 << (i % 64));
            self.count -= 1;
        }
    }
    fn first_free(&self, granule: u64) -> Option<u64> {
        (0..self.places(granule)).find(|&i| !self.is_used(i))
    }
}

/// The address of slot `n`.
pub fn slot_address(n: u32) -> u64 {
    FIRST_SLOT + u64::from(n) * SLOT
}

/// The slot an address of some arena lies in.
pub fn slot_of(addr: u64) -> Option<u32> {
    let n = addr.checked_sub(FIRST_SLOT)? / SLOT;
    u32::try_from(n).ok().filter(|&n| n < SLOTS)
}

fn round_up(v: u64, to: u64) -> Option<u64> {
    v.checked_add(to - 1).map(|x| x / to * to)
}

impl Arena {
    /// An arena of `granule`-sized mappings (the driver's allocation
    /// granularity, a power of two); it reserves its slot at first use.
    #[cfg(test)]
    pub fn new(granule: u64) -> Arena {
        Arena::in_space(granule, 0)
    }

    /// [`Arena::new`] for a session of address space `space`: its slot is
    /// the first free one from the space's share of them on, so that the
    /// backends of one program hand out different addresses.
    pub fn in_space(granule: u64, space: u16) -> Arena {
        let first = u32::from(space) * (SLOTS / u32::from(pvgpu_ring::proto::MAX_SPACES)) % SLOTS;
        Arena { granule, first, slot: None, free: BTreeMap::new(), maps: BTreeMap::new(), partial: HashMap::new() }
    }

    /// Whether `addr` lies in this arena's slot (what it gave, or could).
    pub fn owns(&self, addr: u64) -> bool {
        self.slot.is_some() && slot_of(addr) == self.slot
    }

    /// The slot this arena holds, if any.
    #[cfg(test)]
    pub fn slot(&self) -> Option<u32> {
        self.slot
    }

    /// Holds slot `want`, or the first free one; one slot per arena.
    fn ensure_slot(&mut self, b: &mut impl Backing, want: Option<u32>) -> CuRes<()> {
        match (self.slot, want) {
            (Some(have), Some(w)) if have != w => return Err(CuError::ALREADY_MAPPED),
            (Some(_), _) => return Ok(()),
            (None, _) => {}
        }
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        let candidates: Vec<u32> = match want {
            Some(w) => vec![w],
            None => (0..SLOTS).map(|i| (self.first + i) % SLOTS).collect(),
        };
        for n in candidates {
            if *held & (1 << n) != 0 {
                continue;
            }
            if b.reserve_at(slot_address(n), SLOT).is_ok() {
                *held |= 1 << n;
                self.slot = Some(n);
                self.free.insert(slot_address(n), SLOT);
                return Ok(());
            }
        }
        Err(if want.is_some() { CuError::ALREADY_MAPPED } else { CuError::OUT_OF_MEMORY })
    }

    /// `size` bytes at an address of the arena's choosing.
    pub fn alloc(&mut self, b: &mut impl Backing, size: u64) -> CuRes<u64> {
        if size == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        self.ensure_slot(b, None)?;
        if size <= self.granule / 2 {
            let class = size.max(MIN_CLASS).next_power_of_two();
            if let Some(&start) = self.partial.get(&class).and_then(|s| s.first()) {
                return Ok(self.take_place(start, None));
            }
            let start = self.take_addresses(self.granule)?;
            self.map_shared(b, start, class)?;
            return Ok(self.take_place(start, None));
        }
        let len = round_up(size, self.granule).ok_or(CuError::OUT_OF_MEMORY)?;
        let start = self.take_addresses(len)?;
        self.map_whole(b, start, len)?;
        Ok(start)
    }

    /// `size` bytes at `addr`, as an earlier [`Arena::alloc`] (in this
    /// process or another) gave them: `CUDA_ERROR_ALREADY_MAPPED` where
    /// the place is taken or cannot be one `alloc` gives.
    pub fn alloc_at(&mut self, b: &mut impl Backing, addr: u64, size: u64) -> CuRes<()> {
        if size == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        self.ensure_slot(b, Some(slot_of(addr).ok_or(CuError::ALREADY_MAPPED)?))?;
        if size <= self.granule / 2 {
            let class = size.max(MIN_CLASS).next_power_of_two();
            let start = addr & !(self.granule - 1);
            if (addr - start) % class != 0 {
                return Err(CuError::ALREADY_MAPPED);
            }
            match self.maps.get(&start).map(|m| m.shared.as_ref().map(|s| (s.class, s.is_used((addr - start) / class)))) {
                Some(Some((c, false))) if c == class => {}
                Some(_) => return Err(CuError::ALREADY_MAPPED),
                None => {
                    self.carve(start, self.granule)?;
                    self.map_shared(b, start, class)?;
                }
            }
            self.take_place(start, Some((addr - start) / class));
            return Ok(());
        }
        if addr % self.granule != 0 {
            return Err(CuError::ALREADY_MAPPED);
        }
        let len = round_up(size, self.granule).ok_or(CuError::ALREADY_MAPPED)?;
        self.carve(addr, len)?;
        self.map_whole(b, addr, len)
    }

    /// Frees what `alloc` or `alloc_at` gave at `addr`.
    pub fn free(&mut self, b: &mut impl Backing, addr: u64) -> CuRes<()> {
        let (&start, m) = self.maps.range(..=addr).next_back().ok_or(CuError::INVALID_VALUE)?;
        if addr >= start + m.len {
            return Err(CuError::INVALID_VALUE);
        }
        match &m.shared {
            None if addr == start => {}
            None => return Err(CuError::INVALID_VALUE),
            Some(s) => {
                let (class, i) = (s.class, (addr - start) / s.class);
                if (addr - start) % class != 0 || !s.is_used(i) {
                    return Err(CuError::INVALID_VALUE);
                }
                let s = self.maps.get_mut(&start).and_then(|m| m.shared.as_mut()).ok_or(CuError::INVALID_VALUE)?;
                s.set(i, false);
                if s.count > 0 {
                    self.partial.entry(class).or_default().insert(start);
                    return Ok(());
                }
                if let Some(p) = self.partial.get_mut(&class) {
                    p.remove(&start);
                }
            }
        }
        let m = self.maps.remove(&start).ok_or(CuError::INVALID_VALUE)?;
        b.unmap(start, m.len, m.handle);
        self.give_back(start, m.len);
        Ok(())
    }

    /// The mappings that hold `ranges` (addresses this arena gave), each
    /// once: start, bytes and handle; `None` where an address is not one.
    pub fn mappings_of(&self, ranges: &[(u64, u64)]) -> Option<Vec<(u64, u64, u64)>> {
        let mut found = BTreeMap::new();
        for &(addr, len) in ranges {
            let (&start, m) = self.maps.range(..=addr).next_back()?;
            if addr.checked_add(len)? > start + m.len {
                return None;
            }
            found.insert(start, (m.len, m.handle));
        }
        Some(found.into_iter().map(|(start, (len, handle))| (start, len, handle)).collect())
    }

    /// Unmaps everything and gives the slot back.
    pub fn release(&mut self, b: &mut impl Backing) {
        for (start, m) in std::mem::take(&mut self.maps) {
            b.unmap(start, m.len, m.handle);
        }
        self.partial.clear();
        self.free.clear();
        if let Some(n) = self.slot.take() {
            b.unreserve(slot_address(n), SLOT);
            *HELD.lock().unwrap_or_else(|p| p.into_inner()) &= !(1 << n);
        }
    }

    fn map_whole(&mut self, b: &mut impl Backing, start: u64, len: u64) -> CuRes<()> {
        match b.map(start, len) {
            Ok(handle) => {
                self.maps.insert(start, Mapping { len, handle, shared: None });
                Ok(())
            }
            Err(e) => {
                self.give_back(start, len);
                Err(e)
            }
        }
    }

    fn map_shared(&mut self, b: &mut impl Backing, start: u64, class: u64) -> CuRes<()> {
        let handle = match b.map(start, self.granule) {
            Ok(h) => h,
            Err(e) => {
                self.give_back(start, self.granule);
                return Err(e);
            }
        };
        let words = (self.granule / class).div_ceil(64) as usize;
        let shared = Shared { class, used: vec![0; words], count: 0 };
        self.maps.insert(start, Mapping { len: self.granule, handle, shared: Some(shared) });
        self.partial.entry(class).or_default().insert(start);
        Ok(())
    }

    /// Takes place `at` (or the first free one) of the shared granule at
    /// `start`, which has one free; returns its address.
    fn take_place(&mut self, start: u64, at: Option<u64>) -> u64 {
        let granule = self.granule;
        let Some(s) = self.maps.get_mut(&start).and_then(|m| m.shared.as_mut()) else { return start };
        let i = at.or_else(|| s.first_free(granule)).unwrap_or(0);
        s.set(i, true);
        let (class, full) = (s.class, s.count == s.places(granule));
        if full && let Some(p) = self.partial.get_mut(&class) {
            p.remove(&start);
        }
        start + i * class
    }

    /// The lowest free range of `len` bytes.
    fn take_addresses(&mut self, len: u64) -> CuRes<u64> {
        let (&start, _) = self.free.iter().find(|&(_, &l)| l >= len).ok_or(CuError::OUT_OF_MEMORY)?;
        self.carve(start, len)?;
        Ok(start)
    }

    /// Takes `[addr, addr+len)` out of the free ranges.
    fn carve(&mut self, addr: u64, len: u64) -> CuRes<()> {
        let end = addr.checked_add(len).ok_or(CuError::ALREADY_MAPPED)?;
        let (&s, &l) = self.free.range(..=addr).next_back().ok_or(CuError::ALREADY_MAPPED)?;
        if end > s + l {
            return Err(CuError::ALREADY_MAPPED);
        }
        self.free.remove(&s);
        if addr > s {
            self.free.insert(s, addr - s);
        }
        if s + l > end {
            self.free.insert(end, s + l - end);
        }
        Ok(())
    }

    /// Returns `[addr, addr+len)` to the free ranges, joined with its
    /// neighbours.
    fn give_back(&mut self, addr: u64, len: u64) {
        let (mut start, mut end) = (addr, addr + len);
        if let Some((&s, &l)) = self.free.range(..addr).next_back()
            && s + l == addr
        {
            self.free.remove(&s);
            start = s;
        }
        if let Some(l) = self.free.remove(&end) {
            end += l;
        }
        self.free.insert(start, end - start);
    }
}

#[cfg(test)]
mod tests;
