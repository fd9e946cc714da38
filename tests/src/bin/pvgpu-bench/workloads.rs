//! What is measured on each target: the null-call round trip, launches,
//! graph replays, copies from pageable and from page-locked memory, MatSum
//! and Jacobi.

use crate::replay::{Kind, Replay};
use crate::report::Recorder;
use anyhow::{Context as _, Result, bail};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use pvgpu_frontend::Stream;
use pvgpu_tests::native::NativeGpu;
use pvgpu_tests::{Device, Gpu, f32_bytes, jacobi, jacobi_init, matsum, matsum_bytes, matsum_cpu, matsum_inputs, max_abs_diff};
use std::time::Instant;

/// How much of everything to run.
pub struct Plan {
    pub rtt_iters: u32,
    pub launch_iters: u32,
    pub sizes: Vec<usize>,
    pub copy_budget: usize,
    pub matsum_n: usize,
    pub matsum_runs: usize,
    pub jacobi: (usize, usize),
    pub jacobi_runs: usize,
    pub replay_reps: u32,
}

impl Plan {
    pub fn new(quick: bool, gpu: bool) -> Plan {
        let kib = |k: usize| k << 10;
        if quick {
            Plan {
                rtt_iters: 2_000,
                launch_iters: 2_000,
                sizes: vec![kib(4), kib(1024), kib(16 * 1024)],
                copy_budget: 64 << 20,
                matsum_n: 1 << 18,
                matsum_runs: 3,
                jacobi: (256, 50),
                jacobi_runs: 1,
                replay_reps: 200,
            }
        } else {
            Plan {
                rtt_iters: 20_000,
                launch_iters: 20_000,
                sizes: vec![kib(4), kib(64), kib(1024), kib(16 * 1024), kib(256 * 1024)],
                copy_budget: 512 << 20,
                matsum_n: 1 << 20,
                matsum_runs: 20,
                jacobi: if gpu { (1024, 1000) } else { (512, 100) },
                jacobi_runs: if gpu { 5 } else { 1 },
                replay_reps: 2_000,
            }
        }
    }

    /// Progress steps of one target's run.
    pub fn steps(&self) -> u64 {
        (5 + 2 * self.sizes.len()) as u64
    }
}

/// Page-locked host memory a target hands out, freed on drop.
pub trait Pinned {
    fn ptr(&self) -> *mut u8;
}

impl Pinned for pvgpu_tests::native::PinnedBuf {
    fn ptr(&self) -> *mut u8 {
        self.as_ptr()
    }
}

struct AreaBuf<'a> {
    c: &'a pvgpu_frontend::Client,
    p: *mut u8,
}

impl Pinned for AreaBuf<'_> {
    fn ptr(&self) -> *mut u8 {
        self.p
    }
}

impl Drop for AreaBuf<'_> {
    fn drop(&mut self) {
        self.c.host_free(self.p);
    }
}

/// What a measured target offers besides the workloads.
pub trait Target: Device + Replay {
    /// The cheapest round trip: a no-op request (remote) or an idle
    /// `cuCtxSynchronize` (native).
    fn null_call(&self) -> pvgpu_frontend::Result<()>;
    /// Page-locked host memory (`cuMemAllocHost`), if the target has any.
    fn pinned(&self, len: usize) -> Result<Option<Box<dyn Pinned + '_>>>;
    /// Synchronous copy from `len` bytes at `src`.
    ///
    /// # Safety
    /// `src` readable for `len` bytes.
    unsafe fn htod_ptr(&self, d: u64, src: *const u8, len: usize) -> pvgpu_frontend::Result<()>;
    /// Synchronous copy into `len` bytes at `dst`.
    ///
    /// # Safety
    /// `dst` writable for `len` bytes.
    unsafe fn dtoh_ptr(&self, dst: *mut u8, d: u64, len: usize) -> pvgpu_frontend::Result<()>;
}

