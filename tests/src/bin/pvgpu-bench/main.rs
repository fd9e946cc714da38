//! `pvgpu-bench`: measures pvgpu against the CUDA driver called directly.
//!
//! Starts an embedded backend (GPU if one is present, else the host test
//! double) with a local shared-memory and a TCP listener, or measures a
//! running backend (`--connect`). For each transport (`native`, `local`,
//! `tcp`) it measures the null-call round trip, the cost of an asynchronous
//! launch, copy bandwidth from 4 KiB to 256 MiB from pageable and from
//! page-locked memory, and the MatSum and Jacobi workloads, several times
//! over, interleaving the transports; where PyTorch and a GPU are present,
//! a training step natively and through the drop-in library. Beside them:
//! a cache-line and a raw TCP ping-pong between the same CPUs, what an
//! idle session costs, and the local ring with both sides on one CPU.
//! Prints medians with their spread, each transport's ratio to native (or
//! to `local` when there is no GPU) and the verdict on each target;
//! `--json` prints the samples, `--plot` draws them.

mod pinning;
mod plot;
mod reference;
mod replay;
mod report;
mod start;
mod torch;
mod workloads;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use pinning::Pins;
use pvgpu_backend::config::{AdmissionConfig, ControlSocket};
use pvgpu_backend::exec::cuda::CudaExecutor;
use pvgpu_backend::exec::host::HostExecutor;
use pvgpu_backend::{Backend, Config, Listen, SessionConfig};
use pvgpu_frontend::{BackendAddr, Client, Options};
use pvgpu_ring::tcp_auth::TcpKey;
use pvgpu_tests::native::NativeGpu;
use pvgpu_tests::{Gpu, TempDir, jacobi_cpu, jacobi_init};
use report::{REFERENCE, Recorder, Results, Sample};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloads::{Plan, Target, latency_histogram, measure};

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
    /// TLS on loopback, ended by the backend's supervisor and relayed to
    /// the session (not measured unless named).
    Tls,
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
    /// Fewer iterations, smaller sizes, one run (a minute or less).
    #[arg(long)]
    quick: bool,
    /// Runs of the whole set, transports interleaved (default 3; 1 with
    /// --quick). The table shows medians and their spread.
    #[arg(long)]
    repeat: Option<usize>,
    /// CPUs of the program's thread and the session's: `CLIENT,BACKEND`
    /// (`3,3` puts both on one), or `off`. Default: two cores of one
    /// package.
    #[arg(long, value_name = "CLIENT,BACKEND|off")]
    cpus: Option<String>,
    /// Draw latency histograms and copy bandwidth against size into an SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Skip the PyTorch training steps.
    #[arg(long)]
    no_torch: bool,
    /// Timed runs of each PyTorch training loop (after a warm-up).
    #[arg(long, default_value = "5")]
    torch_runs: usize,
    /// Steps of each PyTorch training run.
    #[arg(long, default_value = "100")]
    torch_steps: usize,
    /// The drop-in library PyTorch loads as libcuda.so.1 (default:
    /// libpvgpu_cuda.so beside this program).
    #[arg(long, value_name = "PATH")]
    dropin: Option<PathBuf>,
    /// Print the samples and verdicts as JSON on stdout (the tables go to
    /// stderr).
    #[arg(long)]
    json: bool,
    /// Measure a running backend (local:PATH, tcp:HOST:PORT or xen) instead
    /// of an embedded one. Repeatable.
    #[arg(long = "connect", value_name = "ADDR")]
    connect: Vec<String>,
    /// Be the program whose start is measured: one first command against
    /// `native` or a pvgpu address (started by the benchmark itself).
    #[arg(long, value_name = "TARGET", hide = true)]
    first_command: Option<String>,
}

