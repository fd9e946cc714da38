//! The integrity check, `d4082055-bde6-704b-8d34-ba123c66e1f2`: 3 slots,
//! 24 bytes.
//!
//! - [1] `CUresult check(u32 version, u64 unix_seconds, u64 out[2])`: each
//!   copy of the runtime calls it three times at start-up (CUDA 13.0:
//!   versions 13000, 13001, 13002) and compares `out` with what it computes
//!   itself from the driver's public answers; on a mismatch every runtime
//!   call fails with `cudaErrorSoftwareValidityNotEstablished`.
//! - [2]: never called by CUDA 13's runtime; unknown.
//!
//! How `out` is made (checked bit for bit against the H100's driver, four
//! vectors, and agreeing with three open reimplementations): for versions
//! ending in 0 or 1 it is a constant; otherwise it is HMAC-MD2 (RFC 1319
//! MD2, RFC 2104 HMAC with MD2's 16-byte block) under a fixed key of a
//! message that binds the answer to this process: the reported driver
//! version, `version`, the pid, the calling thread's `pthread_self`, the
//! addresses of the runtime interface table, of this table and of its
//! check function, `unix_seconds`, then each device's UUID and PCI domain,
//! bus and device numbers. Every value comes from this library's own
//! answers, so the runtime's copy of the computation agrees.

use super::{Table, size_slot, traced, unknown_slot};
use crate::state;
use hmac::{Hmac, Mac};
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::{CuError, CuResult};
use std::ffi::c_void;

pub(super) const UUID: super::Uuid = [0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2];

pub(super) static TABLE: Table<3> = Table([size_slot(3), check as *const c_void, unknown_slot as *const c_void]);

/// The HMAC key.
const KEY: [u8; 16] = [0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52, 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f];

/// `out` for versions ending in 0 and in 1.
const FIXED: [[u64; 2]; 2] = [[0x3341_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8], [0x1841_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8]];

/// The process-bound facts the answer covers.
pub struct Record {
    /// `cuDriverGetVersion` as this library reports it.
    pub driver_version: u32,
    /// The `version` argument.
    pub version: u32,
    /// `getpid()`.
    pub pid: u32,
    /// The low 32 bits of the calling thread's `pthread_self()`.
    pub thread: u32,
    /// Address of the runtime interface table.
    pub cudart_table: u64,
    /// Address of this table.
    pub integrity_table: u64,
    /// Address of the check function (slot 1's value).
    pub check_fn: u64,
    /// The `unix_seconds` argument.
    pub unix_seconds: u64,
    /// Per device: UUID, PCI domain, bus and device.
    pub devices: Vec<([u8; 16], i32, i32, i32)>,
}

/// The answer for `r`.
pub fn answer(r: &Record) -> [u64; 2] {
    if r.version % 10 < 2 {
        return FIXED[(r.version % 10) as usize];
    }
    let mut mac = Hmac::<md2::Md2>::new_from_slice(&KEY).expect("HMAC takes a key of any length");
    mac.update(&r.driver_version.to_le_bytes());
    mac.update(&r.version.to_le_bytes());
    mac.update(&r.pid.to_le_bytes());
    mac.update(&r.thread.to_le_bytes());
    for v in [r.cudart_table, r.integrity_table, r.check_fn, r.unix_seconds] {
        mac.update(&v.to_le_bytes());
    }
    for (uuid, domain, bus, device) in &r.devices {
        mac.update(uuid);
        for v in [domain, bus, device] {
            mac.update(&v.to_le_bytes());
        }
    }
    let d = mac.finalize().into_bytes();
    let word = |i: usize| u64::from_le_bytes(d[i..i + 8].try_into().expect("16-byte digest"));
    [word(0), word(8)]
}

/// This process's facts for `version` and `unix_seconds`.
fn record(version: u32, unix_seconds: u64) -> Result<Record, CuError> {
    state::client()?;
    let mut devices = Vec::new();
    for d in 0..state::backends::device_count() {
        let a = |k| state::device_attribute(d, k);
        devices.push((
            state::device_props(d)?.uuid,
            a(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            a(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            a(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
        ));
    }
    Ok(Record {
        driver_version: crate::api::init::reported_driver_version() as u32,
        version,
        // SAFETY: getpid and pthread_self have no preconditions.
        pid: unsafe { libc::getpid() } as u32,
        // SAFETY: as above.
        thread: unsafe { libc::pthread_self() } as u64 as u32,
        cudart_table: super::cudart::TABLE.addr() as u64,
        integrity_table: TABLE.addr() as u64,
        check_fn: check as *const c_void as u64,
        unix_seconds,
        devices,
    })
}

/// [1].
unsafe extern "C" fn check(version: u32, unix_seconds: u64, out: *mut [u64; 2]) -> CuResult {
    let r = state::run("integrity[1]", || {
        let value = answer(&record(version, unix_seconds)?);
        // SAFETY: writable, per the table's contract.
        unsafe { state::put(out, value) }
    });
    traced("integrity", 1, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The H100's driver's answers for one process (driver 580, CUDA 13.0,
    /// one device), recorded with the record's fields.
    #[test]
    fn answers_match_the_driver() {
        let mut r = Record {
            driver_version: 13000,
            version: 0,
            pid: 428,
            thread: 0x7ff7_e6fd_a140u64 as u32,
            cudart_table: 0x7ff7_e62e_7680,
            integrity_table: 0x7ff7_e62e_7660,
            check_fn: 0x7ff7_e0c4_6350,
            unix_seconds: 1_795_388_547,
            devices: vec![([0xce, 0x45, 0x7e, 0xd6, 0x33, 0x63, 0x95, 0x4f, 0x62, 0x2b, 0x78, 0x19, 0x91, 0x90, 0xf4, 0xf2], 0, 0, 6)],
        };
        for (version, want) in [
            (13002, [0x80fb_a481_55e1_8532, 0x1efa_39ec_703a_a7e8]),
            (13003, [0x18f8_5573_14b9_da2c, 0x56f3_5ef2_7a0d_c1fd]),
            (13009, [0x0e08_b465_a27c_1029, 0xff98_9e6f_710b_3271]),
            (12082, [0xf917_831f_22e6_983c, 0xb594_66cf_a9d3_f4db]),
            (13000, FIXED[0]),
            (13001, FIXED[1]),
        ] {
            r.version = version;
            assert_eq!(answer(&r), want, "version {version}");
        }
    }
}
