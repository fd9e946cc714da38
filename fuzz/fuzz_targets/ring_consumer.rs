//! The ring with a hostile peer writing the shared memory.
//!
//! A region is laid out as the frontend lays it out (`init_region`) and
//! attached by the backend's own connection type (`RingConn`: the request
//! channel's consumer and the response channel's producer, with
//! `MAX_RING_RECORD` as their limit). The input is a program interleaving:
//!
//! - the peer's writes: any bytes anywhere in the region (control page,
//!   indices, record headers, payloads, data area), a chosen index slot set
//!   to any value, a record header (with or without the right magic) at or
//!   after the consumer's published position;
//! - an honest frontend: records sent on the request channel, replies taken
//!   off the response channel and released;
//! - the backend: `recv` (try_recv, and when nothing is there release and
//!   prepare_wait, through the same wait loop the backend runs), `release`,
//!   and `send` of replies of any size (with a peer that may lie about
//!   `cons`).
//!
//! Checked: nothing panics or reads outside the region (ASan, and the
//! channel's debug assertions on every copy); every record handed to the
//! backend (or to the frontend) is at most `MAX_RING_RECORD` bytes; a
//! channel error is sticky; and until the peer first scribbles, the
//! backend receives exactly the records the frontend sent, in order.

#![no_main]

use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use pvgpu_backend::conn::{Conn, ConnError, RingConn};
use pvgpu_ring::channel::{Consumer, Producer, RECORD_HEADER, RECORD_MAGIC, Sent};
use pvgpu_ring::layout::{Geometry, MAX_RING_RECORD, init_region};
use pvgpu_ring::notify::{Notifier, NotifyError, Wake};
use pvgpu_ring::proto::{HEADER_LEN, Header, Opcode, Request};
use pvgpu_ring::region::{DataArea, RegionChannel, SharedRegion};
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use zerocopy::IntoBytes;

/// Index slots of the control page, a cache line each: request channel
/// (prod, cons, prod_event, cons_event), then the response channel's.
const IDX_SLOTS: [u64; 8] = [0x100, 0x140, 0x180, 0x1c0, 0x200, 0x240, 0x280, 0x2c0];
const REQ_CONS: u64 = 0x140;
const RSP_CONS: u64 = 0x240;

/// A doorbell that never blocks: a wait "times out" at once, so the
/// backend's wait loop gives up at its first tick (the stop flag is set).
struct NoDoorbell;

impl Notifier for NoDoorbell {
    fn notify(&self) -> Result<(), NotifyError> {
        Ok(())
    }
    fn wait(&self, _timeout: Option<Duration>) -> Result<Wake, NotifyError> {
        Ok(Wake::TimedOut)
    }
}

struct World {
    region: SharedRegion,
    /// The whole region as bytes the peer writes (the peer's view).
    raw: DataArea,
    geometry: Geometry,
    backend: RingConn,
    front_tx: Producer<RegionChannel>,
    front_rx: Consumer<RegionChannel>,
    /// Records sent and not yet received, while the peer has been honest.
    in_flight: VecDeque<Vec<u8>>,
    honest: bool,
    backend_broken: bool,
    frontend_broken: bool,
    next_id: u64,
}

fn channel_size(u: &mut Unstructured) -> ArbResult<u32> {
    // Small channels wrap often; large ones let records reach the limit.
    Ok(if u.arbitrary::<bool>()? { 4096 } else { 1 << 17 })
}

impl World {
    fn new(u: &mut Unstructured) -> ArbResult<Self> {
        let geometry = Geometry { req_size: channel_size(u)?, rsp_size: channel_size(u)?, data_size: 4096 };
        let region = SharedRegion::heap(geometry.total_len());
        let front = init_region(&region, &geometry).expect("a fresh region of the geometry's size");
        let backend =
            RingConn::new(region.clone(), &geometry, Box::new(NoDoorbell), Duration::ZERO).expect("the control page just written");
        let raw = region.area(0, region.len()).expect("the whole region");
        Ok(World {
            raw,
            geometry,
            backend,
            front_tx: Producer::new(front.req, MAX_RING_RECORD),
            front_rx: Consumer::new(front.rsp, MAX_RING_RECORD),
            in_flight: VecDeque::new(),
            honest: true,
            backend_broken: false,
            frontend_broken: false,
            next_id: 1,
            region,
        })
    }

    fn scribble(&mut self, off: u64, bytes: &[u8]) {
        self.honest = false;
        let len = self.raw.len() as u64;
        for (i, b) in bytes.iter().enumerate() {
            self.raw.write((off + i as u64) % len, &[*b]).expect("in the region");
        }
    }

    fn read_u32(&self, off: u64) -> u32 {
        let mut b = [0u8; 4];
        self.raw.read(off, &mut b).expect("in the control page");
        u32::from_le_bytes(b)
    }

    /// A request as the frontend builds one, `extra` payload bytes long.
    fn request(&mut self, extra: usize) -> Vec<u8> {
        let id = self.next_id;
        self.next_id += 1;
        let h = Header::request(Opcode::Nop, id, 1, extra);
        let mut rec = h.as_bytes().to_vec();
        rec.extend((0..extra).map(|i| (i as u64 ^ id) as u8));
        rec
    }

