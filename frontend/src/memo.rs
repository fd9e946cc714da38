//! Answers the client keeps so that it need not ask again: queries whose
//! answer cannot change until the session itself changes it. Frameworks ask
//! these on every step (PyTorch asks a function's attributes before most
//! launches), and each would otherwise cost a round trip.
//!
//! - a function's attributes, until the session sets one of them;
//! - occupancy figures of a function, until the session sets one of its
//!   attributes (they depend on them);
//! - a context's limits, until the session sets one (or the context goes);
//!   not the stack size, which the driver raises by itself when a kernel
//!   needs more;
//! - the device handle of an ordinal.

use std::collections::HashMap;

/// `CU_LIMIT_STACK_SIZE`: grown by the driver at launch, so never kept.
const LIMIT_STACK_SIZE: u32 = pvgpu_ring::cuda::api::CU_LIMIT_STACK_SIZE.0;

/// An occupancy question: function, kind, block size, limit, dynamic
/// shared memory, flags.
pub(crate) type OccupancyKey = (u64, u32, i32, i32, u64, u32);

#[derive(Debug, Default)]
pub(crate) struct Memo {
    func_attrs: HashMap<(u64, i32), i32>,
    /// What the session last set each function attribute to.
    func_set: HashMap<(u64, i32), i32>,
    occupancy: HashMap<OccupancyKey, (i64, i64)>,
    limits: HashMap<(u64, u32), u64>,
    devices: HashMap<i32, i32>,
}

impl Memo {
    pub(crate) fn func_attr(&self, f: u64, attr: i32) -> Option<i32> {
        self.func_attrs.get(&(f, attr)).copied()
    }

    pub(crate) fn set_func_attr(&mut self, f: u64, attr: i32, v: i32) {
        self.func_attrs.insert((f, attr), v);
    }

    /// Whether setting `attr` of `f` to `v` would change nothing: it is
    /// known to hold that value already.
    pub(crate) fn func_attr_is(&self, f: u64, attr: i32, v: i32) -> bool {
        self.func_set.get(&(f, attr)).or_else(|| self.func_attrs.get(&(f, attr))) == Some(&v)
    }

    /// The session set an attribute of `f` to `v`: what it may change
    /// (every attribute read back, every occupancy figure) is asked again.
    pub(crate) fn func_was_set(&mut self, f: u64, attr: i32, v: i32) {
        self.func_attrs.retain(|k, _| k.0 != f);
        self.occupancy.retain(|k, _| k.0 != f);
        self.func_set.insert((f, attr), v);
    }

    /// A set failed: what the attribute holds is no longer known.
    pub(crate) fn forget_func(&mut self, f: u64) {
        self.func_attrs.retain(|k, _| k.0 != f);
        self.func_set.retain(|k, _| k.0 != f);
        self.occupancy.retain(|k, _| k.0 != f);
    }

    pub(crate) fn occupancy(&self, k: &OccupancyKey) -> Option<(i64, i64)> {
        self.occupancy.get(k).copied()
    }

    pub(crate) fn set_occupancy(&mut self, k: OccupancyKey, v: (i64, i64)) {
        self.occupancy.insert(k, v);
    }

    pub(crate) fn limit(&self, ctx: u64, limit: u32) -> Option<u64> {
        self.limits.get(&(ctx, limit)).copied()
    }

    pub(crate) fn set_limit(&mut self, ctx: u64, limit: u32, v: u64) {
        if limit != LIMIT_STACK_SIZE {
            self.limits.insert((ctx, limit), v);
        }
    }

    /// A limit was set (the driver may round it), or the context went.
    pub(crate) fn forget_limits(&mut self, ctx: u64) {
        self.limits.retain(|k, _| k.0 != ctx);
    }

    /// Contexts went whose ids are not known here.
    pub(crate) fn forget_all_limits(&mut self) {
        self.limits.clear();
    }

    pub(crate) fn device(&self, ordinal: i32) -> Option<i32> {
        self.devices.get(&ordinal).copied()
    }

    pub(crate) fn set_device(&mut self, ordinal: i32, dev: i32) {
        self.devices.insert(ordinal, dev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_an_attribute_forgets_the_function_only() {
        let mut m = Memo::default();
        m.set_func_attr(1, 8, 48 << 10);
        m.set_func_attr(2, 8, 0);
        m.set_occupancy((1, 0, 256, 0, 0, 0), (4, 0));
        assert!(m.func_attr_is(1, 8, 48 << 10));
        m.func_was_set(1, 9, 50);
        assert_eq!(m.func_attr(1, 8), None);
        assert_eq!(m.occupancy(&(1, 0, 256, 0, 0, 0)), None);
        assert_eq!(m.func_attr(2, 8), Some(0));
        assert!(m.func_attr_is(1, 9, 50), "setting it again to 50 changes nothing");
        assert!(!m.func_attr_is(1, 9, 51));
        m.forget_func(1);
        assert!(!m.func_attr_is(1, 9, 50));
    }

    #[test]
    fn the_stack_size_is_never_kept() {
        let mut m = Memo::default();
        m.set_limit(1, LIMIT_STACK_SIZE, 1024);
        m.set_limit(1, 2, 8 << 20);
        assert_eq!(m.limit(1, LIMIT_STACK_SIZE), None);
        assert_eq!(m.limit(1, 2), Some(8 << 20));
        m.forget_limits(1);
        assert_eq!(m.limit(1, 2), None);
    }
}
