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

/// Payload bytes read per step: a frame's buffer grows with what arrives,
/// never to what a header merely claims.
pub const READ_STEP: usize = 1 << 20;

/// Reads one frame into `buf`: header, then payload, read in steps of
/// [`READ_STEP`] as it arrives, so that a peer that claims a large payload
/// and stalls costs what it sent. Returns the header. A clean end of
/// stream before the first byte is [`FrameError::Closed`]; a reset
/// connection is [`FrameError::Closed`] too.
pub fn read_frame_into(r: &mut impl Read, buf: &mut Vec<u8>) -> Result<Header, FrameError> {
    let mut hb = [0u8; HEADER_LEN];
    let h = read_header(r, &mut hb)?;
    buf.clear();
    buf.extend_from_slice(&hb);
    append_payload(r, buf, h.payload_len.get() as usize)?;
    Ok(h)
}

/// Reads one frame: returns its header and leaves the payload in `payload`
/// (read as [`read_frame_into`] reads it).
pub fn read_frame(r: &mut impl Read, payload: &mut Vec<u8>) -> Result<Header, FrameError> {
    let mut hb = [0u8; HEADER_LEN];
    let h = read_header(r, &mut hb)?;
    payload.clear();
    append_payload(r, payload, h.payload_len.get() as usize)?;
    Ok(h)
}

fn read_header(r: &mut impl Read, hb: &mut [u8; HEADER_LEN]) -> Result<Header, FrameError> {
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut hb[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset && got == 0 => return Err(FrameError::Closed),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Header::parse(hb)?)
}

/// Appends `len` bytes read from `r` to `buf`, [`READ_STEP`] at a time.
fn append_payload(r: &mut impl Read, buf: &mut Vec<u8>, mut len: usize) -> io::Result<()> {
    while len > 0 {
        let step = len.min(READ_STEP);
        let at = buf.len();
        buf.resize(at + step, 0);
        r.read_exact(&mut buf[at..])?;
        len -= step;
    }
    Ok(())
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

    /// A header that claims a large payload makes the buffer grow only
    /// with the bytes that actually arrive.
    #[test]
    fn payload_is_read_before_it_is_allocated() {
        let h = Header::request(Opcode::Nop, 1, 0, MAX_PAYLOAD);
        let mut wire = h.as_bytes().to_vec();
        wire.extend_from_slice(&[0u8; 100]);
        let mut buf = Vec::new();
        assert!(read_frame_into(&mut &wire[..], &mut buf).is_err());
        assert!(buf.capacity() <= HEADER_LEN + 2 * READ_STEP, "{} bytes allocated for 100 received", buf.capacity());
        const { assert!(MAX_PAYLOAD > 4 * READ_STEP) };
    }
}
