//! Device handles (`nvmlDevice_t`): opaque pointers to the caller, here a
//! tag and the device index, never dereferenced, and checked on every call
//! against the devices NVML counted at initialisation.

use crate::session::{self, Session};
use crate::status::{NvmlError, Res};
use std::ffi::c_void;
use std::sync::Arc;

/// `nvmlDevice_t`.
pub type NvmlDevice = *mut c_void;

/// High bits of every handle, so that a stray pointer or a small integer
/// is not taken for a device.
const TAG: usize = 0x7076_0000;
/// Room for the index below the tag.
const INDEX_BITS: usize = 0xffff;
/// Most devices a session can name.
pub const MAX_DEVICES: u32 = INDEX_BITS as u32 + 1;

/// The handle of device `index`.
pub fn handle(index: u32) -> NvmlDevice {
    (TAG | (index as usize & INDEX_BITS)) as *mut c_void
}

/// The device index behind `h`, if `h` is a handle of one of `count`
/// devices.
pub fn index(h: NvmlDevice, count: u32) -> Option<u32> {
    let v = h as usize;
    if v & !INDEX_BITS != TAG {
        return None;
    }
    let i = (v & INDEX_BITS) as u32;
    (i < count).then_some(i)
}

/// NVML's state and the device `h` names: `NVML_ERROR_UNINITIALIZED`
/// before `nvmlInit`, `NVML_ERROR_INVALID_ARGUMENT` for anything but one
/// of its devices' handles.
pub fn device(h: NvmlDevice) -> Res<(Arc<Session>, u32)> {
    let s = session::current()?;
    let i = index(h, s.count()).ok_or(NvmlError::INVALID_ARGUMENT)?;
    Ok((s, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_strays_are_refused() {
        assert!(!handle(0).is_null());
        assert_eq!(index(handle(0), 1), Some(0));
        assert_eq!(index(handle(3), 4), Some(3));
        assert_eq!(index(handle(1), 1), None, "beyond the device count");
        assert_eq!(index(std::ptr::null_mut(), 4), None);
        assert_eq!(index(1 as NvmlDevice, 4), None);
        assert_eq!(index((TAG | 0x1_0000) as NvmlDevice, 4), None);
    }
}
