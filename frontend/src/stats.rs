//! What a session sent, command by command, for finding out why a program
//! runs slower through pvgpu than natively: how many of each command were
//! posted (sent without waiting) and how many waited for their reply, and
//! how long those waits took. Off unless [`crate::Options::stats`] is set
//! (`PVGPU_STATS=1`); the drop-in library prints the table when the program
//! exits.

use pvgpu_ring::proto::Opcode;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Counts for one command.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CallCount {
    /// Sent without waiting for a reply.
    pub posted: u64,
    /// Sent and waited for.
    pub waited: u64,
    /// Time spent waiting for those replies, send to reply.
    pub wait: Duration,
}

/// Counts by opcode.
#[derive(Debug, Default, Clone)]
pub struct CallStats {
    by_op: BTreeMap<u16, CallCount>,
    pending: Option<(u16, Instant)>,
}

impl CallStats {
    pub(crate) fn sent(&mut self, opcode: u16, waits: bool) {
        let c = self.by_op.entry(opcode).or_default();
        if waits {
            c.waited += 1;
            self.pending = Some((opcode, Instant::now()));
        } else {
            c.posted += 1;
        }
    }

    pub(crate) fn replied(&mut self, opcode: u16) {
        if let Some((op, t)) = self.pending.take() {
            if op == opcode {
                self.by_op.entry(op).or_default().wait += t.elapsed();
            }
        }
    }

    /// Counts of each opcode sent at least once.
    pub fn by_opcode(&self) -> impl Iterator<Item = (u16, CallCount)> + '_ {
        self.by_op.iter().map(|(&op, &c)| (op, c))
    }

    /// A table, commands with the longest total wait first.
    pub fn table(&self) -> String {
        let mut rows: Vec<(u16, CallCount)> = self.by_opcode().collect();
        rows.sort_by(|a, b| b.1.wait.cmp(&a.1.wait).then(b.1.posted.cmp(&a.1.posted)));
        let (waited, posted): (u64, u64) = rows.iter().fold((0, 0), |(w, p), (_, c)| (w + c.waited, p + c.posted));
        let total: Duration = rows.iter().map(|(_, c)| c.wait).sum();
        let mut s = format!(
            "pvgpu: {waited} calls waited for a reply ({:.1} ms in all), {posted} were posted\n{:<24}{:>10}{:>10}{:>12}{:>10}\n",
            total.as_secs_f64() * 1e3,
            "command",
            "waited",
            "posted",
            "wait ms",
            "mean us"
        );
        for (op, c) in rows {
            let name = Opcode::try_from(op).map_or_else(|_| format!("opcode {op}"), |o| format!("{o:?}"));
            let mean = if c.waited > 0 { c.wait.as_secs_f64() * 1e6 / c.waited as f64 } else { 0.0 };
            let _ = writeln!(s, "{name:<24}{:>10}{:>10}{:>12.2}{:>10.2}", c.waited, c.posted, c.wait.as_secs_f64() * 1e3, mean);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_posts_and_waits_by_opcode() {
        let mut s = CallStats::default();
        s.sent(Opcode::LaunchKernel as u16, false);
        s.sent(Opcode::LaunchKernel as u16, false);
        s.sent(Opcode::Nop as u16, true);
        std::thread::sleep(Duration::from_millis(2));
        s.replied(Opcode::Nop as u16);
        let got: Vec<_> = s.by_opcode().collect();
        let launch = got.iter().find(|(op, _)| *op == Opcode::LaunchKernel as u16).unwrap().1;
        let nop = got.iter().find(|(op, _)| *op == Opcode::Nop as u16).unwrap().1;
        assert_eq!((launch.posted, launch.waited), (2, 0));
        assert_eq!((nop.posted, nop.waited), (0, 1));
        assert!(nop.wait >= Duration::from_millis(2));
        let t = s.table();
        assert!(t.lines().nth(2).unwrap().starts_with("Nop"), "{t}");
        assert!(t.contains("LaunchKernel"), "{t}");
    }
}
