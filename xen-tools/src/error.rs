//! The crate's one error type.
//!
//! Messages say what happened and, where there is one, what to do about it.
//! System errors are kept as fields (an [`Errno`] or an [`std::io::Error`])
//! and printed in the message, so one line tells the whole story.

use nix::errno::Errno;
use std::time::Duration;

/// Everything that can go wrong in the `/dev/xen` layer and XenStore.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XenError {
    /// A device node or socket does not exist.
    #[error("{path} not found: {hint}")]
    DeviceMissing {
        /// The path tried.
        path: String,
        /// What to do.
        hint: &'static str,
    },
    /// A device node exists but could not be opened.
    #[error("Cannot open {path}: {errno}{}", open_hint(*.errno))]
    Open {
        /// The path tried.
        path: String,
        /// Why.
        errno: Errno,
    },
    /// An ioctl failed.
    #[error("{op} on {device} failed: {errno}{}", hint_suffix(.hint))]
    Ioctl {
        /// The device (`/dev/xen/gntalloc`).
        device: &'static str,
        /// The ioctl (`IOCTL_GNTALLOC_ALLOC_GREF`).
        op: &'static str,
        /// Why.
        errno: Errno,
        /// What to do (may be empty).
        hint: &'static str,
    },
    /// Mapping pages of a device failed.
    #[error("Mapping {pages} page(s) of {device} failed: {errno}{}", hint_suffix(.hint))]
    Mmap {
        /// The device.
        device: &'static str,
        /// How many pages.
        pages: usize,
        /// Why.
        errno: Errno,
        /// What to do (may be empty).
        hint: &'static str,
    },
    /// A read, write or poll on a device failed.
    #[error("{what} failed: {errno}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// Why.
        errno: Errno,
    },
    /// The event-channel device dropped notifications because nobody read
    /// them in time.
    #[error(
        "The event-channel ring overflowed and dropped notifications: call EvtChn::reset, then unmask the ports and re-check their rings"
    )]
    EvtchnOverflow,
    /// A caller passed something this crate refuses.
    #[error("Invalid argument: {0}")]
    InvalidArgument(String),
    /// This crate needs 4 KiB pages.
    #[error("The kernel's page size is {0} bytes; Xen grants here need 4096-byte pages")]
    PageSize(usize),
    /// No XenStore connection could be found.
    #[error(
        "No XenStore found (tried {tried}): in Dom0 start xenstored (systemctl start xenstored, or xencommons); in a guest /dev/xen/xenbus exists whenever Linux runs under Xen (old kernels: mount -t xenfs xenfs /proc/xen)"
    )]
    NoXenStore {
        /// The paths tried.
        tried: String,
    },
    /// Talking to xenstored failed at the I/O level.
    #[error("XenStore connection ({what}): {io}")]
    StoreIo {
        /// What was being done.
        what: &'static str,
        /// Why.
        io: std::io::Error,
    },
    /// xenstored answered a request with an error.
    #[error("XenStore {op} of {path:?} failed: {errno}{}", store_hint(.errno))]
    Store {
        /// The request (`XS_READ`).
        op: &'static str,
        /// The path it named.
        path: String,
        /// The errno name xenstored sent (`ENOENT`).
        errno: String,
    },
    /// xenstored (or whoever is on the other end) broke the wire protocol;
    /// the connection is unusable afterwards.
    #[error("XenStore protocol violation: {0}; the connection is closed, open a new one")]
    Protocol(String),
    /// A XenStore reply did not come in time.
    #[error("XenStore {op} of {path:?} got no reply within {timeout:?}: is xenstored running and responsive?")]
    Timeout {
        /// The request.
        op: &'static str,
        /// The path it named.
        path: String,
        /// The limit.
        timeout: Duration,
    },
    /// A transaction kept conflicting with other writers.
    #[error("XenStore transaction conflicted {attempts} times in a row (EAGAIN); retry later or reduce concurrent writers")]
    TransactionConflict {
        /// How many times it was tried.
        attempts: u32,
    },
    /// A value read from XenStore is not what it should be (for example a
    /// peer wrote garbage into its `state` node).
    #[error("Bad value {value:?} at {path}: {expected}")]
    BadValue {
        /// Where.
        path: String,
        /// What was there (lossily decoded, truncated).
        value: String,
        /// What was expected.
        expected: &'static str,
    },
}

impl XenError {
    /// The errno name of a [`XenError::Store`] error (`"ENOENT"`), if this
    /// is one.
    pub fn store_errno(&self) -> Option<&str> {
        match self {
            XenError::Store { errno, .. } => Some(errno),
            _ => None,
        }
    }

    /// Whether this is xenstored saying the node does not exist.
    pub fn is_not_found(&self) -> bool {
        self.store_errno() == Some("ENOENT")
    }

    /// Whether this is xenstored saying a transaction must be retried.
    pub fn is_again(&self) -> bool {
        self.store_errno() == Some("EAGAIN")
    }

    /// The system errno behind this error, where there is one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            XenError::Open { errno, .. } | XenError::Ioctl { errno, .. } | XenError::Mmap { errno, .. } | XenError::Sys { errno, .. } => {
                Some(*errno)
            }
            XenError::StoreIo { io, .. } => io.raw_os_error().map(Errno::from_raw),
            _ => None,
        }
    }
}

impl From<XenError> for std::io::Error {
    fn from(e: XenError) -> Self {
        match e.errno() {
            Some(errno) => std::io::Error::new(std::io::Error::from(errno).kind(), e),
            None => std::io::Error::other(e),
        }
    }
}

fn hint_suffix(hint: &str) -> String {
    if hint.is_empty() { String::new() } else { format!("; {hint}") }
}

fn open_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::EACCES | Errno::EPERM => "; run as root, or give this user access to the device (a udev rule)",
        Errno::ENODEV | Errno::ENXIO => "; the driver is not active: is this kernel running under Xen?",
        _ => "",
    }
}

fn store_hint(errno: &str) -> &'static str {
    match errno {
        "ENOENT" => " (no such node)",
        "EACCES" | "EPERM" => " (permission denied: check the node's permissions with xenstore-ls -p)",
        "EEXIST" => " (already exists)",
        "EINVAL" => " (xenstored found the request invalid: check the path syntax)",
        "E2BIG" => " (too large: XenStore values and replies are limited to 4096 bytes)",
        "ENOSPC" | "EQUOTA" => " (quota exceeded: too many nodes, watches or transactions for this domain)",
        "EAGAIN" => " (transaction conflict: retry the transaction)",
        "EBUSY" => " (xenstored is busy: retry)",
        "ENOSYS" => " (not supported by this xenstored)",
        "EISCONN" => " (already connected)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_the_hint_and_the_errno() {
        let e = XenError::Ioctl { device: "/dev/xen/gntalloc", op: "IOCTL_GNTALLOC_ALLOC_GREF", errno: Errno::ENOSPC, hint: "raise it" };
        let s = e.to_string();
        assert!(s.contains("IOCTL_GNTALLOC_ALLOC_GREF") && s.contains("ENOSPC") && s.ends_with("; raise it"), "{s}");
        let e = XenError::Store { op: "XS_READ", path: "/x".into(), errno: "ENOENT".into() };
        assert!(e.is_not_found());
        assert_eq!(e.to_string(), "XenStore XS_READ of \"/x\" failed: ENOENT (no such node)");
        let io: std::io::Error = XenError::Open { path: "/dev/xen/evtchn".into(), errno: Errno::EACCES }.into();
        assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
    }
}
