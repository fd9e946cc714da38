//! User objects (`cuUserObjectCreate` and kin): a pointer of the program
//! and its destructor, with a count of the references that the program and
//! its graphs own; the destructor runs once the last one goes. They live in
//! this library alone: the backend never sees them.
//!
//! A graph owns references of its own (`cuGraphRetainUserObject`, which
//! makes new ones or takes the program's) and copies of those of its
//! child-graph nodes, kept by node so that they go with the node. A clone,
//! an executable graph, and a child-graph node made from a graph each get
//! a copy of every reference the graph owns; an executable graph updated
//! from a graph, or whose child-graph node is set from one, exchanges its
//! copies for the new graph's. What an executable graph lets go (destroyed
//! or updated) is released once the work of its launches is done: a host
//! function on each stream it was launched on ([`crate::callback`]), the
//! last of which releases it; never launched, at once.
//!
//! As the driver does, a graph may release references it does not own:
//! the object loses them all the same, and the graph's own count stops at
//! zero. Releasing more references than an object has destroys it.
//!
//! Destructors run on a thread of this library, one at a time, in the
//! order their objects lost their last reference, and never while the
//! library holds a lock (they must not call CUDA, as the API requires).

use super::graph::graph_id;
use crate::callback::{self, Call, HostFn};
use crate::state::{self, handle, id, put, run};
use pvgpu_frontend::{Context, Stream};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_uint, c_void};
use std::ops::RangeInclusive;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, mpsc};

/// A program's destructor and the pointer it takes.
#[derive(Clone, Copy)]
struct Destructor {
    f: HostFn,
    ptr: usize,
}

/// A user object: its destructor and how many references it has.
struct Object {
    destructor: Destructor,
    refs: u64,
}

/// What owns references besides the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Owner {
    Graph(u64),
    Exec(u64),
}

/// Where an owner's references come from: its own (`None`), or a copy of
/// child-graph node `n`'s (`Some(n)`).
type Source = Option<u64>;

/// The source of the child-graph nodes of a clone, whose node ids this
/// library does not learn: their references go with the whole clone.
const CLONED_NODES: Source = Some(0);

/// References held: count by (owner, source, object).
type Key = (Owner, Source, u64);

/// References released together: (object, count).
type Released = Vec<(u64, u64)>;

/// Objects, the references graphs and executable graphs own, and where
/// each executable graph that owns some was launched.
struct Table {
    objects: BTreeMap<u64, Object>,
    refs: BTreeMap<Key, u64>,
    /// (context, stream) ids by executable graph.
    launches: BTreeMap<u64, BTreeSet<(u64, u64)>>,
}

static TABLE: Mutex<Table> = Mutex::new(Table { objects: BTreeMap::new(), refs: BTreeMap::new(), launches: BTreeMap::new() });

fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every key of `owner`.
fn keys_of(owner: Owner) -> RangeInclusive<Key> {
    (owner, None, 0)..=(owner, Some(u64::MAX), u64::MAX)
}

impl Table {
    /// Whether `owner` holds any reference.
    fn owns(&self, owner: Owner) -> bool {
        self.refs.range(keys_of(owner)).next().is_some()
    }

    /// Adds `n` references to `object`; false if there is no such object.
    fn retain(&mut self, object: u64, n: u64) -> bool {
        self.objects.get_mut(&object).map(|o| o.refs = o.refs.saturating_add(n)).is_some()
    }

    /// Drops `n` references of `object`: its destructor, when none are left.
    fn drop_refs(&mut self, object: u64, n: u64) -> Option<Destructor> {
        let o = self.objects.get_mut(&object)?;
        o.refs = o.refs.saturating_sub(n);
        if o.refs > 0 {
            return None;
        }
        self.objects.remove(&object).map(|o| o.destructor)
    }

    /// Counts `n` more references under `key`.
    fn hold(&mut self, key: Key, n: u64) {
        let held = self.refs.entry(key).or_default();
        *held = held.saturating_add(n);
    }

