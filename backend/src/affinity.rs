//! CPU sets: the `--session-cpus` grammar (`0-3,8`) and pinning the calling
//! thread to a set. A session's thread spins briefly for the next request;
//! pinned near the GPU (and away from the program's own cores, on a shared
//! host) it answers sooner and more steadily.

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// Why a CPU list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// Not a list of numbers and ranges.
    #[error("CPU list {0:?} is not of the form 0-3,8")]
    Syntax(String),
    /// A CPU number past what the kernel's CPU sets hold.
    #[error("CPU {cpu} is out of range (at most {max})")]
    OutOfRange {
        /// The number given.
        cpu: usize,
        /// Largest CPU number a set holds.
        max: usize,
    },
}

/// Parses `0-3,8` into CPU numbers, in order, without repeats.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, CpuListError> {
    let bad = || CpuListError::Syntax(s.to_string());
    let max = CpuSet::count() - 1;
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<usize>().map_err(|_| bad())?, b.trim().parse::<usize>().map_err(|_| bad())?),
            None => {
                let a = part.parse::<usize>().map_err(|_| bad())?;
                (a, a)
            }
        };
        if a > b {
            return Err(bad());
        }
        if b > max {
            return Err(CpuListError::OutOfRange { cpu: b, max });
        }
        for c in a..=b {
            if !cpus.contains(&c) {
                cpus.push(c);
            }
        }
    }
    Ok(cpus)
}

/// Pins the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> nix::Result<()> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c)?;
    }
    sched_setaffinity(Pid::from_raw(0), &set)
}

/// The CPUs the calling thread may run on.
pub fn allowed_cpus() -> Vec<usize> {
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("2, 1,2").unwrap(), vec![2, 1]);
        assert!(matches!(parse_cpu_list("3-1"), Err(CpuListError::Syntax(_))));
        assert!(matches!(parse_cpu_list("a"), Err(CpuListError::Syntax(_))));
        assert!(matches!(parse_cpu_list(""), Err(CpuListError::Syntax(_))));
        assert!(matches!(parse_cpu_list("99999"), Err(CpuListError::OutOfRange { .. })));
    }

    #[test]
    fn pinning_takes_effect_on_this_thread_only() {
        let mine = allowed_cpus();
        let first = mine[0];
        std::thread::spawn(move || {
            pin_current_thread(&[first]).unwrap();
            assert_eq!(allowed_cpus(), vec![first]);
        })
        .join()
        .unwrap();
        assert_eq!(allowed_cpus(), mine);
    }
}
