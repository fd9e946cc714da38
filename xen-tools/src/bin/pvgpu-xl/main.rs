//! `pvgpu-xl`: the toolstack part of pvgpu. `xl` has no vgpu device type,
//! so this creates and removes the device's XenStore directories as libxl
//! does for its own devices. Run it in Dom0.
//!
//! ```text
//! pvgpu-xl attach <domain> [--count N] [--devid N]
//! pvgpu-xl detach <domain> [--devid N]
//! pvgpu-xl list [<domain>]
//! pvgpu-xl save <domain> <file> [--timeout S]
//! pvgpu-xl restore <file>
//! pvgpu-xl migrate <domain> <host> [--ssh COMMAND] [--dir DIR] [--timeout S]
//! pvgpu-xl adopt <dir>
//! ```

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use pvgpu_xen::vgpu::{self, be, fe};
use pvgpu_xen::xenbus::{read_state, write_state};
use pvgpu_xen::{XenStore, XenbusState, XsAccess};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod migrate;
mod save;

#[derive(Parser, Debug)]
#[command(name = "pvgpu-xl", version, about = "Attach, detach and list pvgpu vgpu devices of Xen guests")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Gives a guest vgpu devices (one per GPU program it runs at once).
    Attach {
        /// Domain name or id.
        domain: String,
        /// How many devices to add.
        #[arg(long, default_value = "1")]
        count: u32,
        /// Id of the first device (default: the lowest free ids).
        #[arg(long)]
        devid: Option<u32>,
        /// Domain of the backend (where pvgpu-backend runs).
        #[arg(long, default_value = "0")]
        backend_domid: u16,
    },
    /// Removes a guest's vgpu devices (all, or one), ending their sessions.
    Detach {
        /// Domain name or id.
        domain: String,
        /// Only this device.
        #[arg(long)]
        devid: Option<u32>,
        /// Domain of the backend.
        #[arg(long, default_value = "0")]
        backend_domid: u16,
    },
    /// `xl save` of a guest whose programs hold GPU sessions: each session is checkpointed
    /// (into FILE.pvgpu/) and leaves the backend first.
    Save {
        /// Domain name or id.
        domain: String,
        /// The save file, as `xl save` takes it.
        file: PathBuf,
        /// How long each session may take to reach a call that waits for a reply (where it is
        /// checkpointed), in seconds.
        #[arg(long, default_value = "60")]
        timeout: u64,
        #[command(flatten)]
        backend: Backend,
    },
    /// `xl restore` of a guest saved with `pvgpu-xl save`: its vgpu devices, and its GPU
    /// sessions handed back to the backend for its programs to take.
    Restore {
        /// The save file.
        file: PathBuf,
        #[command(flatten)]
        backend: Backend,
    },
    /// `xl migrate` of a guest whose programs hold GPU sessions: each session is checkpointed
    /// into DIR (copied to the host), then the guest migrates, and the sessions are handed to
    /// it where it runs (`pvgpu-xl adopt DIR` there).
    Migrate {
        /// Domain name or id.
        domain: String,
        /// The host, as `xl migrate` takes it (localhost: this one).
        host: String,
        /// The remote shell, as `xl migrate -s` takes it: `sh` runs it with the host and a
        /// command after it.
        #[arg(long, default_value = "ssh")]
        ssh: String,
        /// The folder for the guest's GPU sessions, here and on the host (made owner-only;
        /// default /var/tmp/pvgpu-migrate-DOMAIN).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// How long each session may take to reach a call that waits for a reply, in seconds.
        #[arg(long, default_value = "60")]
        timeout: u64,
        #[command(flatten)]
        backend: Backend,
    },
    /// Gives a guest that now runs here (migrated with `pvgpu-xl migrate`) its vgpu devices and
    /// hands its GPU sessions from DIR to the backend.
    Adopt {
        /// The folder `pvgpu-xl migrate` sent.
        dir: PathBuf,
        #[command(flatten)]
        backend: Backend,
    },
    /// Lists vgpu devices and their states.
    List {
        /// Only this domain.
        domain: Option<String>,
        /// Domain of the backend.
        #[arg(long, default_value = "0")]
        backend_domid: u16,
    },
}

/// Where the backend runs, and its control socket.
#[derive(clap::Args, Debug)]
struct Backend {
    /// The backend's control socket, unix:PATH (default: the backend's default).
    #[arg(long, value_name = "unix:PATH", value_parser = pvgpu_ctl::client::Endpoint::parse)]
    control: Option<pvgpu_ctl::client::Endpoint>,
    /// Domain of the backend.
    #[arg(long, default_value = "0")]
    backend_domid: u16,
}

/// A domain id from a number or a name (`/local/domain/*/name`).
fn resolve(xs: &mut XenStore, domain: &str) -> Result<u16> {
    if let Ok(id) = domain.parse() {
        return Ok(id);
    }
    for d in xs.directory("/local/domain").context("listing domains")? {
        if let Ok(name) = xs.read_string(&format!("/local/domain/{d}/name")) {
            if name == domain {
                return d.parse().with_context(|| format!("domain directory {d} is not a number"));
            }
        }
    }
    bail!("no domain named {domain} (see `xl list`)")
}