/// The embedded backend with its listeners, pinned to the session CPU.
fn start_backend(gpu: bool, listen: Vec<Listen>, cpus: Option<Vec<usize>>, key_file: &Path, tls: Option<&Tls>) -> Result<Backend> {
    let session = SessionConfig { cpus, ..SessionConfig::default() };
    let tls = tls.map(|t| pvgpu_backend::tls::server_config(&t.cert, &t.key)).transpose()?;
    let admission = AdmissionConfig { tcp_key: Some(TcpKey::from_file(key_file)?), tls, ..AdmissionConfig::default() };
    let cfg = Config { listen, session, admission, control: ControlSocket::Off, metrics: None, control_http: None, peers: Vec::new() };
    Ok(if gpu {
        Backend::start_threads(Arc::new(CudaExecutor::new()?), cfg)?
    } else {
        Backend::start_threads(Arc::new(HostExecutor::new(16 << 30)), cfg)?
    })
}

/// The PEM files of the embedded backend's TLS listener.
struct Tls {
    cert: PathBuf,
    key: PathBuf,
}

/// A transport's end, connected once and measured in every run.
struct Remote {
    name: String,
    addr: BackendAddr,
    client: Client,
}

/// Null-call and launch round trips of the local ring with the program and
/// its session on one CPU: what spinning would cost a guest without a CPU
/// to spare.
fn shared_cpu(dir: &Path, gpu: bool, cpu: usize, key_file: &Path, opts: &Options, run: usize, iters: u32) -> Result<Vec<Sample>> {
    let sock = dir.join("one-cpu.sock");
    let _b = start_backend(gpu, vec![Listen::Local(sock.clone())], Some(vec![cpu]), key_file, None)?;
    let client = Client::connect(&BackendAddr::Local(sock), opts)?;
    let g = Gpu::new(&client)?;
    let exec = client.info().executor.clone();
    let mut rec = Recorder { samples: Vec::new(), transport: "local-1cpu", executor: &exec, run };
    let mut h = latency_histogram()?;
    for i in 0..iters + iters / 10 {
        let s = Instant::now();
        g.null_call()?;
        if i >= iters / 10 {
            h.saturating_record(s.elapsed().as_nanos() as u64);
        }
    }
    rec.add("null_rtt_p50_us", h.value_at_quantile(0.5) as f64 / 1e3, "us");
    rec.add("null_rtt_p99_us", h.value_at_quantile(0.99) as f64 / 1e3, "us");
    let null = g.func("pvgpu_null")?;
    let n = iters / 4;
    let s = Instant::now();
    for _ in 0..n {
        pvgpu_tests::Device::launch(&g, &null, [1, 1, 1], [1, 1, 1], &[])?;
        pvgpu_tests::Device::sync(&g)?;
    }
    rec.add("launch_sync_us", s.elapsed().as_secs_f64() * 1e6 / n as f64, "us");
    Ok(rec.samples)
}

/// `0-3,8` from a list of CPUs.
fn cpu_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j > i { format!("{}-{}", cpus[i], cpus[j]) } else { cpus[i].to_string() });
        i = j + 1;
    }
    parts.join(",")
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if let Some(target) = &args.first_command {
        return start::child(target);
    }
    let setup = Setup::new(&args)?;
    let (targets, _backend) = connect(&args, &setup)?;
    let gpus = targets.remotes.iter().map(|r| Gpu::new(&r.client)).collect::<pvgpu_frontend::Result<Vec<_>>>()?;
    let (mut samples, rtt) = measure_all(&setup, &targets, &gpus)?;
    if setup.gpu && targets.embedded && !args.no_torch {
        let cpus: Vec<usize> = setup.all_cpus.iter().copied().filter(|&c| setup.pins.is_none_or(|p: Pins| p.backend != c)).collect();
        // The training loops run over local and TCP (the drop-in library
        // would need the TLS authority too).
        let remotes: Vec<(&str, String)> =
            targets.remotes.iter().filter(|r| r.name != "tls").map(|r| (r.name.as_str(), r.addr.to_string())).collect();
        samples.extend(torch::steps(
            args.dropin.as_deref(),
            cpus,
            &remotes,
            &setup.key_file,
            setup.executor,
            args.torch_runs,
            args.torch_steps,
        ));
    }
    report_all(&args, &setup, &targets, &samples, &rtt)?;
    // Let sessions say goodbye before the embedded backend stops.
    drop(gpus);
    drop(targets);
    std::thread::sleep(Duration::from_millis(10));
    Ok(())
}

