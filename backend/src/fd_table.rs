//! Room in the process's descriptor table, made once as the process
//! starts.
//!
//! The kernel grows a process's descriptor table (doubling it) when a new
//! descriptor does not fit, and a process of several threads then waits
//! for an RCU grace period first. A session handing its device memory
//! over in place creates a descriptor per piece in its worker, the
//! supervisors pass them on, and the restoring worker receives them, all
//! within the migration's pause: where the count passed 64 (a CUDA worker
//! holds some 50 of its own), the call waited 14-27 ms on the H200
//! (2026-11-29: the twelfth of 13 exports, and the twelfth of 13
//! descriptors received, whatever the piece's size; 0.02-0.06 ms each
//! once the room was made). Made at start, the room costs a few KiB of
//! kernel memory and no wait.

use std::os::fd::{AsFd, OwnedFd};

/// Descriptors the table holds without growing, unless the process may
/// open fewer (`RLIMIT_NOFILE`).
pub const ROOM: u64 = 4096;

/// Grows the descriptor table to hold [`ROOM`] descriptors (or as many as
/// the process may open), once as it starts: before its first thread it
/// waits for nothing (a worker), after them for one grace period, then and
/// not within a pause (a supervisor, [`crate::Backend`]). Where the kernel
/// refuses, the table grows as it is used, as before.
pub fn make_room() {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft);
    let Ok(highest) = i32::try_from(ROOM.min(soft).saturating_sub(1)) else { return };
    // A descriptor at the highest number makes the table hold it; closed
    // at once, the table stays that large.
    if let Ok(fd) = nix::fcntl::fcntl(std::io::stderr().as_fd(), nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(highest)) {
        // SAFETY: `fcntl` just opened this descriptor for us.
        drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_table_holds_the_room_made() {
        super::make_room();
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |(s, _)| s);
        let want = super::ROOM.min(soft) as usize;
        // The table's size, as the kernel reports it.
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let size: usize = status.lines().find_map(|l| l.strip_prefix("FDSize:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        assert!(size >= want, "FDSize {size}, wanted at least {want}");
    }
}