impl Target for Gpu<'_> {
    fn null_call(&self) -> pvgpu_frontend::Result<()> {
        self.c.nop()
    }
    fn pinned(&self, len: usize) -> Result<Option<Box<dyn Pinned + '_>>> {
        Ok(self.c.host_alloc(len).map(|p| Box::new(AreaBuf { c: self.c, p }) as Box<dyn Pinned>))
    }
    unsafe fn htod_ptr(&self, d: u64, src: *const u8, len: usize) -> pvgpu_frontend::Result<()> {
        // SAFETY: passed on from the caller.
        unsafe { self.c.memcpy_htod_raw(d, src, len, Stream::DEFAULT, false) }
    }
    unsafe fn dtoh_ptr(&self, dst: *mut u8, d: u64, len: usize) -> pvgpu_frontend::Result<()> {
        // SAFETY: passed on from the caller.
        unsafe { self.c.memcpy_dtoh_raw(dst, len, d, Stream::DEFAULT, false) }
    }
}

impl Target for NativeGpu {
    fn null_call(&self) -> pvgpu_frontend::Result<()> {
        self.sync()
    }
    fn pinned(&self, len: usize) -> Result<Option<Box<dyn Pinned + '_>>> {
        Ok(Some(Box::new(self.alloc_host(len)?)))
    }
    unsafe fn htod_ptr(&self, d: u64, src: *const u8, len: usize) -> pvgpu_frontend::Result<()> {
        // SAFETY: passed on from the caller.
        unsafe { self.htod_raw(d, src, len) }
    }
    unsafe fn dtoh_ptr(&self, dst: *mut u8, d: u64, len: usize) -> pvgpu_frontend::Result<()> {
        // SAFETY: passed on from the caller.
        unsafe { self.dtoh_raw(dst, d, len) }
    }
}

/// Round-trip latencies in nanoseconds.
pub fn latency_histogram() -> Result<Histogram<u64>> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).context("histogram")
}

