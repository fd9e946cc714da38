//! `pvgpu-bench`: measures pvgpu against the CUDA driver called directly.
//!
//! Starts an embedded backend (GPU if one is present, else the host test
//! double) with a local shared-memory and a TCP listener, or measures a
//! running backend (`--connect`). For each transport (`native`, `local`,
//! `tcp`) it measures the null-call round trip, the cost of an asynchronous
//! launch, copy bandwidth from 4 KiB to 256 MiB, and the MatSum and Jacobi
//! workloads, then prints a table with each transport's ratio to native (or
//! to `local` when there is no GPU). `--json` prints the samples as JSON.

use anyhow::{Context as _, Result, bail};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use pvgpu_backend::config::AdmissionConfig;
use pvgpu_backend::exec::cuda::CudaExecutor;
use pvgpu_backend::exec::host::HostExecutor;
use pvgpu_backend::{Backend, Config, Listen, SessionConfig};
use pvgpu_frontend::{BackendAddr, Client, Options};
use pvgpu_ring::tcp_auth::TcpKey;
use pvgpu_tests::native::NativeGpu;
use pvgpu_tests::{
    Device, Gpu, TempDir, f32_bytes, jacobi, jacobi_cpu, jacobi_init, matsum, matsum_bytes, matsum_cpu, matsum_inputs, max_abs_diff,
};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ExecChoice {
    /// The GPU if libcuda and a device are present, else the host double.
    Auto,
    /// The GPU.
    Cuda,
    /// The host test double.
    Host,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    /// The driver called directly (GPU only).
    Native,
    /// Local shared-memory ring.
    Local,
    /// TCP on loopback.
    Tcp,
}

#[derive(Parser, Debug)]
#[command(name = "pvgpu-bench", version, about = "Measures pvgpu transports against native CUDA")]
struct Args {
    /// Executor of the embedded backend.
    #[arg(long, value_enum, default_value = "auto")]
    executor: ExecChoice,
    /// Transports to measure (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["native", "local", "tcp"])]
    transport: Vec<Which>,
    /// Fewer iterations and smaller sizes (a minute or less).
    #[arg(long)]
    quick: bool,
    /// Print the samples as a JSON array on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
    /// Measure a running backend (local:PATH, tcp:HOST:PORT or xen) instead
    /// of an embedded one. Repeatable.
    #[arg(long = "connect", value_name = "ADDR")]
    connect: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
struct Sample {
    transport: String,
    executor: String,
    metric: String,
    value: f64,
    unit: &'static str,
}

struct Plan {
    rtt_iters: u32,
    launch_iters: u32,
    sizes: Vec<usize>,
    copy_budget: usize,
    matsum_n: usize,
    matsum_runs: usize,
    jacobi: (usize, usize),
    jacobi_runs: usize,
}

impl Plan {
    fn new(quick: bool, gpu: bool) -> Plan {
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
            }
        } else {
            Plan {
                rtt_iters: 20_000,
                launch_iters: 20_000,
                sizes: vec![kib(4), kib(64), kib(1024), kib(16 * 1024), kib(256 * 1024)],
                copy_budget: 1 << 30,
                matsum_n: 1 << 20,
                matsum_runs: 20,
                jacobi: if gpu { (1024, 1000) } else { (512, 100) },
                jacobi_runs: if gpu { 5 } else { 1 },
            }
        }
    }

    fn steps(&self) -> u64 {
        (4 + 2 * self.sizes.len()) as u64
    }
}

/// What a measured target offers besides the workloads.
trait Target: Device {
    /// The cheapest round trip: a no-op request (remote) or an idle
    /// `cuCtxSynchronize` (native).
    fn null_call(&self) -> pvgpu_frontend::Result<()>;
}

impl Target for Gpu<'_> {
    fn null_call(&self) -> pvgpu_frontend::Result<()> {
        self.c.nop()
    }
}

impl Target for NativeGpu {
    fn null_call(&self) -> pvgpu_frontend::Result<()> {
        self.sync()
    }
}

struct Recorder<'a> {
    samples: Vec<Sample>,
    transport: &'a str,
    executor: &'a str,
}

