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

mod arena;
mod array;
mod conditional;
mod context;
mod driver;
mod ext;
mod graph;
mod graph_mem;
mod host_node;
mod ipc;
mod link;
mod memop;
mod node_params;
mod nvml;

/// The GPUs' gauges for `/metrics`, read with NVML (no CUDA context);
/// `None` where NVML or GPUs are missing.
pub fn gpu_gauges() -> Option<std::sync::Arc<dyn crate::metrics::GpuSource>> {
    let boards = nvml::Boards::load();
    if boards.is_none() {
        tracing::info!("no NVML: /metrics has no per-GPU gauges");
    }
    boards.map(|b| std::sync::Arc::new(b) as std::sync::Arc<dyn crate::metrics::GpuSource>)
}
pub mod output;
mod placed;
mod pool;
mod vmm;

use super::{Copy2D, CtxInfo, CuRes, DeviceInfo, Executor, LaunchAttr, LaunchDims, Param, Rect, TensorMapEncode};
use cudarc::driver::sys;
use pvgpu_ring::cuda::api::*;
use pvgpu_ring::cuda::api::{CUdevice_attribute, Driver};
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
    drv: &'static Driver,
    nvml: Option<nvml::Nvml>,
    memory: crate::config::DeviceMemory,
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
    /// The other devices that can reach `dev`'s memory peer to peer.
    fn peers_of(&self, dev: sys::CUdevice) -> Vec<sys::CUdevice> {
        let can = |peer: sys::CUdevice| {
            let mut v = 0;
            // SAFETY: valid out-pointer; devices of this driver.
            let r = unsafe { sys::cuDeviceCanAccessPeer(&mut v, peer, dev) };
            r == sys::cudaError_enum::CUDA_SUCCESS && v == 1
        };
        self.raw.iter().copied().filter(|&p| p != dev && can(p)).collect()
    }

    /// Loads libcuda, initialises it and describes every device; device
    /// memory where the driver puts it.
    pub fn new() -> Result<Self, CudaInitError> {
        Self::with_memory(crate::config::DeviceMemory::Driver)
    }

    /// As [`CudaExecutor::new`], with device memory where `memory` says.
    pub fn with_memory(memory: crate::config::DeviceMemory) -> Result<Self, CudaInitError> {
        let drv = load_driver()?;
        // SAFETY: cuInit has no preconditions.
        init_ck("cuInit", unsafe { sys::cuInit(0) })?;
        let mut driver_version = 0;
        // SAFETY: valid out-pointer.
        init_ck("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut driver_version) })?;
        let mut count = 0;
        // SAFETY: valid out-pointer.
        init_ck("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) })?;
        let mut devices = Vec::new();
        let mut raw = Vec::new();
        for i in 0..count {
            let mut dev = 0;
            // SAFETY: valid out-pointer; ordinal in range.
            init_ck("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev, i) })?;
            devices.push(describe(drv, dev)?);
            raw.push(dev);
        }
        let bus_ids: Vec<String> = raw.iter().map(|&d| bus_id(d)).collect();
        let nvml = nvml::Nvml::load(&bus_ids);
        tracing::info!(driver_version, devices = devices.len(), nvml = nvml.is_some(), ?memory, "CUDA executor ready");
        Ok(CudaExecutor { devices, raw, driver_version, drv, nvml, memory })
    }
}

/// Loads libcuda and checks that every entry point the executor calls is
/// there: cudarc resolves each on first use and panics if it is missing,
/// so an old driver fails here with a clear error instead of in a session.
fn load_driver() -> Result<&'static Driver, CudaInitError> {
    // SAFETY: only tries to dlopen the library.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaInitError::NoDriver);
    }
    for name in REQUIRED_SYMBOLS {
        // SAFETY: the library is loaded; we only look the symbol up.
        if unsafe { sys::culib().get::<*const c_void>(name.as_bytes()) }.is_err() {
            return Err(CudaInitError::Driver { call: name, status: CuError::NOT_FOUND });
        }
    }
    // SAFETY: the library is loaded (checked above).
    let drv = unsafe { driver::load() };
    driver::check(drv)?;
    Ok(drv)
}

