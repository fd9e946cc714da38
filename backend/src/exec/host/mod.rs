//! The host executor: a **test double** for the GPU.
//!
//! Device memory is host RAM, each context gets its own range of fake
//! device addresses, and kernels are Rust functions from a small registry
//! keyed by kernel name ([`KERNELS`], in [`kernels`]). A module image (PTX, cubin or fatbin)
//! is parsed only for its entry points, parameter layouts and globals
//! ([`super::image`]); a kernel without a Rust implementation is
//! `CUDA_ERROR_NOT_FOUND` at lookup. Streams run in order, synchronously;
//! events record the host clock. A kernel that touches memory outside the
//! context's allocations faults like a GPU kernel: the context's status
//! becomes a sticky `CUDA_ERROR_ILLEGAL_ADDRESS`.
//!
//! It exists so that CI runs every command end to end without a GPU. It says
//! so in its device name ("pvgpu host executor (test double)") and in the
//! backend's log.

mod array;
mod capture;
mod conditional;
mod context;
mod device_launch;
mod ext;
mod graph;
mod ipc;
mod kernels;
mod memop;
mod node_params;
mod pool;
mod replay;
mod vmm;

pub use kernels::{Args, Call, Fault, HostKernel, KERNELS, Mem};

use super::image::{self, ImageInfo};
use super::{Copy2D, CtxInfo, CuRes, DeviceInfo, Executor, LaunchAttr, LaunchDims, Param, Rect, TensorMapEncode};
use pvgpu_ring::CuError;
use pvgpu_ring::cuda::api::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Alignment of host allocations (CUDA guarantees at least 256).
const ALIGN: u64 = 512;
/// Unmapped bytes left after each allocation so small overruns fault.
const GUARD: u64 = 4096;
/// Address range given to each context.
const CTX_SPAN: u64 = 1 << 40;
const BASE: u64 = 0x2000_0000_0000;
/// The context span no context gets: `[0x3000_0000_0000, +CTX_SPAN)`.
const PRIVATE_SLOT: u64 = (0x3000_0000_0000 - BASE) / CTX_SPAN;
/// How many context spans there are.
const SPANS: u64 = 64;
static NEXT_CTX: AtomicU64 = AtomicU64::new(1);

/// What the double reserves for each context, as a driver does.
pub const CONTEXT_BYTES: u64 = 16 << 20;
/// Threads whose stacks the double reserves (one multiprocessor of 2048).
pub const STACK_THREADS: u64 = 2048;

/// The host test double.
pub struct HostExecutor {
    devices: Vec<DeviceInfo>,
    used: Arc<AtomicU64>,
    /// Bytes reserved by contexts (see `HostContext::recount_reserved`).
    reserved: Arc<AtomicU64>,
    /// Host memory page-locked for copies (`pin_host`): the process's, as
    /// the driver's portable registrations are, whichever context made it.
    pinned: Arc<std::sync::Mutex<BTreeMap<u64, usize>>>,
}

impl HostExecutor {
    /// One fake device with `total_mem` bytes of "device" memory.
    pub fn new(total_mem: u64) -> Self {
        Self::with_devices(total_mem, 1)
    }

