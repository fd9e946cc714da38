//! Mirrored memory kept coherent while the program makes no call. Over a
//! transport that shares no memory (TCP), the connection makes the
//! program's page-locked memory and its mirror in the backend agree around
//! every call ([`crate::mirror`]); a program that waits for a kernel by
//! polling mapped memory, or answers a kernel that waits for a flag, makes
//! none. While work it posted may still run (until a context
//! synchronisation), a thread of the library looks every so often: it
//! sends what the program changed and pulls what the device changed.
//!
//! The cost: a round trip and a comparison of the mirrored memory on
//! each side per look, only while work is in flight and no call is under
//! way. Looks follow each other quickly while something changes (from
//! [`FIRST_LOOK`]) and further apart while nothing does, up to
//! [`LONGEST_PAUSE`], or longer for large mirrors, so that comparing stays
//! under about [`SCAN_RATE`] bytes a second.

use crate::rpc::Conn;
use std::sync::{Mutex, Weak};
use std::time::Duration;

/// Pause after a look that found a change.
pub const FIRST_LOOK: Duration = Duration::from_micros(100);
/// Longest pause between looks (small mirrors).
pub const LONGEST_PAUSE: Duration = Duration::from_millis(10);
/// Bytes compared per second, at most, while nothing changes.
pub const SCAN_RATE: u64 = 256 << 20;
/// Pause while no work is in flight, before looking whether some is (a
/// look at a flag, no round trip).
const IDLE_PAUSE: Duration = Duration::from_millis(2);

/// The pause after a look at `bytes` of mirrored memory that found no
/// change, after a pause of `last`.
fn next_pause(last: Duration, bytes: usize) -> Duration {
    let scan = Duration::from_secs_f64(bytes as f64 / SCAN_RATE as f64);
    (last * 2).min(LONGEST_PAUSE.max(scan))
}

/// Starts the thread for the connection `conn`; it ends with the
/// connection (when the client is dropped, or the connection dies).
pub(crate) fn start(conn: Weak<Mutex<Conn>>) {
    let spawned = std::thread::Builder::new().name("pvgpu-mirrors".into()).spawn(move || keep(conn));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the thread that keeps mapped memory coherent between calls");
    }
}

fn keep(conn: Weak<Mutex<Conn>>) {
    let mut pause = FIRST_LOOK;
    let mut idle = true;
    loop {
        std::thread::sleep(pause);
        let Some(conn) = conn.upgrade() else { return };
        // A call under way keeps the mirrors coherent itself.
        let Ok(mut c) = conn.try_lock() else { continue };
        if c.is_dead() {
            return;
        }
        if !c.in_flight {
            (pause, idle) = (IDLE_PAUSE, true);
            continue;
        }
        if idle {
            // Work was posted since the last look: look again soon.
            (pause, idle) = (FIRST_LOOK, false);
        }
        pause = match c.refresh_mirrors() {
            Ok(true) => FIRST_LOOK,
            Ok(false) => next_pause(pause, c.mirrors.page_locked_bytes()),
            // The connection reports its loss at the program's next call.
            Err(_) => return,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_to_a_bound_that_grows_with_the_mirrors() {
        let mut p = FIRST_LOOK;
        for _ in 0..20 {
            p = next_pause(p, 4096);
        }
        assert_eq!(p, LONGEST_PAUSE);
        let big = 1 << 30;
        let mut p = FIRST_LOOK;
        for _ in 0..40 {
            p = next_pause(p, big);
        }
        assert_eq!(p, Duration::from_secs(4), "1 GiB compared at 256 MiB/s");
    }
}
