//! A session's meter: what it did (commands, their service times and
//! errors, kernel and graph launches, bytes copied each way), counted by
//! the session and read by the supervisor for `/metrics`.
//!
//! The supervisor makes one small memfd per session and maps it; a worker
//! process maps the same pages, a session thread shares the supervisor's
//! mapping. Only the session's serving thread writes its counts, so each
//! count is a plain load and store (no locked instruction on the request
//! path); the supervisor reads the words with relaxed loads, and a reading
//! taken while a request is counted is at most one request behind. When the
//! session ends, the supervisor takes a last reading into its running
//! totals ([`crate::metrics`]), so the counters it exports only grow.
//!
//! Service times are taken for one waited call in [`TIME_EVERY`]: reading
//! the clock twice costs about 50 ns on a virtual machine's clock. Measured
//! on the H200 host (pvgpu-bench, local ring, medians of three interleaved
//! runs each, 2026-11-27): a null call took 0.70 µs without the meter and
//! 0.75 µs timing every call; with one in eight timed, 0.67 µs against
//! 0.68 µs without, within the runs' spread.
//!
//! ```text
//! word 0  commands           1  replies (waited calls)   2  errors
//!      3  kernel launches    4  graph launches
//!      5  bytes host→device  6  bytes device→host        7  bytes device→device
//!      8  service time of the timed replies, sum in ns
//!      9  timed replies
//!      10..10+BUCKETS+1  timed replies by service time (bucket i: ≤ BUCKETS_NS[i]; last: more)
//!      then ERROR_SLOTS pairs (code + 1, count); code + 1 = u64::MAX: any other code
//!      448..451  the session's GPU turn: turn, want, activity (`crate::share`;
//!                written by both sides, by compare-and-swap)
//!      451       contended GPU time it has held, in ns (the supervisor's)
//!      452..459  a restored session's rebuild (written once, by the
//!                session): its number where it was checkpointed, then the
//!                seconds of the rebuild and of its parts in ns (whole,
//!                contexts, memory, modules, graphs), then when it was back
//!                (Unix ms, written last: non-zero once the rest is there)
//! ```

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the service-time buckets, in nanoseconds.
pub const BUCKETS_NS: [u64; 19] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];
/// One waited call in this many has its service time taken.
pub const TIME_EVERY: u64 = 8;
/// Distinct error codes a meter tells apart; the rest count together.
pub const ERROR_SLOTS: usize = 8;
/// Error codes above this are counted as "other" (CUDA's codes are below
/// 1000).
const MAX_CODE: u32 = 999;

const COMMANDS: usize = 0;
const REPLIES: usize = 1;
const ERRORS: usize = 2;
const KERNELS: usize = 3;
const GRAPHS: usize = 4;
const BYTES: usize = 5;
const LATENCY_SUM: usize = 8;
const TIMED: usize = 9;
const BUCKET0: usize = 10;
const CODES: usize = BUCKET0 + BUCKETS_NS.len() + 1;
const WORDS: usize = CODES + 2 * ERROR_SLOTS;
/// The session's GPU turn words ([`crate::share`]): turn, want, activity,
/// and the contended time held (written by the supervisor only).
const TURN: usize = 448;
/// A restored session's rebuild: from-session, five durations, back-at.
const RESTORED: usize = TURN + 4;
const RESTORED_WORDS: usize = 8;
const OTHER: u64 = u64::MAX;

/// Which way a copy went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the program's memory to the device.
    HostToDevice = 0,
    /// From the device to the program's memory.
    DeviceToHost = 1,
    /// Within device memory.
    DeviceToDevice = 2,
}

impl Direction {
    /// All of them, in word order.
    pub const ALL: [Direction; 3] = [Direction::HostToDevice, Direction::DeviceToHost, Direction::DeviceToDevice];

    /// The `direction` label.
    pub fn label(self) -> &'static str {
        match self {
            Direction::HostToDevice => "host_to_device",
            Direction::DeviceToHost => "device_to_host",
            Direction::DeviceToDevice => "device_to_device",
        }
    }
}

struct Words(memmap2::MmapRaw);

