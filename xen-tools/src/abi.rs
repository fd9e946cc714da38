//! The kernel and XenStore ABI this crate speaks, mirrored from the C
//! headers: Linux's `include/uapi/xen/{gntalloc,gntdev,evtchn}.h` (shipped
//! by Debian's libxen-dev as `/usr/include/xen/sys/*.h`) and Xen's
//! `xen/include/public/io/{xs_wire,xenbus}.h`.
//!
//! Every ioctl number, struct size and field offset here is checked against
//! those headers by `tests/headers.rs`, which compiles a C program with them.
//! The structs are `#[repr(C)]` with the same fields as the C ones; the
//! variable-length ones (`gref_ids[1]`, `refs[1]`) keep their one-element
//! array so that `size_of` matches the C `sizeof` that the ioctl number
//! encodes.
//!
//! All the ioctls are `_IOC(_IOC_NONE, type, nr, sizeof(struct))`: the
//! direction bits are "none" even though the kernel reads and writes the
//! argument, so nix's `ioctl_readwrite!` family (which would encode a
//! direction) does not fit; the numbers are built with nix's `ioc!`, which
//! knows each architecture's bit layout.

use std::mem::size_of;

/// Xen's page size: the unit of grants and of the `/dev/xen` mmap offsets.
/// This crate refuses to run on kernels whose page size differs.
pub const XEN_PAGE_SIZE: usize = 4096;

/// `_IOC(_IOC_NONE, ty, nr, size)`.
const fn ioc_none(ty: u8, nr: u8, size: usize) -> u32 {
    // All the numbers fit in 32 bits on every architecture (the size field
    // is at most 14 bits wide and the direction is "none").
    nix::ioc!(nix::sys::ioctl::NONE, ty, nr, size) as u32
}

// ---------------------------------------------------------------- gntalloc

/// `struct ioctl_gntalloc_alloc_gref`: allocate `count` pages and grant them
/// to `domid`. Followed in memory by `count` grant references (the struct
/// itself holds the first).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GntallocAllocGref {
    /// IN: the domain to be given access.
    pub domid: u16,
    /// IN: [`GNTALLOC_FLAG_WRITABLE`] or 0 (read-only for the peer).
    pub flags: u16,
    /// IN: number of pages.
    pub count: u32,
    /// OUT: the mmap offset of the first page.
    pub index: u64,
    /// OUT: the grant references, one per page (variable length).
    pub gref_ids: [u32; 1],
}

/// `struct ioctl_gntalloc_dealloc_gref`: drop this file's hold on `count`
/// grants starting at mmap offset `index`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GntallocDeallocGref {
    /// IN: the offset `ALLOC_GREF` returned.
    pub index: u64,
    /// IN: number of pages.
    pub count: u32,
}

/// `struct ioctl_gntalloc_unmap_notify` (and `ioctl_gntdev_unmap_notify`,
/// which has the same layout): what the kernel does when the pages are
/// finally released.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnmapNotify {
    /// IN: mmap offset of a byte within the page (the byte to clear with
    /// [`UNMAP_NOTIFY_CLEAR_BYTE`]).
    pub index: u64,
    /// IN: [`UNMAP_NOTIFY_CLEAR_BYTE`] | [`UNMAP_NOTIFY_SEND_EVENT`], or 0.
    pub action: u32,
    /// IN: the event channel to signal with [`UNMAP_NOTIFY_SEND_EVENT`].
    pub event_channel_port: u32,
}

/// The peer may write the granted pages.
pub const GNTALLOC_FLAG_WRITABLE: u16 = 1;
/// On release, clear (set to zero) the byte at the notify offset.
pub const UNMAP_NOTIFY_CLEAR_BYTE: u32 = 0x1;
/// On release, signal the event channel.
pub const UNMAP_NOTIFY_SEND_EVENT: u32 = 0x2;

/// `IOCTL_GNTALLOC_ALLOC_GREF`.
pub const IOCTL_GNTALLOC_ALLOC_GREF: u32 = ioc_none(b'G', 5, size_of::<GntallocAllocGref>());
/// `IOCTL_GNTALLOC_DEALLOC_GREF`.
pub const IOCTL_GNTALLOC_DEALLOC_GREF: u32 = ioc_none(b'G', 6, size_of::<GntallocDeallocGref>());
/// `IOCTL_GNTALLOC_SET_UNMAP_NOTIFY`.
pub const IOCTL_GNTALLOC_SET_UNMAP_NOTIFY: u32 = ioc_none(b'G', 7, size_of::<UnmapNotify>());

// ------------------------------------------------------------------ gntdev

