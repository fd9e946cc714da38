//! Per-session handle tables: guests only ever see opaque ids.
//!
//! An id is `(generation << 32) | (slot + 1)`: zero is never an id (CUDA's
//! "null" handle), and a stale id (its slot since reused) does not match the
//! slot's new generation, so a guest cannot reach an object through an id it
//! was not given for that object. The generation's top byte is the
//! session's address space ([`pvgpu_ring::proto::Hello::space`]), so that a
//! program with several backends gets ids of each that no other one makes;
//! the 24 bits below count reuses.

use pvgpu_ring::CuError;

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Bits of a generation that count reuses; above them, the space.
const COUNT: u32 = 0x00ff_ffff;

/// A table of objects addressed by opaque 64-bit ids, with a size limit.
pub struct HandleTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
    max: usize,
    /// The generation of a slot never used: the space, and a count of 1.
    first: u32,
}

impl<T> HandleTable<T> {
    /// An empty table holding at most `max` objects.
    pub fn new(max: usize) -> Self {
        HandleTable { slots: Vec::new(), free: Vec::new(), len: 0, max: max.min(u32::MAX as usize - 1), first: 1 }
    }

    /// Makes ids of address space `space` from now on (below
    /// [`pvgpu_ring::proto::MAX_SPACES`]); slots already used keep theirs.
    pub fn set_space(&mut self, space: u16) {
        self.first = (u32::from(space) << (pvgpu_ring::proto::SPACE_SHIFT - 32)) | 1;
        for s in self.slots.iter_mut().filter(|s| s.value.is_none()) {
            s.generation = self.first;
        }
    }

    /// Number of live objects.
    pub fn len(&self) -> usize {
        self.len
    }

    fn split(id: u64) -> Option<(usize, u32)> {
        let slot = (id & 0xffff_ffff).checked_sub(1)? as usize;
        Some((slot, (id >> 32) as u32))
    }

    /// Stores `value`; `CUDA_ERROR_OUT_OF_MEMORY` when the table is full.
    pub fn insert(&mut self, value: T) -> Result<u64, CuError> {
        if self.len >= self.max {
            return Err(CuError::OUT_OF_MEMORY);
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot { generation: self.first, value: None });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[slot as usize];
        s.value = Some(value);
        self.len += 1;
        Ok(((s.generation as u64) << 32) | (slot as u64 + 1))
    }

    /// Stores `value` under `id`, an id a table handed out before (a
    /// restored session keeps its guest's handles): `INVALID_VALUE` for an
    /// id no table hands out or one in use, `OUT_OF_MEMORY` when full.
    pub fn insert_at(&mut self, id: u64, value: T) -> Result<(), CuError> {
        let (slot, generation) = Self::split(id).ok_or(CuError::INVALID_VALUE)?;
        if generation == 0 || slot >= self.max {
            return Err(CuError::INVALID_VALUE);
        }
        if self.len >= self.max {
            return Err(CuError::OUT_OF_MEMORY);
        }
        while self.slots.len() <= slot {
            self.free.push(self.slots.len() as u32);
            self.slots.push(Slot { generation: self.first, value: None });
        }
        if self.slots[slot].value.is_some() {
            return Err(CuError::INVALID_VALUE);
        }
        self.free.retain(|f| *f as usize != slot);
        self.slots[slot] = Slot { generation, value: Some(value) };
        self.len += 1;
        Ok(())
    }

    /// The object with id `id`, if live.
    pub fn get(&self, id: u64) -> Option<&T> {
        let (slot, generation) = Self::split(id)?;
        let s = self.slots.get(slot)?;
        if s.generation != generation {
            return None;
        }
        s.value.as_ref()
    }

    /// The object with id `id`, if live, mutably.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let (slot, generation) = Self::split(id)?;
        let s = self.slots.get_mut(slot)?;
        if s.generation != generation {
            return None;
        }
        s.value.as_mut()
    }

    /// Removes and returns the object with id `id`.
    pub fn remove(&mut self, id: u64) -> Option<T> {
        let (slot, generation) = Self::split(id)?;
        let s = self.slots.get_mut(slot)?;
        if s.generation != generation {
            return None;
        }
        let v = s.value.take()?;
        // The count wraps within its bits, never to 0; the space stays.
        s.generation = (s.generation & !COUNT) | (s.generation.wrapping_add(1) & COUNT).max(1);
        self.free.push(slot as u32);
        self.len -= 1;
        Some(v)
    }

    /// Removes every object for which `f` is false, returning them.
    pub fn drain_where(&mut self, mut f: impl FnMut(&T) -> bool) -> Vec<T> {
        let ids: Vec<u64> = self.iter().filter(|(_, v)| f(v)).map(|(id, _)| id).collect();
        ids.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    /// Live objects with their ids.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| s.value.as_ref().map(|v| (((s.generation as u64) << 32) | (i as u64 + 1), v)))
    }

    /// Live objects, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|s| s.value.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_opaque_and_stale_ids_miss() {
        let mut t = HandleTable::new(2);
        let a = t.insert("a").unwrap();
        let b = t.insert("b").unwrap();
        assert_ne!(a, 0);
        assert_eq!(t.insert("c"), Err(CuError::OUT_OF_MEMORY));
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.get(a), None);
        let c = t.insert("c").unwrap();
        assert_ne!(c, a, "a reused slot gets a new id");
        assert_eq!(t.get(a), None);
        assert_eq!(t.get(c), Some(&"c"));
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(u64::MAX), None);
        assert_eq!(t.drain_where(|v| *v == "b"), vec!["b"]);
        assert_eq!(t.get(b), None);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn restored_ids_are_the_same_ids() {
        let mut a = HandleTable::new(8);
        let ids: Vec<u64> = (0..4).map(|i| a.insert(i).unwrap()).collect();
        a.remove(ids[1]);
        let again = a.insert(9).unwrap();
        let mut b = HandleTable::new(8);
        for (id, v) in a.iter() {
            b.insert_at(id, *v).unwrap();
        }
        assert_eq!(b.get(again), Some(&9));
        assert_eq!(b.get(ids[3]), Some(&3));
        assert_eq!(b.insert_at(again, 1), Err(CuError::INVALID_VALUE), "an id in use");
        assert_eq!(b.insert_at(0, 1), Err(CuError::INVALID_VALUE));
        assert_eq!(b.insert_at(u64::MAX, 1), Err(CuError::INVALID_VALUE));
        let fresh = b.insert(7).unwrap();
        assert!(b.get(fresh) == Some(&7) && b.len() == 5, "free slots stay usable");
    }

    #[test]
    fn ids_carry_their_space_through_reuse() {
        use pvgpu_ring::proto::space_of;
        let (mut a, mut b) = (HandleTable::new(4), HandleTable::new(4));
        b.set_space(5);
        for _ in 0..3 {
            let (x, y) = (a.insert(()).unwrap(), b.insert(()).unwrap());
            assert_eq!((space_of(x), space_of(y)), (0, 5));
            assert_ne!(x, y);
        }
        // Wrap a slot's reuse count: the space stays and the id is never 0.
        let id = b.insert(()).unwrap();
        b.slots[(id & 0xffff_ffff) as usize - 1].generation |= COUNT;
        let id = b.iter().map(|(i, _)| i).find(|i| i & 0xffff_ffff == id & 0xffff_ffff).unwrap();
        b.remove(id).unwrap();
        let again = b.insert(()).unwrap();
        assert_eq!(space_of(again), 5);
        assert_eq!((again >> 32) as u32 & COUNT, 1);
    }
}
