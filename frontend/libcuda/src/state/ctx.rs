//! Contexts as the program sees them.
//!
//! A context handle is what `cuCtxCreate` or `cuDevicePrimaryCtxRetain`
//! gave the program. Created contexts are the backend's ids. A device's
//! primary context has one handle for the life of the process
//! (`PRIMARY_TAG | device`), whether or not it is active, because NVIDIA's
//! runtime takes the handle before it retains the context (the runtime
//! interface table's slot 2) and makes it current while still inactive;
//! each activation is a new backend context behind the same handle.
//!
//! Each thread has a stack of handles (`cuCtxPushCurrent`/`Pop`,
//! `cuCtxSetCurrent` replaces the top). Each context has local storage
//! (the driver's private context-local storage table): values keyed by an
//! opaque pointer, with a destructor the library runs, newest first, when
//! the context is destroyed, or its primary context released to zero or
//! reset. Destructors run without any of the library's locks held.

use super::{cu, objects};
use pvgpu_frontend::{Context, CuError};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};

/// Tag of primary-context handles.
pub const PRIMARY_TAG: u64 = 0xC000_0000_0000_0000;

/// A context-local storage destructor: `dtor(ctx, key, value)`.
pub type ClsDtor = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void)>;

/// A device's primary context.
#[derive(Debug, Default, Clone, Copy)]
struct Primary {
    /// The backend context while active.
    backend: Option<u64>,
    /// Retain count.
    refs: u32,
    /// `cuDevicePrimaryCtxSetFlags`.
    flags: u32,
}

#[derive(Default)]
struct Contexts {
    primary: HashMap<i32, Primary>,
    /// Device of each created context.
    created: HashMap<u64, i32>,
    /// Local storage of each context: (key, value, destructor), oldest first.
    cls: HashMap<u64, Vec<(usize, usize, ClsDtor)>>,
}

static CONTEXTS: Mutex<Option<Contexts>> = Mutex::new(None);

fn contexts() -> MutexGuard<'static, Option<Contexts>> {
    let mut g = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(Contexts::default);
    g
}

/// Runs `f` on the context table.
fn with<T>(f: impl FnOnce(&mut Contexts) -> T) -> T {
    let mut g = contexts();
    f(g.as_mut().expect("initialised by contexts()"))
}

thread_local! {
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// The handle of `dev`'s primary context.
pub fn primary_handle(dev: i32) -> u64 {
    PRIMARY_TAG | dev as u32 as u64
}

/// The device of a primary-context handle.
pub(crate) fn primary_dev(h: u64) -> Option<i32> {
    (h & PRIMARY_TAG == PRIMARY_TAG).then_some((h & 0xffff_ffff) as u32 as i32)
}

/// The calling thread's current context handle, if any.
pub fn current_handle() -> Option<u64> {
    // `try_with`: NVIDIA's runtime asks from its thread-local destructors,
    // possibly after this one's ran; the thread then has no context.
    STACK.try_with(|s| s.borrow().last().copied()).ok().flatten()
}

/// The backend context behind a handle: `CUDA_ERROR_INVALID_CONTEXT` for an
/// inactive primary context.
pub fn backend(h: u64) -> Result<Context, CuError> {
    match primary_dev(h) {
        Some(dev) => with(|c| c.primary.get(&dev).and_then(|p| p.backend)).map(Context).ok_or(CuError::INVALID_CONTEXT),
        None if h == 0 => Err(CuError::INVALID_CONTEXT),
        None => Ok(Context(h)),
    }
}

/// Every context the program holds: its devices' active primary
/// contexts, then the contexts it created.
pub fn live() -> Vec<u64> {
    with(|c| {
        let primary = c.primary.iter().filter(|(_, p)| p.backend.is_some()).map(|(dev, _)| primary_handle(*dev));
        primary.chain(c.created.keys().copied()).collect()
    })
}

/// The program's handle of backend context `c`: the primary context's
/// handle while it is active on `c`, else `c` itself (a created context).
pub fn handle_of(c: Context) -> u64 {
    with(|t| t.primary.iter().find(|(_, p)| p.backend == Some(c.0)).map(|(dev, _)| primary_handle(*dev))).unwrap_or(c.0)
}

/// The calling thread's current context, as the backend knows it.
pub fn current() -> Result<Context, CuError> {
    backend(current_handle().ok_or(CuError::INVALID_CONTEXT)?)
}

/// A context handle the program passed, or the current one for null.
pub fn or_current(h: u64) -> Result<u64, CuError> {
    if h == 0 { current_handle().ok_or(CuError::INVALID_CONTEXT) } else { Ok(h) }
}

/// The device of a context.
pub fn device_of(h: u64) -> Result<i32, CuError> {
    match primary_dev(h) {
        Some(dev) => Ok(dev),
        None => with(|c| c.created.get(&h).copied()).ok_or(CuError::INVALID_CONTEXT),
    }
}

/// Whether `h` names a context the program holds (created, or an active
/// primary context).
pub fn is_live(h: u64) -> bool {
    backend(h).is_ok() && (primary_dev(h).is_some() || with(|c| c.created.contains_key(&h)))
}

/// Replaces the top of the calling thread's stack (`cuCtxSetCurrent`).
pub fn set_current(h: Option<u64>) {
    let _ = STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        s.extend(h);
    });
}

