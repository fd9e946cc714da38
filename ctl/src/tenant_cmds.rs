//! `pvgpu-ctl tenant ...` and `pvgpu-ctl key ...`.

use anyhow::{Context, Result};
use clap::Subcommand;
use pvgpu_ctl::api::{IssueKey, IssuedKey, Key, NewTenant, Quota, Revoked, Tenant};
use pvgpu_ctl::client::Control;
use std::path::PathBuf;

/// A limit on the command line: a number, or `unlimited`.
#[derive(Debug, Clone)]
pub enum Limit<T> {
    /// At most this.
    At(T),
    /// No limit of the tenant's own.
    Unlimited,
}

impl<T> Limit<T> {
    fn get(self) -> Option<T> {
        match self {
            Limit::At(v) => Some(v),
            Limit::Unlimited => None,
        }
    }
}

fn memory(s: &str) -> Result<Limit<u64>, String> {
    if s == "unlimited" { Ok(Limit::Unlimited) } else { pvgpu_ctl::parse_size(s).map(Limit::At) }
}

/// A GPU list on the command line: ordinals, comma-separated, or `all`.
fn gpus(s: &str) -> Result<Limit<Vec<u32>>, String> {
    if s == "all" {
        return Ok(Limit::Unlimited);
    }
    s.split(',')
        .map(|n| n.trim().parse::<u32>().map_err(|_| format!("{n:?} is not a GPU number (use e.g. 0,2 or all)")))
        .collect::<Result<_, _>>()
        .map(Limit::At)
}

fn share(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if (1..=1000).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a GPU share (a weight from 1 to 1000)")),
    }
}

fn sessions(s: &str) -> Result<Limit<u32>, String> {
    if s == "unlimited" { Ok(Limit::Unlimited) } else { s.parse().map(Limit::At).map_err(|_| format!("{s:?} is not a number of sessions")) }
}

