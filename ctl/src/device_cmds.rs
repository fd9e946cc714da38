//! `pvgpu-ctl devices` and `pvgpu-ctl device drain|resume`.

use anyhow::{Result, bail};
use clap::Subcommand;
use pvgpu_ctl::api::Gpu;
use pvgpu_ctl::client::Control;
use std::time::{Duration, Instant};

#[derive(Subcommand, Debug)]
pub enum DeviceCmd {
    /// Drains a GPU for maintenance: new sessions are not given it (live ones keep it).
    Drain {
        /// The GPU's number (`pvgpu-ctl devices` lists them).
        gpu: u32,
        /// Then waits, at most SECS seconds, until no live session has a context on it.
        #[arg(long, value_name = "SECS")]
        wait: Option<u64>,
        /// Then moves each live session on it to this peer of the backend (`pvgpu-ctl peers`), one after another.
        #[arg(long, value_name = "PEER")]
        move_to: Option<String>,
    },
    /// Gives a drained GPU back to new sessions.
    Resume {
        /// The GPU's number.
        gpu: u32,
    },
}

/// `pvgpu-ctl devices`.
pub fn list(control: &Control, json: bool) -> Result<()> {
    let gpus: Vec<Gpu> = control.call("GET", "/v1/devices")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&gpus)?);
    } else {
        print_gpus(&gpus);
    }
    Ok(())
}

/// `pvgpu-ctl device ...`.
pub fn device(control: &Control, cmd: DeviceCmd) -> Result<()> {
    match cmd {
        DeviceCmd::Drain { gpu, wait, move_to } => {
            let g: Gpu = control.call("POST", &format!("/v1/devices/{gpu}/drain"))?;
            println!("GPU {gpu} drained: new sessions are not given it; {}", users(&g));
            if let Some(peer) = move_to {
                move_off(control, &g, &peer);
            }
            if let Some(secs) = wait {
                wait_out(control, gpu, Duration::from_secs(secs))?;
            }
        }
        DeviceCmd::Resume { gpu } => {
            let _: Gpu = control.call("DELETE", &format!("/v1/devices/{gpu}/drain"))?;
            println!("GPU {gpu} is given to new sessions again");
        }
    }
    Ok(())
}

/// Moves each session on `g` to `peer`; says what became of each (a
/// session that would not move stays, and `--wait` then says so).
fn move_off(control: &Control, g: &Gpu, peer: &str) {
    for &id in &g.sessions {
        let req = pvgpu_ctl::api::MigrateRequest {
            peer: peer.to_string(),
            upload: false,
            copy: false,
            cold: false,
            timeout_seconds: None,
            wait_seconds: None,
        };
        match control.migrate(id, &req) {
            Ok(r) => println!(
                "session {id} moved to {peer} ({}): {} of device state, {:.3} s",
                r.to,
                crate::bytes(r.state_bytes),
                r.checkpoint_seconds + r.restore_seconds + r.record_seconds
            ),
            Err(e) => println!("session {id} stays on GPU {}: {e}", g.index),
        }
    }
}

/// Waits until no live session has a context on GPU `gpu`.
fn wait_out(control: &Control, gpu: u32, limit: Duration) -> Result<()> {
    let t = Instant::now();
    loop {
        let gpus: Vec<Gpu> = control.call("GET", "/v1/devices")?;
        let Some(g) = gpus.into_iter().find(|g| g.index == gpu) else { bail!("the backend no longer lists GPU {gpu}") };
        if g.sessions.is_empty() {
            println!("GPU {gpu} is free: no live session uses it ({:.1} s)", t.elapsed().as_secs_f64());
            return Ok(());
        }
        if t.elapsed() >= limit {
            bail!(
                "GPU {gpu} still has {} after {} s; it stays drained. End them with `pvgpu-ctl end ID`, or wait longer",
                users(&g),
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn users(g: &Gpu) -> String {
    match g.sessions.len() {
        0 => "no live session uses it".into(),
        _ => format!("live sessions on it: {}", g.sessions.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

fn print_gpus(gpus: &[Gpu]) {
    println!("{:>4}  {:<28} {:<8} {:>6} {:>21}  SESSIONS", "GPU", "NAME", "STATE", "UTIL", "MEMORY");
    for g in gpus {
        let state = if g.drained { "drained" } else { "open" };
        let util = g.utilization_ratio.map_or("-".into(), |u| format!("{:.0}%", u * 100.0));
        let mem = match (g.memory_used_bytes, g.memory_total_bytes) {
            (Some(u), Some(t)) => format!("{} / {}", crate::bytes(u), crate::bytes(t)),
            _ => "-".into(),
        };
        let sessions = if g.sessions.is_empty() { "-".into() } else { g.sessions.iter().map(u64::to_string).collect::<Vec<_>>().join(",") };
        println!("{:>4}  {:<28} {:<8} {:>6} {:>21}  {}", g.index, g.name, state, util, mem, sessions);
    }
}
