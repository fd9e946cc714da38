//! `pvgpu-ctl`: talks to a running `pvgpu-backend` over its control socket.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use pvgpu_ctl::api::{CheckpointRequest, RestoreRequest, Session};
use pvgpu_ctl::client::{Control, Endpoint};
use pvgpu_ctl::snapshot;
use std::io::Seek;
use std::path::PathBuf;

mod device_cmds;
mod tenant_cmds;

#[derive(Parser, Debug)]
#[command(
    name = "pvgpu-ctl",
    version,
    about = "Controls a running pvgpu backend: its sessions (list, end, checkpoint, restore, migrate), tenants and keys"
)]
struct Cli {
    /// The backend's control API: unix:PATH (its control socket; default: the backend's default, see
    /// docs/operations.md), or https://HOST:PORT (or http://) where it serves --control-http.
    #[arg(long, value_name = "ADDRESS", value_parser = Endpoint::parse, env = "PVGPU_CTL_CONTROL", global = true)]
    control: Option<Endpoint>,
    /// Over http(s): a file holding the backend's --control-token.
    #[arg(long, value_name = "FILE", env = "PVGPU_CTL_TOKEN_FILE", global = true)]
    token: Option<PathBuf>,
    /// Over https: the authority (PEM) that signed the backend's certificate (default: the system's).
    #[arg(long, value_name = "FILE", env = "PVGPU_CTL_CA", global = true)]
    ca: Option<PathBuf>,
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
    /// Writes a session's state to FILE at its next call that waits, then
    /// detaches it from this backend (its program waits for a restore)
    /// unless --leave-running.
    Checkpoint {
        /// The session's number.
        session: u64,
        /// The snapshot to write (a new file, owner-only).
        file: PathBuf,
        /// Keep the session running here too.
        #[arg(long)]
        leave_running: bool,
        /// Seconds to wait for the session's next call that waits.
        #[arg(long, default_value = "60")]
        timeout: u64,
        /// Prints the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Hands a snapshot to this backend: its program's next connection takes the session back.
    Restore {
        /// The snapshot file.
        file: PathBuf,
        /// Prints the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists restored snapshots whose programs have not taken them back yet, and device memory kept on the GPU for snapshots of sessions that left.
    Restores,
    /// Lets go of what the backend holds for a snapshot: a parked snapshot no program took, or the device memory it keeps on the GPU for a session that left (freed). The session's program cannot go on from that snapshot afterwards.
    Discard {
        /// The snapshot file, as `pvgpu-ctl restores` names it.
        file: String,
    },
    /// Tenants: names that keys belong to and quotas hold for (a backend with --state-dir).
    Tenant {
        #[command(subcommand)]
        cmd: tenant_cmds::TenantCmd,
    },
    /// Tenants' keys: issue, rotate, revoke, list.
    Key {
        #[command(subcommand)]
        cmd: tenant_cmds::KeyCmd,
    },
    /// Lists the backend's GPUs: drained or not, the sessions on each, NVML's gauges.
    Devices {
        /// Prints the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drains a GPU for maintenance, or gives it back.
    Device {
        #[command(subcommand)]
        cmd: device_cmds::DeviceCmd,
    },
    /// Moves a live session to another backend (run it on this backend's host): the other backend checks the session's skeleton first (a refusal stops it with the session never paused), then checkpoint here, restore there (refused there, the session goes back here), and the program's next call goes on there.
    Migrate {
        /// The session's number (at this backend).
        session: u64,
        /// The other backend's control API (unix:PATH, or https://HOST:PORT with the same --token).
        #[arg(long, value_name = "ADDRESS", value_parser = Endpoint::parse, required_unless_present = "peer", requires = "address")]
        to: Option<Endpoint>,
        /// Where the program reaches the other backend, as PVGPU_BACKEND writes it (local:PATH, tcp:HOST:PORT, tls:HOST:PORT, rdma:HOST:PORT).
        #[arg(long, requires = "to")]
        address: Option<String>,
        /// Instead of --to and --address: one of the backend's --peer by name (`pvgpu-ctl peers`); the backend moves the session itself.
        #[arg(long, value_name = "NAME", conflicts_with_all = ["to", "dir"])]
        peer: Option<String>,
        /// Where the snapshot passes (default: /dev/shm, memory); removed once the other backend holds it.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Seconds to wait for the session's next call that waits.
        #[arg(long, default_value = "60")]
        timeout: u64,
        /// Upload the snapshot to the other backend even when its control socket is on this host (always so over https).
        #[arg(long)]
        upload: bool,
        /// Copy the session's device memory through the snapshot even when the other backend is on this host with the same GPUs (by default it stays on the GPU, handed over in place).
        #[arg(long)]
        copy: bool,
        /// Rebuild the session in a fresh worker at the other backend (by default, where its control socket is on this host, a worker is prepared from the session's skeleton before the pause: contexts made and modules loaded while the program runs).
        #[arg(long)]
        cold: bool,
        /// Then wait up to SECONDS for the session to serve its program at the other backend, and report the whole pause and the rebuild's parts (a program that makes no call meanwhile is not waited for).
        #[arg(long, value_name = "SECONDS")]
        wait: Option<u64>,
        /// Prints the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists the backends this one may move sessions to (its --peer options).
    Peers {
        /// Prints the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Checks a snapshot file and describes it (no backend needed).
    Inspect {
        /// The snapshot file.
        file: PathBuf,
        /// Prints its whole description as JSON.
        #[arg(long)]
        json: bool,
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
    let control = connect(&cli)?;
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
        Cmd::Peers { json } => {
            let peers: Vec<pvgpu_ctl::api::Peer> = control.call("GET", "/v1/peers")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&peers)?);
            } else if peers.is_empty() {
                println!("this backend has no peers (pvgpu-backend --peer name=..,control=..,address=..)");
            } else {
                println!("{:<16} {:<40} ADDRESS", "NAME", "CONTROL");
                for p in &peers {
                    println!("{:<16} {:<40} {}", p.name, p.control, p.address);
                }
            }
        }
        Cmd::Migrate { session, to, address, peer, dir, timeout, upload, copy, cold, wait, json } => {
            let r = match (peer, to, address) {
                (Some(peer), _, _) => {
                    let req =
                        pvgpu_ctl::api::MigrateRequest { peer, upload, copy, cold, timeout_seconds: Some(timeout), wait_seconds: wait };
                    control.migrate(session, &req)?
                }
                (None, Some(to), Some(address)) => {
                    let token = control_token(cli.token.as_deref(), &to)?;
                    let target = Control::at(to, token, cli.ca.as_deref())?;
                    let dir = dir.unwrap_or_else(pvgpu_ctl::migrate::default_dir);
                    let how = pvgpu_ctl::migrate::How { upload, copy, cold, unchecked: false };
                    let mut r = pvgpu_ctl::migrate::migrate(&control, &target, session, &address, &dir, timeout, how)?;
                    if let Some(w) = wait {
                        pvgpu_ctl::migrate::wait_back(&target, &mut r, std::time::Duration::from_secs(w));
                    }
                    r
                }
                _ => anyhow::bail!("name the other backend: --peer NAME, or --to CONTROL with --address ADDRESS"),
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "session {} moved to {}: {} of device state{}; room made for the snapshot in {:.3} s, checkpoint {:.3} s (the session held {:.3} s of it), restore {:.3} s{}, move recorded in {:.3} s; its program goes on there at its next call",
                    r.session,
                    r.to,
                    bytes(r.state_bytes),
                    if r.handed_bytes > 0 {
                        format!(" copied, {} left on the GPU (handed over in place)", bytes(r.handed_bytes))
                    } else {
                        String::new()
                    },
                    r.room_seconds,
                    r.checkpoint_seconds - r.room_seconds,
                    r.held_seconds,
                    r.restore_seconds,
                    if r.uploaded { " (uploaded)" } else { "" },
                    r.record_seconds
                );
                if r.prepared {
                    println!("a worker there was prepared from the session's skeleton in {:.3} s, before the pause", r.prepare_seconds);
                } else if let Some(why) = &r.not_prepared {
                    println!("no worker there was prepared before the pause ({why}); a fresh one rebuilt the session");
                }
                if let Some(f) = &r.left_file {
                    println!("the snapshot could not be removed: {f}");
                }
                match (&r.back, wait) {
                    (Some(b), _) => println!(
                        "back at work there after a pause of {:.3} s: {:.3} s after the move was recorded, of which the rebuild {:.3} s{} (contexts {:.3} s, memory {:.3} s, modules {:.3} s, graphs {:.3} s)",
                        b.pause_seconds,
                        b.after_move_seconds,
                        b.rebuild.rebuild_seconds,
                        if b.rebuild.prepared { " in the prepared worker" } else { "" },
                        b.rebuild.contexts_seconds,
                        b.rebuild.memory_seconds,
                        b.rebuild.modules_seconds,
                        b.rebuild.graphs_seconds
                    ),
                    (None, Some(w)) => println!("its program made no call within {w} s; it takes the session back at its next"),
                    (None, None) => {}
                }
            }
        }
        Cmd::Checkpoint { session, file, leave_running, timeout, json } => {
            let req = CheckpointRequest { file: absolute(&file)?, leave_running, timeout_seconds: Some(timeout), ..Default::default() };
            let r = control.checkpoint(session, &req)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                let how = if r.left_running { "still runs here" } else { "left this backend; its program waits for `pvgpu-ctl restore`" };
                println!(
                    "session {} checkpointed to {}: {} of device state, {} file, {:.3} s (of which {:.3} s making room for the file while the session ran); it {how}",
                    r.session,
                    r.file,
                    bytes(r.state_bytes),
                    bytes(r.file_bytes),
                    r.seconds,
                    r.room_seconds
                );
            }
        }
        Cmd::Restore { file, json } => {
            let r = control.restore(&RestoreRequest { file: absolute(&file)?, handed_from: None })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "session {} of {} ({} of device state on {}) is ready; its program takes it back at its next call",
                    r.session,
                    r.peer,
                    bytes(r.state_bytes),
                    r.devices.join(", ")
                );
            }
        }
        Cmd::Restores => {
            for w in control.waiting()? {
                let on_gpu = if w.handed_bytes > 0 { format!("  ({} left on the GPU)", bytes(w.handed_bytes)) } else { String::new() };
                let kept = if w.kept { "  kept here for its restore (here, or where it moved)" } else { "" };
                println!("{}  {}{on_gpu}{kept}", w.peer, w.file);
            }
        }
        Cmd::Discard { file } => {
            let r = control.discard(&pvgpu_ctl::api::DiscardRequest { file: file.clone() })?;
            let what = match (r.parked, r.kept_bytes) {
                (true, 0) => "the parked snapshot dropped".to_string(),
                (true, n) => format!("the parked snapshot dropped, {} of device memory freed", bytes(n)),
                (false, n) => format!("{} of device memory kept on the GPU freed", bytes(n)),
            };
            println!("{file}: {what}; its program cannot go on from it");
        }
        Cmd::Inspect { file, json } => inspect(&file, json)?,
        Cmd::Tenant { cmd } => tenant_cmds::tenant(&control, cmd)?,
        Cmd::Key { cmd } => tenant_cmds::key(&control, cmd)?,
        Cmd::Devices { json } => device_cmds::list(&control, json)?,
        Cmd::Device { cmd } => device_cmds::device(&control, cmd)?,
    }
    Ok(())
}