fn devices(xs: &mut XenStore, backend: u16, domid: u16) -> Result<Vec<u32>> {
    let root = format!("{}/{domid}", vgpu::backend_root(backend));
    match xs.directory(&root) {
        Ok(d) => {
            let mut ids: Vec<u32> = d.iter().filter_map(|s| s.parse().ok()).collect();
            ids.sort_unstable();
            Ok(ids)
        }
        Err(e) if e.is_not_found() => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let mut xs = XenStore::open().context("cannot reach XenStore (run pvgpu-xl in Dom0, with xenstored running)")?;
    match cli.cmd {
        Cmd::Attach { domain, count, devid, backend_domid } => attach(&mut xs, &domain, count, devid, backend_domid),
        Cmd::Detach { domain, devid, backend_domid } => detach(&mut xs, &domain, devid, backend_domid),
        Cmd::List { domain, backend_domid } => list(&mut xs, domain.as_deref(), backend_domid),
        Cmd::Save { domain, file, timeout, backend: b } => {
            save::save(&mut xs, &control_api(b.control)?, &domain, &file, timeout, b.backend_domid)
        }
        Cmd::Restore { file, backend: b } => save::restore(&mut xs, &control_api(b.control)?, &file, b.backend_domid),
        Cmd::Migrate { domain, host, ssh, dir, timeout, backend: b } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(format!("/var/tmp/pvgpu-migrate-{domain}")));
            let to = migrate::Target { host: &host, ssh: &ssh };
            migrate::migrate(&mut xs, &control_api(b.control)?, &domain, &to, &dir, timeout, b.backend_domid)
        }
        Cmd::Adopt { dir, backend: b } => save::adopt(&mut xs, &control_api(b.control)?, &dir, b.backend_domid),
    }
}

/// The backend's control API over its socket on this host.
fn control_api(endpoint: Option<pvgpu_ctl::client::Endpoint>) -> Result<pvgpu_ctl::client::Control> {
    let endpoint = endpoint.unwrap_or_else(|| pvgpu_ctl::client::Endpoint::Unix(pvgpu_ctl::default_socket()));
    if !matches!(endpoint, pvgpu_ctl::client::Endpoint::Unix(_)) {
        bail!("pvgpu-xl speaks to the backend in this domain: give its control socket as unix:PATH");
    }
    Ok(pvgpu_ctl::client::Control::at(endpoint, None, None)?)
}

/// `attach`: `count` new devices, numbered from `devid` or the first free.
fn attach(xs: &mut XenStore, domain: &str, count: u32, devid: Option<u32>, backend_domid: u16) -> Result<()> {
    let domid = resolve(xs, domain)?;
    let existing = devices(xs, backend_domid, domid)?;
    let mut next = devid.unwrap_or(0);
    for _ in 0..count {
        while devid.is_none() && existing.contains(&next) {
            next += 1;
        }
        vgpu::create_device(xs, backend_domid, domid, next).with_context(|| format!("creating vgpu device {next} of domain {domid}"))?;
        println!("attached vgpu {next} to domain {domid} ({})", vgpu::frontend_dir(domid, next));
        next += 1;
    }
    Ok(())
}

/// `detach`: each device taken offline, its session ended (waited for up to
/// 10 s), and removed.
fn detach(xs: &mut XenStore, domain: &str, devid: Option<u32>, backend_domid: u16) -> Result<()> {
    let domid = resolve(xs, domain)?;
    let ids = match devid {
        Some(d) => vec![d],
        None => devices(xs, backend_domid, domid)?,
    };
    for id in ids {
        let be_dir = vgpu::backend_dir(backend_domid, domid, id);
        let fe_dir = vgpu::frontend_dir(domid, id);
        // Take the device offline and end its session, as xl does.
        let _ = xs.transaction(|tx| {
            tx.write(&vgpu::key(&be_dir, be::ONLINE), b"0")?;
            if tx.try_read(&vgpu::key(&fe_dir, fe::STATE))?.is_some() {
                write_state(tx, &fe_dir, XenbusState::Closing)?;
            }
            Ok(())
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match read_state(xs, &be_dir) {
                Ok(XenbusState::Closed | XenbusState::Unknown | XenbusState::Initialising | XenbusState::InitWait) | Err(_) => break,
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        vgpu::remove_device(xs, backend_domid, domid, id).with_context(|| format!("removing vgpu device {id}"))?;
        println!("detached vgpu {id} from domain {domid}");
    }
    Ok(())
}

/// `list`: every device of `domain` (or of every guest), with its states,
/// executor and claiming process.
fn list(xs: &mut XenStore, domain: Option<&str>, backend_domid: u16) -> Result<()> {
    let domains: Vec<u16> = match domain {
        Some(d) => vec![resolve(xs, d)?],
        None => match xs.directory(&vgpu::backend_root(backend_domid)) {
            Ok(d) => d.iter().filter_map(|s| s.parse().ok()).collect(),
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => return Err(e.into()),
        },
    };
    println!("{:>6} {:>5}  {:<14} {:<14} {:<8} claimed by", "domain", "devid", "frontend", "backend", "executor");
    for domid in domains {
        for id in devices(xs, backend_domid, domid)? {
            let (f, b) = vgpu::states(xs, backend_domid, domid, id)?;
            let be_dir = vgpu::backend_dir(backend_domid, domid, id);
            let exec = xs.read_string(&vgpu::key(&be_dir, be::EXECUTOR)).unwrap_or_else(|_| "-".into());
            let claim = xs
                .read_string(&vgpu::key(&vgpu::frontend_dir(domid, id), fe::CLAIM))
                // PID.N.NANOS: the claiming process and its connection.
                .map(|p| format!("pid {}", p.split('.').next().unwrap_or_default()))
                .unwrap_or_default();
            println!("{domid:>6} {id:>5}  {:<14} {:<14} {exec:<8} {claim}", f.name(), b.name());
        }
    }
    Ok(())
}