/// What every step of a run shares: the machine, its CPUs, the plan.
struct Setup {
    runs: usize,
    quick: bool,
    all_cpus: Vec<usize>,
    pins: Option<Pins>,
    /// Where the program runs (see [`Setup::new`]).
    client_cpus: Vec<usize>,
    native: Option<NativeGpu>,
    gpu: bool,
    executor: &'static str,
    plan: Plan,
    date: Option<String>,
    dir: TempDir,
    key_file: PathBuf,
}

impl Setup {
    fn new(args: &Args) -> Result<Setup> {
        let all_cpus = pvgpu_backend::affinity::allowed_cpus();
        let pins = pinning::choose(args.cpus.as_deref())?;
        // The program runs on every CPU but the sessions' (its copies use a
        // few threads), unless --cpus named one; the references, and the
        // run with both sides on one CPU, pin it to its own.
        let client_cpus: Vec<usize> = match (pins, &args.cpus) {
            (Some(p), None) => all_cpus.iter().copied().filter(|&c| c != p.backend).collect(),
            (Some(p), Some(_)) => vec![p.client],
            (None, _) => all_cpus.clone(),
        };
        pin(&client_cpus)?;
        let native = match args.executor {
            ExecChoice::Host => None,
            _ => NativeGpu::open().context("the CUDA driver is present but failed to start")?,
        };
        if args.executor == ExecChoice::Cuda && native.is_none() {
            bail!("--executor cuda: no CUDA driver or device found");
        }
        let gpu = native.is_some();
        let dir = TempDir::new("bench");
        let key_file = dir.0.join("tcp.key");
        pvgpu_tests::write_key_file(&key_file);
        Ok(Setup {
            runs: args.repeat.unwrap_or(if args.quick { 1 } else { 3 }).max(1),
            quick: args.quick,
            all_cpus,
            pins,
            client_cpus,
            native,
            gpu,
            executor: if gpu { "cuda" } else { "host" },
            plan: Plan::new(args.quick, gpu),
            date: std::process::Command::new("date")
                .arg("+%F")
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()),
            dir,
            key_file,
        })
    }
}

/// Pins this thread to `cpus`.
fn pin(cpus: &[usize]) -> Result<()> {
    pvgpu_backend::affinity::pin_current_thread(cpus).with_context(|| format!("pinning to CPUs {cpus:?}"))
}

/// The transports measured, connected once.
struct Targets {
    remotes: Vec<Remote>,
    with_native: bool,
    embedded: bool,
    opts: Options,
}

/// Connects to the embedded backend (started here) or to those `--connect`
/// names.
fn connect(args: &Args, setup: &Setup) -> Result<(Targets, Option<Backend>)> {
    let mut opts = Options::from_env();
    let mut addrs: Vec<(String, BackendAddr)> = Vec::new();
    let embedded = args.connect.is_empty();
    let backend = if embedded {
        let sock = setup.dir.0.join("bench.sock");
        opts.tcp_key = Some(setup.key_file.clone());
        let mut listen = vec![Listen::Local(sock.clone()), Listen::Tcp("127.0.0.1:0".into())];
        let tls = args.transport.contains(&Which::Tls).then(|| {
            let (ca, cert, key) = pvgpu_tests::write_tls_files(&setup.dir.0);
            opts.tls_ca = Some(ca);
            listen.push(Listen::Tls("127.0.0.1:0".into()));
            Tls { cert, key }
        });
        let b = start_backend(setup.gpu, listen, setup.pins.map(|p| vec![p.backend]), &setup.key_file, tls.as_ref())?;
        if args.transport.contains(&Which::Local) {
            addrs.push(("local".into(), BackendAddr::Local(sock)));
        }
        if args.transport.contains(&Which::Tcp) {
            addrs.push(("tcp".into(), BackendAddr::Tcp(b.tcp_addrs()[0].to_string())));
        }
        if tls.is_some() {
            addrs.push(("tls".into(), BackendAddr::Tls(b.tcp_addrs()[1].to_string())));
        }
        Some(b)
    } else {
        for a in &args.connect {
            let addr: BackendAddr = a.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            let name = match &addr {
                BackendAddr::Local(_) => "local",
                BackendAddr::Tcp(_) => "tcp",
                BackendAddr::Tls(_) => "tls",
                BackendAddr::Rdma(_) => "rdma",
                BackendAddr::Xen(_) => "xen",
            };
            addrs.push((name.into(), addr));
        }
        None
    };
    let mut remotes = Vec::new();
    for (name, addr) in addrs {
        let client = Client::connect(&addr, &opts).with_context(|| format!("connecting to {addr}"))?;
        remotes.push(Remote { name, addr, client });
    }
    let with_native = setup.gpu && args.transport.contains(&Which::Native);
    Ok((Targets { remotes, with_native, embedded, opts }, backend))
}

