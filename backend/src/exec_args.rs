//! The executor's options of `pvgpu-backend` (and of its workers, which
//! get them back as arguments): part of the binary, beside `main.rs`.

use clap::Args;
use pvgpu_backend::config::parse_bytes;
use pvgpu_backend::config::{DeviceMemory, ExecutorConfig, ExecutorKind, SessionConfig, SessionLimits};
use pvgpu_backend::share::GpuShare;
use std::time::Duration;

/// What runs the commands and how each session is served.
#[derive(Args, Debug, Clone)]
pub(crate) struct ExecArgs {
    /// What runs the commands: the GPU (cuda) or the host test double (host).
    #[arg(long, value_enum, default_value = "cuda")]
    pub(crate) executor: ExecutorKind,
    /// Device memory each session may allocate (e.g. 8G). Unlimited if unset.
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) mem_quota: Option<u64>,
    /// Percent of a device's persisting-L2 maximum one session may set
    /// aside (`cudaLimitPersistingL2CacheSize`); larger requests are cut to
    /// it. The set-aside is the device's, shared by every session on it.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(0..=100))]
    persisting_l2_percent: u32,
    /// Largest shared data area a local frontend may bring.
    #[arg(long, value_parser = parse_bytes, default_value = "1G")]
    pub(crate) max_data_area: u64,
    /// Microseconds a session spins for its next request before sleeping.
    #[arg(long, default_value = "50")]
    pub(crate) spin_us: u64,
    /// Where the GPU executor puts device memory: `driver` (cuMemAlloc), or
    /// `placed` at addresses the backend reserves per context, so that a
    /// checkpointed session can be restored in another backend process
    /// (`pvgpu-ctl checkpoint` without `--leave-running`; docs/operations.md).
    #[arg(long, value_enum, default_value = "driver")]
    pub(crate) device_memory: DeviceMemory,
    /// Fake device memory of the host executor.
    #[arg(long, value_parser = parse_bytes, default_value = "4G")]
    pub(crate) host_mem: u64,
    /// Devices of the host executor (the test double), 1 to 16.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub(crate) host_devices: u16,
    /// Where module images are kept between sessions, so a guest's next
    /// program names them instead of sending them; `off` keeps none.
    /// Default: $XDG_CACHE_HOME/pvgpu/images (else ~/.cache/pvgpu/images).
    #[arg(long, value_name = "DIR|off")]
    pub(crate) image_cache: Option<String>,
    /// Most bytes of images kept (least recently used go first).
    #[arg(long, value_parser = parse_bytes, default_value = "4G")]
    pub(crate) image_cache_max: u64,
    /// Seconds a TCP session may send nothing before it is ended (0: never).
    #[arg(long, value_name = "SECS", default_value = "3600")]
    pub(crate) tcp_idle_timeout: u64,
    /// Seconds a local or Xen session may send nothing before it is ended
    /// (0: never).
    #[arg(long, value_name = "SECS", default_value = "0")]
    pub(crate) idle_timeout: u64,
    /// CPUs the sessions' serving threads run on, e.g. `2-7` (the cores
    /// nearest the GPU, away from the programs' own). Default: anywhere.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    pub(crate) session_cpus: Option<CpuList>,
    /// How sessions share a GPU's time: `driver` (it time-slices between
    /// them as between any processes) or `weighted` (they take turns, and
    /// each tenant's sessions get time by the tenant's GPU share).
    #[arg(long, value_enum, default_value = "driver")]
    pub(crate) gpu_share: GpuShare,
    /// Milliseconds a session keeps its GPU turn while others wait
    /// (`--gpu-share weighted`).
    #[arg(long, value_name = "MS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) gpu_slice_ms: u64,
}

/// A parsed `--session-cpus` list.
#[derive(Debug, Clone)]
pub(crate) struct CpuList(Vec<usize>);

fn parse_cpus(s: &str) -> Result<CpuList, String> {
    pvgpu_backend::affinity::parse_cpu_list(s).map(CpuList).map_err(|e| e.to_string())
}

fn secs(n: u64) -> Option<Duration> {
    (n > 0).then(|| Duration::from_secs(n))
}

impl ExecArgs {
    pub(crate) fn session(&self) -> SessionConfig {
        SessionConfig {
            limits: SessionLimits {
                mem_quota: self.mem_quota,
                persisting_l2_percent: self.persisting_l2_percent,
                gpu_turns: self.gpu_share == GpuShare::Weighted,
                ..SessionLimits::default()
            },
            max_data_area: self.max_data_area,
            spin: Duration::from_micros(self.spin_us),
            same_address: false,
            image_cache: self.image_cache_dir(),
            image_cache_max: self.image_cache_max,
            tcp_idle_timeout: secs(self.tcp_idle_timeout),
            idle_timeout: secs(self.idle_timeout),
            cpus: self.session_cpus.as_ref().map(|c| c.0.clone()),
            gpu_slice: (self.gpu_share == GpuShare::Weighted).then(|| Duration::from_millis(self.gpu_slice_ms)),
        }
    }

    fn image_cache_dir(&self) -> Option<std::path::PathBuf> {
        match self.image_cache.as_deref() {
            Some("off") => None,
            Some(dir) => Some(dir.into()),
            None => {
                let base = std::env::var_os("XDG_CACHE_HOME")
                    .map(std::path::PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache")))?;
                Some(base.join("pvgpu").join("images"))
            }
        }
    }

    pub(crate) fn executor(&self) -> ExecutorConfig {
        ExecutorConfig {
            kind: self.executor,
            host_mem: self.host_mem,
            host_devices: self.host_devices.into(),
            device_memory: self.device_memory,
        }
    }

    pub(crate) fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--executor".into(),
            self.executor.name().into(),
            "--max-data-area".into(),
            self.max_data_area.to_string(),
            "--spin-us".into(),
            self.spin_us.to_string(),
            "--host-mem".into(),
            self.host_mem.to_string(),
            "--host-devices".into(),
            self.host_devices.to_string(),
        ];
        if let Some(q) = self.mem_quota {
            a.push("--mem-quota".into());
            a.push(q.to_string());
        }
        a.push("--persisting-l2-percent".into());
        a.push(self.persisting_l2_percent.to_string());
        a.push("--image-cache".into());
        a.push(self.image_cache_dir().map_or("off".into(), |d| d.display().to_string()));
        a.push("--image-cache-max".into());
        a.push(self.image_cache_max.to_string());
        a.push("--tcp-idle-timeout".into());
        a.push(self.tcp_idle_timeout.to_string());
        a.push("--idle-timeout".into());
        a.push(self.idle_timeout.to_string());
        if self.device_memory == DeviceMemory::Placed {
            a.push("--device-memory".into());
            a.push("placed".into());
        }
        if self.gpu_share == GpuShare::Weighted {
            a.push("--gpu-share".into());
            a.push("weighted".into());
        }
        if let Some(cpus) = &self.session_cpus {
            a.push("--session-cpus".into());
            a.push(cpus.0.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","));
        }
        a
    }
}
