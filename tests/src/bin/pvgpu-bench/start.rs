//! `session_start_ms`: from a program's process start to its first
//! finished command, natively and through each transport.
//!
//! The program is this binary again, started with `--first-command
//! TARGET` (`native`, or a pvgpu address): it makes the device's primary
//! context current, allocates 4 KiB, sets 4 bytes and reads them back, then
//! prints one line. The time runs from before the spawn to that line; the
//! program's exit is not counted (natively the driver tears the context
//! down in the program's process, through pvgpu in the backend after the
//! program has gone). Against the embedded backend a session is a thread
//! of the benchmark's process, as with `--isolation thread`; a backend with
//! worker processes and its pool (`--worker-pool`) is measured with
//! `--connect`.

use anyhow::{Context as _, Result, bail};
use pvgpu_frontend::{BackendAddr, Client, Options, Stream};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Most a start may take before it counts as failed.
const LIMIT: Duration = Duration::from_secs(60);

/// What the started program prints once its first command has returned.
const DONE: &str = "first command done";

/// In the started program: the first command against `target`, then the
/// line the parent waits for.
pub fn child(target: &str) -> Result<()> {
    let value = if target == "native" {
        pvgpu_tests::native::first_command()?
    } else {
        let addr: BackendAddr = target.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
        let c = Client::connect(&addr, &Options::from_env()).with_context(|| format!("connecting to {addr}"))?;
        c.init()?;
        let ctx = c.primary_ctx_retain(c.device_get(0)?)?;
        let d = c.mem_alloc(ctx, 4096)?;
        c.memset(d, 7, 4, 1, Stream::DEFAULT)?;
        let mut v = [0u8; 4];
        c.memcpy_dtoh(&mut v, d)?;
        u32::from_le_bytes(v)
    };
    if value != 7 {
        bail!("the first command read back {value}, not 7");
    }
    println!("{DONE}");
    Ok(())
}

/// Starts the program `n` times against `target`, one after the other
/// (with a pause, so that a backend's pool is full again), and returns each
/// start's time in milliseconds. The TCP key and TLS authority of `opts`
/// are handed to the program.
pub fn measure(target: &str, opts: &Options, n: usize) -> Result<Vec<f64>> {
    let exe = std::env::current_exe().context("finding this program to start it again")?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(300));
        let mut cmd = Command::new(&exe);
        cmd.arg("--first-command").arg(target).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        if let Some(k) = &opts.tcp_key {
            cmd.env("PVGPU_TCP_KEY", k);
        }
        if let Some(ca) = &opts.tls_ca {
            cmd.env("PVGPU_TLS_CA", ca);
        }
        let start = Instant::now();
        let mut child = cmd.spawn().with_context(|| format!("starting {}", exe.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().context("the program's output")?;
        BufReader::new(stdout).read_line(&mut line)?;
        let took = start.elapsed();
        let status = child.wait()?;
        if line.trim() != DONE || !status.success() || took > LIMIT {
            bail!("a program starting against {target} failed ({status}, printed {line:?})");
        }
        times.push(took.as_secs_f64() * 1e3);
    }
    Ok(times)
}