    /// `count` fake devices (1 to 16), each with `total_mem` bytes of
    /// "device" memory (one pool of host memory behind them all), told
    /// apart by their UUID and PCI device number.
    pub fn with_devices(total_mem: u64, count: usize) -> Self {
        tracing::warn!(
            "host executor selected: a test double with device memory in host RAM and kernels from a Rust registry; it is not a GPU"
        );
        let a = |k: CUdevice_attribute, v: i32| (k.0 as i32, v);
        let attrs = vec![
            a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024),
            a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024),
            a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024),
            a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64),
            a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, i32::MAX),
            a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535),
            a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535),
            a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024),
            a(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 64 * 1024),
            a(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32),
            a(CU_DEVICE_ATTRIBUTE_MAX_PITCH, i32::MAX),
            a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536),
            a(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1_000_000),
            a(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512),
            a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1),
            a(CU_DEVICE_ATTRIBUTE_INTEGRATED, 0),
            a(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0),
            a(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, 0),
            a(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 0),
            a(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0),
            a(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0),
            a(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 1_000_000),
            a(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 64),
            a(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 0),
            a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048),
            a(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 0),
            a(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
            a(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0),
            a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 7),
            a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 5),
            a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 64 * 1024),
            a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536),
            a(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1),
            a(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1),
            a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 64 * 1024),
            a(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 16),
            a(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
            a(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 4 << 20),
            a(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 1),
            a(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1),
            a(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0 as i32),
        ];
        // Like a driver, answer every attribute; those not listed are 0.
        let attrs: Vec<(i32, i32)> =
            (1..CU_DEVICE_ATTRIBUTE_MAX.0 as i32).map(|k| attrs.iter().find(|(a, _)| *a == k).copied().unwrap_or((k, 0))).collect();
        let devices = (0..count.clamp(1, 16))
            .map(|i| {
                let mut uuid = *b"pvgpu-host-dbl\0\0";
                uuid[15] = i as u8 + 1;
                let mut attrs: Vec<(i32, i32)> = attrs.clone();
                if let Some(a) = attrs.iter_mut().find(|(k, _)| *k == CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID.0 as i32) {
                    a.1 = i as i32;
                }
                DeviceInfo { name: "pvgpu host executor (test double)".into(), uuid, total_mem, attrs }
            })
            .collect();
        HostExecutor { devices, used: Arc::new(AtomicU64::new(0)), reserved: Arc::new(AtomicU64::new(0)), pinned: Arc::default() }
    }

    /// Ranges of host memory page-locked for copies now.
    pub fn pinned_ranges(&self) -> usize {
        self.pinned.lock().map_or(0, |p| p.len())
    }

    /// Bytes of "device" memory currently allocated by all contexts.
    pub fn used_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

impl Executor for HostExecutor {
    type Context = HostContext;

    fn kind(&self) -> &'static str {
        "host"
    }

    fn driver_version(&self) -> i32 {
        13000
    }

    fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    fn can_access_peer(&self, device: usize, peer: usize) -> CuRes<i32> {
        self.devices.get(device).and(self.devices.get(peer)).ok_or(CuError::INVALID_DEVICE)?;
        // One device: no peer, as a driver answers for a device and itself.
        Ok(0)
    }

    fn mem_pool_access(&self, device: usize, peer: usize, set: Option<u32>) -> CuRes<u32> {
        self.devices.get(device).and(self.devices.get(peer)).ok_or(CuError::INVALID_DEVICE)?;
        pool::access(device, peer, set)
    }

    fn p2p_attribute(&self, _attr: u32, src: usize, dst: usize) -> CuRes<i32> {
        self.devices.get(src).and(self.devices.get(dst)).ok_or(CuError::INVALID_DEVICE)?;
        // The driver refuses a device and itself.
        Err(CuError::INVALID_DEVICE)
    }

    fn gauges(&self, device: usize) -> CuRes<super::Gauges> {
        self.devices.get(device).ok_or(CuError::INVALID_DEVICE)?;
        // Nothing runs in the background of the double: idle, and no sensors.
        Ok(super::Gauges { gpu_util: Some(0), mem_util: Some(0), driver_version: "pvgpu host executor".into(), ..Default::default() })
    }

    fn vmm_granularity(&self, device: usize, _option: u32) -> CuRes<u64> {
        self.devices.get(device).ok_or(CuError::INVALID_DEVICE)?;
        Ok(vmm::GRANULARITY)
    }

    fn restores_addresses(&self) -> bool {
        true
    }

    fn process_footprint(&self) -> Option<u64> {
        Some(self.used_bytes() + self.reserved.load(Ordering::Relaxed))
    }

    fn create_context(&self, device: usize, _flags: u32, space: u16) -> CuRes<HostContext> {
        let dev = self.devices.get(device).ok_or(CuError::INVALID_DEVICE)?;
        // Spread contexts (also those of other worker processes) over
        // distinct address ranges, as a GPU's unified address space does,
        // leaving out the span where programs' private page-locked memory
        // lies (the drop-in library places it from 0x3000_0000_0000,
        // `frontend/libcuda/src/api/host.rs`): a program's mirror there must
        // not meet a context's device addresses. Each address space (one
        // per backend of a program) has spans of its own.
        let per = SPANS / u64::from(pvgpu_ring::proto::MAX_SPACES);
        let k = (NEXT_CTX.fetch_add(1, Ordering::Relaxed) + std::process::id() as u64 * 7) % per;
        let n = u64::from(space) * per + k;
        let n = if n == PRIVATE_SLOT { u64::from(space) * per + (k + 1) % per } else { n };
        let base = BASE + n * CTX_SPAN;
        let mut c = HostContext {
            mem: Mem {
                allocs: BTreeMap::new(),
                host: BTreeMap::new(),
                next: base + ALIGN,
                end: base + CTX_SPAN / 2,
                modules_next: base + CTX_SPAN / 2 + ALIGN,
                modules_end: base + CTX_SPAN / 4 * 3,
                rehomed_next: base + CTX_SPAN / 4 * 3,
                end_all: base + CTX_SPAN,
                conds: HashMap::new(),
                device_graphs: HashSet::new(),
                device_launches: Vec::new(),
                arrays: array::Arrays::default(),
                reserved: BTreeMap::new(),
            },
            total: dev.total_mem,
            used: self.used.clone(),
            held: 0,
            reserved: self.reserved.clone(),
            reserving: 0,
            pinned: self.pinned.clone(),
            sticky: None,
            modules: HashMap::new(),
            next_module: 1,
            epoch: Instant::now(),
            events: HashMap::new(),
            next_handle: 1,
            dyn_shared: 48 * 1024,
            // CU_LIMIT_STACK_SIZE, PRINTF_FIFO_SIZE, MALLOC_HEAP_SIZE,
            // PERSISTING_L2_CACHE_SIZE.
            limits: HashMap::from([(0, 1024), (1, 1 << 20), (2, 8 << 20), (6, 0)]),
            pool_attrs: HashMap::new(),
            pools: pool::HostPools::on(device),
            output: Vec::new(),
            errors: Vec::new(),
            phys: HashMap::new(),
            mapped: HashMap::new(),
            opened: HashSet::new(),
            graphs: graph::Graphs::default(),
            exec_nodes: HashMap::new(),
            host_work: replay::HostWork::default(),
            stream_attrs: HashMap::new(),
        };
        c.recount_reserved();
        Ok(c)
    }
}