    /// Gives `to` new references, as many as `from` holds, under the source
    /// `at` names for each of `from`'s.
    fn copy(&mut self, from: Owner, to: Owner, at: impl Fn(Source) -> Source) {
        let held: Vec<(Key, u64)> = self.refs.range(keys_of(from)).map(|(k, n)| (*k, *n)).collect();
        for ((_, source, object), n) in held {
            // An object released by a graph that did not own the references
            // may be gone already.
            if self.retain(object, n) {
                self.hold((to, at(source), object), n);
            }
        }
    }

    /// Takes `owner`'s references from the sources `which` picks, to release.
    fn take(&mut self, owner: Owner, which: impl Fn(Source) -> bool) -> Released {
        let keys: Vec<Key> = self.refs.range(keys_of(owner)).map(|(k, _)| *k).filter(|k| which(k.1)).collect();
        keys.into_iter().filter_map(|k| self.refs.remove(&k).map(|n| (k.2, n))).collect()
    }
}

/// Releases references: the destructors of the objects left with none run
/// on the destructor thread, after the table's lock is let go.
fn release(refs: Released) {
    let due: Vec<Destructor> = {
        let mut t = table();
        refs.into_iter().filter_map(|(object, n)| t.drop_refs(object, n)).collect()
    };
    due.into_iter().for_each(destroy);
}

/// Runs `d` on the destructor thread (started at the first destructor); on
/// the calling thread only when no thread can be started.
fn destroy(d: Destructor) {
    static QUEUE: OnceLock<Option<mpsc::Sender<Destructor>>> = OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Destructor>();
        match std::thread::Builder::new().name("pvgpu-user-obj".into()).spawn(move || rx.into_iter().for_each(call)) {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!(error = %e, "no thread for user objects' destructors; they run on the releasing thread");
                None
            }
        }
    });
    match queue.as_ref().map(|q| q.send(d)) {
        Some(Ok(())) => {}
        Some(Err(mpsc::SendError(d))) => call(d),
        None => call(d),
    }
}

fn call(d: Destructor) {
    // SAFETY: the program gave `f` and `ptr` to cuUserObjectCreate, for
    // `f(ptr)` to run once, when the object's last reference is gone.
    unsafe { (d.f)(d.ptr as *mut c_void) }
}

/// A reference count argument: 1 to `INT_MAX`.
fn count(n: c_uint) -> Result<u64, CuError> {
    if n == 0 || n > i32::MAX as c_uint { Err(CuError::INVALID_VALUE) } else { Ok(n.into()) }
}

/// The id behind a user object handle (null is refused).
fn object_id(h: CUuserObject) -> Result<u64, CuError> {
    if h.is_null() { Err(CuError::INVALID_VALUE) } else { Ok(id(h)) }
}

/// `cuUserObjectCreate`: the program owns the `initial` references.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuUserObjectCreate(
    out: *mut CUuserObject,
    ptr: *mut c_void,
    destroy: CUhostFn,
    initial: c_uint,
    flags: c_uint,
) -> CuResult {
    run("cuUserObjectCreate", || {
        state::client()?;
        let f = destroy.ok_or(CuError::INVALID_VALUE)?;
        if out.is_null() || initial == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0 {
            return Err(CuError::INVALID_VALUE);
        }
        let h = state::local_handle();
        let object = Object { destructor: Destructor { f, ptr: ptr as usize }, refs: initial.into() };
        table().objects.insert(h, object);
        // SAFETY: non-null and writable per the API.
        unsafe { put(out, handle(h)) }
    })
}

/// `cuUserObjectRetain`.
#[unsafe(no_mangle)]
pub extern "C" fn cuUserObjectRetain(object: CUuserObject, n: c_uint) -> CuResult {
    run("cuUserObjectRetain", || {
        let (object, n) = (object_id(object)?, count(n)?);
        if table().retain(object, n) { Ok(()) } else { Err(CuError::INVALID_VALUE) }
    })
}

/// `cuUserObjectRelease`.
#[unsafe(no_mangle)]
pub extern "C" fn cuUserObjectRelease(object: CUuserObject, n: c_uint) -> CuResult {
    run("cuUserObjectRelease", || {
        let (object, n) = (object_id(object)?, count(n)?);
        let due = {
            let mut t = table();
            if !t.objects.contains_key(&object) {
                return Err(CuError::INVALID_VALUE);
            }
            t.drop_refs(object, n)
        };
        due.into_iter().for_each(destroy);
        Ok(())
    })
}