/// Each target's null-call round trips, by name.
type Latencies = Vec<(String, Histogram<u64>)>;

/// Every run: the workloads natively and over each transport, the
/// references, and the local ring on one CPU; then an idle session's CPU.
fn measure_all(setup: &Setup, t: &Targets, gpus: &[Gpu<'_>]) -> Result<(Vec<Sample>, Latencies)> {
    let (plan, runs, executor) = (&setup.plan, setup.runs, setup.executor);
    let n_targets = t.remotes.len() as u64 + t.with_native as u64;
    let pb = ProgressBar::new((plan.steps() + 1) * n_targets * runs as u64 + 1);
    pb.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]").unwrap_or_else(|_| ProgressStyle::default_bar()));
    pb.set_message("CPU reference of Jacobi");
    let jacobi_ref = jacobi_cpu(&jacobi_init(plan.jacobi.0), plan.jacobi.0, plan.jacobi.1);
    pb.inc(1);
    let mut samples = Vec::new();
    let mut rtt: Latencies = Vec::new();
    if t.with_native {
        rtt.push(("native".into(), latency_histogram()?));
    }
    for r in &t.remotes {
        rtt.push((r.name.clone(), latency_histogram()?));
    }
    let native_rows = t.with_native as usize;
    for run in 0..runs {
        if let (Some(n), true) = (&setup.native, t.with_native) {
            n.make_current()?;
            let mut rec = Recorder { samples: Vec::new(), transport: "native", executor, run };
            measure(n, plan, &mut rec, &pb, &jacobi_ref, &mut rtt[0].1)?;
            samples.extend(rec.samples);
        }
        for (i, (r, g)) in t.remotes.iter().zip(gpus).enumerate() {
            let exec_name = r.client.info().executor.clone();
            let mut rec = Recorder { samples: Vec::new(), transport: &r.name, executor: &exec_name, run };
            let h = &mut rtt[native_rows + i].1;
            measure(g, plan, &mut rec, &pb, &jacobi_ref, h).with_context(|| format!("measuring {} ({})", r.name, r.addr))?;
            samples.extend(rec.samples);
        }
        samples.extend(references(setup, t, &pb, run)?);
    }
    if t.embedded && !t.remotes.is_empty() {
        pb.set_message("an idle session's CPU");
        let mut rec = Recorder { samples: Vec::new(), transport: REFERENCE, executor, run: 0 };
        rec.add("idle_cpu_percent", reference::idle_cpu_percent(Duration::from_secs(1)), "%");
        samples.extend(rec.samples);
    }
    // Programs started afresh come last: the sessions they leave end in
    // this process, which the idle measurement above must not see.
    for run in 0..runs {
        samples.extend(session_starts(setup, t, &pb, run)?);
    }
    pb.finish_and_clear();
    Ok((samples, rtt))
}

