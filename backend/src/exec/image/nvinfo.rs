//! The `.nv.info.<kernel>` sections of a cubin: a list of attributes, each
//! `(format u8, attribute u8)` and two more bytes: nothing (`NVAL`), a byte
//! and padding (`BVAL`), a half-word (`HVAL`), or the length of a value that
//! follows (`SVAL`). Records stay 4-byte aligned (checked on sm_75 to sm_90
//! cubins nvcc 13 builds; sm_90's happen to hold no `NVAL`). The one read
//! here is `EIATTR_KPARAM_INFO`: a kernel parameter's ordinal, offset and
//! size.

use crate::exec::Param;
use pvgpu_ring::CuError;

const EIFMT_NVAL: u8 = 1;
const EIFMT_BVAL: u8 = 2;
const EIFMT_HVAL: u8 = 3;
const EIFMT_SVAL: u8 = 4;
const EIATTR_KPARAM_INFO: u8 = 0x17;

fn rd<const N: usize>(d: &[u8], at: usize) -> Result<[u8; N], CuError> {
    d.get(at..at.checked_add(N).ok_or(CuError::INVALID_IMAGE)?).and_then(|s| s.try_into().ok()).ok_or(CuError::INVALID_IMAGE)
}

/// The parameter layout a kernel's `.nv.info` section declares, in ordinal
/// order.
pub fn params(b: &[u8]) -> Result<Vec<Param>, CuError> {
    let mut params: Vec<(u16, Param)> = Vec::new();
    let mut i = 0;
    while i + 2 <= b.len() {
        let (fmt, attr) = (b[i], b[i + 1]);
        i += 2;
        match fmt {
            EIFMT_NVAL | EIFMT_BVAL | EIFMT_HVAL => i += 2,
            EIFMT_SVAL => {
                let n = u16::from_le_bytes(rd(b, i)?) as usize;
                let pay = b.get(i + 2..i + 2 + n).ok_or(CuError::INVALID_IMAGE)?;
                i += 2 + n;
                if attr == EIATTR_KPARAM_INFO {
                    let ordinal = u16::from_le_bytes(rd(pay, 4)?);
                    let offset = u16::from_le_bytes(rd(pay, 6)?) as u32;
                    let size = (u32::from_le_bytes(rd(pay, 8)?) >> 18) & 0x3fff;
                    params.push((ordinal, Param { offset, size }));
                }
            }
            _ => return Err(CuError::INVALID_IMAGE),
        }
    }
    params.sort_by_key(|(o, _)| *o);
    Ok(params.into_iter().map(|(_, p)| p).collect())
}