/// A loaded module.
pub struct HostModule {
    id: u64,
}

struct ModuleState {
    info: ImageInfo,
    globals: HashMap<String, u64>,
}

/// A function handle.
#[derive(Clone, Copy, Debug)]
pub struct HostFunction {
    module: u64,
    kernel: HostKernel,
}

impl PartialEq for HostFunction {
    fn eq(&self, other: &Self) -> bool {
        self.module == other.module && std::ptr::fn_addr_eq(self.kernel, other.kernel)
    }
}

/// One context of the host executor.
pub struct HostContext {
    mem: Mem,
    total: u64,
    used: Arc<AtomicU64>,
    /// Bytes this context added to `used`.
    held: u64,
    /// Bytes reserved by all contexts of the executor.
    reserved: Arc<AtomicU64>,
    /// Bytes this context added to `reserved`.
    reserving: u64,
    /// The executor's copy-only pins.
    pinned: Arc<std::sync::Mutex<BTreeMap<u64, usize>>>,
    sticky: Option<CuError>,
    modules: HashMap<u64, ModuleState>,
    next_module: u64,
    epoch: Instant,
    events: HashMap<u64, Option<Duration>>,
    next_handle: u64,
    dyn_shared: i32,
    limits: HashMap<u32, u64>,
    pool_attrs: HashMap<u32, u64>,
    /// Pools of the program's own.
    pools: pool::HostPools,
    /// What kernels printed, for the session.
    output: Vec<u8>,
    /// What a failed device assertion wrote to standard error.
    errors: Vec<u8>,
    /// Physical allocations (`cuMemCreate`) by handle.
    phys: HashMap<u64, vmm::Phys>,
    /// Mappings: address to physical handle.
    mapped: HashMap<u64, u64>,
    /// Addresses of memory opened from another session.
    opened: HashSet<u64>,
    /// Graphs, executable graphs and captures.
    graphs: graph::Graphs,
    /// For each executable graph, its nodes by the nodes of the graphs it
    /// was made or updated from.
    exec_nodes: HashMap<u64, HashMap<u64, u64>>,
    /// Launched work held back behind a host node.
    host_work: replay::HostWork,
    /// Stream attributes set, by stream (0: the default stream) and id.
    stream_attrs: HashMap<(u64, u32), [u8; 64]>,
}

impl HostContext {
    fn ok(&self) -> CuRes<()> {
        self.sticky.map_or(Ok(()), Err)
    }