/// One run's references (cache line and raw TCP ping-pongs between the
/// pinned CPUs) and the local ring with both sides on one CPU.
fn references(setup: &Setup, t: &Targets, pb: &ProgressBar, run: usize) -> Result<Vec<Sample>> {
    pb.set_message("references");
    if let Some(p) = setup.pins {
        pin(&[p.client])?;
    }
    let mut rec = Recorder { samples: Vec::new(), transport: REFERENCE, executor: setup.executor, run };
    reference::measure(&mut rec, setup.pins.map(|p| (p.client, p.backend)), setup.plan.rtt_iters)?;
    let mut samples = rec.samples;
    if let (Some(p), true) = (setup.pins, t.embedded) {
        pb.set_message("local ring, both sides on one CPU");
        samples.extend(shared_cpu(&setup.dir.0, setup.gpu, p.client, &setup.key_file, &t.opts, run, setup.plan.rtt_iters / 4)?);
    }
    pin(&setup.client_cpus)?;
    Ok(samples)
}

/// One run's session starts: a program started afresh against each
/// target, a few times, each start a sample.
fn session_starts(setup: &Setup, t: &Targets, pb: &ProgressBar, run: usize) -> Result<Vec<Sample>> {
    let mut targets: Vec<(String, String)> = Vec::new();
    if t.with_native {
        targets.push(("native".into(), "native".into()));
    }
    targets.extend(t.remotes.iter().map(|r| (r.name.clone(), r.addr.to_string())));
    let mut rec = Recorder { samples: Vec::new(), transport: "", executor: setup.executor, run };
    for (name, target) in &targets {
        pb.set_message(format!("session start, {name}"));
        let times = start::measure(target, &t.opts, if setup.quick { 3 } else { 5 })?;
        rec.transport = name;
        for ms in times {
            rec.add("session_start_ms", ms, "ms");
        }
        pb.inc(1);
    }
    Ok(rec.samples)
}

/// Prints the table and the verdicts; draws the plot and writes JSON when
/// asked.
fn report_all(args: &Args, setup: &Setup, t: &Targets, samples: &[Sample], rtt: &Latencies) -> Result<()> {
    let device_name = setup.native.as_ref().map_or_else(|| "host test double".to_string(), |n| n.name.clone());
    let results = Results { samples };
    let baseline = if samples.iter().any(|s| s.transport == "native") {
        "native".to_string()
    } else {
        t.remotes.first().map_or("local".into(), |r| r.name.clone())
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let cpus = match setup.pins {
        Some(p) => {
            format!("sessions on CPU {}, program on CPUs {} (references on CPU {})", p.backend, cpu_list(&setup.client_cpus), p.client)
        }
        None => "unpinned".into(),
    };
    let mut header = format!(
        "pvgpu-bench {}: executor {} ({device_name}), {} mode, {} run(s), {}, host {}, {cpus}",
        env!("CARGO_PKG_VERSION"),
        setup.executor,
        if setup.quick { "quick" } else { "full" },
        setup.runs,
        setup.date.clone().unwrap_or_default(),
        host.trim()
    );
    if !setup.gpu {
        header += "\nno GPU here: the backend ran the host executor (a test double), so only the ratios between transports mean anything";
    }
    let plan = &setup.plan;
    header += &format!("\nMatSum {} floats; Jacobi {}x{}, {} sweeps", plan.matsum_n, plan.jacobi.0, plan.jacobi.0, plan.jacobi.1);
    results.print(&baseline, &header);
    let verdicts = if setup.gpu { results.targets(&plan.sizes) } else { Vec::new() };
    report::print_targets(&verdicts);
    if let Some(path) = &args.plot {
        let title = format!("pvgpu-bench, {device_name}, {}", setup.date.clone().unwrap_or_default());
        plot::draw(path, &title, rtt, &results, &plan.sizes).with_context(|| format!("drawing {}", path.display()))?;
        eprintln!("\nplot: {}", path.display());
    }
    if args.json {
        let out = serde_json::json!({ "header": header, "cpus": cpus, "samples": samples, "targets": verdicts });
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}
