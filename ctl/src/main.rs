//! `pvgpu-ctl`: talks to a running `pvgpu-backend` over its control socket.

use anyhow::Result;
use clap::{Parser, Subcommand};
use pvgpu_ctl::api::Session;
use pvgpu_ctl::client::Control;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "pvgpu-ctl", version, about = "Controls a running pvgpu backend: lists and ends its sessions")]
struct Cli {
    /// The backend's control socket, unix:PATH (default: the backend's default, see docs/operations.md).
    #[arg(long, value_name = "unix:PATH", value_parser = pvgpu_ctl::parse_address, global = true)]
    control: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Lists the live sessions: number, peer, transport, devices, memory held, age.
    Sessions {
        /// Prints the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Shows one session.
    Show {
        /// The session's number.
        session: u64,
        /// Prints the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Ends a session: its program's next call fails with CUDA_ERROR_DEVICE_UNAVAILABLE.
    End {
        /// The session's number.
        session: u64,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("pvgpu-ctl: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let control = Control::new(cli.control.unwrap_or_else(pvgpu_ctl::default_socket));
    match cli.command {
        Cmd::Sessions { json } => {
            let sessions = control.sessions()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&sessions)?);
            } else {
                print_table(&sessions);
            }
        }
        Cmd::Show { session, json } => {
            let s = control.session(session)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print_table(std::slice::from_ref(&s));
            }
        }
        Cmd::End { session } => {
            let s = control.end(session)?;
            println!("session {} ({}, {}) is ending", s.id, s.peer, s.transport);
        }
    }
    Ok(())
}

fn print_table(sessions: &[Session]) {
    println!("{:>6}  {:<24} {:<9} {:<8} {:>12}  {:>9}", "ID", "PEER", "TRANSPORT", "DEVICES", "MEMORY", "AGE");
    for s in sessions {
        let devices =
            if s.devices.is_empty() { "-".to_string() } else { s.devices.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",") };
        println!("{:>6}  {:<24} {:<9} {:<8} {:>12}  {:>9}", s.id, s.peer, s.transport, devices, bytes(s.memory_bytes), age(s.age_seconds));
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (n as f64, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

fn age(secs: f64) -> String {
    let s = secs as u64;
    match s {
        0..60 => format!("{secs:.1}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}