#[derive(Subcommand, Debug)]
pub enum TenantCmd {
    /// Adds a tenant.
    Add {
        /// Its name (letters, digits, '.', '_', '-').
        name: String,
        /// Device memory all its sessions may hold together (e.g. 64MiB), or unlimited.
        #[arg(long, value_parser = memory, default_value = "unlimited")]
        memory: Limit<u64>,
        /// Sessions it may hold at once, or unlimited.
        #[arg(long, value_parser = sessions, default_value = "unlimited")]
        sessions: Limit<u32>,
        /// The backend's GPUs its sessions are given, in the order they see them (e.g. 1,0), or all.
        #[arg(long, value_parser = gpus, default_value = "all")]
        gpus: Limit<Vec<u32>>,
        /// Its weight in GPU time against other tenants (1 to 1000) when the backend runs --gpu-share weighted.
        #[arg(long, value_parser = share, default_value = "1")]
        share: u32,
        /// A local user (uid:N) or Xen guest (domain:NAME) whose sessions are the tenant's; repeatable.
        #[arg(long = "member", value_name = "PEER")]
        members: Vec<String>,
    },
    /// Lists the tenants with what they hold now.
    List {
        /// Prints the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows one tenant.
    Show {
        /// Its name.
        name: String,
        /// Prints the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Changes a tenant's quota; its live sessions are held to it from their next allocation.
    Set {
        /// Its name.
        name: String,
        /// Device memory all its sessions may hold together, or unlimited.
        #[arg(long, value_parser = memory)]
        memory: Option<Limit<u64>>,
        /// Sessions it may hold at once, or unlimited.
        #[arg(long, value_parser = sessions)]
        sessions: Option<Limit<u32>>,
        /// The backend's GPUs its new sessions are given (e.g. 0,2), or all.
        #[arg(long, value_parser = gpus)]
        gpus: Option<Limit<Vec<u32>>>,
        /// Its weight in GPU time (1 to 1000), applied to its live sessions at once.
        #[arg(long, value_parser = share)]
        share: Option<u32>,
    },
    /// Makes a local user (uid:N) or Xen guest (domain:NAME) a member: its new sessions are the tenant's.
    Join {
        /// The tenant.
        name: String,
        /// The peer.
        peer: String,
    },
    /// Takes a member out: its new sessions are its own again.
    Leave {
        /// The tenant.
        name: String,
        /// The peer.
        peer: String,
    },
    /// Removes a tenant: its keys are revoked and its sessions end.
    Remove {
        /// Its name.
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum KeyCmd {
    /// Issues a key to a tenant and writes its file (owner-only); programs name it in PVGPU_TCP_KEY.
    Issue {
        /// The tenant.
        tenant: String,
        /// The key file to write (must not exist).
        #[arg(long)]
        out: PathBuf,
    },
    /// Issues a new key and revokes the tenant's others for new connections (their live sessions go on).
    Rotate {
        /// The tenant.
        tenant: String,
        /// The new key file to write (must not exist).
        #[arg(long)]
        out: PathBuf,
    },
    /// Revokes a tenant's keys (or one, with --key): new connections with them are refused and their sessions end.
    Revoke {
        /// The tenant.
        tenant: String,
        /// Only this key (its id).
        #[arg(long)]
        key: Option<String>,
    },
    /// Lists a tenant's keys.
    List {
        /// The tenant.
        tenant: String,
        /// Prints the API's JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn tenant(control: &Control, cmd: TenantCmd) -> Result<()> {
    match cmd {
        TenantCmd::Add { name, memory, sessions, gpus, share, members } => {
            let q = Quota { memory_bytes: memory.get(), max_sessions: sessions.get(), gpus: gpus.get(), gpu_share: Some(share) };
            let req = NewTenant { name, quota: q, members };
            let t: Tenant = control.call_with("POST", "/v1/tenants", Some(&req))?;
            println!("tenant {} added ({})", t.name, quota(&t.quota));
        }
        TenantCmd::List { json } => {
            let all: Vec<Tenant> = control.call("GET", "/v1/tenants")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                print_tenants(&all);
            }
        }
        TenantCmd::Show { name, json } => {
            let t: Tenant = control.call("GET", &format!("/v1/tenants/{name}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                print_tenants(std::slice::from_ref(&t));
            }
        }
        TenantCmd::Set { name, memory, sessions, gpus, share } => {
            let now: Tenant = control.call("GET", &format!("/v1/tenants/{name}"))?;
            let q = Quota {
                memory_bytes: memory.map_or(now.quota.memory_bytes, Limit::get),
                max_sessions: sessions.map_or(now.quota.max_sessions, Limit::get),
                gpus: gpus.map_or(now.quota.gpus, Limit::get),
                gpu_share: share.or(now.quota.gpu_share),
            };
            let t: Tenant = control.call_with("PUT", &format!("/v1/tenants/{name}/quota"), Some(&q))?;
            println!("tenant {}: {}", t.name, quota(&t.quota));
        }
        TenantCmd::Join { name, peer } => {
            let t: Tenant = control.call("PUT", &format!("/v1/tenants/{name}/members/{peer}"))?;
            println!("{peer} joined tenant {}; members: {}", t.name, t.members.join(", "));
        }
        TenantCmd::Leave { name, peer } => {
            let t: Tenant = control.call("DELETE", &format!("/v1/tenants/{name}/members/{peer}"))?;
            let left = if t.members.is_empty() { "none".into() } else { t.members.join(", ") };
            println!("{peer} left tenant {}; members: {left}", t.name);
        }
        TenantCmd::Remove { name } => {
            let r: Revoked = control.call("DELETE", &format!("/v1/tenants/{name}"))?;
            println!("tenant {name} removed; {}", revoked(&r));
        }
    }
    Ok(())
}

pub fn key(control: &Control, cmd: KeyCmd) -> Result<()> {
    match cmd {
        KeyCmd::Issue { tenant, out } => issue(control, &tenant, &out, false),
        KeyCmd::Rotate { tenant, out } => issue(control, &tenant, &out, true),
        KeyCmd::Revoke { tenant, key } => {
            let path = match &key {
                Some(id) => format!("/v1/tenants/{tenant}/keys/{id}"),
                None => format!("/v1/tenants/{tenant}/keys"),
            };
            let r: Revoked = control.call("DELETE", &path)?;
            println!("tenant {tenant}: {}", revoked(&r));
            Ok(())
        }
        KeyCmd::List { tenant, json } => {
            let keys: Vec<Key> = control.call("GET", &format!("/v1/tenants/{tenant}/keys"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&keys)?);
            } else {
                println!("{:<18} {:<12} {:<12}", "KEY", "ISSUED", "REVOKED");
                for k in keys {
                    let revoked = k.revoked_unix_seconds.map_or("-".into(), |t| t.to_string());
                    println!("{:<18} {:<12} {:<12}", k.id, k.created_unix_seconds, revoked);
                }
            }
            Ok(())
        }
    }
}

/// Issues a key and writes its file. The file is made before the key is
/// asked for, so a path that cannot be written costs no key.
fn issue(control: &Control, tenant: &str, out: &std::path::Path, rotate: bool) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| format!("cannot create {} (a key is written to a new file)", out.display()))?;
    let issued: Result<IssuedKey> =
        control.call_with("POST", &format!("/v1/tenants/{tenant}/keys"), Some(&IssueKey { rotate })).map_err(Into::into);
    let issued = match issued {
        Ok(k) => k,
        Err(e) => {
            let _ = std::fs::remove_file(out);
            return Err(e);
        }
    };
    file.write_all(issued.key_file.as_bytes()).and_then(|()| file.sync_all()).with_context(|| format!("cannot write {}", out.display()))?;
    println!("key {} of tenant {} written to {} (programs set PVGPU_TCP_KEY={})", issued.id, issued.tenant, out.display(), out.display());
    if !issued.revoked.is_empty() {
        println!("revoked for new connections: {}", issued.revoked.join(", "));
    }
    Ok(())
}

fn quota(q: &Quota) -> String {
    let mem = q.memory_bytes.map_or("memory unlimited".into(), |b| format!("memory {}", crate::bytes(b)));
    let ses = q.max_sessions.map_or("sessions unlimited".into(), |n| format!("{n} sessions"));
    format!("{mem}, {ses}, GPUs {}, GPU share {}", gpu_list(q), q.gpu_share.unwrap_or(1))
}

fn revoked(r: &Revoked) -> String {
    let keys = if r.keys.is_empty() { "no keys revoked".to_string() } else { format!("keys revoked: {}", r.keys.join(", ")) };
    let ended: Vec<String> = r.sessions_ended.iter().map(u64::to_string).collect();
    if ended.is_empty() { keys } else { format!("{keys}; sessions ended: {}", ended.join(", ")) }
}

fn gpu_list(q: &Quota) -> String {
    q.gpus
        .as_ref()
        .map_or("all".into(), |g| if g.is_empty() { "none".into() } else { g.iter().map(u32::to_string).collect::<Vec<_>>().join(",") })
}

fn print_tenants(all: &[Tenant]) {
    println!(
        "{:<20} {:>12} {:>10} {:>8} {:>5} {:>5} {:>9} {:>12}  MEMBERS",
        "TENANT", "MEMORY CAP", "MAX SESS", "GPUS", "SHARE", "KEYS", "SESSIONS", "MEMORY"
    );
    for t in all {
        let cap = t.quota.memory_bytes.map_or("-".into(), crate::bytes);
        let max = t.quota.max_sessions.map_or("-".into(), |n| n.to_string());
        let members = if t.members.is_empty() { "-".into() } else { t.members.join(",") };
        println!(
            "{:<20} {:>12} {:>10} {:>8} {:>5} {:>5} {:>9} {:>12}  {}",
            t.name,
            cap,
            max,
            gpu_list(&t.quota),
            t.quota.gpu_share.unwrap_or(1),
            t.live_keys,
            t.sessions,
            crate::bytes(t.memory_bytes),
            members
        );
    }
}
