//! GPU time shared by weight (`--gpu-share weighted`): sessions on one GPU
//! take turns, and each tenant's sessions together get GPU time in
//! proportion to the tenant's share (`pvgpu-ctl tenant set NAME --share
//! N`; a session outside every tenant has share 1).
//!
//! Left alone (`--gpu-share driver`, the default), the driver time-slices
//! between the sessions' worker processes as between any processes: each
//! busy session gets about the same GPU time, whoever it belongs to.
//!
//! # The model
//!
//! - A session may touch a GPU (any command that enters one of its
//!   contexts there) only while it holds that GPU's **turn**. A GPU with
//!   one busy session leaves the turn with it: no waiting, no draining.
//! - The supervisor's [`Arbiter`] grants each GPU's turn to the waiting
//!   session whose tenant has had the least GPU time for its share
//!   (time held divided by share: weighted fair queueing on virtual time).
//!   Only time held while others waited is charged: a session alone on a
//!   GPU spends nobody's time. A tenant that comes back after a pause
//!   starts level with the others, not with credit saved while away.
//! - A turn lasts at least `--gpu-slice-ms` (20 ms) while others wait,
//!   and until the holder's tenant has had its share (its virtual time
//!   has reached a waiting tenant's). Then the holder is asked to yield: at its next command it waits for the work it
//!   queued on that GPU to finish (its contexts there are synchronised),
//!   and gives the turn back. The wait is charged to it, not to the next
//!   holder.
//! - A holder that has just waited for all it queued on the GPU (a
//!   context or stream synchronisation) while others wait, and whose
//!   tenant has had its share, gives the turn back at once, whatever is
//!   left of its slice: the GPU has nothing of its own to run, so the
//!   next holder starts on an idle GPU and nobody waits for a drain. A
//!   training loop that synchronises once a step then holds the turn for
//!   its step's GPU work, not for the time its program spends launching
//!   the next step on the CPU, which then overlaps the other sessions'
//!   turns.
//! - A holder that sends no command for a quarter of a slice while others
//!   wait (its program sleeps, or computes on its CPU) loses its turn at
//!   once, without the drain; work it left queued then overlaps the next
//!   holder's turn, and the driver time-slices the two for that overlap.
//! - A holder that does not give the turn back within [`DRAIN_MAX`] of
//!   being asked (a kernel that runs for seconds, a drain waiting on
//!   something else) loses it anyway: one session cannot stop the others.
//!   Its kernels then share the GPU as the driver schedules them.
//!
//! # The turn word
//!
//! Each session's meter page ([`crate::meter`]) holds three words the
//! supervisor and the session share: `TURN` (the turn it holds), `WANT`
//! (the GPU it waits for) and `ENTERED` (commands that entered and left a
//! context, counted: the holder's activity). `TURN` is 0 when it holds no
//! turn, else `epoch << 9 | OTHERS_DUE | YIELD | BUSY | device + 1`, and
//! changes only by compare-and-swap:
//!
//! | who | from | to |
//! |---|---|---|
//! | supervisor: grant | 0 | `epoch, device` |
//! | supervisor: ask to yield | `epoch, ..` | same, `YIELD` |
//! | supervisor: others are due, or no longer | `epoch, ..` | same, `OTHERS_DUE` set or clear |
//! | supervisor: take back an idle turn | `epoch, ..` without `BUSY` | 0 |
//! | session: enter a command | `epoch, device` | same, `BUSY` |
//! | session: leave it | `.., BUSY` | without `BUSY` |
//! | session: give back after draining | `.., BUSY` | 0 |
//! | session: give back after a synchronisation | `.., OTHERS_DUE, BUSY` | 0 |
//!
//! Because the supervisor takes back only a turn without `BUSY`, a session
//! that has entered its command keeps the turn until it leaves it (or
//! [`DRAIN_MAX`] passes). A waiting session sleeps on the word's low half
//! (a futex, shared between processes) and the supervisor wakes it when it
//! grants.

mod arbiter;

pub use arbiter::{Arbiter, Group, Seen, TICK, TICK_CONTENDED, run};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Longest a turn's holder keeps it once asked to yield.
pub const DRAIN_MAX: Duration = Duration::from_secs(1);
/// Longest a waiting session sleeps before it looks at its turn again (a
/// lost wake-up costs at most this).
const WAIT_SLICE: Duration = Duration::from_millis(5);

const DEVICE_MASK: u64 = 0x3f;
const BUSY: u64 = 1 << 6;
const YIELD: u64 = 1 << 7;
const OTHERS_DUE: u64 = 1 << 8;
const EPOCH_SHIFT: u32 = 9;

/// How GPU time is shared between sessions (`--gpu-share`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum GpuShare {
    /// The driver time-slices between sessions as between processes.
    #[default]
    Driver,
    /// Sessions take turns; tenants get time by their shares.
    Weighted,
}

/// Most devices a turn word names (device + 1 must fit [`DEVICE_MASK`]).
pub const MAX_DEVICES: usize = DEVICE_MASK as usize - 1;