/// Name, UUID, memory and every attribute the driver answers of `dev`.
fn describe(drv: &Driver, dev: sys::CUdevice) -> Result<DeviceInfo, CudaInitError> {
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
    let get_attr =
        driver::entry(drv.cuDeviceGetAttribute).map_err(|status| CudaInitError::Driver { call: "cuDeviceGetAttribute", status })?;
    let mut attrs = Vec::new();
    for a in 1..CU_DEVICE_ATTRIBUTE_MAX.0 {
        let mut v = 0;
        // SAFETY: valid out-pointer; an unknown attribute number is answered
        // with an error status.
        if unsafe { get_attr(&mut v, CUdevice_attribute(a), dev) } == CuResult::SUCCESS {
            if a == CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES.0 {
                // Pools go to another process by file descriptor only
                // (docs/compatibility.md): a program that finds fabric
                // handles among the types would ask for them.
                v &= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0 as i32;
            }
            attrs.push((a as i32, v));
        }
    }
    Ok(DeviceInfo { name: String::from_utf8_lossy(&name).into_owned(), uuid: uuid.bytes.map(|b| b as u8), total_mem: total as u64, attrs })
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
        vmm::granularity(self.drv, dev, option)
    }

    fn process_footprint(&self) -> Option<u64> {
        self.nvml.as_ref()?.process_used()
    }

    fn can_access_peer(&self, device: usize, peer: usize) -> CuRes<i32> {
        let (d, p) = (*self.raw.get(device).ok_or(CuError::INVALID_DEVICE)?, *self.raw.get(peer).ok_or(CuError::INVALID_DEVICE)?);
        let mut v = 0;
        // SAFETY: valid out-pointer; devices of this driver.
        ck(unsafe { sys::cuDeviceCanAccessPeer(&mut v, d, p) })?;
        Ok(v)
    }

    fn mem_pool_access(&self, device: usize, peer: usize, set: Option<u32>) -> CuRes<u32> {
        let (d, p) = (*self.raw.get(device).ok_or(CuError::INVALID_DEVICE)?, *self.raw.get(peer).ok_or(CuError::INVALID_DEVICE)?);
        let mut pool = ptr::null_mut();
        // SAFETY: valid out-pointer; a device of this driver.
        ck(unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, d) })?;
        pool::access(self.drv, pool, p, set)
    }

    fn p2p_attribute(&self, attr: u32, src: usize, dst: usize) -> CuRes<i32> {
        let (s, d) = (*self.raw.get(src).ok_or(CuError::INVALID_DEVICE)?, *self.raw.get(dst).ok_or(CuError::INVALID_DEVICE)?);
        let mut v = 0;
        let call = driver::entry(self.drv.cuDeviceGetP2PAttribute)?;
        // SAFETY: valid out-pointer; devices of this driver; the driver
        // checks the attribute.
        driver::ok(unsafe { call(&mut v, CUdevice_P2PAttribute(attr), s, d) })?;
        Ok(v)
    }

    fn create_context(&self, device: usize, flags: u32, space: u16) -> CuRes<CudaContext> {
        let dev = *self.raw.get(device).ok_or(CuError::INVALID_DEVICE)?;
        let mut raw = ptr::null_mut();
        // SAFETY: valid out-pointer; null create-params asks for defaults.
        ck(unsafe { sys::cuCtxCreate_v4(&mut raw, ptr::null_mut(), flags, dev) })?;
        let mut ctx = CudaContext { raw, dev, drv: self.drv, host: host_node::HostNodes::default(), placed: None, space };
        if self.memory == crate::config::DeviceMemory::Placed {
            ctx.placed = Some(Box::new(placed::Placed::new(self.drv, dev, self.peers_of(dev), space)?));
        }
        Ok(ctx)
    }

    fn restores_addresses(&self) -> bool {
        self.memory == crate::config::DeviceMemory::Placed
    }
}

/// A CUDA context owned by one session (RAII: destroyed on drop).
pub struct CudaContext {
    raw: sys::CUcontext,
    dev: sys::CUdevice,
    drv: &'static Driver,
    /// Host nodes' targets and fences: dropped after the context is
    /// destroyed (fields drop after `Drop::drop`).
    host: host_node::HostNodes,
    /// Device memory at the backend's addresses (`--device-memory placed`).
    placed: Option<Box<placed::Placed>>,
    /// The session's address space ([`crate::exec::Executor::create_context`]).
    space: u16,
}

// SAFETY: a CUDA context may be used from any thread once made current
// there; the session owns it and uses it from one thread at a time.
unsafe impl Send for CudaContext {}

impl Drop for CudaContext {
    fn drop(&mut self) {
        if let Some(p) = self.placed.as_mut() {
            // Placed memory outlives contexts: give it back once the
            // context's work is done.
            // SAFETY: the context is alive (destroyed below).
            let current = ck(unsafe { sys::cuCtxSetCurrent(self.raw) });
            // SAFETY: no arguments; acts on this context, made current.
            let done = current.and_then(|()| ck(unsafe { sys::cuCtxSynchronize() }));
            if let Err(e) = done {
                tracing::warn!(error = %e, "a context's work failed before its placed memory went back");
            }
            p.release();
        }
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
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