impl Recorder<'_> {
    fn add(&mut self, metric: impl Into<String>, value: f64, unit: &'static str) {
        self.samples.push(Sample { transport: self.transport.into(), executor: self.executor.into(), metric: metric.into(), value, unit });
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn measure<T: Target>(t: &T, plan: &Plan, rec: &mut Recorder<'_>, pb: &ProgressBar, jacobi_ref: &[f32]) -> Result<()> {
    let name = rec.transport.to_string();
    let step = |what: &str| pb.set_message(format!("{name}: {what}"));

    step("null-call round trip");
    for _ in 0..plan.rtt_iters / 10 {
        t.null_call()?;
    }
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).context("histogram")?;
    for _ in 0..plan.rtt_iters {
        let s = Instant::now();
        t.null_call()?;
        h.saturating_record(s.elapsed().as_nanos() as u64);
    }
    rec.add("null_rtt_p50_us", h.value_at_quantile(0.5) as f64 / 1e3, "us");
    rec.add("null_rtt_p99_us", h.value_at_quantile(0.99) as f64 / 1e3, "us");
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

    for &size in &plan.sizes {
        let d = t.alloc(size as u64)?;
        let mut host: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let reps = (plan.copy_budget / size).clamp(3, 2000);
        step(&format!("copy {size} B host to device"));
        t.htod(d, &host)?;
        let s = Instant::now();
        for _ in 0..reps {
            t.htod(d, &host)?;
        }
        rec.add(format!("htod_gbps_{size}"), (size * reps) as f64 / s.elapsed().as_secs_f64() / 1e9, "GB/s");
        pb.inc(1);
        step(&format!("copy {size} B device to host"));
        t.dtoh(&mut host, d)?;
        let s = Instant::now();
        for _ in 0..reps {
            t.dtoh(&mut host, d)?;
        }
        rec.add(format!("dtoh_gbps_{size}"), (size * reps) as f64 / s.elapsed().as_secs_f64() / 1e9, "GB/s");
        if host.iter().enumerate().take(4096).any(|(i, &b)| b != i as u8) {
            bail!("{name}: copies of {size} bytes came back wrong");
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

fn lower_is_better(metric: &str) -> bool {
    !metric.contains("gbps")
}

fn print_table(samples: &[Sample], baseline: &str, header: &str) {
    let mut transports: Vec<&str> = Vec::new();
    let mut metrics: Vec<&str> = Vec::new();
    for s in samples {
        if !transports.contains(&s.transport.as_str()) {
            transports.push(&s.transport);
        }
        if !metrics.contains(&s.metric.as_str()) {
            metrics.push(&s.metric);
        }
    }
    let get = |t: &str, m: &str| samples.iter().find(|s| s.transport == t && s.metric == m).map(|s| s.value);
    eprintln!("\n{header}");
    eprintln!("ratios are slowdowns against {baseline} (1.00x = as fast; higher = slower)\n");
    let mut line = format!("{:<28}", "metric");
    for t in &transports {
        line += &format!("{:>12}", t);
        if *t != baseline {
            line += &format!("{:>9}", "ratio");
        }
    }
    eprintln!("{line}");
    for m in &metrics {
        let unit = samples.iter().find(|s| s.metric == *m).map_or("", |s| s.unit);
        let mut line = format!("{:<28}", format!("{m} ({unit})"));
        let base = get(baseline, m);
        for t in &transports {
            match get(t, m) {
                Some(v) => line += &format!("{:>12}", format_value(v)),
                None => line += &format!("{:>12}", "-"),
            }
            if *t != baseline {
                match (get(t, m), base) {
                    (Some(v), Some(b)) if v > 0.0 && b > 0.0 => {
                        let r = if lower_is_better(m) { v / b } else { b / v };
                        line += &format!("{:>8.2}x", r);
                    }
                    _ => line += &format!("{:>9}", "-"),
                }
            }
        }
        eprintln!("{line}");
    }
}

fn format_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let native = match args.executor {
        ExecChoice::Host => None,
        _ => NativeGpu::open().context("the CUDA driver is present but failed to start")?,
    };
    if args.executor == ExecChoice::Cuda && native.is_none() {
        bail!("--executor cuda: no CUDA driver or device found");
    }
    let gpu = native.is_some();
    let executor = if gpu { "cuda" } else { "host" };
    let plan = Plan::new(args.quick, gpu);
    let date = std::process::Command::new("date").arg("+%F").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());

    // The backend: embedded, unless --connect names one.
    let dir = TempDir::new("bench");
    let sock = dir.0.join("bench.sock");
    let key_file = dir.0.join("tcp.key");
    let mut targets: Vec<(String, BackendAddr)> = Vec::new();
    let _backend: Option<Backend> = if args.connect.is_empty() {
        let session = SessionConfig::default();
        pvgpu_tests::write_key_file(&key_file);
        let admission = AdmissionConfig { tcp_key: Some(TcpKey::from_file(&key_file)?), ..AdmissionConfig::default() };
        let cfg = Config { listen: vec![Listen::Local(sock.clone()), Listen::Tcp("127.0.0.1:0".into())], session, admission };
        let b = if gpu {
            Backend::start_threads(Arc::new(CudaExecutor::new()?), cfg)?
        } else {
            Backend::start_threads(Arc::new(HostExecutor::new(16 << 30)), cfg)?
        };
        if args.transport.contains(&Which::Local) {
            targets.push(("local".into(), BackendAddr::Local(sock.clone())));
        }
        if args.transport.contains(&Which::Tcp) {
            targets.push(("tcp".into(), BackendAddr::Tcp(b.tcp_addrs()[0].to_string())));
        }
        Some(b)
    } else {
        for a in &args.connect {
            let addr: BackendAddr = a.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            let name = match &addr {
                BackendAddr::Local(_) => "local",
                BackendAddr::Tcp(_) => "tcp",
                BackendAddr::Tls(_) => "tls",
                BackendAddr::Xen(_) => "xen",
            };
            targets.push((name.into(), addr));
        }
        None
    };
    let with_native = gpu && args.transport.contains(&Which::Native);

    let n_targets = targets.len() as u64 + with_native as u64;
    let pb = ProgressBar::new(plan.steps() * n_targets + 1);
    pb.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]").unwrap_or_else(|_| ProgressStyle::default_bar()));
    pb.set_message("CPU reference of Jacobi");
    let jacobi_ref = jacobi_cpu(&jacobi_init(plan.jacobi.0), plan.jacobi.0, plan.jacobi.1);
    pb.inc(1);

    let mut samples = Vec::new();
    let mut device_name = String::from("host test double");
    if let (true, Some(n)) = (with_native, &native) {
        n.make_current()?;
        device_name = n.name.clone();
        let mut rec = Recorder { samples: Vec::new(), transport: "native", executor };
        measure(n, &plan, &mut rec, &pb, &jacobi_ref)?;
        samples.extend(rec.samples);
    } else if let Some(n) = &native {
        device_name = n.name.clone();
    }
    let mut opts = Options::from_env();
    if args.connect.is_empty() {
        opts.tcp_key = Some(key_file.clone());
    }
    for (name, addr) in &targets {
        let client = Client::connect(addr, &opts).with_context(|| format!("connecting to {addr}"))?;
        let exec_name = client.info().executor.clone();
        let g = Gpu::new(&client)?;
        let mut rec = Recorder { samples: Vec::new(), transport: name, executor: &exec_name };
        measure(&g, &plan, &mut rec, &pb, &jacobi_ref)?;
        samples.extend(rec.samples);
    }
    pb.finish_and_clear();

    let baseline =
        if samples.iter().any(|s| s.transport == "native") { "native" } else { targets.first().map_or("local", |t| t.0.as_str()) };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let mut header = format!(
        "pvgpu-bench {}: executor {executor} ({device_name}), {} mode, {}, host {}",
        env!("CARGO_PKG_VERSION"),
        if args.quick { "quick" } else { "full" },
        date.unwrap_or_default(),
        host.trim()
    );
    if !gpu {
        header += "\nno GPU here: the backend ran the host executor (a test double), so only the ratios between transports mean anything";
    }
    header += &format!(
        "\nMatSum {} floats; Jacobi {}x{}, {} sweeps; copies from pageable memory",
        plan.matsum_n, plan.jacobi.0, plan.jacobi.0, plan.jacobi.1
    );
    print_table(&samples, baseline, &header);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&samples)?);
    }
    // Let sessions say goodbye before the embedded backend stops.
    std::thread::sleep(Duration::from_millis(10));
    Ok(())
}
