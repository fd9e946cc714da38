//! The GPU executor, on cudarc's `sys` layer (dynamically loaded libcuda).
//!
//! Each [`CudaContext`] is our own RAII handle over a context made with
//! `cuCtxCreate`: never the device's primary context, which is shared by
//! the whole process. Dropping it destroys the context, which frees every
//! allocation, module, stream and event made in it.
//!
//! Faults are per process on a GPU (a kernel's illegal address poisons every
//! context of the process: see `docs/architecture.md`), so the backend runs
//! each session of this executor in its own worker process by default.

mod ext;
mod nvml;
pub mod output;
mod vmm;

use super::{Copy2D, CtxInfo, CuRes, DeviceInfo, ExecContext, Executor, LaunchAttr, LaunchDims, Param, Rect, TensorMapEncode};
use cudarc::driver::sys;
use ext::ExtFns;
use pvgpu_ring::cuda::attr;
use pvgpu_ring::{CuError, CuResult};
use std::ffi::{c_int, c_void};
use std::ptr;

fn ck(r: sys::CUresult) -> CuRes<()> {
    ck_raw(r as u32)
}

fn ck_raw(v: u32) -> CuRes<()> {
    CuResult(v).result()
}

/// Why the GPU executor could not start.
#[derive(Debug, thiserror::Error)]
pub enum CudaInitError {
    /// libcuda could not be loaded.
    #[error("The NVIDIA driver library (libcuda.so.1) was not found; install the driver or use --executor host")]
    NoDriver,
    /// A driver call failed during start-up.
    #[error("CUDA driver call {call} failed during start-up: {status}")]
    Driver {
        /// The call.
        call: &'static str,
        /// Its status.
        status: CuError,
    },
}

fn init_ck(call: &'static str, r: sys::CUresult) -> Result<(), CudaInitError> {
    ck(r).map_err(|status| CudaInitError::Driver { call, status })
}

/// `cuDeviceGetAttribute` with the attribute as a plain integer: cudarc's
/// binding takes a Rust enum, which cannot hold arbitrary numbers.
type GetAttrFn = unsafe extern "C" fn(*mut c_int, c_int, sys::CUdevice) -> u32;

/// Driver entry points the executor calls (CUDA 12.8 or newer has them all).
const REQUIRED_SYMBOLS: &[&str] = &[
    "cuModuleGetFunctionCount",
    "cuModuleEnumerateFunctions",
    "cuFuncGetName",
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid_v2",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuCtxCreate_v4",
    "cuCtxDestroy_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemGetInfo_v2",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuMemcpyHtoD_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncGetParamInfo",
    "cuModuleGetGlobal_v2",
    "cuLaunchKernel",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime_v2",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
];

/// The GPUs of this host.
pub struct CudaExecutor {
    devices: Vec<DeviceInfo>,
    raw: Vec<sys::CUdevice>,
    driver_version: i32,
    int_fns: IntFns,
    ext_fns: ExtFns,
    nvml: Option<nvml::Nvml>,
}

/// A device's PCI bus id as `cuDeviceGetPCIBusId` writes it (empty if the
/// driver does not say).
fn bus_id(dev: sys::CUdevice) -> String {
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: a buffer of the length passed.
    if unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, dev) } != sys::cudaError_enum::CUDA_SUCCESS {
        return String::new();
    }
    buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect()
}