/// One session's turn words, as the session or the supervisor sees them.
#[derive(Clone, Copy)]
pub struct Turn<'a> {
    turn: &'a AtomicU64,
    want: &'a AtomicU64,
    entered: &'a AtomicU64,
    /// Contended time held so far, in ns; the supervisor's alone.
    held_ns: Option<&'a AtomicU64>,
}

/// What a turn word says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The device.
    pub device: usize,
    /// Which grant.
    pub epoch: u64,
    /// The session is inside a command.
    pub busy: bool,
    /// It has been asked to yield.
    pub yielding: bool,
    /// Others wait for the device and the holder's tenant has had its
    /// share: it gives the turn back at its next synchronisation.
    pub others_due: bool,
}

fn decode(v: u64) -> Option<Held> {
    let d = v & DEVICE_MASK;
    (d != 0).then(|| Held {
        device: (d - 1) as usize,
        epoch: v >> EPOCH_SHIFT,
        busy: v & BUSY != 0,
        yielding: v & YIELD != 0,
        others_due: v & OTHERS_DUE != 0,
    })
}

impl<'a> Turn<'a> {
    /// The words at `turn`, `want` and `entered`.
    pub fn new(turn: &'a AtomicU64, want: &'a AtomicU64, entered: &'a AtomicU64) -> Self {
        Turn { turn, want, entered, held_ns: None }
    }

    /// Keeps the contended time held at `held_ns`.
    pub fn with_held(mut self, held_ns: &'a AtomicU64) -> Self {
        self.held_ns = Some(held_ns);
        self
    }

    /// The session's turn now, for an operator: `holds GPU N`, `waits for
    /// GPU N`, or nothing.
    pub fn describe(&self) -> Option<String> {
        match (self.held(), self.wants()) {
            (Some(h), _) => Some(format!("holds GPU {}", h.device)),
            (None, Some(d)) => Some(format!("waits for GPU {d}")),
            (None, None) => None,
        }
    }

    /// Contended GPU time held so far, if the session ever took a turn.
    pub fn held_for(&self) -> Option<Duration> {
        let ns = self.held_ns?.load(Ordering::Relaxed);
        (ns > 0 || self.entered() > 0).then(|| Duration::from_nanos(ns))
    }

    /// Adds `d` to the contended time held (the supervisor, once a tick).
    pub fn add_held(&self, d: Duration) {
        if let Some(w) = self.held_ns {
            // Single writer (the arbiter's thread): a load and a store.
            w.store(w.load(Ordering::Relaxed).saturating_add(d.as_nanos() as u64), Ordering::Relaxed);
        }
    }

    // ---- the session's side ----

