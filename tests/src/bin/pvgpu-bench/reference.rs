//! What the transports are held against besides native CUDA: two threads
//! handing a cache line back and forth (the floor of any shared-memory
//! round trip between those CPUs), a raw TCP ping-pong of the same message
//! sizes over loopback (the floor of the TCP transport's round trip), a raw
//! TCP stream between the same CPUs (the ceiling of its copies), and what
//! an idle process costs.

use crate::report::Recorder;
use crate::workloads::latency_histogram;
use anyhow::{Context as _, Result};
use hdrhistogram::Histogram;
use pvgpu_backend::affinity::pin_current_thread;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The cache-line and raw TCP references between the calling thread and
/// the session's CPU (`pins`: program's, session's), `iters` round trips
/// of TCP and four times as many of the cache line.
pub fn measure(rec: &mut Recorder<'_>, pins: Option<(usize, usize)>, iters: u32) -> Result<()> {
    let peer = pins.map(|p| p.1);
    // Two spinning threads need two CPUs (on one, each hand-off would wait
    // for a time slice).
    if pins.is_some_and(|(client, backend)| client != backend) {
        let h = cacheline_ping_pong(peer, iters as u64 * 4)?;
        rec.add("cacheline_rtt_p50_us", h.value_at_quantile(0.5) as f64 / 1e3, "us");
    }
    let h = tcp_ping_pong(peer, pvgpu_ring::proto::HEADER_LEN, iters)?;
    rec.add("tcp_raw_rtt_p50_us", h.value_at_quantile(0.5) as f64 / 1e3, "us");
    rec.add("tcp_raw_rtt_p99_us", h.value_at_quantile(0.99) as f64 / 1e3, "us");
    rec.add("tcp_raw_stream_gbps", tcp_stream(peer, STREAM_BYTES)?, "GB/s");
    Ok(())
}

/// Bytes the raw TCP stream carries per run.
const STREAM_BYTES: usize = 512 << 20;

/// One-way throughput of loopback TCP from this thread to a reader on
/// `peer_cpu`, in GB/s: `total` bytes written in 8 MiB calls (the chunk a
/// TCP copy sends), read into a buffer of that size, timed until the
/// reader's one-byte acknowledgement of the last byte comes back (Nagle
/// off, the kernel's default buffers, as the transport has them).
pub fn tcp_stream(peer_cpu: Option<usize>, total: usize) -> Result<f64> {
    const CHUNK: usize = 8 << 20;
    let (mut s, sink) = loopback_peer(peer_cpu, "raw TCP stream", move |mut s| {
        let mut buf = vec![0u8; CHUNK];
        // A warm-up of one chunk, then the timed run; each acknowledged.
        for want in [CHUNK, total] {
            let mut got = 0;
            while got < want {
                let n = s.read(&mut buf[..CHUNK.min(want - got)])?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                got += n;
            }
            s.write_all(&[1])?;
        }
        Ok(())
    })?;
    let buf = vec![7u8; CHUNK];
    let mut ack = [0u8; 1];
    s.write_all(&buf)?;
    s.read_exact(&mut ack)?;
    let t = Instant::now();
    let mut sent = 0;
    while sent < total {
        let n = CHUNK.min(total - sent);
        s.write_all(&buf[..n])?;
        sent += n;
    }
    s.read_exact(&mut ack)?;
    let gbps = total as f64 / t.elapsed().as_secs_f64() / 1e9;
    sink.join().map_err(|_| anyhow::anyhow!("stream sink panicked"))?.context("stream sink")?;
    Ok(gbps)
}

fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        let _ = pin_current_thread(&[c]);
    }
}

/// Round trips of a cache line between this thread and one on `peer_cpu`,
/// timed in batches of 64 (per round trip, nanoseconds).
pub fn cacheline_ping_pong(peer_cpu: Option<usize>, iters: u64) -> Result<Histogram<u64>> {
    const BATCH: u64 = 64;
    let line = Arc::new(AtomicU64::new(0));
    let peer = {
        let line = line.clone();
        std::thread::spawn(move || {
            pin(peer_cpu);
            let mut want = 1;
            while want < 2 * iters {
                // Pairs with the Release store below (and the main thread's).
                while line.load(Ordering::Acquire) != want {
                    std::hint::spin_loop();
                }
                line.store(want + 1, Ordering::Release);
                want += 2;
            }
        })
    };
    let mut h = latency_histogram()?;
    let mut v = 0;
    for _ in 0..iters / BATCH {
        let s = Instant::now();
        for _ in 0..BATCH {
            line.store(v + 1, Ordering::Release);
            while line.load(Ordering::Acquire) != v + 2 {
                std::hint::spin_loop();
            }
            v += 2;
        }
        h.saturating_record(s.elapsed().as_nanos() as u64 / BATCH);
    }
    // Let the peer finish its count.
    while v < 2 * iters {
        line.store(v + 1, Ordering::Release);
        while line.load(Ordering::Acquire) != v + 2 {
            std::hint::spin_loop();
        }
        v += 2;
    }
    peer.join().map_err(|_| anyhow::anyhow!("cache-line peer panicked"))?;
    Ok(h)
}

/// Round trips of `len`-byte messages over loopback TCP to an echo thread
/// on `peer_cpu` that blocks in `read` (Nagle off on both ends), in
/// nanoseconds.
pub fn tcp_ping_pong(peer_cpu: Option<usize>, len: usize, iters: u32) -> Result<Histogram<u64>> {
    let (mut s, echo) = loopback_peer(peer_cpu, "raw TCP", move |mut s| {
        let mut buf = vec![0u8; len];
        loop {
            if s.read_exact(&mut buf).is_err() {
                return Ok(());
            }
            s.write_all(&buf)?;
        }
    })?;
    let mut buf = vec![0u8; len];
    for _ in 0..iters / 10 {
        s.write_all(&buf)?;
        s.read_exact(&mut buf)?;
    }
    let mut h = latency_histogram()?;
    for _ in 0..iters {
        let t = Instant::now();
        s.write_all(&buf)?;
        s.read_exact(&mut buf)?;
        h.saturating_record(t.elapsed().as_nanos() as u64);
    }
    drop(s);
    echo.join().map_err(|_| anyhow::anyhow!("echo thread panicked"))?.context("echo thread")?;
    Ok(h)
}

/// A loopback TCP connection to a thread on `peer_cpu` that runs `serve`
/// on its end (Nagle off on both); `what` names it in errors.
fn loopback_peer(
    peer_cpu: Option<usize>,
    what: &str,
    serve: impl FnOnce(TcpStream) -> std::io::Result<()> + Send + 'static,
) -> Result<(TcpStream, std::thread::JoinHandle<std::io::Result<()>>)> {
    let listener = TcpListener::bind("127.0.0.1:0").with_context(|| format!("{what} listener"))?;
    let addr = listener.local_addr()?;
    let peer = std::thread::spawn(move || {
        pin(peer_cpu);
        let (s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        serve(s)
    });
    let s = TcpStream::connect(addr).with_context(|| format!("{what} connect"))?;
    s.set_nodelay(true)?;
    Ok((s, peer))
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU this process uses over `wall` while it does nothing itself, as a
/// percentage of one CPU.
pub fn idle_cpu_percent(wall: Duration) -> f64 {
    // Past every spin window first.
    std::thread::sleep(Duration::from_millis(50));
    let (c0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(wall);
    (cpu_time() - c0).as_secs_f64() / t0.elapsed().as_secs_f64() * 100.0
}