impl CudaExecutor {
    /// Loads libcuda, initialises it and describes every device.
    pub fn new() -> Result<Self, CudaInitError> {
        // SAFETY: only tries to dlopen the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaInitError::NoDriver);
        }
        // cudarc resolves each symbol on first use and panics if it is
        // missing: resolve them all now, so an old driver fails here with a
        // clear error instead of in a session.
        for name in REQUIRED_SYMBOLS {
            // SAFETY: the library is loaded; we only look the symbol up.
            if unsafe { sys::culib().get::<*const c_void>(name.as_bytes()) }.is_err() {
                return Err(CudaInitError::Driver { call: name, status: CuError::NOT_FOUND });
            }
        }
        // SAFETY: cuInit has no preconditions.
        init_ck("cuInit", unsafe { sys::cuInit(0) })?;
        let mut driver_version = 0;
        // SAFETY: valid out-pointer.
        init_ck("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut driver_version) })?;
        let mut count = 0;
        // SAFETY: valid out-pointer.
        init_ck("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) })?;
        // SAFETY: the library is loaded (checked above); the symbol has this
        // C signature in every CUDA version.
        let get_attr: GetAttrFn = unsafe { symbol("cuDeviceGetAttribute")? };
        let mut devices = Vec::new();
        let mut raw = Vec::new();
        for i in 0..count {
            let mut dev = 0;
            // SAFETY: valid out-pointer; ordinal in range.
            init_ck("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev, i) })?;
            let mut name = [0 as std::ffi::c_char; 256];
            // SAFETY: buffer of the length passed.
            init_ck("cuDeviceGetName", unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), 256, dev) })?;
            let name: Vec<u8> = name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
            // SAFETY: CUuuid is plain bytes; valid out-pointer.
            let mut uuid: sys::CUuuid = unsafe { std::mem::zeroed() };
            // SAFETY: valid out-pointer.
            init_ck("cuDeviceGetUuid", unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, dev) })?;
            let mut total = 0usize;
            // SAFETY: valid out-pointer.
            init_ck("cuDeviceTotalMem", unsafe { sys::cuDeviceTotalMem_v2(&mut total, dev) })?;
            let mut attrs = Vec::new();
            for a in 1..attr::MAX {
                let mut v = 0;
                // SAFETY: valid out-pointer; an unknown attribute number is
                // answered with an error status.
                if unsafe { get_attr(&mut v, a, dev) } == 0 {
                    attrs.push((a, v));
                }
            }
            devices.push(DeviceInfo {
                name: String::from_utf8_lossy(&name).into_owned(),
                uuid: uuid.bytes.map(|b| b as u8),
                total_mem: total as u64,
                attrs,
            });
            raw.push(dev);
        }
        // SAFETY: these are the C signatures of the four symbols.
        let int_fns = unsafe {
            IntFns {
                get: symbol("cuFuncGetAttribute")?,
                set: symbol("cuFuncSetAttribute")?,
                get_limit: symbol("cuCtxGetLimit")?,
                set_limit: symbol("cuCtxSetLimit")?,
            }
        };
        // SAFETY: the library is loaded.
        let ext_fns = unsafe { ExtFns::resolve()? };
        let bus_ids: Vec<String> = raw.iter().map(|&d| bus_id(d)).collect();
        let nvml = nvml::Nvml::load(&bus_ids);
        tracing::info!(driver_version, devices = devices.len(), nvml = nvml.is_some(), "CUDA executor ready");
        Ok(CudaExecutor { devices, raw, driver_version, int_fns, ext_fns, nvml })
    }
}

impl Executor for CudaExecutor {
    type Context = CudaContext;

    fn kind(&self) -> &'static str {
        "cuda"
    }

    fn driver_version(&self) -> i32 {
        self.driver_version
    }

    fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    fn gauges(&self, device: usize) -> CuRes<super::Gauges> {
        self.raw.get(device).ok_or(CuError::INVALID_DEVICE)?;
        Ok(self.nvml.as_ref().map_or_else(super::Gauges::default, |n| n.gauges(device)))
    }

    fn vmm_granularity(&self, device: usize, option: u32) -> CuRes<u64> {
        let dev = *self.raw.get(device).ok_or(CuError::INVALID_DEVICE)?;
        vmm::granularity(&self.ext_fns, dev, option)
    }

    fn create_context(&self, device: usize, flags: u32) -> CuRes<CudaContext> {
        let dev = *self.raw.get(device).ok_or(CuError::INVALID_DEVICE)?;
        let mut raw = ptr::null_mut();
        // SAFETY: valid out-pointer; null create-params asks for defaults.
        ck(unsafe { sys::cuCtxCreate_v4(&mut raw, ptr::null_mut(), flags, dev) })?;
        Ok(CudaContext { raw, dev, attr_fns: self.int_fns, ext: self.ext_fns })
    }
}

