//! Stream memory operations of the host test double: writes store the
//! value at once; a wait looks at the value until it meets the condition
//! (the program or another stream may write it meanwhile: page-locked
//! memory is the program's own), for at most [`WAIT_CAP`], after which the
//! context is poisoned as a GPU's would be by work that never ends.
//! Barriers and flushes order nothing here (work runs in order, at once).

use super::HostContext;
use super::graph::Op;
use crate::exec::{CuRes, MemOp};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::time::{Duration, Instant};

/// Longest a wait looks at its value.
const WAIT_CAP: Duration = Duration::from_secs(10);

/// Whether `now` meets a wait's condition against `value` (`flags`' low
/// bits: GEQ, EQ, AND, NOR), in `bits`-bit arithmetic.
fn met(now: u64, value: u64, flags: u32, bits: u32) -> bool {
    let mask = if bits == 32 { u32::MAX as u64 } else { u64::MAX };
    let (now, value) = (now & mask, value & mask);
    match flags & 3 {
        // Cyclic: (signed)(now - value) >= 0.
        0 if bits == 32 => (now.wrapping_sub(value) as u32 as i32) >= 0,
        0 => (now.wrapping_sub(value) as i64) >= 0,
        1 => now == value,
        2 => now & value != 0,
        _ => !(now | value) & mask != 0,
    }
}

impl HostContext {
    /// Reads the `n`-byte value at `addr`.
    fn value_at(&self, addr: u64, n: usize) -> CuRes<u64> {
        let b = self.mem.bytes(addr, n).map_err(|_| CuError::ILLEGAL_ADDRESS)?;
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(b);
        Ok(u64::from_le_bytes(v))
    }

    /// Runs `ops` in order.
    pub(super) fn run_mem_ops(&mut self, ops: &[MemOp]) -> CuRes<()> {
        for o in ops {
            let r = match CUstreamBatchMemOpType(o.kind) {
                CU_STREAM_MEM_OP_WRITE_VALUE_32 => self.write_value(o.addr, &o.value.to_le_bytes()[..4]),
                CU_STREAM_MEM_OP_WRITE_VALUE_64 => self.write_value(o.addr, &o.value.to_le_bytes()),
                CU_STREAM_MEM_OP_WAIT_VALUE_32 => self.wait_value(o, 32),
                CU_STREAM_MEM_OP_WAIT_VALUE_64 => self.wait_value(o, 64),
                _ => Ok(()),
            };
            if let Err(e) = r {
                // As on a GPU: the context is poisoned.
                self.sticky = Some(e);
                return Err(e);
            }
        }
        Ok(())
    }

    fn write_value(&mut self, addr: u64, bytes: &[u8]) -> CuRes<()> {
        self.mem.bytes_mut(addr, bytes.len()).map_err(|_| CuError::ILLEGAL_ADDRESS)?.copy_from_slice(bytes);
        Ok(())
    }

    fn wait_value(&mut self, o: &MemOp, bits: u32) -> CuRes<()> {
        let start = Instant::now();
        loop {
            if met(self.value_at(o.addr, bits as usize / 8)?, o.value, o.flags, bits) {
                return Ok(());
            }
            if start.elapsed() > WAIT_CAP {
                return Err(CuError::LAUNCH_TIMEOUT);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// `cuStreamBatchMemOp`: recorded on a capturing stream, else run.
    pub(super) fn mem_ops(&mut self, ops: &[MemOp], s: Option<u64>) -> CuRes<()> {
        self.ok()?;
        if self.captured(s, || Op::MemOps(ops.to_vec()))? {
            return Ok(());
        }
        self.run_mem_ops(ops)
    }
}

#[cfg(test)]
mod tests {
    use super::met;

    #[test]
    fn conditions_are_the_drivers() {
        // GEQ is cyclic: 1 is past u32::MAX in 32-bit arithmetic.
        assert!(met(1, u32::MAX as u64, 0, 32));
        assert!(!met(5, 6, 0, 32));
        assert!(met(6, 6, 0, 64));
        assert!(met(7, 7, 1, 32) && !met(7, 8, 1, 32));
        assert!(met(0b110, 0b010, 2, 32) && !met(0b100, 0b010, 2, 32));
        // NOR: some bit clear in both.
        assert!(met(0, 0, 3, 32) && !met(u32::MAX as u64, 0, 3, 32));
    }
}