impl Words {
    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < WORDS || (TURN..RESTORED + RESTORED_WORDS).contains(&i), "meter word out of range");
        // SAFETY: the mapping holds WORDS aligned u64 words (it is at least
        // a page, page-aligned, checked when mapped); the memory is shared
        // and reached only through atomics, which have u64's layout. The
        // mapping lives as long as `self`.
        unsafe { &*(self.0.as_mut_ptr().add(8 * i) as *const AtomicU64) }
    }

    fn turn(&self) -> crate::share::Turn<'_> {
        crate::share::Turn::new(self.word(TURN), self.word(TURN + 1), self.word(TURN + 2)).with_held(self.word(TURN + 3))
    }

    /// Adds `n` to word `i`; only the session's serving thread calls it.
    fn bump(&self, i: usize, n: u64) {
        let w = self.word(i);
        // Single writer: a load and a store, no read-modify-write needed.
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
}

const LEN: usize = 4096;
const _: () = assert!(WORDS <= TURN && (RESTORED + RESTORED_WORDS) * 8 <= LEN);

/// The supervisor's side: the memfd and its mapping.
pub struct Meter {
    words: Arc<Words>,
    fd: OwnedFd,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Meter")
    }
}

impl Meter {
    /// A zeroed meter for a new session.
    pub fn new() -> io::Result<Meter> {
        use nix::sys::memfd::{MFdFlags, memfd_create};
        let fd = memfd_create(c"pvgpu-meter", MFdFlags::MFD_CLOEXEC).map_err(io::Error::from)?;
        let file = std::fs::File::from(fd);
        file.set_len(LEN as u64)?;
        let map = memmap2::MmapOptions::new().len(LEN).map_raw(&file)?;
        Ok(Meter { words: Arc::new(Words(map)), fd: OwnedFd::from(file) })
    }

    /// The memfd, for a worker process to map.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The session's side, in this process.
    pub fn view(&self) -> MeterView {
        MeterView { words: self.words.clone() }
    }

    /// The session's GPU turn, as the supervisor sees it.
    pub fn turn(&self) -> crate::share::Turn<'_> {
        self.words.turn()
    }

    /// How the session was rebuilt, where it was restored from a snapshot.
    pub fn restored(&self) -> Option<pvgpu_ctl::api::Restored> {
        // Acquire: pairs with the Release store of `back` in
        // `MeterView::restored`, which follows the other words.
        let back = self.words.word(RESTORED + 6).load(Ordering::Acquire);
        if back == 0 {
            return None;
        }
        let secs = |i| Duration::from_nanos(self.words.word(RESTORED + i).load(Ordering::Relaxed)).as_secs_f64();
        Some(pvgpu_ctl::api::Restored {
            from_session: self.words.word(RESTORED).load(Ordering::Relaxed),
            back_unix_ms: back,
            rebuild_seconds: secs(1),
            contexts_seconds: secs(2),
            memory_seconds: secs(3),
            modules_seconds: secs(4),
            graphs_seconds: secs(5),
            prepared: self.words.word(RESTORED + 7).load(Ordering::Relaxed) != 0,
        })
    }

    /// What the session has counted so far.
    pub fn read(&self) -> Reading {
        let w = |i| self.words.word(i).load(Ordering::Relaxed);
        let mut r = Reading {
            commands: w(COMMANDS),
            replies: w(REPLIES),
            errors: w(ERRORS),
            kernels: w(KERNELS),
            graph_launches: w(GRAPHS),
            latency_sum_ns: w(LATENCY_SUM),
            timed: w(TIMED),
            ..Reading::default()
        };
        for d in Direction::ALL {
            r.bytes[d as usize] = w(BYTES + d as usize);
        }
        for (i, b) in r.buckets.iter_mut().enumerate() {
            *b = w(BUCKET0 + i);
        }
        for slot in 0..ERROR_SLOTS {
            let (code, n) = (w(CODES + 2 * slot), w(CODES + 2 * slot + 1));
            match code {
                0 => {}
                OTHER => r.codes.push((None, n)),
                c => r.codes.push((u32::try_from(c - 1).ok().filter(|c| *c <= MAX_CODE), n)),
            }
        }
        r
    }
}

