//! The backend's reading of a TCP session's byte stream, after the
//! opening: frames (`pvgpu_ring::frame::FrameReader`, reading ahead), a
//! large one into the connection's staging as `TcpConn` reads it
//! (`pvgpu_backend::staging`), each decoded as the session would
//! (`Request::decode`), until the stream ends or breaks.
//!
//! Input: one byte saying how many bytes each read returns at most (less
//! one; 0: all), then the stream.
//!
//! Checked: no panic; a frame's buffer never grows past what arrived by
//! more than one read step, whatever its header claims (the staging is
//! fixed memory); every frame read whole is the bytes that arrived for it
//! (read ahead or not, into the buffer or the staging).

#![no_main]

use libfuzzer_sys::fuzz_target;
use pvgpu_backend::staging::Staging;
use pvgpu_ring::frame::{FrameReader, FrameSink, READ_STEP};
use std::cell::RefCell;
use pvgpu_ring::proto::{HEADER_LEN, Request};
use std::io::Read;

struct Pieces<'a> {
    input: &'a [u8],
    piece: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.input.len()).min(self.piece);
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input = &self.input[n..];
        Ok(n)
    }
}

thread_local! {
    static STAGING: RefCell<Staging> = RefCell::new(Staging::new().expect("map the staging"));
}

fuzz_target!(|data: &[u8]| STAGING.with_borrow_mut(|staging| {
    let Some((&choice, stream)) = data.split_first() else { return };
    let piece = if choice == 0 { usize::MAX } else { choice as usize };
    let mut r = Pieces { input: stream, piece };
    let mut buf = Vec::new();
    let mut reader = FrameReader::new(std::time::Duration::ZERO);
    loop {
        let before = r.input.len() + reader.buffered();
        let mut staged = false;
        let res = reader.read_choosing(&mut r, |h| {
            staged = Staging::takes(h);
            if staged { &mut *staging as &mut dyn FrameSink } else { &mut buf }
        });
        let arrived = before - r.input.len() - reader.buffered();
        let frame = if staged { staging.request() } else { &buf[..] };
        if !staged {
            assert!(frame.len() <= arrived.max(HEADER_LEN) + READ_STEP, "{} bytes buffered for {arrived} received", frame.len());
        }
        let Ok(h) = res else { break };
        assert_eq!(frame.len(), arrived, "a frame is what arrived for it");
        assert_eq!(frame.len(), HEADER_LEN + h.payload_len.get() as usize);
        let _ = Request::decode(&h, &frame[HEADER_LEN..]);
    }
}));