/// `struct ioctl_gntdev_grant_ref`: one grant to map.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GntdevGrantRef {
    /// The granting domain.
    pub domid: u32,
    /// The grant reference.
    pub r#ref: u32,
}

/// `struct ioctl_gntdev_map_grant_ref`: reserve an mmap range for `count`
/// grants. Followed in memory by `count` [`GntdevGrantRef`]s (the struct
/// itself holds the first).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GntdevMapGrantRef {
    /// IN: number of grants.
    pub count: u32,
    /// Padding.
    pub pad: u32,
    /// OUT: the mmap offset to map them at.
    pub index: u64,
    /// IN: the grants (variable length).
    pub refs: [GntdevGrantRef; 1],
}

/// `struct ioctl_gntdev_unmap_grant_ref`: release the range at `index`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GntdevUnmapGrantRef {
    /// IN: the offset `MAP_GRANT_REF` returned.
    pub index: u64,
    /// IN: number of pages (must match the map).
    pub count: u32,
    /// Padding.
    pub pad: u32,
}

/// `IOCTL_GNTDEV_MAP_GRANT_REF`.
pub const IOCTL_GNTDEV_MAP_GRANT_REF: u32 = ioc_none(b'G', 0, size_of::<GntdevMapGrantRef>());
/// `IOCTL_GNTDEV_UNMAP_GRANT_REF`.
pub const IOCTL_GNTDEV_UNMAP_GRANT_REF: u32 = ioc_none(b'G', 1, size_of::<GntdevUnmapGrantRef>());
/// `IOCTL_GNTDEV_SET_UNMAP_NOTIFY`.
pub const IOCTL_GNTDEV_SET_UNMAP_NOTIFY: u32 = ioc_none(b'G', 7, size_of::<UnmapNotify>());

// ------------------------------------------------------------------ evtchn

/// `struct ioctl_evtchn_bind_interdomain`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvtchnBindInterdomain {
    /// The domain that offered the port.
    pub remote_domain: u32,
    /// The port it offered (allocated unbound for us).
    pub remote_port: u32,
}

/// `struct ioctl_evtchn_bind_unbound_port`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvtchnBindUnboundPort {
    /// The domain allowed to bind the other end.
    pub remote_domain: u32,
}

/// `struct ioctl_evtchn_unbind` and `struct ioctl_evtchn_notify` (same
/// layout: one port).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvtchnPort {
    /// A local port bound through this file.
    pub port: u32,
}

/// `IOCTL_EVTCHN_BIND_INTERDOMAIN`: returns the local port.
pub const IOCTL_EVTCHN_BIND_INTERDOMAIN: u32 = ioc_none(b'E', 1, size_of::<EvtchnBindInterdomain>());
/// `IOCTL_EVTCHN_BIND_UNBOUND_PORT`: returns the local port.
pub const IOCTL_EVTCHN_BIND_UNBOUND_PORT: u32 = ioc_none(b'E', 2, size_of::<EvtchnBindUnboundPort>());
/// `IOCTL_EVTCHN_UNBIND`.
pub const IOCTL_EVTCHN_UNBIND: u32 = ioc_none(b'E', 3, size_of::<EvtchnPort>());
/// `IOCTL_EVTCHN_NOTIFY`.
pub const IOCTL_EVTCHN_NOTIFY: u32 = ioc_none(b'E', 4, size_of::<EvtchnPort>());
/// `IOCTL_EVTCHN_RESET`: empties the pending ring and clears its overflow.
pub const IOCTL_EVTCHN_RESET: u32 = ioc_none(b'E', 5, 0);

// ---------------------------------------------------------------- XenStore

/// `struct xsd_sockmsg`: the header of every XenStore message. On the wire
/// its fields are in the host's byte order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XsdSockmsg {
    /// Message type ([`XsType`]).
    pub r#type: u32,
    /// Request id, echoed in the reply.
    pub req_id: u32,
    /// Transaction id, 0 outside a transaction.
    pub tx_id: u32,
    /// Length of the payload that follows.
    pub len: u32,
}

/// Largest payload of one XenStore message (`XENSTORE_PAYLOAD_MAX`).
pub const XENSTORE_PAYLOAD_MAX: usize = 4096;
/// Longest absolute path (`XENSTORE_ABS_PATH_MAX`).
pub const XENSTORE_ABS_PATH_MAX: usize = 3072;
/// Longest relative path (`XENSTORE_REL_PATH_MAX`).
pub const XENSTORE_REL_PATH_MAX: usize = 2048;

