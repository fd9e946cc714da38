//! The process's address layout under `--device-memory placed`.
//!
//! Placed device memory comes back at its addresses in any process
//! ([`crate::exec::cuda`]), but the driver still puts module code and
//! globals in a heap of its own, beside the process's other mappings. With
//! address-space randomisation that heap moves from one process to the
//! next, and a restored session's globals (`cudaMemcpyToSymbol`'s targets,
//! cuBLAS's constants) would be elsewhere. Without it, the same sequence
//! of loads lands at the same addresses (measured on the H100, driver 580:
//! PyTorch trainings and a program with a `__device__` table restored in a
//! new backend process with every global in place). So the backend runs
//! itself and its workers without randomisation in this mode; the cost is
//! that one exploit mitigation of the worker processes is gone
//! (docs/architecture.md, threat model).
//!
//! Without randomisation Linux would put a process's mappings right below
//! its stack, where the programs' own stacks and mappings are too; a
//! worker maps a program's host memory at the program's addresses
//! (mirrors of memory a captured graph copies to, the stack included), and
//! such a fixed neighbour was in the way of about one program in two. So
//! the backend also asks for the legacy layout: mappings grow upwards from
//! a third of the address space (`0x2aaa_aaaa_b000`), far from where a
//! program's stack, libraries and heap are, and below the placed device
//! memory (`0x4000_0000_0000`).

use nix::sys::personality::{self, Persona};
use std::os::unix::process::CommandExt;

/// Why the layout could not be fixed.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// The personality could not be read or set.
    #[error(
        "cannot turn address-space randomisation off (personality): {0}; --device-memory placed needs it (under systemd, add LockPersonality=no in a drop-in for pvgpu-backend.service)"
    )]
    Personality(nix::Error),
    /// The backend could not start itself again.
    #[error("cannot start pvgpu-backend again without address-space randomisation")]
    Exec(#[source] std::io::Error),
}

/// Returns at once where randomisation is already off (a worker, or a
/// backend that started itself again); otherwise turns it off and replaces
/// this process with the same program and arguments, so it never returns
/// then. Call it before anything is opened or started.
pub fn fix() -> Result<(), LayoutError> {
    let p = personality::get().map_err(LayoutError::Personality)?;
    let fixed = Persona::ADDR_NO_RANDOMIZE | Persona::ADDR_COMPAT_LAYOUT;
    if p.contains(fixed) {
        return Ok(());
    }
    personality::set(p | fixed).map_err(LayoutError::Personality)?;
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_else(|| "pvgpu-backend".into());
    tracing::info!("--device-memory placed: starting again without address-space randomisation");
    Err(LayoutError::Exec(std::process::Command::new("/proc/self/exe").arg0(argv0).args(args).exec()))
}