/// The control API the command line names.
fn connect(cli: &Cli) -> Result<Control> {
    let endpoint = cli.control.clone().unwrap_or_else(|| Endpoint::Unix(pvgpu_ctl::default_socket()));
    let token = control_token(cli.token.as_deref(), &endpoint)?;
    Ok(Control::at(endpoint, token, cli.ca.as_deref())?)
}

/// The bearer token an http(s) endpoint needs, read from `file`.
fn control_token(file: Option<&std::path::Path>, endpoint: &Endpoint) -> Result<Option<String>> {
    match (endpoint, file) {
        (Endpoint::Unix(_), _) => Ok(None),
        (_, Some(file)) => {
            let t = std::fs::read_to_string(file).with_context(|| format!("cannot read the token file {}", file.display()))?;
            Ok(Some(t.trim().to_string()))
        }
        (_, None) => anyhow::bail!("{endpoint} needs the backend's --control-token: pass --token FILE (or set PVGPU_CTL_TOKEN_FILE)"),
    }
}

fn absolute(p: &std::path::Path) -> Result<String> {
    Ok(std::path::absolute(p).with_context(|| format!("cannot make {} absolute", p.display()))?.display().to_string())
}

fn inspect(path: &std::path::Path, json: bool) -> Result<()> {
    let mut f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = f.metadata()?.len();
    snapshot::verify_file(&f, len)?;
    f.seek(std::io::SeekFrom::Start(0))?;
    let (reader, mut meta) = snapshot::Reader::open(std::io::BufReader::new(&mut f), len)?;
    let version = reader.version();
    meta.token = "(hidden)".into();
    if json {
        println!("{}", serde_json::to_string_pretty(&meta)?);
        return Ok(());
    }
    let s = &meta.state;
    println!("snapshot of session {} of {}, format {version}, checksum good", meta.session, meta.peer);
    println!(
        "  executor {}, devices: {}",
        meta.executor,
        meta.devices.iter().map(|d| format!("{} {}", d.ordinal, d.name)).collect::<Vec<_>>().join(", ")
    );
    println!("  {} of device state in a {} file", bytes(meta.state_bytes), bytes(len));
    println!(
        "  {} contexts, {} allocations, {} modules, {} streams, {} events, {} graphs, {} executable graphs, {} arrays, {} texture or surface objects",
        s.contexts.len(),
        s.allocations.len(),
        s.modules.len(),
        s.streams.len(),
        s.events.len(),
        s.graphs.len(),
        s.graph_execs.len(),
        s.arrays.len(),
        s.tex_objects.len()
    );
    Ok(())
}

fn print_table(sessions: &[Session]) {
    let turns = sessions.iter().any(|s| s.gpu_turn_seconds.is_some());
    print!("{:>6}  {:<24} {:<9} {:<16} {:<8} {:>12}  {:>9}", "ID", "PEER", "TRANSPORT", "TENANT", "DEVICES", "MEMORY", "AGE");
    println!("{}", if turns { "  GPU TURN" } else { "" });
    for s in sessions {
        let devices =
            if s.devices.is_empty() { "-".to_string() } else { s.devices.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",") };
        let tenant = s.tenant.as_deref().unwrap_or("-");
        print!(
            "{:>6}  {:<24} {:<9} {:<16} {:<8} {:>12}  {:>9}",
            s.id,
            s.peer,
            s.transport,
            tenant,
            devices,
            bytes(s.memory_bytes),
            age(s.age_seconds)
        );
        // Under --gpu-share weighted: its turn now, and the time it has
        // held while others waited.
        let turn = s.gpu_turn_seconds.map(|t| format!("  {} ({t:.1} s held)", s.gpu_turn.as_deref().unwrap_or("-")));
        println!("{}", if turns { turn.unwrap_or_else(|| "  -".into()) } else { String::new() });
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
