//! Which CPUs the benchmark runs on. Unpinned, the program's thread and the
//! session's thread land wherever the scheduler puts them (sometimes on one
//! core, sometimes on another socket), and round trips move by a factor of
//! two from run to run. Pinned, both sides keep their caches and a round
//! trip costs what the hardware costs.

use anyhow::{Result, bail};
use pvgpu_backend::affinity::{allowed_cpus, parse_cpu_list};

/// The program's CPU and the session's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pins {
    pub client: usize,
    pub backend: usize,
}

fn topology(cpu: usize, what: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}")).ok()?.trim().parse().ok()
}

/// `off`, `CLIENT,BACKEND`, or `None` (automatic: two CPUs of different
/// cores in one package, away from CPU 0 where there is a choice: it
/// takes most interrupts).
pub fn choose(spec: Option<&str>) -> Result<Option<Pins>> {
    match spec {
        Some("off") => Ok(None),
        Some(s) => {
            let cpus = parse_cpu_list(s)?;
            match cpus[..] {
                [c, b] => Ok(Some(Pins { client: c, backend: b })),
                // `0,0` parses to one CPU: both sides on it.
                [c] => Ok(Some(Pins { client: c, backend: c })),
                _ => bail!("--cpus takes two CPUs, the program's and the session's (e.g. 2,3), or off"),
            }
        }
        None => {
            let allowed = allowed_cpus();
            let Some(&last) = allowed.last() else { return Ok(None) };
            let key = |c: usize| (topology(c, "physical_package_id"), topology(c, "core_id"));
            let package = key(last).0;
            let client = last;
            let other_core = |c: usize| key(c).0 == package && key(c) != key(client);
            let backend = allowed
                .iter()
                .rev()
                .copied()
                .find(|&c| c != 0 && other_core(c))
                .or_else(|| allowed.iter().rev().copied().find(|&c| other_core(c)));
            Ok(backend.map(|backend| Pins { client, backend }))
        }
    }
}
