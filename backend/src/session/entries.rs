//! What the session's tables hold for each object a guest has a handle
//! for: contexts, streams and events, modules and functions, and the
//! ranges of device memory it may touch.

use crate::exec::Param;
use std::sync::Arc;

pub(super) struct CtxEntry<C> {
    pub(super) primary: bool,
    /// The device's ordinal.
    pub(super) device: usize,
    /// The flags it was made with.
    pub(super) flags: u32,
    pub(super) ctx: C,
    /// Limits the guest set (`cuCtxSetLimit`): limit to the value the
    /// context has and when it was set (the session's `made` order), for
    /// a checkpoint.
    pub(super) limits: std::collections::BTreeMap<u32, (u64, u64)>,
}

pub(super) struct Owned<T> {
    pub(super) ctx: u64,
    pub(super) value: T,
    /// Creation flags and priority (priority: streams only), for a
    /// checkpoint.
    pub(super) flags: u32,
    pub(super) priority: i32,
    /// When it was made, among the session's modules, streams and events
    /// ([`super::Session`]'s `made`).
    pub(super) seq: u64,
}

pub(super) struct ModEntry<M> {
    pub(super) ctx: u64,
    pub(super) module: Option<M>,
    /// The image as loaded (NUL-terminated), for a checkpoint.
    pub(super) image: Arc<[u8]>,
    /// Globals the guest looked up: name, address, size.
    pub(super) globals: Vec<(String, u64, u64)>,
    /// The variables in global memory its image declares
    /// ([`crate::exec::image::writable_globals`]), read when it was loaded
    /// where sessions may leave (so that a checkpoint need not read the
    /// image within its pause); `None`: read at a checkpoint.
    pub(super) writable: Option<std::sync::Arc<[String]>>,
    /// When it was loaded ([`super::Session`]'s `made`).
    pub(super) seq: u64,
}

pub(super) struct FnEntry<F> {
    pub(super) ctx: u64,
    pub(super) module: u64,
    pub(super) func: F,
    pub(super) layout: std::sync::Arc<[Param]>,
    pub(super) param_bytes: usize,
    /// Attributes the guest set (`cuFuncSetAttribute`: the dynamic shared
    /// memory it may use, the carve-out, cluster settings), for a
    /// checkpoint.
    pub(super) attributes: std::collections::BTreeMap<i32, i32>,
}

#[derive(Clone, Copy)]
pub(super) struct Alloc {
    pub(super) len: u64,
    pub(super) ctx: u64,
    pub(super) kind: AllocKind,
}

/// Where a range of device memory the session may touch comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AllocKind {
    /// `cuMemAlloc` or `cuMemAllocAsync`: counted in `mem_used`.
    Memory,
    /// A global of this module.
    Global(u64),
    /// An accessible mapping of physical memory (`vmm`), counted in
    /// `mem_used` when it was created.
    Mapped,
    /// The data area, shared with the program, as the device sees it.
    Area,
    /// Mirrored host memory ([`super::mirror`]), counted in `mem_used`.
    Mirror,
    /// Another process's memory, opened through its interprocess handle
    /// (counted in its exporter's quota).
    Opened,
    /// Memory from pool `.0` of the program's own (`pool`), counted in
    /// `mem_used`.
    Pooled(u64),
    /// Another process's allocation from a pool this session imported
    /// (`pool_ipc`): freed as an allocation is, counted in its exporter's
    /// quota.
    PoolImported,
    /// Graph memory: the address of an allocation node, or of an
    /// allocation captured on a stream. The driver maps it while a graph
    /// runs (and until it is freed); counted through the session's
    /// measured footprint, not `mem_used`.
    Graph,
}
