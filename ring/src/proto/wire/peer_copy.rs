//! Requests of a copy between two backends of one program
//! (`PVGPU_BACKEND=a,b`; `cuMemcpyPeer` between their devices): the
//! receiving session opens the copy and hands out a ticket, the sending
//! session connects to the receiving backend with it, then the one sends
//! while the other receives ([`crate::peer_copy`] is the connection's
//! opening).

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// The longest backend address a [`PeerCopyConnect`] carries.
pub const PEER_ADDRESS_MAX: usize = 64;

wire_structs! {
    /// Receiving side, first: `len` bytes of this session's device memory
    /// at `dst` will come from another backend.
    pub struct PeerCopyOpen {
        /// Device address.
        pub dst: U64,
        /// Bytes, at least one.
        pub len: U64,
    }
    /// The copy's ticket.
    pub struct PeerTicketRep {
        /// Random; good for one connection, for a short time.
        pub ticket: [u8; 16],
    }
    /// Sending side, first: connect to the backend at `address` (as
    /// `PVGPU_BACKEND` names it) for the copy `ticket` names.
    pub struct PeerCopyConnect {
        /// The receiving side's ticket.
        pub ticket: [u8; 16],
        /// Bytes, as opened.
        pub len: U64,
        /// Bytes of `address` used.
        pub address_len: U32,
        /// Reserved, zero.
        pub reserved: U32,
        /// The receiving backend's address, UTF-8.
        pub address: [u8; PEER_ADDRESS_MAX],
    }
    /// Sending side, then: `len` bytes at `src` go through the connection
    /// made for `ticket`; answered once the receiving side has them all.
    pub struct PeerCopySend {
        /// The ticket connected for.
        pub ticket: [u8; 16],
        /// Device address.
        pub src: U64,
        /// Bytes, as opened.
        pub len: U64,
    }
    /// Receiving side, at the same time: takes the bytes of the copy
    /// `ticket` names into device memory.
    pub struct PeerCopyReceive {
        /// The ticket handed out.
        pub ticket: [u8; 16],
    }
}

impl PeerCopyConnect {
    /// The address, if its length is in range and it is UTF-8.
    pub fn address(&self) -> Option<&str> {
        let n = usize::try_from(self.address_len.get()).ok().filter(|&n| n <= PEER_ADDRESS_MAX)?;
        std::str::from_utf8(&self.address[..n]).ok()
    }
}
