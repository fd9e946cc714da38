//! Where the backend is and how to talk to it, from the environment.

use crate::error::Result;
use crate::error::SettingError;
use crate::transport;
use pvgpu_ring::addr::AddrError;
use std::path::PathBuf;
use std::time::Duration;

/// Where the backend is: `local:PATH`, `tcp:HOST:PORT`, `xen` or `xen:DEVICE`
/// (the grammar both sides share, [`pvgpu_ring::addr`]).
pub use pvgpu_ring::addr::Addr as BackendAddr;

/// Default local socket of a backend.
pub const DEFAULT_SOCKET: &str = "/run/pvgpu/pvgpu.sock";

/// `PVGPU_BACKEND`; without it, Xen when this is a Xen guest with a vgpu
/// device, else the default local socket.
pub fn backend_from_env() -> Result<BackendAddr> {
    match std::env::var("PVGPU_BACKEND") {
        Ok(s) if !s.is_empty() => Ok(s.parse()?),
        _ if transport::xen::available() => Ok(BackendAddr::Xen(None)),
        _ => Ok(BackendAddr::Local(PathBuf::from(DEFAULT_SOCKET))),
    }
}

/// `PVGPU_BACKEND` as a list: a program may use the GPUs of several
/// backends, `PVGPU_BACKEND=local:/run/pvgpu/pvgpu.sock,tcp:gpu2:7000`,
/// and sees their devices numbered in the list's order. One address (or
/// none) is a list of one. At most [`pvgpu_ring::proto::MAX_SPACES`].
pub fn backends_from_env() -> Result<Vec<BackendAddr>> {
    match std::env::var("PVGPU_BACKEND") {
        Ok(s) if s.contains(',') => {
            let list = s.split(',').map(str::trim).map(str::parse).collect::<std::result::Result<Vec<BackendAddr>, _>>()?;
            if list.len() > usize::from(pvgpu_ring::proto::MAX_SPACES) {
                let why =
                    format!("{s}' lists {} backends, more than the {} a program may use; '", list.len(), pvgpu_ring::proto::MAX_SPACES);
                return Err(pvgpu_ring::addr::AddrError(why).into());
            }
            Ok(list)
        }
        _ => Ok(vec![backend_from_env()?]),
    }
}

/// Connection options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bytes of shared data area that stage copies (ring transports).
    pub data_area: u64,
    /// Bytes of shared data area for page-locked host allocations
    /// ([`crate::Client::host_alloc`], `cuMemAllocHost`) on ring transports.
    pub pinned: u64,
    /// Staging part of the data area on Xen, where every page is a grant
    /// (the guest's `xen-gntalloc` allows 1024 by default).
    pub xen_data_area: u64,
    /// Page-locked part of the data area on Xen.
    pub xen_pinned: u64,
    /// How long to spin for a reply before sleeping (ring transports).
    pub spin: Duration,
    /// How long to wait for the reply of a call that may synchronise with
    /// the device (a synchronisation, a copy to the host) before sleeping,
    /// on the ring transports:
    /// a pure spin for `spin`, then a spin that yields the CPU on every
    /// turn. The driver spins through such a call (`CU_CTX_SCHED_AUTO` on a
    /// machine with a CPU per context); a program that asks for blocking
    /// synchronisation gets `spin` alone.
    pub sync_spin: Duration,
    /// Longest wait for any one reply; `None` waits as long as the backend
    /// lives.
    pub timeout: Option<Duration>,
    /// Make every call wait for its reply (debugging).
    pub sync_calls: bool,
    /// Count what the session sends, command by command
    /// ([`crate::Client::call_stats`]; `PVGPU_STATS=1`).
    pub stats: bool,
    /// File holding the key a TCP backend checks (`PVGPU_TCP_KEY`;
    /// [`Options::for_backend`] picks a backend's own from a list).
    pub tcp_key: Option<PathBuf>,
    /// PEM file of the certificate (or its authority) a `tls:` backend
    /// must present (`PVGPU_TLS_CA`, a list as `PVGPU_TCP_KEY`).
    pub tls_ca: Option<PathBuf>,
    /// How long a session the backend checkpointed and detached may take
    /// to come back (a restore) before its next call fails
    /// (`PVGPU_RESUME_TIMEOUT_S`, default 300 s).
    pub resume_timeout: Duration,
    /// The program's address space at this backend: its place in the
    /// program's list of backends ([`pvgpu_ring::proto::Hello::space`]).
    pub space: u16,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            data_area: 64 << 20,
            pinned: 256 << 20,
            xen_data_area: 2 << 20,
            xen_pinned: 1 << 20,
            spin: Duration::from_micros(100),
            sync_spin: Duration::from_millis(20),
            timeout: None,
            sync_calls: false,
            stats: false,
            tcp_key: None,
            tls_ca: None,
            resume_timeout: Duration::from_secs(300),
            space: 0,
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