/// Times `reps` copies of `size` bytes each way through `copy` and records
/// the bandwidth as `<prefix>htod_gbps_<size>` and `<prefix>dtoh_gbps_<size>`.
fn copy_pair(
    rec: &mut Recorder<'_>,
    prefix: &str,
    size: usize,
    reps: usize,
    mut htod: impl FnMut() -> pvgpu_frontend::Result<()>,
    mut dtoh: impl FnMut() -> pvgpu_frontend::Result<()>,
) -> Result<()> {
    htod()?;
    let s = Instant::now();
    for _ in 0..reps {
        htod()?;
    }
    rec.add(format!("{prefix}htod_gbps_{size}"), (size * reps) as f64 / s.elapsed().as_secs_f64() / 1e9, "GB/s");
    dtoh()?;
    let s = Instant::now();
    for _ in 0..reps {
        dtoh()?;
    }
    rec.add(format!("{prefix}dtoh_gbps_{size}"), (size * reps) as f64 / s.elapsed().as_secs_f64() / 1e9, "GB/s");
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs every workload once on `t`; the null-call latencies also go into
/// `rtt` (for the plot).
pub fn measure<T: Target>(
    t: &T,
    plan: &Plan,
    rec: &mut Recorder<'_>,
    pb: &ProgressBar,
    jacobi_ref: &[f32],
    rtt: &mut Histogram<u64>,
) -> Result<()> {
    let name = rec.transport.to_string();
    let step = |what: &str| pb.set_message(format!("{name}: {what}"));

    step("null-call round trip");
    for _ in 0..plan.rtt_iters / 10 {
        t.null_call()?;
    }
    let mut h = latency_histogram()?;
    for _ in 0..plan.rtt_iters {
        let s = Instant::now();
        t.null_call()?;
        h.saturating_record(s.elapsed().as_nanos() as u64);
    }
    rec.add("null_rtt_p50_us", h.value_at_quantile(0.5) as f64 / 1e3, "us");
    rec.add("null_rtt_p99_us", h.value_at_quantile(0.99) as f64 / 1e3, "us");
    rtt.add(&h).context("merging histograms")?;
    pb.inc(1);

    step("launch");
    let null = t.kernel("pvgpu_null")?;
    for _ in 0..100 {
        t.launch(&null, [1, 1, 1], [1, 1, 1], &[])?;
    }
    t.sync()?;
    // Amortised cost of a launch in a long run of launches, the drain at the
    // end included, so queueing cannot hide the work.
    let s = Instant::now();
    for _ in 0..plan.launch_iters {
        t.launch(&null, [1, 1, 1], [1, 1, 1], &[])?;
    }
    t.sync()?;
    rec.add("launch_us", s.elapsed().as_secs_f64() * 1e6 / plan.launch_iters as f64, "us");
    let n = plan.launch_iters / 10;
    let s = Instant::now();
    for _ in 0..n {
        t.launch(&null, [1, 1, 1], [1, 1, 1], &[])?;
        t.sync()?;
    }
    rec.add("launch_sync_us", s.elapsed().as_secs_f64() * 1e6 / n as f64, "us");
    pb.inc(1);

    step("graph replay");
    rec.add("graph_replay_kernels_us", t.replay_us(Kind::Kernels, plan.replay_reps)?, "us");
    rec.add("graph_replay_copies_us", t.replay_us(Kind::Copies, plan.replay_reps)?, "us");
    pb.inc(1);

    for &size in &plan.sizes {
        let d = t.alloc(size as u64)?;
        let mut host: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let reps = (plan.copy_budget / size).clamp(3, 2000);
        step(&format!("copies of {size} B from pageable memory"));
        let cell = std::cell::RefCell::new(&mut host);
        copy_pair(rec, "", size, reps, || t.htod(d, &cell.borrow()[..]), || t.dtoh(&mut cell.borrow_mut()[..], d))?;
        if host.iter().enumerate().take(4096).any(|(i, &b)| b != i as u8) {
            bail!("{name}: copies of {size} bytes came back wrong");
        }
        pb.inc(1);
        step(&format!("copies of {size} B from page-locked memory"));
        if let Some(buf) = t.pinned(size)? {
            let p = buf.ptr();
            // SAFETY: `p` is a live allocation of `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), p, size) };
            // SAFETY: as above, for both directions.
            copy_pair(rec, "pinned_", size, reps, || unsafe { t.htod_ptr(d, p, size) }, || unsafe { t.dtoh_ptr(p, d, size) })?;
            // SAFETY: as above.
            let back = unsafe { std::slice::from_raw_parts(p, size.min(4096)) };
            if back.iter().enumerate().any(|(i, &b)| b != i as u8) {
                bail!("{name}: copies of {size} bytes from page-locked memory came back wrong");
            }
        }
        t.free(d)?;
        pb.inc(1);
    }

    step("MatSum");
    let f = t.kernel("mat_sum")?;
    let (a, b) = matsum_inputs(plan.matsum_n);
    if matsum(t, &f, &a, &b)? != matsum_cpu(&a, &b) {
        bail!("{name}: MatSum result differs from the CPU reference");
    }
    let (ab, bb) = (f32_bytes(&a), f32_bytes(&b));
    let mut out = vec![0u8; ab.len()];
    let mut times = Vec::new();
    for _ in 0..plan.matsum_runs {
        let s = Instant::now();
        matsum_bytes(t, &f, &ab, &bb, &mut out)?;
        times.push(s.elapsed().as_secs_f64() * 1e3);
    }
    rec.add("matsum_ms", median(times), "ms");
    pb.inc(1);

    step("Jacobi");
    let (n, sweeps) = plan.jacobi;
    let f = t.kernel("jacobi_step")?;
    let init = jacobi_init(n);
    let mut times = Vec::new();
    for run in 0..plan.jacobi_runs {
        let s = Instant::now();
        let out = jacobi(t, &f, &init, n, sweeps)?;
        times.push(s.elapsed().as_secs_f64() * 1e3);
        if run == 0 && max_abs_diff(&out, jacobi_ref) > 1e-3 {
            bail!("{name}: Jacobi result differs from the CPU reference");
        }
    }
    rec.add("jacobi_ms", median(times), "ms");
    pb.inc(1);
    Ok(())
}