/// `cuGraphRetainUserObject`: new references the graph owns, or with
/// `CU_GRAPH_USER_OBJECT_MOVE` the program's, handed to the graph.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphRetainUserObject(graph: CUgraph, object: CUuserObject, n: c_uint, flags: c_uint) -> CuResult {
    run("cuGraphRetainUserObject", || {
        let (g, object, n) = (graph_id(graph)?.0, object_id(object)?, count(n)?);
        let moved = match flags {
            0 => false,
            f if f == CU_GRAPH_USER_OBJECT_MOVE.0 => true,
            _ => return Err(CuError::INVALID_VALUE),
        };
        let mut t = table();
        if !t.objects.contains_key(&object) {
            return Err(CuError::INVALID_VALUE);
        }
        if !moved {
            t.retain(object, n);
        }
        t.hold((Owner::Graph(g), None, object), n);
        Ok(())
    })
}

/// `cuGraphReleaseUserObject`: the object loses `n` references; the
/// graph's own count stops at zero.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphReleaseUserObject(graph: CUgraph, object: CUuserObject, n: c_uint) -> CuResult {
    run("cuGraphReleaseUserObject", || {
        let (g, object, n) = (graph_id(graph)?.0, object_id(object)?, count(n)?);
        let due = {
            let mut t = table();
            if !t.objects.contains_key(&object) {
                return Err(CuError::INVALID_VALUE);
            }
            let key = (Owner::Graph(g), None, object);
            match t.refs.get(&key).copied() {
                Some(held) if held > n => _ = t.refs.insert(key, held - n),
                Some(_) => _ = t.refs.remove(&key),
                None => {}
            }
            t.drop_refs(object, n)
        };
        due.into_iter().for_each(destroy);
        Ok(())
    })
}

/// Graph `g` was destroyed: its references go.
pub(crate) fn graph_gone(g: u64) {
    let refs = table().take(Owner::Graph(g), |_| true);
    release(refs);
}

/// Node `n` was destroyed: a child-graph node's references go with it.
pub(crate) fn node_gone(n: u64) {
    let refs = {
        let mut t = table();
        let keys: Vec<Key> = t.refs.keys().filter(|k| matches!(k.0, Owner::Graph(_)) && k.1 == Some(n)).copied().collect();
        keys.into_iter().filter_map(|k| t.refs.remove(&k).map(|count| (k.2, count))).collect()
    };
    release(refs);
}

/// `clone` was cloned from `g`: it owns copies of `g`'s references.
pub(crate) fn cloned(g: u64, clone: u64) {
    table().copy(Owner::Graph(g), Owner::Graph(clone), |source| source.and(CLONED_NODES));
}

/// Child-graph node `node` of `parent` was made from `child`: it owns
/// copies of `child`'s references.
pub(crate) fn child_added(parent: u64, node: u64, child: u64) {
    table().copy(Owner::Graph(child), Owner::Graph(parent), |_| Some(node));
}

/// Executable graph `e` was instantiated from `g`: it owns copies of `g`'s
/// references.
pub(crate) fn instantiated(g: u64, e: u64) {
    table().copy(Owner::Graph(g), Owner::Exec(e), |source| source);
}

/// Executable graph `e` was launched on `s`: what it releases later waits
/// for that launch.
pub(crate) fn launched(e: u64, s: CUstream) {
    let owns = table().owns(Owner::Exec(e));
    if !owns {
        return;
    }
    match stream_context(s) {
        Ok(ctx) => _ = table().launches.entry(e).or_default().insert((ctx.0, state::stream(s).0)),
        Err(err) => tracing::debug!(status = ?err, "no context for the stream of a launch; its references may go before it ends"),
    }
}

/// The backend context of stream `s`'s context.
fn stream_context(s: CUstream) -> Result<Context, CuError> {
    let h = match super::exec::stream_info(s)? {
        Some(info) => info.ctx,
        None => state::current_handle().ok_or(CuError::INVALID_CONTEXT)?,
    };
    state::ctx::backend(h)
}