/// Pushes a context (`cuCtxPushCurrent`, `cuCtxCreate`).
pub fn push(h: u64) {
    let _ = STACK.try_with(|s| s.borrow_mut().push(h));
}

/// Pops the current context (`cuCtxPopCurrent`).
pub fn pop() -> Option<u64> {
    STACK.try_with(|s| s.borrow_mut().pop()).ok().flatten()
}

/// Creates a context on `dev` (`cuCtxCreate`); it becomes current.
pub fn create(dev: i32, flags: u32) -> Result<u64, CuError> {
    let (client, local) = super::device(dev)?;
    let c = client.ctx_create(local, flags).map_err(cu)?;
    wait_as(client, flags);
    with(|t| t.created.insert(c.0, dev));
    push(c.0);
    Ok(c.0)
}

/// Destroys a created context and everything in it (`cuCtxDestroy`).
pub fn destroy(h: u64) -> Result<(), CuError> {
    if primary_dev(h).is_some() || !with(|c| c.created.contains_key(&h)) {
        return Err(CuError::INVALID_CONTEXT);
    }
    run_destructors(h);
    super::client_of_ctx(h)?.ctx_destroy(Context(h)).map_err(cu)?;
    with(|c| c.created.remove(&h));
    forget(h);
    Ok(())
}

/// `cuDevicePrimaryCtxRetain`: activates the primary context on the first
/// retain; returns its handle.
pub fn primary_retain(dev: i32) -> Result<u64, CuError> {
    let (client, local) = super::device(dev)?;
    let c = client.primary_ctx_retain(local).map_err(cu)?;
    with(|t| {
        let p = t.primary.entry(dev).or_default();
        p.backend = Some(c.0);
        p.refs = p.refs.saturating_add(1);
    });
    Ok(primary_handle(dev))
}

/// `dev`'s primary context, retained once for the life of the process by
/// the library itself: for what the driver keeps outside any context
/// (managed variables, virtual memory) and the backend ties to one.
pub fn primary_held(dev: i32) -> Result<u64, CuError> {
    static HELD: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    if !held.contains(&dev) {
        primary_retain(dev)?;
        held.push(dev);
    }
    Ok(primary_handle(dev))
}

/// `cuDevicePrimaryCtxRelease`: the last release destroys the context and
/// everything in it (its local storage destructors first).
pub fn primary_release(dev: i32) -> Result<(), CuError> {
    let refs = with(|t| t.primary.get(&dev).map_or(0, |p| p.refs));
    if refs == 0 {
        return Err(CuError::INVALID_CONTEXT);
    }
    let h = primary_handle(dev);
    if refs == 1 {
        run_destructors(h);
    }
    let (client, local) = super::device(dev)?;
    client.primary_ctx_release(local).map_err(cu)?;
    let gone = with(|t| {
        let p = t.primary.entry(dev).or_default();
        p.refs -= 1;
        if p.refs == 0 {
            p.backend = None;
        }
        p.refs == 0
    });
    if gone {
        objects().drop_ctx(h);
    }
    Ok(())
}

