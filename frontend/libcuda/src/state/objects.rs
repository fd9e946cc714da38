//! The objects the library handed out, behind one lock: modules and
//! functions (with their parameter layouts), libraries and their kernels,
//! streams, device allocations and host memory. Every object records the
//! handle of its context, so destroying a context forgets all of it.

use pvgpu_frontend::Function;
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// A kernel handed out by `cuModuleGetFunction` (or resolved from a
/// library kernel in one context).
pub struct FnInfo {
    /// Function and layout.
    pub func: Function,
    /// Its module.
    pub module: u64,
    /// Its name, for `cuFuncGetName`.
    pub name: CString,
}

/// A library (`cuLibraryLoadData`): its image, loaded as a module into each
/// context where one of its kernels or globals is used.
pub struct LibInfo {
    /// The image, copied at load.
    pub image: Arc<[u8]>,
    /// The module of each context handle it is loaded into.
    pub modules: HashMap<u64, u64>,
}

/// A library's kernel (`CUkernel`): context-independent; resolved to a
/// function of the current context when used.
pub struct KernelInfo {
    /// Its library.
    pub library: u64,
    /// Its name.
    pub name: CString,
    /// Its function in each context handle it was resolved in.
    pub functions: HashMap<u64, u64>,
    /// Attributes set with `cuKernelSetAttribute`, applied to functions
    /// resolved later.
    pub attrs: Vec<(i32, i32)>,
}

/// A stream handed out by `cuStreamCreate*`.
#[derive(Clone, Copy)]
pub struct StreamInfo {
    /// Its context handle.
    pub ctx: u64,
    /// Creation flags.
    pub flags: u32,
    /// Priority.
    pub priority: i32,
}

/// Host memory the library allocated or registered.
#[derive(Clone, Copy)]
pub struct HostInfo {
    /// Bytes.
    pub len: usize,
    /// `cuMemHostAlloc` flags.
    pub flags: u32,
    /// In the shared data area (else private memory of the program).
    pub in_area: bool,
    /// Private memory mirrored in the backend for the device
    /// ([`pvgpu_frontend::Client::mirror_host`]).
    pub mirrored: bool,
    /// The context handle current when it was allocated (0: none), which
    /// `CU_POINTER_ATTRIBUTE_CONTEXT` reports.
    pub ctx: u64,
}

/// A device allocation, module global or mapping.
#[derive(Clone, Copy, Debug)]
pub struct DevAlloc {
    /// Bytes.
    pub size: u64,
    /// Its context handle.
    pub ctx: u64,
    /// What it is.
    pub kind: DevKind,
    /// Unique for the life of the process (`CU_POINTER_ATTRIBUTE_BUFFER_ID`).
    pub buffer_id: u64,
}

impl DevAlloc {
    /// A range the program just got, with a fresh buffer id.
    pub fn new(size: u64, ctx: u64, kind: DevKind) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        DevAlloc { size, ctx, kind, buffer_id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) }
    }
}

/// What a range of device memory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevKind {
    /// `cuMemAlloc`, `cuMemAllocAsync`: the program frees it.
    Alloc,
    /// A global of this module.
    Global(u64),
    /// A mapping (`cuMemMap`), with its access flags (`cuMemSetAccess`).
    Mapped(u32),
    /// Graph memory (an allocation node's address, or an allocation
    /// captured on a stream): freed by a graph or by the program, and
    /// allocated again by the graph's next launch; the address stays.
    Graph,
    /// Managed memory (`cuMemAllocManaged`): the CPU's pages at the same
    /// address are kept coherent by [`crate::managed`].
    Managed,
    /// Another process's memory (`cuIpcOpenMemHandle`), opened this many
    /// times: the last `cuIpcCloseMemHandle` unmaps it.
    Opened(u32),
}

/// Everything the library tracks, behind one lock.
#[derive(Default)]
pub struct Objects {
    /// Module id to its context handle.
    pub modules: HashMap<u64, u64>,
    /// Function id to kernel.
    pub functions: HashMap<u64, FnInfo>,
    /// Libraries by handle.
    pub libraries: HashMap<u64, LibInfo>,
    /// Library kernels by handle.
    pub kernels: HashMap<u64, KernelInfo>,
    /// Stream id to stream.
    pub streams: HashMap<u64, StreamInfo>,
    /// Device allocations and module globals by address.
    pub device: BTreeMap<u64, DevAlloc>,
    /// Host allocations by address.
    pub host: BTreeMap<usize, HostInfo>,
    /// Registered host ranges by address.
    pub registered: BTreeMap<usize, Registered>,
}

/// A host range the program registered (`cuMemHostRegister`).
#[derive(Clone, Copy)]
pub struct Registered {
    /// Bytes.
    pub len: usize,
    /// `CU_MEMHOSTREGISTER_*` flags.
    pub flags: u32,
    /// Mirrored in the backend for the device from this page-aligned
    /// address ([`pvgpu_frontend::Client::mirror_host`]).
    pub mirrored: Option<usize>,
}

static OBJECTS: OnceLock<Mutex<Objects>> = OnceLock::new();

/// The tracked objects.
pub fn objects() -> MutexGuard<'static, Objects> {
    OBJECTS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

impl Objects {
    /// The device allocation containing `[p, p+len)`: (start, allocation).
    pub fn device_range(&self, p: u64, len: u64) -> Option<(u64, DevAlloc)> {
        let (&start, &a) = self.device.range(..=p).next_back()?;
        (p.checked_add(len)? <= start + a.size).then_some((start, a))
    }

    /// The host allocation containing `p`: (start, info).
    pub fn host_range(&self, p: usize) -> Option<(usize, HostInfo)> {
        let (&start, &i) = self.host.range(..=p).next_back()?;
        (p < start + i.len).then_some((start, i))
    }

    /// Forgets everything of a destroyed context.
    pub fn drop_ctx(&mut self, ctx: u64) {
        let modules: Vec<u64> = self.modules.iter().filter(|(_, c)| **c == ctx).map(|(m, _)| *m).collect();
        for m in modules {
            self.drop_module(m);
        }
        for lib in self.libraries.values_mut() {
            lib.modules.remove(&ctx);
        }
        for k in self.kernels.values_mut() {
            k.functions.remove(&ctx);
        }
        self.streams.retain(|_, s| s.ctx != ctx);
        self.device.retain(|_, a| a.ctx != ctx);
    }

    /// Forgets a module's functions and globals.
    pub fn drop_module(&mut self, m: u64) {
        self.modules.remove(&m);
        self.functions.retain(|_, f| f.module != m);
        self.device.retain(|_, a| a.kind != DevKind::Global(m));
    }
}
