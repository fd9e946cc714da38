//! A checked snapshot kept unchanged until its session takes it back, so
//! that the worker rebuilding the session need not hash it again (on one
//! thread, about a quarter of a second per GiB, within a migration's pause).
//!
//! The supervisor checks a snapshot's digest when it is restored, long
//! before the guest comes back for it. What it then hands the worker must
//! be what it checked:
//!
//! - an uploaded snapshot lives in a memory file of the supervisor's,
//!   **sealed** before its check: nobody can write, grow or shrink it;
//! - a snapshot restored from a path is held under a **read lease**, taken
//!   before its check. The kernel grants one only while no process has the
//!   file open for writing (a writable mapping included), and breaks it as
//!   soon as one opens it so, or truncates it.
//!
//! The worker reads without hashing only if the file is sealed, or the
//! lease is still held when it starts and when it has read everything;
//! otherwise it hashes as it reads, as before. A process that opens a
//! parked snapshot for writing waits for the lease to be broken
//! (`/proc/sys/fs/lease-break-time`, 45 s by default); the restore then
//! hashes the file, and fails if it changed. The lease's owner is cleared,
//! so its break sends this process no signal.
//!
//! A file kept so is also read where it lies: its device memory is mapped
//! from it (`session::chunks::write_mapped`). A restore longer than the
//! lease-break time, while a writer waits, could see the file cut under
//! that mapping once the writer goes on; the worker would then fault (a
//! worker process: its session ends, nothing else).

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use std::fs::File;
use std::os::fd::AsRawFd;

/// The seals that make a memory file unchangeable.
fn unchangeable() -> SealFlag {
    SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_SEAL
}

/// Seals a memory file made with `MFD_ALLOW_SEALING` for good.
pub fn seal(file: &File) -> std::io::Result<()> {
    fcntl(file, FcntlArg::F_ADD_SEALS(unchangeable())).map(drop).map_err(std::io::Error::from)
}

/// Takes a read lease on `file` (opened read-only): whether the kernel
/// granted it, that is, whether nothing had the file open for writing.
pub fn lease(file: &File) -> bool {
    let fd = file.as_raw_fd();
    // SAFETY: F_SETLEASE takes an integer and acts on `fd`, which `file`
    // keeps open for the call; no memory is passed.
    let leased = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) } == 0;
    if leased {
        // No owner: a break sends no SIGIO (whose default would end the
        // process); it shows in `F_GETLEASE` instead.
        // SAFETY: F_SETOWN takes an integer and acts on the open `fd`.
        unsafe { libc::fcntl(fd, libc::F_SETOWN, 0) };
    } else {
        tracing::debug!(error = %std::io::Error::last_os_error(), "no read lease on a snapshot; its restore will hash it again");
    }
    leased
}

/// Whether `file` is as the supervisor checked it: sealed for good, or
/// still under the read lease it took (none broken since, none breaking).
pub fn unchanged(file: &File) -> bool {
    let sealed = fcntl(file, FcntlArg::F_GET_SEALS).is_ok_and(|s| SealFlag::from_bits_truncate(s).contains(unchangeable()));
    // SAFETY: F_GETLEASE takes no argument and acts on the open `fd`.
    sealed || unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLEASE) } == libc::F_RDLCK
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    /// A file of its own for each test, in the temporary directory.
    fn scratch(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("pvgpu-guard-{}-{name}", std::process::id()));
        std::fs::write(&p, b"snapshot").unwrap();
        p
    }

    #[test]
    fn a_sealed_memory_file_is_unchanged_and_refuses_writes() {
        let fd = nix::sys::memfd::memfd_create("pvgpu-test", nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING).unwrap();
        let mut f = File::from(fd);
        f.write_all(b"snapshot").unwrap();
        assert!(!unchanged(&f), "not sealed yet");
        seal(&f).unwrap();
        assert!(unchanged(&f));
        assert!(f.write_all(b"more").is_err(), "sealed against writes");
        assert!(f.set_len(1).is_err(), "and against shrinking");
    }

    #[test]
    fn a_lease_holds_until_someone_opens_the_file_for_writing() {
        let path = scratch("lease");
        let f = File::open(&path).unwrap();
        let leased = lease(&f);
        // Leases may be off here (fs.leases-enable, or a file system
        // without them): the restore then hashes, as unchanged says.
        assert_eq!(unchanged(&f), leased);
        if leased {
            drop(File::open(&path).unwrap());
            assert!(unchanged(&f), "readers do not break it");
            // A writer that does not wait is told to, and starts the break.
            let w = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&path);
            assert!(w.is_err(), "a non-blocking writer is told to wait");
            assert!(!unchanged(&f), "a break under way");
        }
        drop(f);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn no_lease_while_something_writes() {
        let path = scratch("writer");
        let w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let f = File::open(&path).unwrap();
        assert!(!lease(&f), "an open writer");
        assert!(!unchanged(&f));
        drop(w);
        let _ = std::fs::remove_file(&path);
    }
}