/// `cuDevicePrimaryCtxReset`: destroys the primary context whatever its
/// retain count.
pub fn primary_reset(dev: i32) -> Result<(), CuError> {
    let (client, local) = super::device(dev)?;
    client.device_props(local).map_err(cu)?;
    let refs = with(|t| t.primary.get(&dev).map_or(0, |p| p.refs));
    if refs == 0 {
        return Ok(());
    }
    let h = primary_handle(dev);
    run_destructors(h);
    for _ in 0..refs {
        client.primary_ctx_release(local).map_err(cu)?;
    }
    with(|t| {
        let p = t.primary.entry(dev).or_default();
        p.refs = 0;
        p.backend = None;
    });
    objects().drop_ctx(h);
    Ok(())
}

/// (flags, active) of a device's primary context.
pub fn primary_state(dev: i32) -> (u32, bool) {
    with(|t| t.primary.get(&dev).map_or((0, false), |p| (p.flags, p.refs > 0)))
}

/// Records `cuDevicePrimaryCtxSetFlags`' flags (scheduling flags steer how
/// a host thread waits: in the backend for the device, here for the reply).
pub fn primary_set_flags(dev: i32, flags: u32) {
    with(|t| t.primary.entry(dev).or_default().flags = flags);
    if let Ok((client, _)) = super::device(dev) {
        wait_as(client, flags);
    }
}

/// Makes the program's synchronising calls wait for their replies as
/// context flags `flags` ask: `CU_CTX_SCHED_BLOCKING_SYNC` sleeps soon,
/// the others spin as the driver spins (for the whole process, or each
/// backend's part of it: the last context made or set there says).
fn wait_as(c: &pvgpu_frontend::Client, flags: u32) {
    use pvgpu_ring::cuda::api::{CU_CTX_SCHED_BLOCKING_SYNC, CU_CTX_SCHED_MASK};
    c.set_blocking_sync(flags & CU_CTX_SCHED_MASK.0 == CU_CTX_SCHED_BLOCKING_SYNC.0);
}

/// Forgets a destroyed context: its objects, and its place on the calling
/// thread's stack.
fn forget(h: u64) {
    objects().drop_ctx(h);
    let _ = STACK.try_with(|s| s.borrow_mut().retain(|&c| c != h));
}

/// Runs a context's local-storage destructors, newest first, and empties
/// its storage.
fn run_destructors(h: u64) {
    let entries = with(|t| t.cls.remove(&h)).unwrap_or_default();
    for (key, value, dtor) in entries.into_iter().rev() {
        if let Some(d) = dtor {
            // SAFETY: the program registered this destructor for this
            // entry with the context-local storage table; it is called
            // once, as the driver calls it, with no lock of ours held.
            unsafe { d(h as usize as *mut c_void, key as *mut c_void, value as *mut c_void) };
        }
    }
}

/// The context a local-storage call names: null is the current one, which
/// must be active.
fn cls_context(ctx: *mut c_void) -> Result<u64, CuError> {
    let h = or_current(ctx as usize as u64)?;
    backend(h)?;
    Ok(h)
}

/// Stores `value` under `key` in a context's local storage;
/// `CUDA_ERROR_INVALID_HANDLE` if the key is there already.
pub fn cls_put(ctx: *mut c_void, key: *mut c_void, value: *mut c_void, dtor: ClsDtor) -> Result<(), CuError> {
    let h = cls_context(ctx)?;
    with(|t| {
        let entries = t.cls.entry(h).or_default();
        if entries.iter().any(|e| e.0 == key as usize) {
            return Err(CuError::INVALID_HANDLE);
        }
        entries.push((key as usize, value as usize, dtor));
        Ok(())
    })
}

/// The value under `key`; `CUDA_ERROR_INVALID_HANDLE` if there is none.
pub fn cls_get(ctx: *mut c_void, key: *mut c_void) -> Result<*mut c_void, CuError> {
    let h = cls_context(ctx)?;
    with(|t| t.cls.get(&h).and_then(|e| e.iter().find(|e| e.0 == key as usize)).map(|e| e.1 as *mut c_void)).ok_or(CuError::INVALID_HANDLE)
}

/// Removes the value under `key` without running its destructor.
pub fn cls_delete(ctx: *mut c_void, key: *mut c_void) -> Result<(), CuError> {
    let h = cls_context(ctx)?;
    with(|t| {
        let entries = t.cls.get_mut(&h).ok_or(CuError::INVALID_HANDLE)?;
        let at = entries.iter().position(|e| e.0 == key as usize).ok_or(CuError::INVALID_HANDLE)?;
        entries.remove(at);
        Ok(())
    })
}