    fn handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }

    fn free_bytes(&self) -> u64 {
        self.total.saturating_sub(self.used.load(Ordering::Relaxed))
    }

    /// Allocates device memory (whether a capture allows it or not).
    fn alloc_unchecked(&mut self, size: u64) -> CuRes<u64> {
        self.ok()?;
        if size == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        if size > self.free_bytes() {
            return Err(CuError::OUT_OF_MEMORY);
        }
        let addr = self.mem.alloc(size).ok_or(CuError::OUT_OF_MEMORY)?;
        self.used.fetch_add(size, Ordering::Relaxed);
        self.held += size;
        Ok(addr)
    }

    /// Device memory of `ranges` at their addresses, zeroed (a restored
    /// session's allocations, whose bytes the restore writes next).
    fn place_ranges(&mut self, ranges: &[(u64, u64)], handed: Vec<crate::exec::HandedPiece>) -> CuRes<()> {
        self.ok()?;
        let total = ranges.iter().try_fold(0u64, |t, (_, len)| t.checked_add(*len)).ok_or(CuError::INVALID_VALUE)?;
        if total > self.free_bytes() {
            return Err(CuError::OUT_OF_MEMORY);
        }
        let mut sorted = ranges.to_vec();
        sorted.sort_unstable();
        let clear = sorted.windows(2).all(|w| w[0].0.saturating_add(w[0].1) < w[1].0);
        if !clear || sorted.iter().any(|&(a, len)| len == 0 || !self.mem.is_free(a, len)) {
            return Err(CuError::ALREADY_MAPPED);
        }
        // Memory handed over in place is taken whole by the allocation at
        // its address, or the restore fails.
        let mut handed: BTreeMap<u64, crate::exec::HandedPiece> = handed.into_iter().map(|p| (p.address, p)).collect();
        let mut bufs = Vec::with_capacity(sorted.len());
        for &(addr, len) in &sorted {
            let buf = match handed.remove(&addr) {
                Some(p) if p.length == len => ipc::Buf::handed(p.fd, len)?,
                Some(_) => return Err(CuError::INVALID_VALUE),
                None => {
                    let len = usize::try_from(len).map_err(|_| CuError::OUT_OF_MEMORY)?;
                    let mut v = Vec::new();
                    v.try_reserve_exact(len).map_err(|_| CuError::OUT_OF_MEMORY)?;
                    v.resize(len, 0);
                    v.into()
                }
            };
            bufs.push((addr, buf));
        }
        if !handed.is_empty() {
            return Err(CuError::INVALID_VALUE);
        }
        for (addr, buf) in bufs {
            self.mem.place(addr, buf);
        }
        self.used.fetch_add(total, Ordering::Relaxed);
        self.held += total;
        Ok(())
    }

    /// Frees device memory (whether a capture allows it or not).
    fn free_unchecked(&mut self, dptr: u64) -> CuRes<()> {
        self.ok()?;
        if self.opened.contains(&dptr) {
            // Another session's memory imported from a pool: its
            // exporter's, unmapped here and not counted.
            return self.close_mem(dptr);
        }
        let v = self.mem.allocs.remove(&dptr).ok_or(CuError::INVALID_VALUE)?;
        self.used.fetch_sub(v.len() as u64, Ordering::Relaxed);
        self.held -= v.len() as u64;
        Ok(())
    }
}

impl HostContext {
    /// Recounts what the double reserves for this context, as a driver
    /// does: the context itself, a stack for every thread that can be
    /// resident, the printf buffer, the device heap, and module globals.
    fn recount_reserved(&mut self) {
        let limit = |k| self.limits.get(&k).copied().unwrap_or(0);
        let globals: u64 = self.modules.values().flat_map(|m| m.info.globals.values()).map(|g| g.size).sum();
        let want = CONTEXT_BYTES
            .saturating_add(limit(0).saturating_mul(STACK_THREADS))
            .saturating_add(limit(1))
            .saturating_add(limit(2))
            .saturating_add(globals);
        self.reserved.fetch_add(want, Ordering::Relaxed);
        self.reserved.fetch_sub(self.reserving, Ordering::Relaxed);
        self.reserving = want;
    }
}

impl Drop for HostContext {
    fn drop(&mut self) {
        self.used.fetch_sub(self.held, Ordering::Relaxed);
        self.reserved.fetch_sub(self.reserving, Ordering::Relaxed);
    }
}

