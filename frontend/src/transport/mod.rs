//! Transports: how requests reach the backend.
//!
//! Both carry the same messages; they differ in where bulk data travels. On
//! the ring, the frontend copies it into the shared data area and names it
//! with a [`DataRef`]; on TCP it is appended to the message.

pub mod local;
pub mod ring;
pub mod tcp;
pub mod xen;

use crate::error::TransportError;
use pvgpu_ring::proto::{DataRef, Header};

/// Bulk data placed for a request.
#[derive(Debug, Clone, Copy)]
pub struct Staged {
    /// Reference to put in the request.
    pub dref: DataRef,
    /// Whether the bytes must follow the request inline.
    pub inline: bool,
}

/// One connection to a backend.
pub trait Transport: Send {
    /// Sends one request: `h.payload_len` must equal the parts' total.
    fn send(&mut self, h: &Header, parts: &[&[u8]]) -> Result<(), TransportError>;
    /// Waits for the next reply; leaves its payload in `buf`.
    fn recv(&mut self, buf: &mut Vec<u8>) -> Result<Header, TransportError>;
    /// Waits for the next reply as [`Transport::recv`], spinning up to
    /// `spin` before it sleeps (yielding the CPU on every turn past the
    /// connection's own spin): the wait of a call that may synchronise
    /// with the device.
    fn recv_spinning(&mut self, buf: &mut Vec<u8>, spin: std::time::Duration) -> Result<Header, TransportError>;
    /// Waits for the next reply as [`Transport::recv`] (or, with `spin`,
    /// [`Transport::recv_spinning`]). Where bulk data travels inline, a
    /// successful reply whose payload is `dst.len()` bytes is read straight
    /// into `dst` and `true` returned (`buf` is then left alone); otherwise
    /// the payload is in `buf`.
    fn recv_into(
        &mut self,
        buf: &mut Vec<u8>,
        _dst: &mut [u8],
        spin: Option<std::time::Duration>,
    ) -> Result<(Header, bool), TransportError> {
        match spin {
            Some(spin) => self.recv_spinning(buf, spin),
            None => self.recv(buf),
        }
        .map(|h| (h, false))
    }
    /// Largest chunk a copy should move per request.
    fn max_chunk(&self) -> usize;
    /// How many chunk requests may be in flight at once.
    fn pipeline_depth(&self) -> usize;
    /// Places `data` for the next request sent (copying it into the data
    /// area, or marking it inline).
    fn stage(&mut self, data: &[u8]) -> Result<Staged, TransportError>;
    /// Reserves room for `len` bytes the backend will write for the next
    /// request sent; they stay reserved until [`Transport::fetch`].
    fn reserve(&mut self, len: usize) -> Result<Staged, TransportError>;
    /// Copies the bytes of a reserved region (or of the reply's inline tail)
    /// into `dst` and ends the reservation.
    fn fetch(&mut self, s: &Staged, reply_tail: &[u8], dst: &mut [u8]) -> Result<(), TransportError>;
    /// Ends a reservation whose request failed.
    fn discard(&mut self, s: &Staged);
    /// Allocates page-locked host memory the backend can reach directly
    /// (in the shared data area); `None` when the transport has none or it
    /// is full.
    fn host_alloc(&mut self, _len: usize) -> Option<*mut u8> {
        None
    }
    /// Frees memory from [`Transport::host_alloc`]; false if `ptr` is not
    /// the start of such an allocation.
    fn host_free(&mut self, _ptr: *mut u8) -> bool {
        false
    }
    /// The data-area reference of `[ptr, ptr+len)` if it lies inside one
    /// [`Transport::host_alloc`] allocation.
    fn pinned(&self, _ptr: *const u8, _len: usize) -> Option<DataRef> {
        None
    }
    /// Bytes of copy staging at the start of the shared data area, the
    /// rest being the pool [`Transport::host_alloc`] draws from; `None`
    /// without a data area.
    fn area_staging(&self) -> Option<u64> {
        None
    }
    /// Largest request payload one message may carry inline.
    fn max_inline(&self) -> usize {
        pvgpu_ring::proto::MAX_PAYLOAD
    }
    /// Short name (`local`, `tcp`).
    fn kind(&self) -> &'static str;
    /// Lets go of the doorbell of a connection its session left (the data
    /// area stays mapped, for the page-locked memory the program holds
    /// there). A Xen guest must hold no event channel when it is saved:
    /// after `xl restore` the guest kernel has forgotten every port bound
    /// before, and unbinding one of them then crashes the kernel's evtchn
    /// driver (Linux 6.1, `BUG_ON` in `evtchn_unbind_from_user`).
    fn retire(&mut self) {}
    /// Whether the backend asks for a call (a checkpoint is ordered while
    /// the program makes none, [`pvgpu_ring::layout::LEAVE_WANTED`]);
    /// reading it takes the request. Transports without shared memory cannot be asked.
    fn leave_wanted(&mut self) -> bool {
        false
    }
    /// Whether [`Transport::leave_wanted`] can ever be true.
    fn can_be_asked_to_leave(&self) -> bool {
        false
    }
}
