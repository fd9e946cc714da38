//! Page-locked staging of a stream connection (TCP, or the supervisor's
//! TLS relay).
//!
//! Over a stream a copy's data travels inline: a host-to-device chunk (up
//! to 8 MiB from our frontend) in its request, a device-to-host chunk in
//! its reply. Read into an ordinary buffer, each chunk is copied to the
//! device from pageable memory: the driver stages it through its own
//! buffers at a fraction of the DMA engine's speed, and the network waits
//! meanwhile. So a stream connection reads a large request straight into
//! memory of its own, and a copy's reply data is written into it, and the
//! session page-locks that memory through its first context, as it does
//! the ring's data area ([`crate::session::Session::set_staging`]). The
//! connection owns the mapping and outlives the session, whose contexts
//! (and with them the registration) go first.
//!
//! The memory is page-locked for the backend's copies only, never mapped
//! for the device on purpose; a request is decoded from it as from any
//! other buffer of the backend.

use pvgpu_ring::frame::FrameSink;
use pvgpu_ring::proto::{HEADER_LEN, Header};
use std::io;
use std::ptr::NonNull;

/// Largest chunk of a copy the staging holds (the TCP frontend's chunk).
pub const CHUNK_ROOM: usize = 8 << 20;
/// Room for a request: header, the request's own fields, a chunk.
pub const REQUEST_ROOM: usize = HEADER_LEN + (64 << 10) + CHUNK_ROOM;
/// Requests with a payload this long or longer are read into the staging;
/// shorter ones (every call but a copy's) into the session's buffer.
pub const STAGE_MIN: usize = 64 << 10;

/// A stream connection's staging: the request part, then the reply part.
pub struct Staging {
    map: memmap2::MmapMut,
    /// Bytes of the request part in use.
    len: usize,
}

/// The reply part of a connection's staging, handed to the handler of a
/// device-to-host copy.
#[derive(Clone, Copy, Debug)]
pub struct ReplyRoom {
    ptr: NonNull<u8>,
    len: usize,
}

impl ReplyRoom {
    /// Where reply data may be written, if `len` bytes fit.
    pub fn take(&self, len: usize) -> Option<*mut u8> {
        (len <= self.len).then_some(self.ptr.as_ptr())
    }
}

impl Staging {
    /// Maps a connection's staging (not yet page-locked).
    pub fn new() -> io::Result<Staging> {
        Ok(Staging { map: memmap2::MmapMut::map_anon(REQUEST_ROOM + CHUNK_ROOM)?, len: 0 })
    }

    /// Whether a request with header `h` is read into the staging.
    pub fn takes(h: &Header) -> bool {
        let n = h.payload_len.get() as usize;
        n >= STAGE_MIN && HEADER_LEN + n <= REQUEST_ROOM
    }

    /// The request last read into the staging.
    pub fn request(&self) -> &[u8] {
        &self.map[..self.len]
    }

    /// The reply data a handler wrote, `len` bytes (nothing if more than
    /// the reply part holds).
    pub fn reply(&self, len: usize) -> &[u8] {
        self.map.get(REQUEST_ROOM..REQUEST_ROOM + len).unwrap_or(&[])
    }

    /// The reply part, for a handler.
    pub fn reply_room(&mut self) -> ReplyRoom {
        let p = self.map[REQUEST_ROOM..].as_mut_ptr();
        ReplyRoom { ptr: NonNull::new(p).unwrap_or(NonNull::dangling()), len: CHUNK_ROOM }
    }

    /// The whole mapping, for page-locking: it stays at this address as
    /// long as the staging lives.
    pub fn range(&mut self) -> (*mut u8, usize) {
        (self.map.as_mut_ptr(), self.map.len())
    }
}

impl FrameSink for Staging {
    fn clear(&mut self) {
        self.len = 0;
    }

    fn extend_from_slice(&mut self, bytes: &[u8]) -> io::Result<()> {
        let at = self.len;
        self.grow(bytes.len())?.copy_from_slice(bytes);
        debug_assert_eq!(self.len, at + bytes.len());
        Ok(())
    }

    fn grow(&mut self, n: usize) -> io::Result<&mut [u8]> {
        let end = self.len.checked_add(n).filter(|&e| e <= REQUEST_ROOM);
        let Some(end) = end else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "a frame larger than the connection's staging"));
        };
        let at = std::mem::replace(&mut self.len, end);
        Ok(&mut self.map[at..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvgpu_ring::frame::{FrameReader, write_frame};
    use pvgpu_ring::proto::{Header, Opcode};

    fn frame(len: usize, fill: u8) -> (Header, Vec<u8>) {
        let h = Header::request(Opcode::MemcpyHtoD, 1, pvgpu_ring::proto::FLAG_REPLY, len);
        let mut wire = Vec::new();
        write_frame(&mut wire, &h, &[&vec![fill; len]]).unwrap();
        (h, wire)
    }

    #[test]
    fn large_frames_go_to_the_staging_and_small_ones_do_not() {
        let mut st = Staging::new().unwrap();
        let mut small = Vec::new();
        let mut reader = FrameReader::new(std::time::Duration::from_secs(1));
        for (len, fill) in [(STAGE_MIN, 1u8), (100, 2), (REQUEST_ROOM - HEADER_LEN, 3), (REQUEST_ROOM - HEADER_LEN + 1, 4)] {
            let (h, wire) = frame(len, fill);
            let mut staged = false;
            let got = reader
                .read_choosing(&mut &wire[..], |h| {
                    staged = Staging::takes(h);
                    if staged { &mut st as &mut dyn FrameSink } else { &mut small }
                })
                .unwrap();
            assert_eq!(got, h);
            let whole = if staged { st.request() } else { &small[..] };
            assert_eq!(staged, (STAGE_MIN..=REQUEST_ROOM - HEADER_LEN).contains(&len), "len {len}");
            assert_eq!(whole.len(), HEADER_LEN + len);
            assert!(whole[HEADER_LEN..].iter().all(|&b| b == fill), "len {len}");
        }
    }

    #[test]
    fn the_staging_refuses_what_does_not_fit() {
        let mut st = Staging::new().unwrap();
        assert!(st.grow(REQUEST_ROOM).is_ok());
        assert!(st.grow(1).is_err());
        st.clear();
        assert!(FrameSink::extend_from_slice(&mut st, &[7; 10]).is_ok());
        assert_eq!(st.request(), &[7; 10]);
        assert!(st.reply_room().take(CHUNK_ROOM).is_some());
        assert!(st.reply_room().take(CHUNK_ROOM + 1).is_none());
        assert_eq!(st.reply(CHUNK_ROOM + 1), &[] as &[u8]);
    }
}
