//! Copies between the device memory of two backends of one program, from
//! backend to backend: the receiving session opens the copy and hands out
//! a ticket, the sending backend connects to the receiving one with it,
//! then the one sends while the other receives (`docs/protocol.md`,
//! "Copies between backends"). The program's bytes do not pass through
//! the program.

use crate::client::Client;
use crate::error::Result;
use pvgpu_ring::proto::*;

/// A copy's ticket.
pub type Ticket = [u8; 16];

impl Client {
    /// Where this session lives now, as `PVGPU_BACKEND` writes it (after
    /// a move, the backend it moved to); `None` for a client made over a
    /// transport of its own.
    pub fn address(&self) -> Option<String> {
        self.conn_as_is().reattach.as_ref().map(|r| r.addr.to_string())
    }

    /// Receiving side: `len` bytes at `dst` will come from another
    /// backend; the ticket to give the sending side.
    pub fn peer_copy_open(&self, dst: u64, len: u64) -> Result<Ticket> {
        Ok(self.call(&PeerCopyOpen { dst: dst.into(), len: len.into() })?.ticket)
    }

    /// Sending side: this backend connects to the one at `address` for
    /// the copy `ticket` names. Fails (`CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`)
    /// where that backend is not one this backend sends to.
    pub fn peer_copy_connect(&self, ticket: &Ticket, len: u64, address: &str) -> Result<()> {
        let mut a = [0u8; PEER_ADDRESS_MAX];
        let n = address.len();
        a.get_mut(..n).ok_or(crate::CuError::INVALID_VALUE)?.copy_from_slice(address.as_bytes());
        self.call(&PeerCopyConnect { ticket: *ticket, len: len.into(), address_len: (n as u32).into(), reserved: 0.into(), address: a })
    }

    /// Sending side: `len` bytes at `src` go; returns once the receiving
    /// side has them in device memory.
    pub fn peer_copy_send(&self, ticket: &Ticket, src: u64, len: u64) -> Result<()> {
        self.call(&PeerCopySend { ticket: *ticket, src: src.into(), len: len.into() })
    }

    /// Receiving side, while the sending side sends: the bytes, into
    /// device memory.
    pub fn peer_copy_receive(&self, ticket: &Ticket) -> Result<()> {
        self.call(&PeerCopyReceive { ticket: *ticket })
    }
}
