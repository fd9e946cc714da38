//! A hostile peer scribbling over the shared memory yields errors, never
//! panics or hangs: property tests over random interleavings of honest
//! traffic and arbitrary writes to indices, record headers and payloads.
#![cfg(not(loom))]

use proptest::prelude::*;
use pvgpu_ring::channel::{ChannelError, Consumer, Producer, Sent};
use pvgpu_ring::layout::{Geometry, attach_region, init_region};
use pvgpu_ring::proto::{HEADER_LEN, Header, Request};
use pvgpu_ring::region::SharedRegion;

#[derive(Debug, Clone)]
enum Op {
    /// The honest producer sends a record of this many bytes.
    Send(usize),
    /// The consumer takes a record.
    Recv,
    /// The consumer releases what it took.
    Release,
    /// The consumer arms its wake-up.
    Arm,
    /// The producer waits for space.
    ArmSpace,
    /// The hostile peer writes bytes anywhere in the region.
    Scribble(usize, Vec<u8>),
    /// The hostile peer writes a 32-bit value at an index slot.
    SetIndex(usize, u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..300).prop_map(Op::Send),
        4 => Just(Op::Recv),
        2 => Just(Op::Release),
        1 => Just(Op::Arm),
        1 => Just(Op::ArmSpace),
        2 => (0usize..(4096 + 2048), proptest::collection::vec(any::<u8>(), 1..16)).prop_map(|(o, b)| Op::Scribble(o, b)),
        2 => (0usize..8, any::<u32>()).prop_map(|(i, v)| Op::SetIndex(i, v)),
    ]
}

const IDX_SLOTS: [usize; 8] = [0x100, 0x140, 0x180, 0x1c0, 0x200, 0x240, 0x280, 0x2c0];

fn geometry() -> Geometry {
    Geometry { req_size: 4096, rsp_size: 4096, data_size: 4096 }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Whatever the peer does to the shared memory, the consumer returns
    /// records no longer than its limit or an error, and once broken stays
    /// broken; the producer never panics either.
    #[test]
    fn scribbling_peer_gives_errors_not_panics(ops in proptest::collection::vec(op(), 1..200)) {
        let g = geometry();
        let region = SharedRegion::heap(g.total_len());
        let ep = init_region(&region, &g).unwrap();
        let back = attach_region(&region, &g).unwrap();
        let mut prod = Producer::new(ep.req, 1024);
        let mut cons = Consumer::new(back.req, 1024);
        let mut out = Vec::new();
        let mut broken: Option<ChannelError> = None;
        for op in ops {
            match op {
                Op::Send(n) => {
                    let body = vec![0xA5u8; n];
                    let _ = prod.try_send(&[&body]);
                }
                Op::Recv => match cons.try_recv(&mut out) {
                    Ok(true) => {
                        prop_assert!(broken.is_none());
                        prop_assert!(out.len() <= 1024);
                        // Whatever came out decodes to a request or an error.
                        if let Ok(h) = Header::parse(&out) {
                            let _ = Request::decode(&h, &out[HEADER_LEN.min(out.len())..]);
                        }
                    }
                    Ok(false) => prop_assert!(broken.is_none()),
                    Err(e) => {
                        if let Some(b) = broken { prop_assert_eq!(b, e); }
                        broken = Some(e);
                    }
                },
                Op::Release => { cons.release(); }
                Op::Arm => { let _ = cons.prepare_wait(); }
                Op::ArmSpace => { let _ = prod.prepare_wait_for_space(); }
                Op::Scribble(off, bytes) => {
                    let area = region.area(0, region.len()).unwrap();
                    let off = off.min(region.len() - bytes.len());
                    area.write(off as u64, &bytes).unwrap();
                }
                Op::SetIndex(i, v) => {
                    let area = region.area(0, region.len()).unwrap();
                    area.write(IDX_SLOTS[i] as u64, &v.to_le_bytes()).unwrap();
                }
            }
        }
    }

    /// Honest traffic alone always round-trips, in order.
    #[test]
    fn honest_traffic_round_trips(sizes in proptest::collection::vec(0usize..700, 1..100)) {
        let g = geometry();
        let region = SharedRegion::heap(g.total_len());
        let ep = init_region(&region, &g).unwrap();
        let mut prod = Producer::new(ep.req, 1024);
        let back = attach_region(&region, &g).unwrap();
        let mut cons = Consumer::new(back.req, 1024);
        let mut out = Vec::new();
        let mut pending = std::collections::VecDeque::new();
        for (i, n) in sizes.into_iter().enumerate() {
            let body: Vec<u8> = (0..n).map(|b| (b ^ i) as u8).collect();
            loop {
                match prod.try_send(&[&body]).unwrap() {
                    Sent::Yes { .. } => { pending.push_back(body); break; }
                    Sent::Full => {
                        prop_assert!(cons.try_recv(&mut out).unwrap());
                        prop_assert_eq!(&out, &pending.pop_front().unwrap());
                        cons.release();
                    }
                }
            }
        }
        while let Some(b) = pending.pop_front() {
            prop_assert!(cons.try_recv(&mut out).unwrap());
            prop_assert_eq!(&out, &b);
        }
        prop_assert!(!cons.try_recv(&mut out).unwrap());
    }

    /// Random bytes never make the decoder panic.
    #[test]
    fn decoder_survives_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256), op in 0u16..48) {
        let mut b = bytes;
        if b.len() >= HEADER_LEN {
            b[0] = 1; b[1] = 0; b[2] = op as u8; b[3] = 0;
            let plen = (b.len() - HEADER_LEN) as u32;
            b[16..20].copy_from_slice(&plen.to_le_bytes());
        }
        if let Ok(h) = Header::parse(&b) {
            let _ = Request::decode(&h, &b[HEADER_LEN..]);
        }
    }
}