macro_rules! xs_types {
    ($($(#[$m:meta])* $name:ident = $v:literal, $c:literal;)*) => {
        /// `enum xsd_sockmsg_type`: XenStore message types.
        #[repr(u32)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum XsType {
            $($(#[$m])* $name = $v,)*
        }

        impl XsType {
            /// Every type, in numeric order.
            pub const ALL: &'static [XsType] = &[$(XsType::$name,)*];

            /// The type with number `v`, if there is one.
            pub fn from_u32(v: u32) -> Option<XsType> {
                match v {
                    $($v => Some(XsType::$name),)*
                    _ => None,
                }
            }

            /// The C name (`XS_READ`).
            pub fn c_name(self) -> &'static str {
                match self {
                    $(XsType::$name => $c,)*
                }
            }
        }
    };
}

xs_types! {
    /// `XS_CONTROL` (formerly `XS_DEBUG`).
    Control = 0, "XS_CONTROL";
    /// `XS_DIRECTORY`: list a node's children.
    Directory = 1, "XS_DIRECTORY";
    /// `XS_READ`.
    Read = 2, "XS_READ";
    /// `XS_GET_PERMS`.
    GetPerms = 3, "XS_GET_PERMS";
    /// `XS_WATCH`.
    Watch = 4, "XS_WATCH";
    /// `XS_UNWATCH`.
    Unwatch = 5, "XS_UNWATCH";
    /// `XS_TRANSACTION_START`.
    TransactionStart = 6, "XS_TRANSACTION_START";
    /// `XS_TRANSACTION_END`.
    TransactionEnd = 7, "XS_TRANSACTION_END";
    /// `XS_INTRODUCE`.
    Introduce = 8, "XS_INTRODUCE";
    /// `XS_RELEASE`.
    Release = 9, "XS_RELEASE";
    /// `XS_GET_DOMAIN_PATH`.
    GetDomainPath = 10, "XS_GET_DOMAIN_PATH";
    /// `XS_WRITE`.
    Write = 11, "XS_WRITE";
    /// `XS_MKDIR`.
    Mkdir = 12, "XS_MKDIR";
    /// `XS_RM`.
    Rm = 13, "XS_RM";
    /// `XS_SET_PERMS`.
    SetPerms = 14, "XS_SET_PERMS";
    /// `XS_WATCH_EVENT`: an asynchronous watch firing.
    WatchEvent = 15, "XS_WATCH_EVENT";
    /// `XS_ERROR`: an error reply; the payload is an errno name.
    Error = 16, "XS_ERROR";
    /// `XS_IS_DOMAIN_INTRODUCED`.
    IsDomainIntroduced = 17, "XS_IS_DOMAIN_INTRODUCED";
    /// `XS_RESUME`.
    Resume = 18, "XS_RESUME";
    /// `XS_SET_TARGET`.
    SetTarget = 19, "XS_SET_TARGET";
    /// `XS_RESET_WATCHES`.
    ResetWatches = 21, "XS_RESET_WATCHES";
    /// `XS_DIRECTORY_PART`.
    DirectoryPart = 22, "XS_DIRECTORY_PART";
}

impl std::fmt::Display for XsType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.c_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn layouts_match_the_c_structs() {
        assert_eq!(size_of::<GntallocAllocGref>(), 24);
        assert_eq!(offset_of!(GntallocAllocGref, gref_ids), 16);
        assert_eq!(size_of::<GntallocDeallocGref>(), 16);
        assert_eq!(size_of::<UnmapNotify>(), 16);
        assert_eq!(size_of::<GntdevMapGrantRef>(), 24);
        assert_eq!(offset_of!(GntdevMapGrantRef, refs), 16);
        assert_eq!(size_of::<GntdevUnmapGrantRef>(), 16);
        assert_eq!(size_of::<XsdSockmsg>(), 16);
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn ioctl_numbers_have_the_generic_encoding() {
        // _IOC(_IOC_NONE, 'G', 5, 24) = 24 << 16 | 'G' << 8 | 5.
        assert_eq!(IOCTL_GNTALLOC_ALLOC_GREF, 0x0018_4705);
        assert_eq!(IOCTL_GNTDEV_MAP_GRANT_REF, 0x0018_4700);
        assert_eq!(IOCTL_EVTCHN_NOTIFY, 0x0004_4504);
        assert_eq!(IOCTL_EVTCHN_RESET, 0x0000_4505);
    }

    #[test]
    fn xs_types_round_trip() {
        for t in XsType::ALL {
            assert_eq!(XsType::from_u32(*t as u32), Some(*t));
        }
        assert_eq!(XsType::from_u32(20), None);
        assert_eq!(XsType::from_u32(0xffff), None);
    }
}
