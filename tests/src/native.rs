//! The CUDA driver called directly (cudarc's `sys` layer): the baseline of
//! `pvgpu-bench`, running the same workloads as a pvgpu session.

use crate::{Device, PTX};
use cudarc::driver::sys;
use pvgpu_frontend::{CuError, CuResult, Error};
use std::ffi::{CString, c_void};
use std::ptr;

fn ck(r: sys::CUresult) -> pvgpu_frontend::Result<()> {
    let v = r as u32;
    CuResult(v).result().map_err(Error::Cuda)
}

/// A context of its own on device 0 with the test kernels loaded.
pub struct NativeGpu {
    ctx: sys::CUcontext,
    module: sys::CUmodule,
    /// Device name.
    pub name: String,
    /// Driver version.
    pub driver_version: i32,
}

/// A kernel of the native module.
#[derive(Clone, Copy)]
pub struct NativeKernel(sys::CUfunction);

impl NativeKernel {
    /// The driver's handle.
    pub fn raw(&self) -> sys::CUfunction {
        self.0
    }
}

/// A program's first command, natively: `cuInit`, the primary context of
/// device 0 made current, 4 KiB allocated, 4 bytes set to 7 and read back.
/// Returns what was read.
pub fn first_command() -> pvgpu_frontend::Result<u32> {
    let (mut dev, mut ctx, mut d, mut v) = (0, ptr::null_mut(), 0, 0u32);
    // SAFETY: cuInit has no preconditions; each call gets valid
    // out-pointers, and the copy's destination holds its 4 bytes.
    unsafe {
        ck(sys::cuInit(0))?;
        ck(sys::cuDeviceGet(&mut dev, 0))?;
        ck(sys::cuDevicePrimaryCtxRetain(&mut ctx, dev))?;
        ck(sys::cuCtxSetCurrent(ctx))?;
        ck(sys::cuMemAlloc_v2(&mut d, 4096))?;
        ck(sys::cuMemsetD32_v2(d, 7, 1))?;
        ck(sys::cuMemcpyDtoH_v2((&mut v as *mut u32).cast(), d, 4))?;
    }
    Ok(v)
}

impl NativeGpu {
    /// `None` when no CUDA driver is installed.
    pub fn open() -> pvgpu_frontend::Result<Option<NativeGpu>> {
        // SAFETY: only tries to load the library.
        if !unsafe { sys::is_culib_present() } {
            return Ok(None);
        }
        // SAFETY: cuInit has no preconditions.
        ck(unsafe { sys::cuInit(0) })?;
        let mut count = 0;
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuDeviceGetCount(&mut count) })?;
        if count == 0 {
            return Ok(None);
        }
        let mut dev = 0;
        // SAFETY: valid out-pointer, ordinal 0 exists.
        ck(unsafe { sys::cuDeviceGet(&mut dev, 0) })?;
        let mut name = [0 as std::ffi::c_char; 256];
        // SAFETY: buffer of the length passed.
        ck(unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), 256, dev) })?;
        let name: String = name.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect();
        let mut driver_version = 0;
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuDriverGetVersion(&mut driver_version) })?;
        let mut ctx = ptr::null_mut();
        // SAFETY: valid out-pointer; default create parameters.
        ck(unsafe { sys::cuCtxCreate_v4(&mut ctx, ptr::null_mut(), 0, dev) })?;
        let mut image = PTX.to_vec();
        image.push(0);
        let mut module = ptr::null_mut();
        // SAFETY: NUL-terminated PTX; the context is current.
        ck(unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast()) })?;
        Ok(Some(NativeGpu { ctx, module, name, driver_version }))
    }

    /// Makes the context current on the calling thread.
    pub fn make_current(&self) -> pvgpu_frontend::Result<()> {
        // SAFETY: the context is alive.
        ck(unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    /// `cuMemAllocHost`: pinned host memory.
    pub fn alloc_host(&self, bytes: usize) -> pvgpu_frontend::Result<PinnedBuf> {
        let mut p = ptr::null_mut();
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuMemAllocHost_v2(&mut p, bytes) })?;
        Ok(PinnedBuf { p: p.cast(), len: bytes })
    }

    /// `cuMemcpyHtoD` from a raw host pointer.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes.
    pub unsafe fn htod_raw(&self, d: u64, src: *const u8, len: usize) -> pvgpu_frontend::Result<()> {
        // SAFETY: the caller guarantees src; d is an allocation of ours.
        ck(unsafe { sys::cuMemcpyHtoD_v2(d, src.cast(), len) })
    }

    /// `cuMemcpyDtoH` to a raw host pointer.
    ///
    /// # Safety
    /// `dst` must be writable for `len` bytes.
    pub unsafe fn dtoh_raw(&self, dst: *mut u8, d: u64, len: usize) -> pvgpu_frontend::Result<()> {
        // SAFETY: the caller guarantees dst; d is an allocation of ours.
        ck(unsafe { sys::cuMemcpyDtoH_v2(dst.cast(), d, len) })
    }
}

