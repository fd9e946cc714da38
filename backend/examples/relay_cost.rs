//! What the supervisor's relay of an RDMA (or TLS) session costs on this
//! machine: a session's bytes cross a socket pair and a thread each way
//! before its worker sees them. Measures a 32-byte round trip and a 1 GiB
//! one-way stream, directly over a socket pair and through the relay's own
//! copy loop (`pvgpu_backend::rdma::pump`, a thread per direction), so
//! that the hop's share can be put beside a fabric's figures.
//!
//! `cargo run --release -p pvgpu-backend --example relay_cost`

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// One direction of the relay, as the supervisor runs it.
fn copy(from: UnixStream, to: UnixStream) {
    let _ = pvgpu_backend::rdma::pump(&from, &to, &AtomicBool::new(false), Duration::from_secs(30));
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// A program's end and the worker's end, directly or through a relay.
fn ends(relayed: bool) -> (UnixStream, UnixStream) {
    let (program, a) = UnixStream::pair().expect("socket pair");
    if !relayed {
        return (program, a);
    }
    let (b, worker) = UnixStream::pair().expect("socket pair");
    let (a2, b2) = (a.try_clone().expect("clone"), b.try_clone().expect("clone"));
    std::thread::spawn(move || copy(a, b));
    std::thread::spawn(move || copy(b2, a2));
    (program, worker)
}

fn round_trip_us(relayed: bool) -> f64 {
    let (mut program, mut worker) = ends(relayed);
    std::thread::spawn(move || {
        let mut m = [0u8; 32];
        while worker.read_exact(&mut m).is_ok() {
            if worker.write_all(&m).is_err() {
                break;
            }
        }
    });
    let mut m = [7u8; 32];
    let mut samples = Vec::new();
    for _ in 0..20_000 {
        let t = Instant::now();
        program.write_all(&m).expect("write");
        program.read_exact(&mut m).expect("read");
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn stream_gbps(relayed: bool) -> f64 {
    let (mut program, mut worker) = ends(relayed);
    const TOTAL: usize = 1 << 30;
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 8 << 20];
        let mut got = 0;
        while got < TOTAL {
            match worker.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        got
    });
    let chunk = vec![1u8; 8 << 20];
    let t = Instant::now();
    for _ in 0..TOTAL / chunk.len() {
        program.write_all(&chunk).expect("write");
    }
    let got = reader.join().expect("reader");
    got as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    for relayed in [false, true] {
        let how = if relayed { "through a relay" } else { "direct" };
        println!("{how:16} 32-byte round trip p50 {:7.2} us, 1 GiB stream {:6.2} GB/s", round_trip_us(relayed), stream_gbps(relayed));
    }
}
