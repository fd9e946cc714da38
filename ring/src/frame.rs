//! Framing of protocol messages on a byte stream (the TCP transport): each
//! frame is a [`Header`] followed by its payload, bulk data inline.
//!
//! A connection reads its stream through a [`FrameReader`]: a small frame
//! (header and payload) arrives in one `read`, as a raw ping-pong's message
//! does, instead of one call for the header and one for the payload; a
//! large payload is read straight into its buffer, which grows with what
//! arrives, never to what a header merely claims.

use crate::proto::{DecodeError, HEADER_LEN, Header};
use std::io::{self, IoSlice, Read, Write};
use zerocopy::{FromBytes, IntoBytes};

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
    /// The stream's read timeout passed before any byte of a frame came
    /// (the reader keeps its state: read again).
    #[error("No frame arrived in time")]
    Idle,
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

/// Where a frame's bytes go: a growing buffer, or fixed memory such as a
/// backend's page-locked staging.
pub trait FrameSink {
    /// Empties it.
    fn clear(&mut self);
    /// Appends `bytes`; fails if they do not fit.
    fn extend_from_slice(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Lengthens it by `n` bytes and returns them, to be read over (their
    /// contents until then are unspecified); fails if they do not fit.
    fn grow(&mut self, n: usize) -> io::Result<&mut [u8]>;
}

impl FrameSink for Vec<u8> {
    fn clear(&mut self) {
        Vec::clear(self);
    }

    fn extend_from_slice(&mut self, bytes: &[u8]) -> io::Result<()> {
        Vec::extend_from_slice(self, bytes);
        Ok(())
    }

    fn grow(&mut self, n: usize) -> io::Result<&mut [u8]> {
        let at = self.len();
        self.resize(at + n, 0);
        Ok(&mut self[at..])
    }
}

/// A frame's payload read straight into memory of the caller's, which it
/// must fill exactly.
pub struct SliceSink<'a> {
    dst: &'a mut [u8],
    len: usize,
}

impl<'a> SliceSink<'a> {
    /// A sink that fills `dst`.
    pub fn new(dst: &'a mut [u8]) -> Self {
        SliceSink { dst, len: 0 }
    }

    /// The bytes it takes.
    pub fn room(&self) -> usize {
        self.dst.len()
    }
}

impl FrameSink for SliceSink<'_> {
    fn clear(&mut self) {
        self.len = 0;
    }

    fn extend_from_slice(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.grow(bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }

    fn grow(&mut self, n: usize) -> io::Result<&mut [u8]> {
        let end = self.len.checked_add(n).filter(|&e| e <= self.dst.len());
        let Some(end) = end else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "a payload longer than its destination"));
        };
        let at = std::mem::replace(&mut self.len, end);
        Ok(&mut self.dst[at..end])
    }
}

/// Payload bytes read per step: a frame's buffer grows with what arrives,
/// never to what a header merely claims.
pub const READ_STEP: usize = 1 << 20;

/// Bytes a [`FrameReader`] reads ahead at most: a small frame, or the
/// start of a large one.
pub const READ_AHEAD: usize = 64 << 10;

/// Reads frames from a stream, reading ahead of the frame it decodes so
/// that a small frame costs one `read`. Bytes read ahead belong to the
/// next frame: one reader must read every frame of its stream.
///
/// On a stream with a read timeout, a timeout before the first byte of a
/// frame is [`FrameError::Idle`] and loses nothing; within a frame the
/// reader waits on, up to `stall` in all, then fails with the timeout.
pub struct FrameReader {
    ahead: Box<[u8]>,
    start: usize,
    end: usize,
    stall: std::time::Duration,
}

impl FrameReader {
    /// A reader that gives a frame whose bytes stop coming `stall` before
    /// it fails.
    pub fn new(stall: std::time::Duration) -> Self {
        FrameReader { ahead: vec![0; READ_AHEAD].into_boxed_slice(), start: 0, end: 0, stall }
    }

    /// Bytes read ahead, not yet part of a frame returned.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Whether a whole frame is read ahead (the next read needs no call).
    pub fn frame_ready(&self) -> bool {
        if self.buffered() < HEADER_LEN {
            return false;
        }
        match Header::read_from_bytes(&self.ahead[self.start..self.start + HEADER_LEN]) {
            Ok(h) => self.buffered() - HEADER_LEN >= h.payload_len.get() as usize,
            Err(_) => false,
        }
    }

