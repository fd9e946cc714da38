//! Model checking of the channel's index protocol under loom:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test -p pvgpu-ring --test loom --release
//! ```
//!
//! Loom explores the interleavings (and the weak-memory reorderings it
//! models) of a producer and a consumer thread, checking that record bytes
//! are never read while being written (loom's `UnsafeCell` tracks this), that
//! records arrive intact and in order, and that neither side sleeps through
//! a wake-up (a lost wake-up shows up as a deadlock).
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::Notify;
use loom::sync::atomic::{AtomicU32, AtomicU64};
use pvgpu_ring::channel::{ChannelMemory, Consumer, Producer, Sent};

const CAP: usize = 64;

/// The buffer is tracked in 8-byte cells: records are 8-byte aligned and
/// padded, so every cell belongs to exactly one record, and loom reports a
/// race only where the protocol would really let one happen. Header words
/// are atomics of their own beside the cells (in real memory they share
/// bytes with the payloads of other laps, which the index protocol keeps
/// apart).
struct Mem {
    idx: [AtomicU32; 4],
    hdr: [AtomicU64; CAP / 8],
    buf: [UnsafeCell<[u8; 8]>; CAP / 8],
}

#[derive(Clone)]
struct Shared(Arc<Mem>);

impl Shared {
    fn new() -> Self {
        Shared(Arc::new(Mem {
            idx: [AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)],
            hdr: std::array::from_fn(|_| AtomicU64::new(0)),
            buf: std::array::from_fn(|_| UnsafeCell::new([0; 8])),
        }))
    }
}

impl ChannelMemory for Shared {
    fn prod(&self) -> &AtomicU32 {
        &self.0.idx[0]
    }
    fn cons(&self) -> &AtomicU32 {
        &self.0.idx[1]
    }
    fn prod_event(&self) -> &AtomicU32 {
        &self.0.idx[2]
    }
    fn cons_event(&self) -> &AtomicU32 {
        &self.0.idx[3]
    }
    fn header(&self, pos: u32) -> &AtomicU64 {
        &self.0.hdr[pos as usize / 8]
    }
    fn capacity(&self) -> u32 {
        CAP as u32
    }
    unsafe fn write(&self, pos: u32, src: &[u8]) {
        for (i, byte) in src.iter().enumerate() {
            let at = pos as usize + i;
            // SAFETY: loom checks that no other thread accesses this cell
            // concurrently; bounds are the caller's.
            self.0.buf[at / 8].with_mut(|c| unsafe { (*c)[at % 8] = *byte });
        }
    }
    unsafe fn read(&self, pos: u32, dst: &mut [u8]) {
        for (i, byte) in dst.iter_mut().enumerate() {
            let at = pos as usize + i;
            // SAFETY: loom checks that no thread writes this cell
            // concurrently; bounds are the caller's.
            *byte = self.0.buf[at / 8].with(|c| unsafe { (*c)[at % 8] });
        }
    }
}

/// Records arrive intact and in order, and the sleeping consumer is always
/// woken.
#[test]
fn no_lost_wakeup_for_consumer() {
    loom::model(|| {
        let mem = Shared::new();
        let bell = Arc::new(Notify::new());
        let (m2, b2) = (mem.clone(), bell.clone());
        let t = loom::thread::spawn(move || {
            let mut p = Producer::new(m2, 32);
            for i in 0..2u8 {
                match p.try_send(&[&[i; 5]]).unwrap() {
                    Sent::Yes { notify } => {
                        if notify {
                            b2.notify();
                        }
                    }
                    Sent::Full => unreachable!("two small records fit"),
                }
            }
        });
        let mut c = Consumer::new(mem, 32);
        let mut out = Vec::new();
        let mut got = 0u8;
        while got < 2 {
            if c.try_recv(&mut out).unwrap() {
                assert_eq!(out, vec![got; 5]);
                got += 1;
                c.release();
            } else if !c.prepare_wait().unwrap() {
                bell.wait();
            }
        }
        t.join().unwrap();
    });
}

/// A producer waiting for space is always woken by the consumer's release.
#[test]
fn no_lost_wakeup_for_producer() {
    loom::model(|| {
        let mem = Shared::new();
        let bell = Arc::new(Notify::new());
        let (m2, b2) = (mem.clone(), bell.clone());
        let t = loom::thread::spawn(move || {
            let mut c = Consumer::new(m2, 32);
            let mut out = Vec::new();
            let mut got = 0u8;
            while got < 2 {
                if c.try_recv(&mut out).unwrap() {
                    assert_eq!(out, vec![got; 20]);
                    got += 1;
                    if c.release() {
                        b2.notify();
                    }
                } else {
                    loom::thread::yield_now();
                }
            }
        });
        let mut p = Producer::new(mem, 32);
        // Each record takes 32 of the 64 bytes, and the slot of the next
        // header 8 more: the second waits for the first to be released.
        for i in 0..2u8 {
            loop {
                match p.try_send(&[&[i; 20]]).unwrap() {
                    Sent::Yes { .. } => break,
                    Sent::Full => {
                        if p.prepare_wait_for_space().unwrap() < 40 {
                            bell.wait();
                        }
                    }
                }
            }
        }
        t.join().unwrap();
    });
}