    fn step(&mut self, u: &mut Unstructured) -> ArbResult<()> {
        let stop = AtomicBool::new(true);
        match u.int_in_range(0..=10u8)? {
            // The peer writes anywhere.
            0 => {
                let off = u.arbitrary::<u32>()? as u64;
                let n = u.int_in_range(1..=16usize)?;
                let bytes = u.bytes(n)?.to_vec();
                self.scribble(off, &bytes);
            }
            // The peer sets an index.
            1 => {
                let slot = IDX_SLOTS[u.choose_index(IDX_SLOTS.len())?];
                let v: u32 = u.arbitrary()?;
                self.scribble(slot, &v.to_le_bytes());
            }
            // The peer moves an index by a little (near-plausible values).
            2 => {
                let slot = IDX_SLOTS[u.choose_index(IDX_SLOTS.len())?];
                let delta: i16 = u.arbitrary()?;
                let v = self.read_u32(slot).wrapping_add(delta as i32 as u32);
                self.scribble(slot, &v.to_le_bytes());
            }
            // The peer writes a record header at or after the position the
            // backend published (wrapping round the buffer).
            3 => {
                let (cons_slot, buf, cap) = if u.arbitrary::<bool>()? {
                    (REQ_CONS, self.geometry.req_offset() as u64, self.geometry.req_size)
                } else {
                    (RSP_CONS, self.geometry.rsp_offset() as u64, self.geometry.rsp_size)
                };
                let ahead = u.int_in_range(0..=64u32)? * 8;
                let pos = self.read_u32(cons_slot).wrapping_add(ahead) & (cap - 1);
                let len: u32 = if u.arbitrary::<bool>()? { u.int_in_range(0..=MAX_RING_RECORD + 64)? } else { u.arbitrary()? };
                let magic = if u.ratio(7u8, 8)? { RECORD_MAGIC } else { u.arbitrary()? };
                let mut hdr = [0u8; 8];
                hdr[..4].copy_from_slice(&len.to_le_bytes());
                hdr[4..].copy_from_slice(&magic.to_le_bytes());
                self.honest = false;
                for (i, b) in hdr.iter().enumerate() {
                    let at = buf + ((pos + i as u32) & (cap - 1)) as u64;
                    self.raw.write(at, &[*b]).expect("in the buffer");
                }
            }
            // The honest frontend sends a request.
            4 | 5 => {
                let extra = if u.ratio(1u8, 8)? { u.int_in_range(0..=MAX_RING_RECORD as usize)? } else { u.int_in_range(0..=300usize)? };
                let rec = self.request(extra);
                match self.front_tx.try_send(&[&rec]) {
                    Ok(Sent::Yes { .. }) => self.in_flight.push_back(rec),
                    Ok(Sent::Full) | Err(_) => {}
                }
            }
            // The backend receives, as its serving loop does.
            6 | 7 => {
                let mut buf = Vec::new();
                match self.backend.recv(&mut buf, &stop) {
                    Ok(()) => {
                        assert!(!self.backend_broken, "a broken channel delivered a record");
                        assert!(buf.len() <= MAX_RING_RECORD as usize, "record of {} bytes", buf.len());
                        if self.honest {
                            let sent = self.in_flight.pop_front().expect("received a record nobody sent");
                            assert_eq!(buf, sent, "honest traffic changed in the ring");
                        }
                        if let Ok(h) = Header::parse(&buf) {
                            let _ = Request::decode(&h, &buf[HEADER_LEN.min(buf.len())..]);
                        }
                    }
                    Err(ConnError::Shutdown) => {
                        assert!(!self.backend_broken, "a broken channel looked idle");
                        if self.honest {
                            assert!(self.in_flight.is_empty(), "honest records were not delivered");
                        }
                    }
                    Err(ConnError::Channel(_)) => {
                        assert!(!self.honest, "an honest ring broke");
                        self.backend_broken = true;
                    }
                    Err(e) => panic!("unexpected error from recv: {e:?}"),
                }
            }
            // The backend releases what it took.
            8 => {
                self.backend.release().expect("release only rings a doorbell");
            }
            // The backend replies.
            9 => {
                let n = if u.ratio(1u8, 8)? { u.int_in_range(0..=MAX_RING_RECORD as usize)? } else { u.int_in_range(0..=200usize)? };
                let h = Header::request(Opcode::Nop, 7, 0, 0).reply(pvgpu_ring::CuResult::SUCCESS, n);
                let payload = vec![0x5a; n];
                match self.backend.send(&h, &payload, &stop) {
                    Ok(()) | Err(ConnError::Shutdown) => {}
                    Err(ConnError::Channel(_)) => {
                        // The channel keeps room for the next record's header too.
                        let max = MAX_RING_RECORD.min(self.geometry.rsp_size - 2 * RECORD_HEADER) as usize;
                        assert!(!self.honest || n + HEADER_LEN > max, "an honest ring broke");
                    }
                    Err(e) => panic!("unexpected error from send: {e:?}"),
                }
            }
            // The honest frontend takes a reply and releases it, or arms.
            _ => {
                let mut out = Vec::new();
                match self.front_rx.try_recv(&mut out) {
                    Ok(got) => {
                        assert!(!self.frontend_broken, "a broken channel delivered a record");
                        assert!(out.len() <= MAX_RING_RECORD as usize);
                        if got {
                            self.front_rx.release();
                        } else {
                            let _ = self.front_rx.prepare_wait();
                        }
                    }
                    Err(_) => self.frontend_broken = true,
                }
                let _ = self.front_tx.prepare_wait_for_space();
            }
        }
        Ok(())
    }
}

fn run(data: &[u8]) -> ArbResult<()> {
    let mut u = Unstructured::new(data);
    let mut world = World::new(&mut u)?;
    for _ in 0..512 {
        if u.is_empty() {
            break;
        }
        world.step(&mut u)?;
    }
    // The backend's last receive after the program.
    let mut buf = Vec::new();
    if world.backend.recv(&mut buf, &AtomicBool::new(true)).is_ok() {
        assert!(buf.len() <= MAX_RING_RECORD as usize);
    }
    drop(world.region);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