/// A CUDA context owned by one session (RAII: destroyed on drop).
pub struct CudaContext {
    raw: sys::CUcontext,
    dev: sys::CUdevice,
    attr_fns: IntFns,
    ext: ExtFns,
}

/// Driver entry points whose enum arguments we pass as plain integers
/// (cudarc's bindings take Rust enums, which cannot hold numbers from a
/// guest without undefined behaviour).
#[derive(Clone, Copy)]
struct IntFns {
    get: unsafe extern "C" fn(*mut c_int, c_int, sys::CUfunction) -> u32,
    set: unsafe extern "C" fn(sys::CUfunction, c_int, c_int) -> u32,
    get_limit: unsafe extern "C" fn(*mut usize, c_int) -> u32,
    set_limit: unsafe extern "C" fn(c_int, usize) -> u32,
}

/// Looks up a driver symbol by name.
///
/// # Safety
/// `F` must be the symbol's true C signature.
unsafe fn symbol<F: Copy>(name: &'static str) -> Result<F, CudaInitError> {
    // SAFETY: the library is loaded (checked before any call); the caller
    // promises F matches the symbol.
    unsafe { sys::culib().get::<F>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| CudaInitError::Driver { call: name, status: CuError::NOT_FOUND })
}

// SAFETY: a CUDA context may be used from any thread once made current
// there; the session owns it and uses it from one thread at a time.
unsafe impl Send for CudaContext {}

impl Drop for CudaContext {
    fn drop(&mut self) {
        // SAFETY: we created this context and destroy it once; the driver
        // frees everything made in it.
        let r = unsafe { sys::cuCtxDestroy_v2(self.raw) };
        if let Err(e) = ck(r) {
            tracing::warn!(error = %e, "cuCtxDestroy failed");
        }
    }
}

