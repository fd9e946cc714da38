//! Registered host memory (`cuMemHostRegister`). Copies from and to it are
//! staged, which CUDA's semantics allow. Where the device must reach it
//! through the program's pointer (its device pointer is asked for, it was
//! registered `DEVICEMAP`, or a kernel is given a pointer into it), its
//! pages are mirrored in the backend at the same address and kept
//! coherent as mirrored page-locked memory is
//! ([`pvgpu_frontend::Client::mirror_host`]), as NPP does with the images
//! it registers. The mirror covers whole pages; a range sharing a page
//! with another mirrored range is not mirrored (its device pointer is
//! refused), nor is one registered read-only.

use crate::state::objects::Registered;
use crate::state::{self, Res, objects};
use pvgpu_ring::CuError;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Page size of the mirrors.
const PAGE: usize = 4096;
/// `CU_MEMHOSTREGISTER_DEVICEMAP`.
const DEVICEMAP: u32 = 0x02;
/// `CU_MEMHOSTREGISTER_READ_ONLY`.
const READ_ONLY: u32 = 0x08;
/// Registered ranges live now (when none, kernel parameters need no look
/// for pointers into them).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// `cuMemHostRegister`.
pub(super) fn register(p: *mut c_void, size: usize, flags: c_uint) -> Res {
    state::client()?;
    if p.is_null() || size == 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let start = p as usize;
    start.checked_add(size).ok_or(CuError::INVALID_VALUE)?;
    {
        let mut o = objects();
        if o.registered.range(..start.saturating_add(size)).next_back().is_some_and(|(&s, r)| s + r.len > start) {
            return Err(CuError::HOST_MEMORY_ALREADY_REGISTERED);
        }
        o.registered.insert(start, Registered { len: size, flags, mirrored: None });
    }
    // Relaxed: a count read only to skip work.
    LIVE.fetch_add(1, Ordering::Relaxed);
    if flags & DEVICEMAP != 0
        && let Err(e) = mirror(start)
    {
        tracing::debug!(ptr = start, status = ?e, "DEVICEMAP registered memory not mirrored");
    }
    Ok(())
}

/// `cuMemHostUnregister`: its mirror goes with it.
pub(super) fn unregister(p: *mut c_void) -> Res {
    let r = objects().registered.remove(&(p as usize)).ok_or(CuError::HOST_MEMORY_NOT_REGISTERED)?;
    // Relaxed: as in `register`.
    LIVE.fetch_sub(1, Ordering::Relaxed);
    if let Some(page) = r.mirrored {
        state::client()?.unmirror_host(page as *mut u8).map_err(state::cu)?;
    }
    Ok(())
}

/// The registered range holding `p`: its start and what it is.
fn range_of(p: usize) -> Option<(usize, Registered)> {
    let o = objects();
    o.registered.range(..=p).next_back().filter(|(s, r)| p < *s + r.len).map(|(&s, &r)| (s, r))
}

/// The device address of registered memory at `p`: `p` itself, once the
/// range is mirrored.
pub(super) fn device_pointer(p: usize) -> Result<u64, CuError> {
    let (start, _) = range_of(p).ok_or(CuError::INVALID_VALUE)?;
    mirror(start)?;
    Ok(p as u64)
}

/// Mirrors registered range `start` for the device, once.
fn mirror(start: usize) -> Res {
    let (first, end) = {
        let o = objects();
        let r = o.registered.get(&start).ok_or(CuError::INVALID_VALUE)?;
        if r.mirrored.is_some() {
            return Ok(());
        }
        if r.flags & READ_ONLY != 0 {
            return Err(CuError::NOT_SUPPORTED);
        }
        let (first, end) = (start / PAGE * PAGE, (start + r.len).next_multiple_of(PAGE));
        // Two mirrors may not share a page.
        let shared = o
            .registered
            .iter()
            .filter_map(|(&s, x)| x.mirrored.map(|m| (m, (s + x.len).next_multiple_of(PAGE))))
            .any(|(m, other_end)| m < end && first < other_end);
        if shared {
            return Err(CuError::NOT_SUPPORTED);
        }
        (first, end)
    };
    // SAFETY: the program's registered pages, which CUDA requires to stay
    // mapped until cuMemHostUnregister, which unmirrors them first.
    unsafe { state::client()?.mirror_host(first as *mut u8, end - first) }.map_err(state::cu)?;
    if let Some(r) = objects().registered.get_mut(&start) {
        r.mirrored = Some(first);
    }
    Ok(())
}

/// Mirrors the registered ranges a kernel's packed parameters point into.
/// A failure leaves the range as it was.
pub(super) fn mirror_pointers(packed: &[u8]) {
    // Relaxed: see LIVE.
    if LIVE.load(Ordering::Relaxed) == 0 {
        return;
    }
    let wanted: Vec<usize> = packed
        .chunks_exact(8)
        .filter_map(|w| range_of(u64::from_le_bytes(w.try_into().unwrap_or_default()) as usize))
        .filter(|(_, r)| r.mirrored.is_none())
        .map(|(start, _)| start)
        .collect();
    for start in wanted {
        if let Err(e) = mirror(start) {
            tracing::debug!(ptr = start, status = ?e, "registered memory a kernel points into not mirrored");
        }
    }
}