    /// Reads one frame into `buf`: header, then payload. Returns the
    /// header. A clean end of the stream (or a reset) before the first
    /// byte of a frame is [`FrameError::Closed`].
    pub fn read_into(&mut self, r: &mut impl Read, buf: &mut Vec<u8>) -> Result<Header, FrameError> {
        self.read(r, |_| buf as &mut dyn FrameSink, true)
    }

    /// Reads one frame, header and payload, into the sink `choose` picks
    /// once the header is known (a large frame may go to other memory than
    /// a small one). Ends as [`FrameReader::read_into`].
    pub fn read_choosing<'s>(
        &mut self,
        r: &mut impl Read,
        choose: impl FnOnce(&Header) -> &'s mut dyn FrameSink,
    ) -> Result<Header, FrameError> {
        self.read(r, choose, true)
    }

    /// Reads one frame: returns its header and leaves the payload alone in
    /// `payload`.
    pub fn read_payload(&mut self, r: &mut impl Read, payload: &mut Vec<u8>) -> Result<Header, FrameError> {
        self.read(r, |_| payload as &mut dyn FrameSink, false)
    }

    /// Reads one frame, leaving its payload alone in the sink `choose`
    /// picks once the header is known. Ends as [`FrameReader::read_payload`].
    pub fn read_payload_choosing<'s>(
        &mut self,
        r: &mut impl Read,
        choose: impl FnOnce(&Header) -> &'s mut dyn FrameSink,
    ) -> Result<Header, FrameError> {
        self.read(r, choose, false)
    }

    fn read<'s>(
        &mut self,
        r: &mut impl Read,
        choose: impl FnOnce(&Header) -> &'s mut dyn FrameSink,
        with_header: bool,
    ) -> Result<Header, FrameError> {
        let mut since = None;
        while self.buffered() < HEADER_LEN {
            match self.fill(r) {
                Ok(0) if self.buffered() == 0 => return Err(FrameError::Closed),
                Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset && self.buffered() == 0 => return Err(FrameError::Closed),
                Err(e) if timed_out(&e) && self.buffered() == 0 => return Err(FrameError::Idle),
                Err(e) if timed_out(&e) => self.stalled(&mut since, e)?,
                Err(e) => return Err(e.into()),
            }
        }
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(&self.ahead[self.start..self.start + HEADER_LEN]);
        let h = Header::parse(&hb)?;
        self.start += HEADER_LEN;
        let out = choose(&h);
        out.clear();
        if with_header {
            out.extend_from_slice(&hb)?;
        }
        let mut len = h.payload_len.get() as usize;
        let have = len.min(self.buffered());
        out.extend_from_slice(&self.ahead[self.start..self.start + have])?;
        self.start += have;
        len -= have;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        // The rest straight into `out`, growing as it arrives.
        while len > 0 {
            let step = len.min(READ_STEP);
            let room = out.grow(step)?;
            let mut got = 0;
            while got < step {
                match r.read(&mut room[got..]) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if timed_out(&e) => self.stalled(&mut since, e)?,
                    Err(e) => return Err(e.into()),
                }
            }
            len -= step;
        }
        Ok(h)
    }

    /// Reads what the stream has into the space after the bytes read
    /// ahead.
    fn fill(&mut self, r: &mut impl Read) -> io::Result<usize> {
        if self.end == self.ahead.len() {
            self.ahead.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        loop {
            match r.read(&mut self.ahead[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// A read within a frame timed out: fine until `stall` has passed
    /// since the first such timeout.
    fn stalled(&self, since: &mut Option<std::time::Instant>, e: io::Error) -> Result<(), FrameError> {
        let first = *since.get_or_insert_with(std::time::Instant::now);
        if first.elapsed() >= self.stall { Err(e.into()) } else { Ok(()) }
    }
}

/// Spins up to `spin` for socket `fd` to have something to read (bytes,
/// its end, or an error): whether it does. A peer that answers within the
/// spin is read without the wake-up of a thread blocked in `read`, as the
/// ring transports spin before they sleep. Each look is a `poll` that does
/// not wait (it reads the socket's state without taking the socket, so
/// arriving segments are not held back behind the look). On a machine with
/// one CPU only the first [`crate::notify::yield_after`] is a pure spin;
/// past it each turn yields the CPU.
pub fn spin_until_readable(fd: std::os::fd::BorrowedFd<'_>, spin: std::time::Duration) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let yield_after = crate::notify::yield_after(spin);
    let start = std::time::Instant::now();
    loop {
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(0) | Err(nix::Error::EINTR) => {}
            _ => return true,
        }
        let spent = start.elapsed();
        if spent >= spin {
            return false;
        }
        if spent >= yield_after {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Whether `e` is a stream's read timeout.
fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{MAX_PAYLOAD, Opcode};

    fn reader() -> FrameReader {
        FrameReader::new(std::time::Duration::from_secs(1))
    }

    #[test]
    fn frames_round_trip() {
        let mut wire = Vec::new();
        let h = Header::request(Opcode::Nop, 5, 0, 7);
        write_frame(&mut wire, &h, &[b"abc", b"", b"defg"]).unwrap();
        let mut r = &wire[..];
        let (mut fr, mut p) = (reader(), Vec::new());
        assert_eq!(fr.read_payload(&mut r, &mut p).unwrap(), h);
        assert_eq!(p, b"abcdefg");
        assert!(matches!(fr.read_payload(&mut r, &mut p), Err(FrameError::Closed)));
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        let mut h = Header::request(Opcode::Nop, 5, 0, 0);
        h.payload_len = ((MAX_PAYLOAD + 1) as u32).into();
        let b = h.as_bytes().to_vec();
        assert!(matches!(reader().read_payload(&mut &b[..], &mut Vec::new()), Err(FrameError::Header(_))));
        let h = Header::request(Opcode::Nop, 5, 0, 10);
        let mut b = h.as_bytes().to_vec();
        b.extend_from_slice(&[0; 4]);
        assert!(matches!(reader().read_payload(&mut &b[..], &mut Vec::new()), Err(FrameError::Io(_))));
        assert!(matches!(reader().read_payload(&mut &b[..10], &mut Vec::new()), Err(FrameError::Io(_))));
    }

    /// A reader that hands out its bytes `piece` at a time, and a timeout
    /// where `gaps` says (before the byte at that offset).
    struct Pieces {
        bytes: Vec<u8>,
        at: usize,
        piece: usize,
        gaps: Vec<usize>,
        reads: usize,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.reads += 1;
            if let Some(i) = self.gaps.iter().position(|g| *g == self.at) {
                self.gaps.remove(i);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let next_gap = self.gaps.iter().copied().filter(|g| *g > self.at).min().unwrap_or(usize::MAX);
            let n = buf.len().min(self.piece).min(self.bytes.len() - self.at).min(next_gap - self.at);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn a_payload_is_read_straight_into_a_slice_it_fits_and_refused_by_one_it_does_not() {
        let (wire, want) = frames(&[3 * READ_AHEAD + 5, 10]);
        let mut fr = reader();
        let mut r = &wire[..];
        let mut dst = vec![0u8; want[0].1.len()];
        let mut sink = SliceSink::new(&mut dst);
        let h = fr.read_payload_choosing(&mut r, |_| &mut sink as &mut dyn FrameSink).unwrap();
        assert_eq!((h, &dst[..]), (want[0].0, &want[0].1[..]));
        let mut small = [0u8; 9];
        let mut sink = SliceSink::new(&mut small);
        assert!(fr.read_payload_choosing(&mut r, |_| &mut sink as &mut dyn FrameSink).is_err());
    }

    fn frames(sizes: &[usize]) -> (Vec<u8>, Vec<(Header, Vec<u8>)>) {
        let mut wire = Vec::new();
        let mut want = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let h = Header::request(Opcode::Nop, i as u64 + 1, 0, n);
            let p: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
            write_frame(&mut wire, &h, &[&p]).unwrap();
            want.push((h, p));
        }
        (wire, want)
    }

    /// Frames of every size come out whole, however the stream splits
    /// them, and small ones cost one read each.
    #[test]
    fn reader_returns_every_frame_whole() {
        let sizes = [0, 7, 4096, READ_AHEAD, 3 * READ_STEP + 5, 1];
        let (wire, want) = frames(&sizes);
        for piece in [1, 13, 4096, usize::MAX] {
            let mut r = Pieces { bytes: wire.clone(), at: 0, piece, gaps: vec![], reads: 0 };
            let mut fr = FrameReader::new(std::time::Duration::from_secs(1));
            let mut buf = Vec::new();
            for (h, p) in &want {
                assert_eq!(fr.read_payload(&mut r, &mut buf).unwrap(), *h);
                assert_eq!(&buf, p, "piece {piece}");
            }
            assert!(matches!(fr.read_payload(&mut r, &mut buf), Err(FrameError::Closed)));
        }
        let (wire, _) = frames(&[16; 10]);
        let mut r = Pieces { bytes: wire, at: 0, piece: usize::MAX, gaps: vec![], reads: 0 };
        let mut fr = FrameReader::new(std::time::Duration::from_secs(1));
        let mut buf = Vec::new();
        for _ in 0..10 {
            fr.read_into(&mut r, &mut buf).unwrap();
            assert_eq!(buf.len(), HEADER_LEN + 16);
        }
        assert_eq!(r.reads, 1, "ten small frames read ahead at once");
        assert!(!fr.frame_ready());
        let (wire, _) = frames(&[16, 5000]);
        let mut r = Pieces { bytes: wire, at: 0, piece: HEADER_LEN + 20, gaps: vec![], reads: 0 };
        fr.fill(&mut r).unwrap();
        assert!(fr.frame_ready(), "a whole small frame");
        fr.read_into(&mut r, &mut buf).unwrap();
        assert!(!fr.frame_ready(), "4 bytes of the next header");
    }

    /// A timeout before a frame is `Idle` and loses nothing; one inside a
    /// frame is waited out; a stream that ends inside a frame is an error.
    #[test]
    fn reader_timeouts() {
        let (wire, want) = frames(&[100, 100]);
        let gaps = vec![0, 10, HEADER_LEN + 50, HEADER_LEN + 100];
        let mut r = Pieces { bytes: wire.clone(), at: 0, piece: 8, gaps, reads: 0 };
        let mut fr = FrameReader::new(std::time::Duration::from_secs(5));
        let mut buf = Vec::new();
        assert!(matches!(fr.read_payload(&mut r, &mut buf), Err(FrameError::Idle)));
        assert_eq!(fr.read_payload(&mut r, &mut buf).unwrap(), want[0].0);
        assert_eq!(buf, want[0].1);
        assert!(matches!(fr.read_payload(&mut r, &mut buf), Err(FrameError::Idle)));
        assert_eq!(fr.read_payload(&mut r, &mut buf).unwrap(), want[1].0);
        assert_eq!(buf, want[1].1);
        // No patience: a timeout inside a frame fails it.
        let mut r = Pieces { bytes: wire.clone(), at: 0, piece: usize::MAX, gaps: vec![10], reads: 0 };
        let mut fr = FrameReader::new(std::time::Duration::ZERO);
        assert!(matches!(fr.read_payload(&mut r, &mut buf), Err(FrameError::Io(_))));
        let mut fr = FrameReader::new(std::time::Duration::from_secs(1));
        assert!(matches!(fr.read_payload(&mut &wire[..HEADER_LEN + 20], &mut buf), Err(FrameError::Io(_))));
    }

    /// A header that claims a large payload makes the reader's buffer
    /// grow only with the bytes that actually arrive.
    #[test]
    fn payload_is_read_before_it_is_allocated() {
        let h = Header::request(Opcode::Nop, 1, 0, MAX_PAYLOAD);
        let mut wire = h.as_bytes().to_vec();
        wire.extend_from_slice(&[0u8; 100]);
        let mut buf = Vec::new();
        assert!(reader().read_into(&mut &wire[..], &mut buf).is_err());
        assert!(buf.capacity() <= HEADER_LEN + 2 * READ_STEP, "{} bytes allocated for 100 received", buf.capacity());
        const { assert!(MAX_PAYLOAD > 4 * READ_STEP) };
    }
}
