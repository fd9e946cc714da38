//! Tracing the slots of the driver's private tables, patched in place.

use crate::stubs::{SLOT_STUBS, SLOTS, SYMBOLS, TABLES};
use crate::trampoline::TARGET;
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

/// The context-local storage table: no size header, three slots.
const CLS: [u8; 16] = [0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93];
/// The integrity check: slot 1's address is hashed by NVIDIA's runtime, so
/// that slot is left alone.
const INTEGRITY: [u8; 16] = [0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2];

/// Tables seen, by UUID, in the order they were first returned.
static SEEN: Mutex<Vec<[u8; 16]>> = Mutex::new(Vec::new());

/// Points the slots of `table` (returned for `id`) at slot trampolines.
///
/// # Safety
/// `table` must be a table the forwarded driver returned for `id`.
pub unsafe fn patch(id: [u8; 16], table: *mut usize) {
    let t = {
        let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        match seen.iter().position(|u| *u == id) {
            Some(t) => t,
            None if seen.len() < TABLES => {
                seen.push(id);
                let name: String = id[..4].iter().map(|b| format!("{b:02x}")).collect();
                crate::report::TABLE_NAMES.lock().unwrap_or_else(|p| p.into_inner()).push(name);
                seen.len() - 1
            }
            None => return,
        }
    };
    let slots: std::ops::Range<usize> = if id == CLS {
        0..3
    } else {
        // SAFETY: slot 0 of every other table is its size in bytes.
        let size = unsafe { table.read() };
        1..(size / 8).min(SLOTS)
    };
    for s in slots {
        if id == INTEGRITY && s == 1 {
            continue;
        }
        // SAFETY: `s` is inside the table (its size says so).
        let slot = unsafe { table.add(s) };
        // SAFETY: as above.
        let f = unsafe { slot.read() };
        let stub = SLOT_STUBS[t][s] as usize;
        if f == 0 || f == stub {
            continue;
        }
        TARGET[SYMBOLS + t * SLOTS + s].store(f, Ordering::Release);
        // SAFETY: the slot lies in the driver's table; its page is made
        // writable first (tables live in the driver's data).
        unsafe {
            writable(slot.cast());
            slot.write(stub);
        }
    }
}

/// Makes the page holding `p` writable (and keeps it readable and
/// executable as it may be).
///
/// # Safety
/// `p` must point into a mapping of this process.
unsafe fn writable(p: *mut c_void) {
    let page = 4096usize;
    let start = (p as usize) & !(page - 1);
    // SAFETY: a page of a mapping, per the caller.
    unsafe { libc::mprotect(start as *mut c_void, page * 2, libc::PROT_READ | libc::PROT_WRITE) };
}
