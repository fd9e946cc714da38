//! Interprocess handles on the GPU: the driver's own memory and event
//! handles, which the supervisor keeps and hands only to sessions of the
//! same guest ([`crate::ipc`]).

use super::{CudaContext, CudaEvent, ck, sys};
use crate::exec::CuRes;
use crate::ipc::IpcObject;

fn bytes(raw: &[std::ffi::c_char; 64]) -> [u8; 64] {
    raw.map(|c| c as u8)
}

fn raw(bytes: &[u8; 64]) -> [std::ffi::c_char; 64] {
    bytes.map(|b| b as std::ffi::c_char)
}

impl CudaContext {
    pub(super) fn ipc_mem_export(&mut self, ptr: u64) -> CuRes<IpcObject> {
        let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: valid out-pointer; the session names one of its
        // allocations of this context.
        ck(unsafe { sys::cuIpcGetMemHandle(&mut h, ptr) })?;
        Ok(IpcObject { bytes: bytes(&h.reserved), fd: None })
    }

    /// The address and size of the memory mapped: the size as the driver
    /// knows it (an exporting worker cannot make a range look longer), or
    /// `claimed` where the driver does not say.
    pub(super) fn ipc_mem_open(&mut self, o: &IpcObject, claimed: u64, flags: u32) -> CuRes<(u64, u64)> {
        let h = sys::CUipcMemHandle_st { reserved: raw(&o.bytes) };
        let mut p = 0;
        // SAFETY: valid out-pointer; the handle is one the driver made in
        // another session's worker (the registry's, never the guest's).
        ck(unsafe { sys::cuIpcOpenMemHandle_v2(&mut p, h, flags) })?;
        let (mut base, mut size) = (0, 0usize);
        // SAFETY: valid out-pointers; `p` was just mapped.
        if ck(unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, p) }).is_err() {
            return Ok((p, claimed));
        }
        Ok((p, (base + size as u64).saturating_sub(p)))
    }

    pub(super) fn ipc_mem_close(&mut self, ptr: u64) -> CuRes<()> {
        // SAFETY: the session closes only addresses it opened here.
        ck(unsafe { sys::cuIpcCloseMemHandle(ptr) })
    }

    pub(super) fn ipc_event_export(&mut self, e: CudaEvent) -> CuRes<IpcObject> {
        let mut h = sys::CUipcEventHandle_st { reserved: [0; 64] };
        // SAFETY: valid out-pointer; a live event of this context.
        ck(unsafe { sys::cuIpcGetEventHandle(&mut h, e.0) })?;
        Ok(IpcObject { bytes: bytes(&h.reserved), fd: None })
    }

    pub(super) fn ipc_event_open(&mut self, o: &IpcObject) -> CuRes<CudaEvent> {
        let h = sys::CUipcEventHandle_st { reserved: raw(&o.bytes) };
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer; a handle the driver made (as above).
        ck(unsafe { sys::cuIpcOpenEventHandle(&mut e, h) })?;
        Ok(CudaEvent(e))
    }
}