macro_rules! send_handle {
    ($(#[$m:meta])* $name:ident($t:ty)) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name($t);
        // SAFETY: driver handles are plain identifiers the driver resolves in
        // the current context; they carry no thread affinity.
        unsafe impl Send for $name {}
    };
}

send_handle!(
    /// A loaded module.
    CudaModule(sys::CUmodule)
);
send_handle!(
    /// A kernel.
    CudaFunction(sys::CUfunction)
);
send_handle!(
    /// A stream.
    CudaStream(sys::CUstream)
);
send_handle!(
    /// An event.
    CudaEvent(sys::CUevent)
);

fn raw_stream(s: Option<CudaStream>) -> sys::CUstream {
    s.map_or(ptr::null_mut(), |s| s.0)
}

impl ExecContext for CudaContext {
    type Module = CudaModule;
    type Function = CudaFunction;
    type Stream = CudaStream;
    type Event = CudaEvent;

    fn make_current(&mut self) -> CuRes<()> {
        // SAFETY: the context is alive (owned by self).
        ck(unsafe { sys::cuCtxSetCurrent(self.raw) })
    }

    unsafe fn register_host(&mut self, ptr: *mut u8, len: usize) -> CuRes<Option<u64>> {
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the caller keeps the range mapped while this context
        // lives; PORTABLE makes it pinned for every context of the process,
        // DEVICEMAP gives it a device address.
        if ck(unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, flags) }).is_err() {
            // SAFETY: as above, without the device mapping.
            ck(unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, sys::CU_MEMHOSTREGISTER_PORTABLE) })?;
            return Ok(None);
        }
        let mut d = 0;
        // SAFETY: valid out-pointer; `ptr` was registered with DEVICEMAP.
        Ok(ck(unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, ptr.cast(), 0) }).ok().map(|_| d))
    }

    fn synchronize(&mut self) -> CuRes<()> {
        // SAFETY: no arguments; acts on the current context.
        ck(unsafe { sys::cuCtxSynchronize() })
    }

    fn mem_alloc(&mut self, size: u64) -> CuRes<u64> {
        let mut p = 0;
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuMemAlloc_v2(&mut p, size as usize) })?;
        Ok(p)
    }

    fn mem_free(&mut self, dptr: u64) -> CuRes<()> {
        // SAFETY: the session only frees addresses this context allocated.
        ck(unsafe { sys::cuMemFree_v2(dptr) })
    }

    fn mem_get_info(&mut self) -> CuRes<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        ck(unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
        Ok((free as u64, total as u64))
    }

    fn memset(&mut self, dptr: u64, value: u32, elem_size: u32, count: u64, stream: Option<CudaStream>) -> CuRes<()> {
        let n = count as usize;
        let s = raw_stream(stream);
        // SAFETY: the session checked the range lies in this session's
        // allocations; the stream belongs to this context.
        ck(unsafe {
            match elem_size {
                1 => sys::cuMemsetD8Async(dptr, value as u8, n, s),
                2 => sys::cuMemsetD16Async(dptr, value as u16, n, s),
                _ => sys::cuMemsetD32Async(dptr, value, n, s),
            }
        })
    }

    unsafe fn htod(&mut self, dst: u64, src: *const u8, len: usize, stream: Option<CudaStream>, wait: bool) -> CuRes<()> {
        match stream {
            // SAFETY: the caller guarantees src is readable for len bytes;
            // the device range was checked.
            None => ck(unsafe { sys::cuMemcpyHtoD_v2(dst, src.cast(), len) }),
            Some(s) => {
                // SAFETY: as above; the stream belongs to this context.
                ck(unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, s.0) })?;
                if wait {
                    // The source may be reused once we return (CUDA stages
                    // pageable sources the same way).
                    // SAFETY: the stream is alive.
                    ck(unsafe { sys::cuStreamSynchronize(s.0) })?;
                }
                Ok(())
            }
        }
    }

    unsafe fn dtoh(&mut self, dst: *mut u8, src: u64, len: usize, stream: Option<CudaStream>, wait: bool) -> CuRes<()> {
        match stream {
            // SAFETY: the caller guarantees dst is writable for len bytes;
            // the device range was checked.
            None => ck(unsafe { sys::cuMemcpyDtoH_v2(dst.cast(), src, len) }),
            Some(s) => {
                // SAFETY: as above; the stream belongs to this context.
                ck(unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, s.0) })?;
                if wait {
                    // SAFETY: the stream is alive.
                    ck(unsafe { sys::cuStreamSynchronize(s.0) })?;
                }
                Ok(())
            }
        }
    }

    fn dtod(&mut self, dst: u64, src: u64, len: u64, stream: Option<CudaStream>, is_async: bool) -> CuRes<()> {
        if is_async {
            // SAFETY: both ranges were checked; the stream belongs here.
            ck(unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len as usize, raw_stream(stream)) })
        } else {
            // SAFETY: both ranges were checked.
            ck(unsafe { sys::cuMemcpyDtoD_v2(dst, src, len as usize) })
        }
    }

    fn module_load(&mut self, image: &[u8]) -> CuRes<CudaModule> {
        if image.last() != Some(&0) {
            return Err(CuError::INVALID_IMAGE);
        }
        let mut m = ptr::null_mut();
        // SAFETY: the image is NUL-terminated (so PTX text ends in bounds)
        // and cubin/fatbin headers were bounds-checked by the session.
        ck(unsafe { sys::cuModuleLoadData(&mut m, image.as_ptr().cast()) })?;
        Ok(CudaModule(m))
    }

    fn module_unload(&mut self, m: CudaModule) -> CuRes<()> {
        // SAFETY: the module was loaded in this context and is unloaded once.
        ck(unsafe { sys::cuModuleUnload(m.0) })
    }

    fn function(&mut self, m: &CudaModule, name: &str) -> CuRes<(CudaFunction, Vec<Param>)> {
        let cname = std::ffi::CString::new(name).map_err(|_| CuError::INVALID_VALUE)?;
        let mut f = ptr::null_mut();
        // SAFETY: valid out-pointer, NUL-terminated name, live module.
        ck(unsafe { sys::cuModuleGetFunction(&mut f, m.0, cname.as_ptr()) })?;
        let mut params = Vec::new();
        for i in 0..pvgpu_ring::proto::MAX_PARAMS {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: valid out-pointers; an index past the last parameter
            // returns CUDA_ERROR_INVALID_VALUE.
            if unsafe { sys::cuFuncGetParamInfo(f, i, &mut off, &mut size) } as u32 != 0 {
                break;
            }
            params.push(Param { offset: off as u32, size: size as u32 });
        }
        Ok((CudaFunction(f), params))
    }

    fn function_names(&mut self, m: &CudaModule) -> CuRes<Vec<String>> {
        let mut n = 0u32;
        // SAFETY: valid out-pointer, live module.
        ck(unsafe { sys::cuModuleGetFunctionCount(&mut n, m.0) })?;
        let n = (n as usize).min(pvgpu_ring::proto::MAX_NAMES);
        let mut fns = vec![ptr::null_mut(); n];
        // SAFETY: room for `n` handles, live module.
        ck(unsafe { sys::cuModuleEnumerateFunctions(fns.as_mut_ptr(), n as u32, m.0) })?;
        let mut names = Vec::with_capacity(n);
        for f in fns {
            let mut p = ptr::null();
            // SAFETY: valid out-pointer; `f` is a function of the live module.
            ck(unsafe { sys::cuFuncGetName(&mut p, f) })?;
            // SAFETY: the driver returns a NUL-terminated name it owns.
            names.push(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn global(&mut self, m: &CudaModule, name: &str) -> CuRes<(u64, u64)> {
        let cname = std::ffi::CString::new(name).map_err(|_| CuError::INVALID_VALUE)?;
        let (mut p, mut size) = (0u64, 0usize);
        // SAFETY: valid out-pointers, NUL-terminated name, live module.
        ck(unsafe { sys::cuModuleGetGlobal_v2(&mut p, &mut size, m.0, cname.as_ptr()) })?;
        Ok((p, size as u64))
    }

    fn launch(
        &mut self,
        f: CudaFunction,
        d: LaunchDims,
        params: &[u8],
        layout: &[Param],
        attrs: &[LaunchAttr],
        stream: Option<CudaStream>,
    ) -> CuRes<()> {
        let mut args: Vec<*mut c_void> = Vec::with_capacity(layout.len());
        for p in layout {
            let end = p.offset as usize + p.size as usize;
            if end > params.len() {
                return Err(CuError::INVALID_VALUE);
            }
            // SAFETY: offset is within `params` (checked just above).
            args.push(unsafe { params.as_ptr().add(p.offset as usize) } as *mut c_void);
        }
        if !attrs.is_empty() {
            return self.launch_with(f, d, &mut args, attrs, stream);
        }
        // SAFETY: one pointer per kernel parameter, each to at least `size`
        // bytes of `params`, which outlives the call; the driver copies the
        // values before returning.
        ck(unsafe {
            sys::cuLaunchKernel(
                f.0,
                d.grid[0],
                d.grid[1],
                d.grid[2],
                d.block[0],
                d.block[1],
                d.block[2],
                d.shared_mem,
                raw_stream(stream),
                args.as_mut_ptr(),
                ptr::null_mut(),
            )
        })
    }

    fn stream_create(&mut self, flags: u32, priority: i32) -> CuRes<CudaStream> {
        let mut s = ptr::null_mut();
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuStreamCreateWithPriority(&mut s, flags, priority) })?;
        Ok(CudaStream(s))
    }

    fn stream_destroy(&mut self, s: CudaStream) -> CuRes<()> {
        // SAFETY: the stream was created here and is destroyed once.
        ck(unsafe { sys::cuStreamDestroy_v2(s.0) })
    }

    fn stream_synchronize(&mut self, s: CudaStream) -> CuRes<()> {
        // SAFETY: live stream.
        ck(unsafe { sys::cuStreamSynchronize(s.0) })
    }

    fn stream_query(&mut self, s: CudaStream) -> CuRes<bool> {
        // SAFETY: live stream.
        match ck(unsafe { sys::cuStreamQuery(s.0) }) {
            Ok(()) => Ok(true),
            Err(CuError::NOT_READY) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn event_create(&mut self, flags: u32) -> CuRes<CudaEvent> {
        let mut e = ptr::null_mut();
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuEventCreate(&mut e, flags) })?;
        Ok(CudaEvent(e))
    }

    fn event_destroy(&mut self, e: CudaEvent) -> CuRes<()> {
        // SAFETY: the event was created here and is destroyed once.
        ck(unsafe { sys::cuEventDestroy_v2(e.0) })
    }

    fn event_record(&mut self, e: CudaEvent, s: Option<CudaStream>) -> CuRes<()> {
        // SAFETY: live event and stream of this context.
        ck(unsafe { sys::cuEventRecord(e.0, raw_stream(s)) })
    }

    fn event_query(&mut self, e: CudaEvent) -> CuRes<bool> {
        // SAFETY: live event.
        match ck(unsafe { sys::cuEventQuery(e.0) }) {
            Ok(()) => Ok(true),
            Err(CuError::NOT_READY) => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn event_synchronize(&mut self, e: CudaEvent) -> CuRes<()> {
        // SAFETY: live event.
        ck(unsafe { sys::cuEventSynchronize(e.0) })
    }

    fn event_elapsed(&mut self, a: CudaEvent, b: CudaEvent) -> CuRes<f32> {
        let mut ms = 0f32;
        // SAFETY: valid out-pointer, live events.
        ck(unsafe { sys::cuEventElapsedTime_v2(&mut ms, a.0, b.0) })?;
        Ok(ms)
    }

    fn stream_wait_event(&mut self, s: Option<CudaStream>, e: CudaEvent) -> CuRes<()> {
        // SAFETY: live stream (or the default stream) and event.
        ck(unsafe { sys::cuStreamWaitEvent(raw_stream(s), e.0, 0) })
    }

    fn func_get_attribute(&mut self, f: CudaFunction, attr: i32) -> CuRes<i32> {
        let mut v = 0;
        // SAFETY: valid out-pointer, live function; the attribute number is
        // passed as a plain int (an unknown one is an error status).
        ck_raw(unsafe { (self.attr_fns.get)(&mut v, attr, f.0) })?;
        Ok(v)
    }

    fn func_set_attribute(&mut self, f: CudaFunction, attr: i32, value: i32) -> CuRes<()> {
        // SAFETY: live function; plain-int attribute as above.
        ck_raw(unsafe { (self.attr_fns.set)(f.0, attr, value) })
    }

    fn info(&mut self) -> CuRes<CtxInfo> {
        let (mut least, mut greatest, mut flags, mut version) = (0, 0, 0u32, 0u32);
        // SAFETY: valid out-pointers; acts on the current context (this one).
        ck(unsafe { sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) })?;
        // SAFETY: valid out-pointer.
        ck(unsafe { sys::cuCtxGetFlags(&mut flags) })?;
        // SAFETY: valid out-pointer, live context.
        ck(unsafe { sys::cuCtxGetApiVersion(self.raw, &mut version) })?;
        Ok(CtxInfo { api_version: version, flags, least_priority: least, greatest_priority: greatest })
    }

    fn get_limit(&mut self, limit: u32) -> CuRes<u64> {
        let mut v = 0usize;
        // SAFETY: valid out-pointer; a plain-int limit number.
        ck_raw(unsafe { (self.attr_fns.get_limit)(&mut v, limit as c_int) })?;
        Ok(v as u64)
    }

    fn occupancy(&mut self, f: CudaFunction, kind: u32, block_size: i32, limit: i32, dyn_smem: u64, flags: u32) -> CuRes<(i64, i64)> {
        match kind {
            0 => {
                let mut n = 0;
                // SAFETY: valid out-pointer, live function.
                ck(unsafe {
                    sys::cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&mut n, f.0, block_size, dyn_smem as usize, flags)
                })?;
                Ok((n as i64, 0))
            }
            1 => {
                let (mut grid, mut block) = (0, 0);
                // SAFETY: valid out-pointers, live function, no callback.
                ck(unsafe {
                    sys::cuOccupancyMaxPotentialBlockSizeWithFlags(&mut grid, &mut block, f.0, None, dyn_smem as usize, limit, flags)
                })?;
                Ok((grid as i64, block as i64))
            }
            _ => {
                let mut size = 0usize;
                // SAFETY: valid out-pointer, live function.
                ck(unsafe { sys::cuOccupancyAvailableDynamicSMemPerBlock(&mut size, f.0, limit, block_size) })?;
                Ok((size as i64, 0))
            }
        }
    }

    fn set_limit(&mut self, limit: u32, value: u64) -> CuRes<()> {
        // SAFETY: plain-int limit number; acts on the current context.
        ck_raw(unsafe { (self.attr_fns.set_limit)(limit as c_int, value as usize) })
    }

    fn occupancy_clusters(&mut self, f: CudaFunction, dims: LaunchDims, attrs: &[LaunchAttr], kind: u32) -> CuRes<i32> {
        self.clusters(f, dims, attrs, kind)
    }

    fn mem_alloc_async(&mut self, size: u64, stream: Option<CudaStream>) -> CuRes<u64> {
        self.alloc_async(size, stream)
    }

    fn mem_free_async(&mut self, dptr: u64, stream: Option<CudaStream>) -> CuRes<()> {
        self.free_async(dptr, stream)
    }

    fn mem_pool_attribute(&mut self, attr: u32, set: Option<u64>) -> CuRes<u64> {
        self.pool_attribute(attr, set)
    }

    unsafe fn copy_2d(&mut self, c: Copy2D, width: u64, height: u64, stream: Option<CudaStream>, wait: bool) -> CuRes<()> {
        // SAFETY: the same contract.
        unsafe { self.copy2d(c, width, height, stream, wait) }
    }

    fn memset_2d(&mut self, rect: Rect, value: u32, elem: u32, s: Option<CudaStream>) -> CuRes<()> {
        self.memset2d(rect, value, elem, s)
    }

    fn tensor_map_encode(&mut self, r: &TensorMapEncode) -> CuRes<[u8; 128]> {
        self.tensor_map(r)
    }

    fn vmm_reserve(&mut self, size: u64, alignment: u64, addr: u64) -> CuRes<u64> {
        self.reserve(size, alignment, addr)
    }

    fn vmm_free(&mut self, ptr: u64, size: u64) -> CuRes<()> {
        self.address_free(ptr, size)
    }

    fn vmm_create(&mut self, size: u64) -> CuRes<u64> {
        self.create(size)
    }

    fn vmm_release(&mut self, handle: u64) -> CuRes<()> {
        self.release(handle)
    }

    fn vmm_map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64) -> CuRes<()> {
        self.map(ptr, size, offset, handle)
    }

    fn vmm_unmap(&mut self, ptr: u64, size: u64) -> CuRes<()> {
        self.unmap(ptr, size)
    }

    fn vmm_set_access(&mut self, ptr: u64, size: u64, flags: u32) -> CuRes<()> {
        self.set_access(ptr, size, flags)
    }

    fn take_output(&mut self, out: &mut Vec<u8>) {
        output::drain(out);
    }
}