/// The session's side of its meter.
#[derive(Clone)]
pub struct MeterView {
    words: Arc<Words>,
}

impl std::fmt::Debug for MeterView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MeterView")
    }
}

impl MeterView {
    /// Maps the supervisor's memfd `fd` (a worker process).
    pub fn map(fd: OwnedFd) -> io::Result<MeterView> {
        let file = std::fs::File::from(fd);
        if file.metadata()?.len() < LEN as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "the meter is smaller than a page"));
        }
        let map = memmap2::MmapOptions::new().len(LEN).map_raw(&file)?;
        Ok(MeterView { words: Arc::new(Words(map)) })
    }

    /// The session's GPU turn, as the session sees it.
    pub fn turn(&self) -> crate::share::Turn<'_> {
        self.words.turn()
    }

    /// The session was restored from a snapshot of session `from`: its
    /// rebuild took `took`, in parts (contexts, memory, modules, graphs),
    /// `prepared` where a worker made ahead had part of it.
    pub fn restored(&self, from: u64, took: Duration, parts: [Duration; 4], prepared: bool) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.words.word(RESTORED).store(from, Ordering::Relaxed);
        self.words.word(RESTORED + 7).store(u64::from(prepared), Ordering::Relaxed);
        self.words.word(RESTORED + 1).store(ns(took), Ordering::Relaxed);
        for (i, d) in parts.into_iter().enumerate() {
            self.words.word(RESTORED + 2 + i).store(ns(d), Ordering::Relaxed);
        }
        let back = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_millis() as u64).max(1);
        // Release: pairs with the Acquire load in `Meter::restored`, so
        // that the words above are there once `back` is.
        self.words.word(RESTORED + 6).store(back, Ordering::Release);
    }

    /// A request arrived.
    pub fn command(&self) {
        self.words.bump(COMMANDS, 1);
    }

    /// Whether the waited call arriving now is one whose service time is
    /// taken (one in [`TIME_EVERY`]).
    pub fn time_this(&self) -> bool {
        self.words.word(REPLIES).load(Ordering::Relaxed) % TIME_EVERY == 0
    }

    /// A waited call was answered with `status`, after `took` where its
    /// time was taken.
    pub fn replied(&self, took: Option<Duration>, status: u32) {
        self.words.bump(REPLIES, 1);
        if let Some(took) = took {
            let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
            self.words.bump(TIMED, 1);
            self.words.bump(LATENCY_SUM, ns);
            let bucket = BUCKETS_NS.iter().position(|&b| ns <= b).unwrap_or(BUCKETS_NS.len());
            self.words.bump(BUCKET0 + bucket, 1);
        }
        if status != 0 {
            self.error(status);
        }
    }

    fn error(&self, status: u32) {
        self.words.bump(ERRORS, 1);
        let code = if status <= MAX_CODE { u64::from(status) + 1 } else { OTHER };
        let slots = (0..ERROR_SLOTS).map(|s| CODES + 2 * s);
        for at in slots {
            let held = self.words.word(at).load(Ordering::Relaxed);
            if held == code || held == 0 {
                self.words.word(at).store(code, Ordering::Relaxed);
                self.words.bump(at + 1, 1);
                return;
            }
        }
        // Every slot holds another code: the last one counts the rest.
        let last = CODES + 2 * (ERROR_SLOTS - 1);
        self.words.word(last).store(OTHER, Ordering::Relaxed);
        self.words.bump(last + 1, 1);
    }

    /// A kernel was launched.
    pub fn kernel(&self) {
        self.words.bump(KERNELS, 1);
    }

    /// A graph was launched.
    pub fn graph_launch(&self) {
        self.words.bump(GRAPHS, 1);
    }

    /// `bytes` were copied `dir`.
    pub fn copied(&self, dir: Direction, bytes: u64) {
        self.words.bump(BYTES + dir as usize, bytes);
    }
}