impl Options {
    /// Defaults, overridden by `PVGPU_DATA_AREA_MB`, `PVGPU_PINNED_MB`,
    /// `PVGPU_XEN_DATA_AREA_KB`, `PVGPU_XEN_PINNED_KB`, `PVGPU_SPIN_US`,
    /// `PVGPU_SYNC_SPIN_US`, `PVGPU_TIMEOUT_MS`, `PVGPU_SYNC`, `PVGPU_STATS`, `PVGPU_TCP_KEY`, `PVGPU_TLS_CA`
    /// and `PVGPU_RESUME_TIMEOUT_S`.
    pub fn from_env() -> Self {
        let mut o = Options::default();
        if let Some(mb) = env_u64("PVGPU_DATA_AREA_MB") {
            o.data_area = mb.clamp(1, 4096) << 20;
        }
        if let Some(mb) = env_u64("PVGPU_PINNED_MB") {
            o.pinned = mb.min(16384) << 20;
        }
        if let Some(kb) = env_u64("PVGPU_XEN_DATA_AREA_KB") {
            o.xen_data_area = kb.clamp(64, 1 << 22) << 10;
        }
        if let Some(kb) = env_u64("PVGPU_XEN_PINNED_KB") {
            o.xen_pinned = kb.min(1 << 22) << 10;
        }
        if let Some(us) = env_u64("PVGPU_SPIN_US") {
            o.spin = Duration::from_micros(us);
        }
        if let Some(us) = env_u64("PVGPU_SYNC_SPIN_US") {
            o.sync_spin = Duration::from_micros(us);
        }
        if let Some(ms) = env_u64("PVGPU_TIMEOUT_MS") {
            o.timeout = Some(Duration::from_millis(ms));
        }
        o.sync_calls = std::env::var("PVGPU_SYNC").is_ok_and(|v| v == "1");
        o.stats = std::env::var("PVGPU_STATS").is_ok_and(|v| v == "1");
        o.tcp_key = std::env::var_os("PVGPU_TCP_KEY").filter(|v| !v.is_empty()).map(PathBuf::from);
        o.tls_ca = std::env::var_os("PVGPU_TLS_CA").filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(s) = env_u64("PVGPU_RESUME_TIMEOUT_S") {
            o.resume_timeout = Duration::from_secs(s);
        }
        o
    }

    /// [`Options::from_env`] for the backend at `addr`: where
    /// `PVGPU_TCP_KEY` or `PVGPU_TLS_CA` is a list
    /// ([`file_for_backend`]), the file it names for `addr`.
    pub fn for_backend(addr: &BackendAddr) -> Result<Self> {
        let mut o = Options::from_env();
        o.tcp_key = pick(&o.tcp_key, "PVGPU_TCP_KEY", addr)?;
        o.tls_ca = pick(&o.tls_ca, "PVGPU_TLS_CA", addr)?;
        Ok(o)
    }
}

fn pick(setting: &Option<PathBuf>, var: &str, addr: &BackendAddr) -> Result<Option<PathBuf>> {
    match setting.as_deref().map(|p| p.to_str()) {
        Some(Some(v)) => Ok(file_for_backend(var, v, addr)?),
        // Not UTF-8: one path, as it was given.
        Some(None) => Ok(setting.clone()),
        None => Ok(None),
    }
}

/// The file a setting names for the backend at `addr`. The setting is one
/// path, for every backend; or a comma-separated list of `ADDRESS=PATH`
/// entries, each for the backend listed in `PVGPU_BACKEND` as `ADDRESS`,
/// and at most one bare `PATH` for the others
/// (`PVGPU_TCP_KEY=tcp:gpu1:7000=/etc/pvgpu/gpu1.key,tcp:gpu2:7000=/etc/pvgpu/gpu2.key`).
/// A value without `=` is one path, commas and all.
pub fn file_for_backend(var: &str, value: &str, addr: &BackendAddr) -> std::result::Result<Option<PathBuf>, SettingError> {
    if !value.contains('=') {
        return Ok(Some(PathBuf::from(value)));
    }
    let bad = |why: String| SettingError { var: var.into(), value: value.into(), why };
    let (mut others, mut own) = (None, None);
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.split_once('=') {
            Some((a, path)) => {
                let named: BackendAddr = a.trim().parse().map_err(|AddrError(a)| {
                    bad(format!("'{a}' is not a backend address; name each backend as PVGPU_BACKEND does (tcp:HOST:PORT=PATH)"))
                })?;
                if named == *addr && own.is_none() {
                    own = Some(PathBuf::from(path.trim()));
                }
            }
            None if others.is_some() => return Err(bad(format!("'{item}' is a second file for every backend; give one at most"))),
            None => others = Some(PathBuf::from(item)),
        }
    }
    Ok(own.or(others))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(addr: &str, value: &str) -> Option<PathBuf> {
        file_for_backend("PVGPU_TCP_KEY", value, &addr.parse().unwrap()).unwrap()
    }

    #[test]
    fn one_path_is_every_backends() {
        assert_eq!(at("tcp:a:1", "/k"), Some("/k".into()));
        assert_eq!(at("tcp:a:1", "/keys/a,b"), Some("/keys/a,b".into()));
    }

    #[test]
    fn each_backend_gets_its_own_file_or_the_default() {
        let v = "tcp:a:1=/ka, /default ,tls:b:2=/kb";
        assert_eq!(at("tcp:a:1", v), Some("/ka".into()));
        assert_eq!(at("tls:b:2", v), Some("/kb".into()));
        assert_eq!(at("tcp:b:2", v), Some("/default".into()));
        assert_eq!(at("tcp:c:3", "tcp:a:1=/ka"), None);
    }

    #[test]
    fn a_bad_entry_is_an_error_that_names_it() {
        let e = file_for_backend("PVGPU_TCP_KEY", "gpu1:7000=/k", &"tcp:a:1".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("'gpu1:7000' is not a backend address"), "{e}");
        assert!(file_for_backend("PVGPU_TCP_KEY", "/a,/b,tcp:a:1=/k", &"tcp:a:1".parse().unwrap()).is_err());
    }
}
