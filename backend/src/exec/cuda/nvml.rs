//! The device gauges monitoring tools show (utilisation, temperature,
//! power, the driver's version), read with NVML from the driver package's
//! `libnvidia-ml.so.1`, loaded when the executor starts. Without it (or
//! for a device NVML does not know) the gauges read as unknown; nothing
//! else depends on it.

use crate::exec::Gauges;
use std::ffi::{CString, c_char, c_uint, c_void};

type Handle = *mut c_void;

#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

/// `nvmlProcessInfo_v2_t`, as `nvmlDeviceGetComputeRunningProcesses_v3`
/// fills it.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// NVML's entry points this file calls.
struct Fns {
    processes: Option<unsafe extern "C" fn(Handle, *mut c_uint, *mut ProcessInfo) -> u32>,
    by_bus_id: unsafe extern "C" fn(*const c_char, *mut Handle) -> u32,
    utilization: unsafe extern "C" fn(Handle, *mut Utilization) -> u32,
    temperature: unsafe extern "C" fn(Handle, u32, *mut c_uint) -> u32,
    power: unsafe extern "C" fn(Handle, *mut c_uint) -> u32,
    driver_version: unsafe extern "C" fn(*mut c_char, c_uint) -> u32,
    /// For the supervisor's `/metrics`: devices by NVML's index.
    count: Option<unsafe extern "C" fn(*mut c_uint) -> u32>,
    by_index: Option<unsafe extern "C" fn(c_uint, *mut Handle) -> u32>,
    name: Option<unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> u32>,
    uuid: Option<unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> u32>,
    memory: Option<unsafe extern "C" fn(Handle, *mut MemoryInfo) -> u32>,
    /// The PCIe link: generation and lanes now, and at most.
    link: [Option<unsafe extern "C" fn(Handle, *mut c_uint) -> u32>; 4],
}

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
struct MemoryInfo {
    total: u64,
    free: u64,
    used: u64,
}

/// NVML, loaded and initialised, with a handle per device.
pub struct Nvml {
    _lib: libloading::Library,
    fns: Fns,
    /// NVML's handle of each CUDA device, by ordinal.
    devices: Vec<Option<Handle>>,
    driver_version: String,
}

// SAFETY: NVML is thread-safe (documented), and its device handles are
// plain identifiers valid for the life of the library.
unsafe impl Send for Nvml {}
// SAFETY: as above.
unsafe impl Sync for Nvml {}

impl Nvml {
    /// Loads NVML and finds each device by its PCI bus id (as
    /// `cuDeviceGetPCIBusId` writes it); `None` without NVML.
    pub fn load(bus_ids: &[String]) -> Option<Nvml> {
        // SAFETY: loading the driver's NVML runs its initialisers, which
        // have no preconditions.
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }.ok()?;
        // SAFETY: each type is the symbol's C signature.
        let (init, fns) = unsafe {
            let init: unsafe extern "C" fn() -> u32 = *lib.get(b"nvmlInit_v2").ok()?;
            let fns = Fns {
                processes: lib.get(b"nvmlDeviceGetComputeRunningProcesses_v3").ok().map(|f| *f),
                by_bus_id: *lib.get(b"nvmlDeviceGetHandleByPciBusId_v2").ok()?,
                utilization: *lib.get(b"nvmlDeviceGetUtilizationRates").ok()?,
                temperature: *lib.get(b"nvmlDeviceGetTemperature").ok()?,
                power: *lib.get(b"nvmlDeviceGetPowerUsage").ok()?,
                driver_version: *lib.get(b"nvmlSystemGetDriverVersion").ok()?,
                count: lib.get(b"nvmlDeviceGetCount_v2").ok().map(|f| *f),
                by_index: lib.get(b"nvmlDeviceGetHandleByIndex_v2").ok().map(|f| *f),
                name: lib.get(b"nvmlDeviceGetName").ok().map(|f| *f),
                uuid: lib.get(b"nvmlDeviceGetUUID").ok().map(|f| *f),
                memory: lib.get(b"nvmlDeviceGetMemoryInfo").ok().map(|f| *f),
                link: [
                    lib.get(b"nvmlDeviceGetCurrPcieLinkGeneration").ok().map(|f| *f),
                    lib.get(b"nvmlDeviceGetCurrPcieLinkWidth").ok().map(|f| *f),
                    lib.get(b"nvmlDeviceGetMaxPcieLinkGeneration").ok().map(|f| *f),
                    lib.get(b"nvmlDeviceGetMaxPcieLinkWidth").ok().map(|f| *f),
                ],
            };
            (init, fns)
        };
        // SAFETY: no arguments.
        if unsafe { init() } != 0 {
            return None;
        }
        let devices = bus_ids
            .iter()
            .map(|id| {
                let id = CString::new(id.as_str()).ok()?;
                let mut h = std::ptr::null_mut();
                // SAFETY: a NUL-terminated id and a valid out-pointer.
                (unsafe { (fns.by_bus_id)(id.as_ptr(), &mut h) } == 0).then_some(h)
            })
            .collect();
        let mut buf = [0 as c_char; 80];
        // SAFETY: a buffer of the length passed.
        let driver_version = if unsafe { (fns.driver_version)(buf.as_mut_ptr(), buf.len() as c_uint) } == 0 {
            buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect()
        } else {
            String::new()
        };
        Some(Nvml { _lib: lib, fns, devices, driver_version })
    }

    /// Device memory this process holds on every device NVML knows, or
    /// `None` where NVML cannot tell (no such call, or this process not
    /// listed: another PID namespace, say).
    pub fn process_used(&self) -> Option<u64> {
        let f = self.fns.processes?;
        let me = std::process::id();
        let mut total = 0u64;
        let mut found = false;
        for h in self.devices.iter().flatten() {
            let mut list = [ProcessInfo::default(); 256];
            let mut n = list.len() as c_uint;
            // SAFETY: a handle NVML gave; `n` says how many entries `list`
            // holds, and NVML writes at most that many.
            if unsafe { f(*h, &mut n, list.as_mut_ptr()) } != 0 {
                return None;
            }
            for p in list.iter().take(n as usize).filter(|p| p.pid == me) {
                found = true;
                // NVML_VALUE_NOT_AVAILABLE is all ones.
                if p.used_gpu_memory != u64::MAX {
                    total += p.used_gpu_memory;
                }
            }
        }
        found.then_some(total)
    }

    /// The gauges of device `ordinal`.
    pub fn gauges(&self, ordinal: usize) -> Gauges {
        let mut g = Gauges { driver_version: self.driver_version.clone(), ..Gauges::default() };
        let Some(Some(h)) = self.devices.get(ordinal).copied() else { return g };
        let mut u = Utilization::default();
        // SAFETY: a handle NVML gave, valid out-pointers.
        unsafe {
            if (self.fns.utilization)(h, &mut u) == 0 {
                (g.gpu_util, g.mem_util) = (Some(u.gpu), Some(u.memory));
            }
            let mut t = 0;
            if (self.fns.temperature)(h, 0, &mut t) == 0 {
                g.temperature = Some(t);
            }
            let mut p = 0;
            if (self.fns.power)(h, &mut p) == 0 {
                g.power_mw = Some(p);
            }
            let read = |f: Option<unsafe extern "C" fn(Handle, *mut c_uint) -> u32>| {
                let mut v = 0;
                f.filter(|f| f(h, &mut v) == 0).map(|_| v)
            };
            let [generation, width, max_gen, max_width] = self.fns.link.map(read);
            g.link = pvgpu_ring::device_status::PcieLink { generation, width, max_gen, max_width };
        }
        g
    }
}