    /// Before a command touches `device`: waits for the turn there (giving
    /// back one held on another device, drained by `drain`), and marks it
    /// busy. `drain(d)` waits for the work the session queued on device
    /// `d`. Gives up when `stop` is set (the session is ending).
    pub fn enter(&self, device: usize, stop: &dyn Fn() -> bool, drain: &mut dyn FnMut(usize)) {
        // Single writer (this session): a load and a store.
        self.entered.store(self.entered.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        loop {
            // SYNC POINT: Acquire pairs with the supervisor's Release in
            // grant, ask_yield and take_back.
            let v = self.turn.load(Ordering::Acquire);
            match decode(v) {
                Some(h) if h.device == device && !h.yielding => {
                    // SYNC POINT: AcqRel; a take-back racing with this
                    // fails one of the two CASes, never both.
                    if self.turn.compare_exchange(v, v | BUSY, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                        return;
                    }
                    continue;
                }
                Some(h) => {
                    // Asked to yield, or a turn on another device: drain
                    // that device, then give the turn back. BUSY first, so
                    // the supervisor does not take it back mid-drain and
                    // grant it to someone whose work would overlap.
                    if self.turn.compare_exchange(v, v | BUSY, Ordering::AcqRel, Ordering::Acquire).is_err() {
                        continue;
                    }
                    drain(h.device);
                    // Waiting again from the moment it gives back, so the
                    // arbiter weighs it against the others on its next
                    // tick rather than granting the others by default.
                    self.want.store(device as u64 + 1, Ordering::Release);
                    // SYNC POINT: Release pairs with the supervisor's
                    // Acquire load that sees the turn given back (and
                    // charges it). A CAS: the supervisor may have taken it
                    // back after DRAIN_MAX and granted a new one meanwhile.
                    let _ = self.turn.compare_exchange(v | BUSY, 0, Ordering::AcqRel, Ordering::Acquire);
                }
                None => {}
            }
            if stop() {
                self.want.store(0, Ordering::Release);
                return;
            }
            self.want.store(device as u64 + 1, Ordering::Release);
            // Sleep while the word says "no turn" (0 in its low half).
            if self.turn.load(Ordering::Acquire) == 0 {
                futex_wait(self.turn, WAIT_SLICE);
            }
            if decode(self.turn.load(Ordering::Acquire)).is_some_and(|h| h.device == device) {
                self.want.store(0, Ordering::Release);
            }
        }
    }

    /// After the command that entered: the turn is no longer busy.
    pub fn leave(&self) {
        // Counted as activity too: a holder that just came out of a long
        // command (a synchronisation) is not idle.
        self.entered.store(self.entered.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        // SYNC POINT: Release pairs with the supervisor's Acquire in
        // take_back (which may then take it).
        self.turn.fetch_and(!BUSY, Ordering::Release);
    }

    /// After a command that waited for all the session had queued on the
    /// turn's device (a synchronisation): if others are due that device,
    /// gives the turn back (after `drain(device)`, for the session's other
    /// contexts there) instead of keeping it to the end of the slice;
    /// otherwise as [`Turn::leave`]. Whether it gave the turn back.
    pub fn leave_synced(&self, drain: &mut dyn FnMut(usize)) -> bool {
        // SYNC POINT: Acquire pairs with the supervisor's Release in
        // set_others_due.
        let v = self.turn.load(Ordering::Acquire);
        let Some(h) = decode(v).filter(|h| h.others_due && h.busy) else {
            self.leave();
            return false;
        };
        drain(h.device);
        self.entered.store(self.entered.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        // SYNC POINT: Release pairs with the supervisor's Acquire load
        // that sees the turn given back. A CAS from whatever the word
        // holds for this grant: the supervisor may have cleared
        // OTHERS_DUE or set YIELD meanwhile (giving back is right either
        // way), or taken the turn back by force.
        let r = self.turn.fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| {
            decode(x).filter(|g| g.epoch == h.epoch && g.device == h.device).map(|_| 0)
        });
        if r.is_err() {
            self.turn.fetch_and(!BUSY, Ordering::Release);
        }
        true
    }

    /// The turn this session holds, if any.
    pub fn held(&self) -> Option<Held> {
        decode(self.turn.load(Ordering::Acquire))
    }

    // ---- the supervisor's side ----

    /// The device this session waits for.
    pub fn wants(&self) -> Option<usize> {
        let w = self.want.load(Ordering::Acquire);
        (w != 0 && self.turn.load(Ordering::Acquire) == 0).then(|| (w - 1) as usize)
    }

    /// Entries into and exits from commands so far (the session's
    /// activity).
    pub fn entered(&self) -> u64 {
        self.entered.load(Ordering::Relaxed)
    }

    /// Grants the turn on `device` as grant `epoch`, if the session holds
    /// none; wakes it.
    pub fn grant(&self, device: usize, epoch: u64) -> bool {
        let v = (epoch << EPOCH_SHIFT) | (device as u64 + 1);
        let ok = self.turn.compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if ok {
            self.want.store(0, Ordering::Release);
            futex_wake(self.turn);
        }
        ok
    }

    /// Tells the holder of grant `epoch` whether others are due the
    /// device: they wait, and its tenant has had its share.
    pub fn set_others_due(&self, epoch: u64, due: bool) {
        // SYNC POINT: Release pairs with the session's Acquire load in
        // leave_synced; a failed CAS of the session's enter retries.
        let _ = self.turn.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            decode(v).filter(|h| h.epoch == epoch && h.others_due != due).map(|_| v ^ OTHERS_DUE)
        });
    }

    /// Asks the holder of grant `epoch` to yield.
    pub fn ask_yield(&self, epoch: u64) {
        let _ = self.turn.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            decode(v).filter(|h| h.epoch == epoch && !h.yielding).map(|_| v | YIELD)
        });
    }

    /// Takes grant `epoch` back if the session is not inside a command
    /// (`force`: even if it is); whether it is gone now.
    pub fn take_back(&self, epoch: u64, force: bool) -> bool {
        let r = self.turn.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| match decode(v) {
            Some(h) if h.epoch == epoch && (force || !h.busy) => Some(0),
            _ => None,
        });
        match r {
            Ok(_) => true,
            Err(v) => decode(v).is_none_or(|h| h.epoch != epoch),
        }
    }
}

/// Sleeps while the low half of `word` is 0, at most `most`.
fn futex_wait(word: &AtomicU64, most: Duration) {
    let ts = libc::timespec { tv_sec: most.as_secs() as libc::time_t, tv_nsec: most.subsec_nanos() as libc::c_long };
    futex(word, libc::FUTEX_WAIT, 0, &ts);
}

/// Wakes whoever sleeps on `word`.
fn futex_wake(word: &AtomicU64) {
    futex(word, libc::FUTEX_WAKE, u32::MAX >> 1, std::ptr::null());
}

/// `futex(2)` on the low half of `word`: shared between processes (not
/// `FUTEX_PRIVATE`), as the page is; its result only hints.
fn futex(word: &AtomicU64, op: libc::c_int, val: u32, timeout: *const libc::timespec) {
    let addr = word.as_ptr() as *const u32;
    // SAFETY: `addr` is the live, aligned low half of `word` (little-endian,
    // asserted below), which the kernel only reads; `timeout` is null or
    // points at the caller's timespec, alive for this call.
    unsafe { libc::syscall(libc::SYS_futex, addr, op, val, timeout) };
}

const _: () = assert!(cfg!(target_endian = "little"), "the turn futex is the word's low half");

#[cfg(test)]
mod tests;
