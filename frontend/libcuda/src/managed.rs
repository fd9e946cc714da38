//! Managed memory (`cuMemAllocManaged`) in a guest, whose pages are not the
//! GPU's.
//!
//! A managed allocation is device memory of the backend, page-aligned, and
//! pages of this process at the same address, so one pointer serves the
//! program's CPU code and its kernels. The library keeps the two coherent
//! by page protection:
//!
//! - each page is *invalid* (no access: the device may hold newer bytes),
//!   *clean* (read-only: the bytes are the device's) or *dirty* (read-write:
//!   the CPU changed them);
//! - the CPU's first touch of an invalid page faults; the fault handler
//!   waits for the device work the program submitted since its work last
//!   finished (every context it holds synchronised), then fetches the page
//!   and the pages after it (up to [`FETCH_PAGES`], within the allocation)
//!   from the device, and makes them clean; a write to a clean page faults
//!   once more and makes it dirty;
//! - before any work is submitted to the device ([`before_device_work`],
//!   from the library's one gate for submitted work), dirty pages are
//!   copied to the device on that work's stream and every page becomes
//!   invalid again.
//!
//! `__managed__` variables (`cuLibraryGetManaged`, how NVIDIA's runtime
//! finds them) are kept the same way: the pages holding a variable are
//! mapped at its device address, and only the variables' own bytes are
//! fetched and copied back.
//!
//! So the device reports concurrent managed access
//! (`CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`, as the GPU answers
//! it): the CPU may touch managed memory while kernels run, and a touch
//! that needs the device's bytes waits for the work running then. While a
//! page is valid on the CPU no device work runs that was submitted before
//! it was fetched, so a dirty page holds every byte as the device would:
//! sending it whole loses none of the device's writes. What a kernel
//! cannot do is wait, while it runs, for the CPU to write managed memory
//! (the CPU's touch waits for that kernel): such a program hangs.
//!
//! Cost: one fault, a synchronisation of the program's contexts where it
//! submitted work since, and one round trip per fetched run of pages the
//! CPU touches after device work; one copy per run of dirty pages at the
//! next submission; nothing while no managed memory is valid on the CPU
//! (one atomic load per submission). Copies naming managed memory as host
//! memory are device-to-device copies.

use crate::state;
use pvgpu_frontend::Stream;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock, RwLock};

/// The CPU's page size (4 KiB on every target pvgpu builds for).
pub const PAGE: usize = 4096;
/// Most pages one fault fetches.
const FETCH_PAGES: usize = 64;

const INVALID: u8 = 0;
const CLEAN: u8 = 1;
const DIRTY: u8 = 2;

/// One managed allocation, or the pages of `__managed__` variables.
pub struct Range {
    /// The backend allocation it lies in (what is freed), 0 for variables
    /// (the module's).
    pub base: u64,
    /// Its first byte, page-aligned: the device address and the CPU's.
    pub ptr: u64,
    /// Bytes the program asked for (an allocation's), or the pages' bytes.
    pub len: usize,
    /// The device bytes the pages stand for, `[start, end)` in address
    /// order: the allocation, or each variable. Only they are fetched and
    /// copied back (the rest of a variable's page is not the session's).
    extents: RwLock<Vec<(u64, u64)>>,
    /// Per page: invalid, clean or dirty.
    pages: Vec<AtomicU8>,
    /// Held while pages change state and protection (a fetch, a page
    /// made dirty, a flush): threads of the program touch managed memory
    /// while another submits work, and each must see the others' changes
    /// whole.
    turn: Mutex<()>,
}

impl Range {
    fn mapped_len(&self) -> usize {
        self.pages.len() * PAGE
    }

