use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

const G: u64 = 2 << 20;

/// Keeps what the arena asked for and checks it as the driver would:
/// mappings inside a reservation, never overlapping.
#[derive(Default)]
struct Fake {
    reserved: Vec<(u64, u64)>,
    /// Ranges another user of the process holds.
    taken: Vec<(u64, u64)>,
    maps: HashMap<u64, (u64, u64)>,
    next: u64,
    fail_maps: bool,
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

impl Backing for Fake {
    fn reserve_at(&mut self, addr: u64, len: u64) -> CuRes<()> {
        if self.taken.iter().chain(&self.reserved).any(|&r| overlaps(r, (addr, len))) {
            return Err(CuError::ALREADY_MAPPED);
        }
        self.reserved.push((addr, len));
        Ok(())
    }
    fn unreserve(&mut self, addr: u64, len: u64) {
        assert!(self.maps.keys().all(|&a| !overlaps((a, 1), (addr, len))), "a reservation freed under its mappings");
        let before = self.reserved.len();
        self.reserved.retain(|&r| r != (addr, len));
        assert_eq!(self.reserved.len() + 1, before, "not a reservation");
    }
    fn map(&mut self, addr: u64, len: u64) -> CuRes<u64> {
        if self.fail_maps {
            return Err(CuError::OUT_OF_MEMORY);
        }
        assert!(len % G == 0 && addr % G == 0, "unaligned mapping {addr:#x}+{len:#x}");
        assert!(self.reserved.iter().any(|&(a, l)| addr >= a && addr + len <= a + l), "mapping outside a reservation");
        assert!(self.maps.iter().all(|(&a, &(l, _))| !overlaps((a, l), (addr, len))), "overlapping mappings");
        self.next += 1;
        self.maps.insert(addr, (len, self.next));
        Ok(self.next)
    }
    fn unmap(&mut self, addr: u64, len: u64, handle: u64) {
        assert_eq!(self.maps.remove(&addr), Some((len, handle)), "unmapping what was not mapped");
    }
}

#[test]
fn small_allocations_share_a_granule_and_give_it_back() {
    let (mut f, mut a) = (Fake::default(), Arena::new(G));
    let ps: Vec<u64> = (0..10).map(|_| a.alloc(&mut f, 700).unwrap()).collect();
    assert_eq!(f.maps.len(), 1, "ten 700-byte allocations in one granule");
    let base = slot_address(a.slot().unwrap());
    for (i, p) in ps.iter().enumerate() {
        assert_eq!(p % 1024, 0);
        assert!(*p >= base && *p < base + SLOT);
        assert!(ps[..i].iter().all(|q| q != p));
    }
    for p in &ps {
        a.free(&mut f, *p).unwrap();
    }
    assert!(f.maps.is_empty(), "the granule went back with its last allocation");
    a.release(&mut f);
    assert!(f.reserved.is_empty());
}

#[test]
fn large_allocations_are_rounded_and_their_addresses_reused() {
    let (mut f, mut a) = (Fake::default(), Arena::new(G));
    let p = a.alloc(&mut f, 3 << 20).unwrap();
    assert_eq!(f.maps[&p].0, 4 << 20);
    let q = a.alloc(&mut f, G).unwrap();
    assert_eq!(q, p + (4 << 20));
    a.free(&mut f, p).unwrap();
    a.free(&mut f, q).unwrap();
    assert_eq!(a.alloc(&mut f, 6 << 20).unwrap(), p, "freed neighbours join into one range");
    a.release(&mut f);
}

#[test]
fn bad_frees_are_refused() {
    let (mut f, mut a) = (Fake::default(), Arena::new(G));
    let p = a.alloc(&mut f, 4 << 20).unwrap();
    let s = a.alloc(&mut f, 100).unwrap();
    assert_eq!(a.free(&mut f, p + 512), Err(CuError::INVALID_VALUE));
    assert_eq!(a.free(&mut f, s + 512), Err(CuError::INVALID_VALUE), "a free place of a shared granule");
    assert_eq!(a.free(&mut f, s + 100), Err(CuError::INVALID_VALUE));
    assert_eq!(a.free(&mut f, 0x1000), Err(CuError::INVALID_VALUE));
    a.free(&mut f, s).unwrap();
    assert_eq!(a.free(&mut f, s), Err(CuError::INVALID_VALUE), "freed twice");
    a.release(&mut f);
    assert!(f.maps.is_empty() && f.reserved.is_empty());
}

#[test]
fn a_failed_mapping_leaves_the_addresses_free() {
    let (mut f, mut a) = (Fake::default(), Arena::new(G));
    let first = a.alloc(&mut f, G).unwrap();
    a.free(&mut f, first).unwrap();
    f.fail_maps = true;
    assert_eq!(a.alloc(&mut f, G), Err(CuError::OUT_OF_MEMORY));
    assert_eq!(a.alloc(&mut f, 64), Err(CuError::OUT_OF_MEMORY));
    f.fail_maps = false;
    assert_eq!(a.alloc(&mut f, G).unwrap(), first);
    a.release(&mut f);
}

#[test]
fn a_taken_slot_is_skipped_and_a_restore_into_it_refused() {
    let mut f = Fake::default();
    let (mut a, mut b) = (Arena::new(G), Arena::new(G));
    let p = a.alloc(&mut f, 64).unwrap();
    let q = b.alloc(&mut f, 64).unwrap();
    assert_ne!(a.slot(), b.slot(), "two contexts of one process, two slots");
    let mut c = Arena::new(G);
    assert_eq!(c.alloc_at(&mut f, p, 64), Err(CuError::ALREADY_MAPPED), "slot held by another context");
    a.release(&mut f);
    b.release(&mut f);
    // Another user of the process holds the first slot's range.
    let first = slot_of(p.min(q)).unwrap();
    f.taken.push((slot_address(first), 4096));
    let mut d = Arena::new(G);
    let r = d.alloc(&mut f, 64).unwrap();
    assert_ne!(slot_of(r), Some(first));
    assert_eq!(c.alloc_at(&mut f, slot_address(first) + G, 64), Err(CuError::ALREADY_MAPPED));
    d.release(&mut f);
}

#[test]
fn places_that_alloc_never_gives_are_refused() {
    let (mut f, mut a) = (Fake::default(), Arena::new(G));
    let base = slot_address(20);
    assert_eq!(a.alloc_at(&mut f, base + 4096, 4 << 20), Err(CuError::ALREADY_MAPPED), "large, not on a granule");
    assert_eq!(a.alloc_at(&mut f, base + 512, 1024), Err(CuError::ALREADY_MAPPED), "small, not on its class");
    a.alloc_at(&mut f, base + 1024, 1024).unwrap();
    assert_eq!(a.alloc_at(&mut f, base + 1024, 1000), Err(CuError::ALREADY_MAPPED), "taken");
    assert_eq!(a.alloc_at(&mut f, base + 4096, 4096), Err(CuError::ALREADY_MAPPED), "a granule of another class");
    assert_eq!(a.alloc_at(&mut f, base, 4 << 20), Err(CuError::ALREADY_MAPPED), "over a shared granule");
    assert_eq!(a.alloc_at(&mut f, slot_address(21), 64), Err(CuError::ALREADY_MAPPED), "another slot");
    assert_eq!(a.alloc_at(&mut f, 0x1000, 64), Err(CuError::ALREADY_MAPPED), "outside every slot");
    a.release(&mut f);
}

proptest! {
    /// Any mix of allocations and frees: allocations never overlap and lie
    /// in the slot; the same live set placed again in a new arena (a
    /// restore) gets the same addresses and mappings; everything goes back.
    #[test]
    fn allocations_are_disjoint_and_restore_in_place(ops in prop::collection::vec((0u64..3, 1u64..(9 << 20), any::<prop::sample::Index>()), 1..120)) {
        let (mut f, mut a) = (Fake::default(), Arena::new(G));
        let mut live: Vec<(u64, u64)> = Vec::new();
        for (op, size, which) in ops {
            if op == 0 && !live.is_empty() {
                let (p, _) = live.remove(which.index(live.len()));
                a.free(&mut f, p).unwrap();
                continue;
            }
            let size = if op == 1 { size % 5000 + 1 } else { size };
            let p = a.alloc(&mut f, size).unwrap();
            prop_assert!(live.iter().all(|&(q, l)| !overlaps((q, l), (p, size))), "overlap at {:#x}", p);
            prop_assert_eq!(slot_of(p), a.slot());
            live.push((p, size));
        }
        let before: BTreeMap<u64, u64> = f.maps.iter().map(|(&a, &(l, _))| (a, l)).collect();
        a.release(&mut f);
        prop_assert!(f.maps.is_empty() && f.reserved.is_empty());
        let mut b = Arena::new(G);
        for &(p, size) in &live {
            b.alloc_at(&mut f, p, size).unwrap();
        }
        let after: BTreeMap<u64, u64> = f.maps.iter().map(|(&a, &(l, _))| (a, l)).collect();
        prop_assert_eq!(before, after);
        let fresh = b.alloc(&mut f, 3000).unwrap();
        prop_assert!(live.iter().all(|&(q, l)| !overlaps((q, l), (fresh, 3000))));
        for &(p, _) in &live {
            b.free(&mut f, p).unwrap();
        }
        b.free(&mut f, fresh).unwrap();
        prop_assert!(f.maps.is_empty());
        b.release(&mut f);
    }
}

#[test]
fn a_restore_maps_exactly_the_mappings_that_held_the_allocations() {
    // Memory handed over in place is the source's mappings: the target's
    // arena must ask for the very same (start, length) to take them.
    // A slot of the last address space: no other test's.
    let space = pvgpu_ring::proto::MAX_SPACES - 1;
    let (mut f, mut a) = (Fake::default(), Arena::in_space(G, space));
    let sizes = [700, 3 * G + 5, 600, 40 << 10, G, 100];
    let mut ranges: Vec<(u64, u64)> = sizes.iter().map(|&n| (a.alloc(&mut f, n).unwrap(), n)).collect();
    let freed = ranges.remove(3);
    a.free(&mut f, freed.0).unwrap();
    let held = a.mappings_of(&ranges).unwrap();
    let mut want: Vec<(u64, u64)> = held.iter().map(|&(s, l, _)| (s, l)).collect();
    want.sort_unstable();
    assert_eq!(held.iter().map(|&(_, _, h)| h).collect::<std::collections::BTreeSet<_>>().len(), held.len(), "each once");
    assert!(a.mappings_of(&[(0x10, 1)]).is_none(), "an address the arena never gave");
    // The slot is this process's: given back, as the source's process
    // ends, before the target's arena takes it.
    a.release(&mut f);

    let (mut g, mut b) = (Fake::default(), Arena::in_space(G, space));
    for &(addr, len) in &ranges {
        b.alloc_at(&mut g, addr, len).unwrap();
    }
    let mut got: Vec<(u64, u64)> = g.maps.iter().map(|(&s, &(l, _))| (s, l)).collect();
    got.sort_unstable();
    assert_eq!(got, want);
    b.release(&mut g);
}