/// A meter's counts at one moment, or several meters' summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// Requests.
    pub commands: u64,
    /// Waited calls answered.
    pub replies: u64,
    /// Of those, failed.
    pub errors: u64,
    /// Kernel launches.
    pub kernels: u64,
    /// Graph launches.
    pub graph_launches: u64,
    /// Bytes copied, by [`Direction`].
    pub bytes: [u64; 3],
    /// Service time of the timed replies, in nanoseconds.
    pub latency_sum_ns: u64,
    /// Replies whose service time was taken.
    pub timed: u64,
    /// Timed replies by service time (not cumulative; the last: slower
    /// than every bound).
    pub buckets: [u64; BUCKETS_NS.len() + 1],
    /// Failed replies by code (`None`: codes the meter did not tell apart).
    pub codes: Vec<(Option<u32>, u64)>,
}

impl Reading {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Reading) {
        self.commands += other.commands;
        self.replies += other.replies;
        self.errors += other.errors;
        self.kernels += other.kernels;
        self.graph_launches += other.graph_launches;
        self.latency_sum_ns += other.latency_sum_ns;
        self.timed += other.timed;
        for (a, b) in self.bytes.iter_mut().zip(other.bytes) {
            *a += b;
        }
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
        for &(code, n) in &other.codes {
            match self.codes.iter_mut().find(|(c, _)| *c == code) {
                Some((_, m)) => *m += n,
                None => self.codes.push((code, n)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuild_reads_back_once_written_whole() {
        let m = Meter::new().unwrap();
        assert_eq!(m.restored(), None, "not a restored session");
        let v = MeterView::map(m.fd().try_clone_to_owned().unwrap()).unwrap();
        let ms = Duration::from_millis;
        v.restored(12, ms(900), [ms(300), ms(250), ms(300), ms(50)], true);
        let r = m.restored().unwrap();
        assert!(r.prepared);
        assert_eq!(r.from_session, 12);
        assert!(r.back_unix_ms > 1_700_000_000_000, "a time: {}", r.back_unix_ms);
        let parts = [r.rebuild_seconds, r.contexts_seconds, r.memory_seconds, r.modules_seconds, r.graphs_seconds];
        assert_eq!(parts, [0.9, 0.3, 0.25, 0.3, 0.05]);
        assert_eq!(m.read().commands, 0, "the other counts untouched");
    }

    #[test]
    fn a_mapped_view_counts_what_the_supervisor_reads() {
        let m = Meter::new().unwrap();
        let v = MeterView::map(m.fd().try_clone_to_owned().unwrap()).unwrap();
        v.command();
        v.command();
        assert!(v.time_this(), "the first waited call is timed");
        v.replied(Some(Duration::from_micros(7)), 0);
        assert!(!v.time_this(), "then one in eight");
        v.replied(Some(Duration::from_millis(3)), 2);
        v.replied(Some(Duration::from_secs(20)), 2);
        v.replied(None, 0);
        v.kernel();
        v.copied(Direction::DeviceToHost, 4096);
        let r = m.read();
        assert_eq!((r.commands, r.replies, r.errors, r.kernels, r.timed), (2, 4, 2, 1, 3));
        assert_eq!(r.bytes, [0, 4096, 0]);
        assert_eq!(r.buckets[0], 1, "7 µs is in the first bucket");
        assert_eq!(r.buckets[8], 1, "3 ms is at most 5 ms");
        assert_eq!(r.buckets[BUCKETS_NS.len()], 1, "20 s is past every bound");
        assert_eq!(r.codes, [(Some(2), 2)]);
        assert_eq!(r.latency_sum_ns, 7_000 + 3_000_000 + 20_000_000_000);
    }

    #[test]
    fn error_codes_past_the_slots_count_together() {
        let m = Meter::new().unwrap();
        let v = m.view();
        for code in 1..=12u32 {
            v.replied(None, code);
        }
        v.replied(None, 1);
        v.replied(None, 70_000);
        let r = m.read();
        assert_eq!(r.errors, 14);
        assert_eq!(r.codes.iter().map(|(_, n)| n).sum::<u64>(), 14);
        assert!(r.codes.contains(&(Some(1), 2)));
        assert!(r.codes.iter().any(|(c, n)| c.is_none() && *n == 6), "codes 8 to 12 and 70000: {:?}", r.codes);
        let mut sum = r.clone();
        sum.add(&r);
        assert_eq!(sum.errors, 28);
        assert!(sum.codes.contains(&(Some(1), 4)));
    }
}