    fn turn(&self) -> MutexGuard<'_, ()> {
        self.turn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

static RANGES: RwLock<BTreeMap<u64, Arc<Range>>> = RwLock::new(BTreeMap::new());
/// Pages not invalid, over all ranges (0: nothing to do at submission).
static VALID: AtomicUsize = AtomicUsize::new(0);
/// Device work was submitted since the program's work last finished (as
/// far as a fetch knows): the next fetch waits for it first.
static IN_FLIGHT: AtomicBool = AtomicBool::new(false);
/// Held by the thread that waits for that work.
static WAITING: Mutex<()> = Mutex::new(());
static HANDLER: Once = Once::new();

thread_local! {
    /// The library's threads that run the program's host functions: the
    /// work they run in is held until they return, so a fetch there does
    /// not wait for it.
    static HOST_FN: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one that runs host functions.
pub fn on_host_fn_thread() {
    HOST_FN.with(|h| h.set(true));
}
/// The SIGSEGV action before ours, for faults that are not ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

fn ranges() -> std::sync::RwLockReadGuard<'static, BTreeMap<u64, Arc<Range>>> {
    RANGES.read().unwrap_or_else(|p| p.into_inner())
}

/// The range holding `addr`.
fn find(addr: u64) -> Option<Arc<Range>> {
    ranges().range(..=addr).next_back().filter(|(_, r)| addr < r.ptr + r.mapped_len() as u64).map(|(_, r)| r.clone())
}

/// Whether `[ptr, ptr+len)` lies in managed memory (one allocation or
/// variable).
pub fn contains(ptr: u64, len: usize) -> bool {
    let end = ptr + len.max(1) as u64;
    find(ptr).is_some_and(|r| r.extents.read().unwrap_or_else(|p| p.into_inner()).iter().any(|&(a, b)| a <= ptr && end <= b))
}

fn protect(addr: u64, len: usize, prot: i32) -> bool {
    // SAFETY: `[addr, addr+len)` is pages of a managed range, mapped by
    // `map` for as long as the range is registered.
    unsafe { libc::mprotect(addr as usize as *mut c_void, len, prot) == 0 }
}

/// Maps `len` bytes (whole pages) at `ptr` for the CPU, inaccessible, and
/// registers them as managed allocation `base`. False when the address is
/// taken in this process.
pub fn map(base: u64, ptr: u64, len: usize) -> bool {
    install_handler();
    let pages = len.div_ceil(PAGE).max(1);
    // SAFETY: a fresh anonymous mapping at a fixed address that must not
    // replace anything (`MAP_FIXED_NOREPLACE`); checked below.
    let got = unsafe {
        libc::mmap(
            ptr as usize as *mut c_void,
            pages * PAGE,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if got == libc::MAP_FAILED {
        return false;
    }
    if got as usize as u64 != ptr {
        // An old kernel that ignores the flag placed it elsewhere.
        // SAFETY: the mapping just made.
        unsafe { libc::munmap(got, pages * PAGE) };
        return false;
    }
    let extents = RwLock::new(vec![(ptr, ptr + len as u64)]);
    let r = Range { base, ptr, len, extents, pages: (0..pages).map(|_| AtomicU8::new(INVALID)).collect(), turn: Mutex::new(()) };
    RANGES.write().unwrap_or_else(|p| p.into_inner()).insert(ptr, Arc::new(r));
    true
}

/// Makes `__managed__` variable `[ptr, ptr+size)` (device memory of a
/// module, as `cuLibraryGetManaged` gives it) managed memory of this
/// process: its pages are mapped where no range has them yet, and the
/// variable's bytes join the extents of the ranges holding its pages.
/// False when a page is taken by something else in this process.
pub fn map_variable(ptr: u64, size: usize) -> bool {
    install_handler();
    let end = ptr + size.max(1) as u64;
    let mut page = ptr & !(PAGE as u64 - 1);
    while page < end {
        let next = page + PAGE as u64;
        let (lo, hi) = (ptr.max(page), end.min(next));
        let held = find(page);
        let r = match held {
            Some(r) => r,
            None => {
                if !map(0, page, PAGE) {
                    return false;
                }
                let Some(r) = find(page) else { return false };
                // A fresh page stands for nothing until a variable joins.
                r.extents.write().unwrap_or_else(|p| p.into_inner()).clear();
                r
            }
        };
        let mut ex = r.extents.write().unwrap_or_else(|p| p.into_inner());
        if !ex.iter().any(|&(a, b)| a <= lo && hi <= b) {
            ex.push((lo, hi));
            ex.sort_unstable();
        }
        page = next;
    }
    true
}

/// The parts of `[at, at+len)` the range's extents cover.
fn covered(r: &Range, at: u64, len: usize) -> Vec<(u64, usize)> {
    let end = at + len as u64;
    let ex = r.extents.read().unwrap_or_else(|p| p.into_inner());
    ex.iter().map(|&(a, b)| (a.max(at), b.min(end))).filter(|&(lo, hi)| lo < hi).map(|(lo, hi)| (lo, (hi - lo) as usize)).collect()
}

/// Forgets managed allocation `ptr` and unmaps its pages: its backend
/// allocation (returned) is the caller's to free.
pub fn unmap(ptr: u64) -> Option<u64> {
    let r = RANGES.write().unwrap_or_else(|p| p.into_inner()).remove(&ptr)?;
    let valid = r.pages.iter().filter(|p| p.load(Ordering::Relaxed) != INVALID).count();
    VALID.fetch_sub(valid, Ordering::Relaxed);
    // SAFETY: the range's own mapping, no longer registered.
    unsafe { libc::munmap(ptr as usize as *mut c_void, r.mapped_len()) };
    Some(r.base)
}

/// Before work is submitted to the device on `stream`: the CPU's changes
/// go to the device (ordered before the work), and every page becomes
/// invalid, so the CPU fetches what the work wrote.
pub fn before_device_work(stream: Stream) {
    // Release: pairs with the swap in `wait_for_device_work`; a fetch that
    // follows this submission waits for it.
    IN_FLIGHT.store(true, Ordering::Release);
    // Relaxed: a hint; the pages' own states are read under the lock.
    if VALID.load(Ordering::Relaxed) == 0 {
        return;
    }
    let all: Vec<Arc<Range>> = ranges().values().cloned().collect();
    for r in all {
        flush(&r, stream);
    }
}

/// Sends the dirty runs of `r` and invalidates its pages. Each run is made
/// read-only before it is read: a thread writing it meanwhile waits for
/// the flush and then fetches the page again, after the work it preceded.
fn flush(r: &Range, stream: Stream) {
    let _turn = r.turn();
    let n = r.pages.len();
    let mut i = 0;
    while i < n {
        if r.pages[i].load(Ordering::Acquire) != DIRTY {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && r.pages[i].load(Ordering::Acquire) == DIRTY {
            i += 1;
        }
        let run = r.ptr + (start * PAGE) as u64;
        protect(run, (i - start) * PAGE, libc::PROT_READ);
        for (at, len) in covered(r, run, (i - start) * PAGE) {
            // SAFETY: dirty pages are readable and writable, mapped while
            // the range is registered.
            let bytes = unsafe { std::slice::from_raw_parts(at as usize as *const u8, len) };
            if let Ok(c) = state::client() {
                if let Err(e) = c.memcpy_htod_async(at, bytes, stream) {
                    tracing::warn!(error = %e, "managed memory: the CPU's changes did not reach the device");
                }
            }
        }
    }
    let valid = r.pages.iter().filter(|p| p.swap(INVALID, Ordering::AcqRel) != INVALID).count();
    VALID.fetch_sub(valid, Ordering::Relaxed);
    protect(r.ptr, r.mapped_len(), libc::PROT_NONE);
}

/// Resolves a CPU fault at `addr` of range `r`: an invalid page is fetched
/// (with the invalid pages after it), a clean one becomes dirty. False if
/// the fault is not one the range explains (an access the program may not
/// make).
fn resolve(r: &Range, addr: u64) -> bool {
    let page = ((addr - r.ptr) as usize) / PAGE;
    if r.pages[page].load(Ordering::Acquire) == INVALID {
        // Outside the range's turn: the work waited for may itself wait for
        // a host function that touches this range. Work another thread
        // submits between this wait and the turn runs while this thread
        // touches the page, as natively: a race of the program's own.
        wait_for_device_work();
    }
    let _turn = r.turn();
    // Another thread may have changed the page meanwhile: its state now.
    match r.pages[page].load(Ordering::Acquire) {
        INVALID => fetch(r, page),
        CLEAN => {
            let at = r.ptr + (page * PAGE) as u64;
            if !protect(at, PAGE, libc::PROT_READ | libc::PROT_WRITE) {
                return false;
            }
            r.pages[page].store(DIRTY, Ordering::Release);
            true
        }
        // Another thread made it dirty meanwhile: the access goes through
        // (or faults once more, if it is being flushed now).
        _ => true,
    }
}

/// Waits until the device work the program submitted has finished, where
/// it submitted any since the last wait: every context it holds is
/// synchronised. A failure (the work failed) is the program's to see at
/// its own next synchronisation; the fetch goes on.
fn wait_for_device_work() {
    if HOST_FN.with(Cell::get) {
        return;
    }
    // One thread waits at a time; one that faults meanwhile waits for it to
    // be done, rather than fetch while the work still runs.
    let _one = WAITING.lock().unwrap_or_else(|p| p.into_inner());
    // AcqRel: pairs with the store in `before_device_work`.
    if !IN_FLIGHT.swap(false, Ordering::AcqRel) {
        return;
    }
    for h in state::ctx::live() {
        let (Ok(c), Ok(ctx)) = (state::client_of_ctx(h), state::ctx::backend(h)) else { continue };
        if let Err(e) = c.ctx_synchronize(ctx) {
            tracing::debug!(error = %e, "managed memory: device work failed before a fetch");
        }
    }
}

/// Fetches invalid page `first` and the invalid pages after it; the caller
/// holds the range's turn.
fn fetch(r: &Range, first: usize) -> bool {
    let mut end = first + 1;
    while end < r.pages.len() && end - first < FETCH_PAGES && r.pages[end].load(Ordering::Acquire) == INVALID {
        end += 1;
    }
    let at = r.ptr + (first * PAGE) as u64;
    let mapped = (end - first) * PAGE;
    if !protect(at, mapped, libc::PROT_READ | libc::PROT_WRITE) {
        return false;
    }
    for (from, len) in covered(r, at, mapped) {
        // SAFETY: the pages were just made writable; nothing else holds
        // them (the program is stopped in its fault).
        let dst = unsafe { std::slice::from_raw_parts_mut(from as usize as *mut u8, len) };
        let Ok(c) = state::client() else { return false };
        if let Err(e) = c.memcpy_dtoh(dst, from) {
            tracing::error!(error = %e, "managed memory: fetching pages from the device failed");
            return false;
        }
    }
    for p in &r.pages[first..end] {
        p.store(CLEAN, Ordering::Release);
    }
    VALID.fetch_add(end - first, Ordering::Relaxed);
    protect(at, mapped, libc::PROT_READ)
}

fn install_handler() {
    HANDLER.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid empty one; the handler has
        // the SA_SIGINFO signature; the previous action is stored once,
        // before any fault can reach our handler.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fault as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
            libc::sigemptyset(&mut sa.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            // The previous action first: a fault may come as soon as ours
            // is in place.
            if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old) == 0 {
                let _ = PREVIOUS.set(old);
                libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
            }
        }
    });
}

/// The SIGSEGV handler: resolves faults in managed memory, hands the rest
/// to the handler before it (or the default action, which ends the
/// program as it would have).
extern "C" fn on_fault(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize as u64;
    if let Some(r) = find(addr) {
        if resolve(&r, addr) {
            return;
        }
    }
    // SAFETY: the previous action is called as it was registered, or the
    // default restored so the returning access faults fatally.
    unsafe {
        match PREVIOUS.get() {
            Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
                if old.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) = std::mem::transmute(old.sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(i32) = std::mem::transmute(old.sa_sigaction);
                    f(sig);
                }
            }
            _ => {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
            }
        }
    }
}
