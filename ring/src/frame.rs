//! Framing of protocol messages on a byte stream (the TCP transport): each
//! frame is a [`Header`] followed by its payload, bulk data inline.

use crate::proto::{DecodeError, HEADER_LEN, Header};
use std::io::{self, IoSlice, Read, Write};
use zerocopy::IntoBytes;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the stream between frames.
    #[error("Peer closed the connection")]
    Closed,
    /// The stream failed or ended inside a frame.
    #[error("Connection failed")]
    Io(#[from] io::Error),
    /// The header is malformed.
    #[error("Malformed frame header")]
    Header(#[from] DecodeError),
}

/// Writes one frame: `header`, then `parts` (whose lengths must add up to
/// `header.payload_len`).
pub fn write_frame(w: &mut impl Write, header: &Header, parts: &[&[u8]]) -> io::Result<()> {
    debug_assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), header.payload_len.get() as usize);
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(parts.len() + 1);
    slices.push(IoSlice::new(header.as_bytes()));
    slices.extend(parts.iter().filter(|p| !p.is_empty()).map(|p| IoSlice::new(p)));
    let mut bufs = &mut slices[..];
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "connection closed while writing")),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads one frame: returns its header and leaves the payload in `payload`.
/// A clean end of stream before the first byte is [`FrameError::Closed`].
pub fn read_frame(r: &mut impl Read, payload: &mut Vec<u8>) -> Result<Header, FrameError> {
    let mut hb = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut hb[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let h = Header::parse(&hb)?;
    payload.clear();
    payload.resize(h.payload_len.get() as usize, 0);
    r.read_exact(payload)?;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{MAX_PAYLOAD, Opcode};

    #[test]
    fn frames_round_trip() {
        let mut wire = Vec::new();
        let h = Header::request(Opcode::Nop, 5, 0, 7);
        write_frame(&mut wire, &h, &[b"abc", b"", b"defg"]).unwrap();
        let mut r = &wire[..];
        let mut p = Vec::new();
        assert_eq!(read_frame(&mut r, &mut p).unwrap(), h);
        assert_eq!(p, b"abcdefg");
        assert!(matches!(read_frame(&mut r, &mut p), Err(FrameError::Closed)));
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        let mut h = Header::request(Opcode::Nop, 5, 0, 0);
        h.payload_len = ((MAX_PAYLOAD + 1) as u32).into();
        let b = h.as_bytes().to_vec();
        assert!(matches!(read_frame(&mut &b[..], &mut Vec::new()), Err(FrameError::Header(_))));
        let h = Header::request(Opcode::Nop, 5, 0, 10);
        let mut b = h.as_bytes().to_vec();
        b.extend_from_slice(&[0; 4]);
        assert!(matches!(read_frame(&mut &b[..], &mut Vec::new()), Err(FrameError::Io(_))));
        assert!(matches!(read_frame(&mut &b[..10], &mut Vec::new()), Err(FrameError::Io(_))));
    }
}