impl HostContext {
    /// Moves the globals of module `m`, just loaded at a restore, where
    /// `placed` names them; those it does not name go out of the way of
    /// later modules' globals ([`kernels::Mem::rehome`]).
    fn place_globals(&mut self, m: HostModule, placed: &[(String, u64)]) -> CuRes<HostModule> {
        // Every global is taken out first: one not placed yet must not hold
        // the place another goes to. Those the snapshot places go to their
        // addresses; the others out of the way of later modules' globals.
        let now: Vec<(String, u64)> = self.modules.get(&m.id).map(|st| st.globals.clone().into_iter().collect()).unwrap_or_default();
        let mut bufs = Vec::with_capacity(now.len());
        for (name, at) in now {
            let buf = self.mem.allocs.remove(&at).ok_or(CuError::INVALID_HANDLE)?;
            bufs.push((name, buf));
        }
        for (name, buf) in bufs {
            let to = placed.iter().find(|(n, _)| *n == name).map(|&(_, a)| a);
            let at = match to {
                Some(addr) if self.mem.is_free(addr, buf.len() as u64) => {
                    self.mem.place(addr, buf);
                    Some(addr)
                }
                Some(_) => None,
                None => self.mem.rehome(buf),
            };
            let Some(at) = at else {
                // The module goes, with what was placed of it.
                crate::exec::ExecContext::module_unload(self, m)?;
                return Err(if to.is_some() { CuError::ALREADY_MAPPED } else { CuError::OUT_OF_MEMORY });
            };
            if let Some(st) = self.modules.get_mut(&m.id) {
                st.globals.insert(name, at);
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::ExecContext;

    const PTX: &[u8] = include_bytes!("../../../../tests/kernels/kernels.ptx");

    #[test]
    fn mat_sum_runs_and_faults_are_sticky() {
        let ex = HostExecutor::new(1 << 30);
        let mut c = ex.create_context(0, 0, 0).unwrap();
        let m = c.module_load(PTX).unwrap();
        let (f, layout) = c.function(&m, "mat_sum").unwrap();
        let n = 1000usize;
        let bytes = n * 4;
        let (a, b, out) = (c.mem_alloc(bytes as u64).unwrap(), c.mem_alloc(bytes as u64).unwrap(), c.mem_alloc(bytes as u64).unwrap());
        let av: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
        // SAFETY: av is a live buffer of `bytes` bytes.
        unsafe {
            c.htod(a, av.as_ptr(), bytes, None, true).unwrap();
            c.htod(b, av.as_ptr(), bytes, None, true).unwrap();
        }
        let mut params = vec![0u8; 28];
        params[0..8].copy_from_slice(&a.to_le_bytes());
        params[8..16].copy_from_slice(&b.to_le_bytes());
        params[16..24].copy_from_slice(&out.to_le_bytes());
        params[24..28].copy_from_slice(&(n as i32).to_le_bytes());
        let dims = LaunchDims { grid: [4, 1, 1], block: [256, 1, 1], shared_mem: 0 };
        c.launch(f, dims, &params, &layout, &[], None).unwrap();
        let mut res = vec![0u8; bytes];
        // SAFETY: res is a live buffer of `bytes` bytes.
        unsafe { c.dtoh(res.as_mut_ptr(), out, bytes, None, true).unwrap() };
        for i in 0..n {
            let v = f32::from_le_bytes(res[i * 4..i * 4 + 4].try_into().unwrap());
            assert_eq!(v, 2.0 * i as f32);
        }
        assert_eq!(ex.used_bytes(), 3 * bytes as u64);
        let (poke, pl) = c.function(&m, "poke").unwrap();
        c.launch(poke, LaunchDims { grid: [1; 3], block: [1; 3], shared_mem: 0 }, &0x10u64.to_le_bytes(), &pl, &[], None).unwrap();
        assert_eq!(c.synchronize(), Err(CuError::ILLEGAL_ADDRESS));
        assert_eq!(c.mem_alloc(16), Err(CuError::ILLEGAL_ADDRESS));
        drop(c);
        assert_eq!(ex.used_bytes(), 0);
    }

    #[test]
    fn guard_gap_catches_overruns() {
        let ex = HostExecutor::new(1 << 30);
        let mut c = ex.create_context(0, 0, 0).unwrap();
        let a = c.mem_alloc(100).unwrap();
        let _b = c.mem_alloc(100).unwrap();
        assert!(c.mem.bytes(a, 100).is_ok());
        assert!(c.mem.bytes(a + 96, 8).is_err());
        assert_eq!(c.memset(a, 0, 4, 26, None), Err(CuError::INVALID_VALUE));
    }

    #[test]
    fn out_of_memory_is_reported() {
        let ex = HostExecutor::new(1 << 20);
        let mut c = ex.create_context(0, 0, 0).unwrap();
        assert!(c.mem_alloc(1 << 19).is_ok());
        assert_eq!(c.mem_alloc(1 << 20), Err(CuError::OUT_OF_MEMORY));
    }
}