/// Pinned host memory from `cuMemAllocHost`, freed on drop.
pub struct PinnedBuf {
    p: *mut u8,
    len: usize,
}

impl PinnedBuf {
    /// Base pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.p
    }
    /// Length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAllocHost, freed once.
        unsafe { sys::cuMemFreeHost(self.p.cast()) };
    }
}

impl Drop for NativeGpu {
    fn drop(&mut self) {
        // SAFETY: our own context, destroyed once; frees the module too.
        unsafe { sys::cuCtxDestroy_v2(self.ctx) };
    }
}

impl Device for NativeGpu {
    type Kernel = NativeKernel;

    fn kernel(&self, name: &str) -> pvgpu_frontend::Result<NativeKernel> {
        let n = CString::new(name).map_err(|_| Error::Cuda(CuError::INVALID_VALUE))?;
        let mut f = ptr::null_mut();
        // SAFETY: valid out-pointer, live module, NUL-terminated name.
        ck(unsafe { sys::cuModuleGetFunction(&mut f, self.module, n.as_ptr()) })?;
        Ok(NativeKernel(f))
    }

    fn alloc(&self, bytes: u64) -> pvgpu_frontend::Result<u64> {
        let mut p = 0;
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuMemAlloc_v2(&mut p, bytes as usize) })?;
        Ok(p)
    }

    fn free(&self, d: u64) -> pvgpu_frontend::Result<()> {
        // SAFETY: an address from alloc.
        ck(unsafe { sys::cuMemFree_v2(d) })
    }

    fn htod(&self, d: u64, src: &[u8]) -> pvgpu_frontend::Result<()> {
        // SAFETY: src is a live slice of its length.
        unsafe { self.htod_raw(d, src.as_ptr(), src.len()) }
    }

    fn dtoh(&self, dst: &mut [u8], d: u64) -> pvgpu_frontend::Result<()> {
        // SAFETY: dst is a live slice of its length.
        unsafe { self.dtoh_raw(dst.as_mut_ptr(), d, dst.len()) }
    }

    fn launch(&self, k: &NativeKernel, grid: [u32; 3], block: [u32; 3], args: &[&[u8]]) -> pvgpu_frontend::Result<()> {
        let mut ptrs: Vec<*mut c_void> = args.iter().map(|a| a.as_ptr() as *mut c_void).collect();
        // SAFETY: one pointer per parameter, each to a value of the
        // parameter's size that outlives the call.
        ck(unsafe {
            sys::cuLaunchKernel(
                k.0,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                0,
                ptr::null_mut(),
                ptrs.as_mut_ptr(),
                ptr::null_mut(),
            )
        })
    }

    fn sync(&self) -> pvgpu_frontend::Result<()> {
        // SAFETY: acts on the current context.
        ck(unsafe { sys::cuCtxSynchronize() })
    }
}