/// Executable graph `e` was destroyed: its references go once its launches
/// have finished.
pub(crate) fn exec_gone(e: u64) {
    let (refs, streams) = {
        let mut t = table();
        (t.take(Owner::Exec(e), |_| true), t.launches.remove(&e).unwrap_or_default())
    };
    release_after(refs, &streams);
}

/// Executable graph `e` was updated from `g`: it owns copies of `g`'s
/// references instead of its own, which go once its launches have
/// finished.
pub(crate) fn exec_updated(e: u64, g: u64) {
    let (old, streams) = {
        let mut t = table();
        let old = t.take(Owner::Exec(e), |_| true);
        t.copy(Owner::Graph(g), Owner::Exec(e), |source| source);
        (old, t.launches.get(&e).cloned().unwrap_or_default())
    };
    release_after(old, &streams);
}

/// Child-graph node `node` of executable graph `e` was set from `child`:
/// the node's references are exchanged for copies of `child`'s, and the
/// old ones go once the launches of `e` have finished.
pub(crate) fn exec_child_set(e: u64, node: u64, child: u64) {
    let (old, streams) = {
        let mut t = table();
        let old = t.take(Owner::Exec(e), |source| source == Some(node));
        t.copy(Owner::Graph(child), Owner::Exec(e), |_| Some(node));
        (old, t.launches.get(&e).cloned().unwrap_or_default())
    };
    release_after(old, &streams);
}

/// Releases `refs` once the work on each of `streams` (context, stream) is
/// done; at once if there is none.
fn release_after(refs: Released, streams: &BTreeSet<(u64, u64)>) {
    if refs.is_empty() {
        return;
    }
    let held = Arc::new(refs);
    for &(ctx, stream) in streams {
        after_work(&held, Context(ctx), Stream(stream));
    }
    last(held);
}

/// The last holder of the references releases them.
fn last(held: Arc<Released>) {
    if let Some(refs) = Arc::into_inner(held) {
        release(refs);
    }
}

/// Holds `held` until the work on `stream` enqueued so far is done. A
/// stream gone since the launch gives way to the context's default stream,
/// which waits for the work of its other (blocking) streams; when neither
/// can take a host function, the stream's launches are not waited for.
fn after_work(held: &Arc<Released>, ctx: Context, stream: Stream) {
    let data = Arc::into_raw(Arc::clone(held)) as usize;
    let queued =
        release_on(ctx, stream, data).or_else(|e| if stream == Stream::DEFAULT { Err(e) } else { release_on(ctx, Stream::DEFAULT, data) });
    if let Err(e) = queued {
        tracing::debug!(status = ?e, "cannot wait for the launches of an executable graph; its user objects' references go now");
        // SAFETY: `data` came from `Arc::into_raw` above and was handed to
        // no host function.
        last(unsafe { Arc::from_raw(data as *const Released) });
    }
}

/// Enqueues [`released`] with `data` on `stream`. Not on a capturing
/// stream (it would become a node of the captured graph), nor on the
/// default stream while a capture is under way (it would wait for the
/// capturing stream).
fn release_on(ctx: Context, stream: Stream, data: usize) -> state::Res {
    let capturing = if stream == Stream::DEFAULT { state::client()?.capturing() } else { super::capture::is_capturing(stream)? };
    if capturing {
        return Err(CuError::STREAM_CAPTURE_UNSUPPORTED);
    }
    callback::enqueue(ctx, stream, Call::Host(released, data))
}

/// Host function: the work before it on its stream is done; the last one
/// of an executable graph's releases its references.
///
/// # Safety
/// `data` comes from `Arc::into_raw` of a `Released` in [`after_work`],
/// given to this function once.
unsafe extern "C" fn released(data: *mut c_void) {
    // SAFETY: per the caller.
    let held = unsafe { Arc::from_raw(data as *const Released) };
    // Nothing unwinds into the caller.
    let _ = catch_unwind(AssertUnwindSafe(|| last(held)));
}
