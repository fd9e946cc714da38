//! Linking on the driver: `cuLinkCreate`, one `cuLinkAddData` per input,
//! `cuLinkComplete`, with the driver's logs kept in buffers of the
//! executor's and the image copied out before the link state goes.

use super::CudaContext;
use super::driver::entry;
use crate::exec::Linked;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::proto::{LinkSpec, MAX_LINK_LOG};
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{CString, c_void};
use std::ptr;

/// The driver's link state, destroyed when dropped.
struct State {
    raw: CUlinkState,
    destroy: PFN_cuLinkDestroy,
}

impl Drop for State {
    fn drop(&mut self) {
        // SAFETY: a state `cuLinkCreate` made, destroyed once; the image
        // it held was copied out before.
        unsafe { (self.destroy)(self.raw) };
    }
}

/// The bytes of a log buffer up to its first NUL.
fn log(buf: &[u8]) -> Vec<u8> {
    buf[..buf.iter().position(|&b| b == 0).unwrap_or(buf.len())].to_vec()
}

impl CudaContext {
    /// [`crate::exec::ExecContext::link`] on the driver.
    pub(super) fn link_on_driver(&mut self, spec: &LinkSpec<'_>) -> Linked {
        let (mut info, mut error) = (vec![0u8; MAX_LINK_LOG], vec![0u8; MAX_LINK_LOG]);
        let mut options: Vec<CUjit_option> = spec.options.iter().map(|&(o, _)| CUjit_option(o)).collect();
        let mut values: Vec<*mut c_void> = spec.options.iter().map(|&(_, v)| v as usize as *mut c_void).collect();
        let fixed = [
            (CU_JIT_INFO_LOG_BUFFER, info.as_mut_ptr().cast()),
            (CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, MAX_LINK_LOG as *mut c_void),
            (CU_JIT_ERROR_LOG_BUFFER, error.as_mut_ptr().cast()),
            (CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, MAX_LINK_LOG as *mut c_void),
            (CU_JIT_WALL_TIME, ptr::null_mut()),
        ];
        for (o, v) in fixed {
            options.push(o);
            values.push(v);
        }
        let image = self.run_link(spec, &mut options, &mut values);
        // The driver wrote the wall time as an f32 into its value's slot.
        let wall_ms = f32::from_bits(values.last().map_or(0, |&v| v as usize as u32));
        Linked { image, info_log: log(&info), error_log: log(&error), wall_ms }
    }

    fn run_link(&mut self, spec: &LinkSpec<'_>, options: &mut [CUjit_option], values: &mut [*mut c_void]) -> Result<Vec<u8>, CuError> {
        let (create, add, complete) =
            (entry(self.drv.cuLinkCreate_v2)?, entry(self.drv.cuLinkAddData_v2)?, entry(self.drv.cuLinkComplete)?);
        let destroy = entry(self.drv.cuLinkDestroy)?;
        let mut raw = ptr::null_mut();
        // SAFETY: `options` and `values` have the same length; every option
        // is a plain value (checked by the session) or one of the log
        // buffers above, which outlive the state (it is dropped at the end
        // of this function).
        unsafe { create(options.len() as u32, options.as_mut_ptr(), values.as_mut_ptr(), &mut raw) }.result()?;
        let state = State { raw, destroy };
        for input in &spec.inputs {
            let name = CString::new(input.name).map_err(|_| CuError::INVALID_VALUE)?;
            // SAFETY: a live state; the bytes are a PTX text the session
            // NUL-terminated, or a cubin or fatbin it bounds-checked; the
            // driver copies what it keeps.
            let r: CuResult = unsafe {
                add(
                    state.raw,
                    CUjitInputType(input.kind),
                    input.data.as_ptr().cast_mut().cast(),
                    input.data.len(),
                    name.as_ptr(),
                    0,
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            };
            r.result()?;
        }
        let (mut cubin, mut size) = (ptr::null_mut(), 0usize);
        // SAFETY: a live state and valid out-pointers.
        unsafe { complete(state.raw, &mut cubin, &mut size) }.result()?;
        if cubin.is_null() {
            return Err(CuError::UNKNOWN);
        }
        // SAFETY: the driver's image of `size` bytes, alive until the state
        // is destroyed (after this copy).
        Ok(unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), size) }.to_vec())
    }
}