/// Every GPU NVML sees, by its index, for the supervisor's `/metrics`
/// (which does not start CUDA).
pub struct Boards {
    nvml: Nvml,
    /// Index, UUID and model of each.
    info: Vec<(u32, String, String)>,
}

fn text(f: impl FnOnce(*mut c_char, c_uint) -> u32) -> String {
    let mut buf = [0 as c_char; 96];
    if f(buf.as_mut_ptr(), buf.len() as c_uint) != 0 {
        return String::new();
    }
    buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect()
}

impl Boards {
    /// Loads NVML and lists its devices; `None` without NVML or devices.
    pub fn load() -> Option<Boards> {
        let mut nvml = Nvml::load(&[])?;
        let (count, by_index) = (nvml.fns.count?, nvml.fns.by_index?);
        let mut n = 0;
        // SAFETY: a valid out-pointer.
        if unsafe { count(&mut n) } != 0 || n == 0 {
            return None;
        }
        let mut info = Vec::new();
        for i in 0..n {
            let mut h = std::ptr::null_mut();
            // SAFETY: an index below NVML's count, a valid out-pointer.
            if unsafe { by_index(i, &mut h) } != 0 {
                nvml.devices.push(None);
                continue;
            }
            // SAFETY: a handle NVML gave; buffers of the lengths passed.
            let name = nvml.fns.name.map_or_else(String::new, |f| text(|b, l| unsafe { f(h, b, l) }));
            // SAFETY: as above.
            let uuid = nvml.fns.uuid.map_or_else(String::new, |f| text(|b, l| unsafe { f(h, b, l) }));
            nvml.devices.push(Some(h));
            info.push((i, uuid, name));
        }
        Some(Boards { nvml, info })
    }
}

impl crate::metrics::GpuSource for Boards {
    fn read(&self) -> Vec<crate::metrics::GpuReading> {
        self.info
            .iter()
            .map(|(index, uuid, name)| {
                let g = self.nvml.gauges(*index as usize);
                let mut r = crate::metrics::GpuReading {
                    index: *index,
                    uuid: uuid.clone(),
                    name: name.clone(),
                    utilization_ratio: g.gpu_util.map(|u| f64::from(u) / 100.0),
                    temperature_celsius: g.temperature.map(f64::from),
                    power_watts: g.power_mw.map(|p| f64::from(p) / 1000.0),
                    ..Default::default()
                };
                if let (Some(f), Some(Some(h))) = (self.nvml.fns.memory, self.nvml.devices.get(*index as usize)) {
                    let mut m = MemoryInfo::default();
                    // SAFETY: a handle NVML gave, a valid out-pointer.
                    if unsafe { f(*h, &mut m) } == 0 {
                        (r.memory_used_bytes, r.memory_total_bytes) = (Some(m.used), Some(m.total));
                    }
                }
                r
            })
            .collect()
    }
}
