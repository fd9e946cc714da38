//! The host test double's device memory and kernels: [`Mem`] holds one
//! context's allocations, and [`KERNELS`] mirrors `tests/kernels/kernels.cu`
//! in Rust, each kernel reading its arguments through [`Args`] and touching
//! memory only through [`Mem`], so an access outside the context's
//! allocations is a [`Fault`] as on a GPU.

use super::*;

/// A kernel fault: an access outside the context's allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault;

/// Host "device" memory of one context: its allocations, and host memory
/// of the process registered for the device at its own address (as a GPU
/// with unified addressing maps page-locked memory).
pub struct Mem {
    pub(super) allocs: BTreeMap<u64, super::ipc::Buf>,
    /// Registered host memory: address to length.
    pub(super) host: BTreeMap<u64, usize>,
    pub(super) next: u64,
    pub(super) end: u64,
    /// Module globals are placed from here to `modules_end`, apart from the
    /// program's memory, as the driver keeps them in a heap of its own: a
    /// module loaded before or after the program's memory is placed does
    /// not change where either lands.
    pub(super) modules_next: u64,
    pub(super) modules_end: u64,
    /// Globals of a module loaded at a restore that the snapshot does not
    /// place (constants, names the program never looked up) go from here
    /// to `end_all`: out of the way of the addresses later modules' globals
    /// come back at.
    pub(super) rehomed_next: u64,
    pub(super) end_all: u64,
    /// The values of the context's conditional handles (device state a
    /// kernel sets, a conditional node reads).
    pub(super) conds: HashMap<u64, u32>,
    /// Executable graphs made for device launch and uploaded: what a
    /// kernel may launch.
    pub(super) device_graphs: HashSet<u64>,
    /// Graphs kernels launched since the context last looked.
    pub(super) device_launches: Vec<u64>,
    /// Arrays and texture and surface objects.
    pub(super) arrays: super::array::Arrays,
    /// Reserved ranges (graph memory, the virtual memory API): start to
    /// end, a guard included.
    pub(super) reserved: BTreeMap<u64, u64>,
}

impl Mem {
    /// `cudaGraphLaunch` in a kernel: graph `exec` runs after the work
    /// before it. A graph not made for device launch, or not uploaded, is
    /// not launched (the device runtime refuses it; the kernel goes on).
    /// Whether it was launched.
    pub fn launch_graph(&mut self, exec: u64) -> bool {
        let known = self.device_graphs.contains(&exec);
        if known {
            self.device_launches.push(exec);
        }
        known
    }

    /// `cudaGraphSetConditional`: a handle the context never made is a
    /// fault (on a GPU, a write where nothing is).
    pub fn set_conditional(&mut self, handle: u64, value: u32) -> Result<(), Fault> {
        *self.conds.get_mut(&handle).ok_or(Fault)? = value;
        Ok(())
    }

    /// Where `[ptr, ptr+len)` lies: an allocation's start (`false`) or a
    /// registered range's (`true`), and the offset in it.
    fn find(&self, ptr: u64, len: u64) -> Result<(u64, usize, bool), Fault> {
        let end = |start: u64, size: usize| {
            let off = ptr - start;
            match off.checked_add(len) {
                Some(e) if e <= size as u64 => Ok(off as usize),
                _ => Err(Fault),
            }
        };
        if let Some((&start, buf)) = self.allocs.range(..=ptr).next_back()
            && let Ok(off) = end(start, buf.len())
        {
            return Ok((start, off, false));
        }
        let (&start, &size) = self.host.range(..=ptr).next_back().ok_or(Fault)?;
        Ok((start, end(start, size)?, true))
    }

    /// Bytes at `[ptr, ptr+len)`.
    pub fn bytes(&self, ptr: u64, len: usize) -> Result<&[u8], Fault> {
        match self.find(ptr, len as u64)? {
            (start, off, false) => Ok(&self.allocs[&start][off..off + len]),
            // SAFETY: registered host memory stays mapped while registered
            // (the caller of `register_host` keeps it so); `[ptr, ptr+len)`
            // lies inside it.
            (_, _, true) => Ok(unsafe { std::slice::from_raw_parts(ptr as usize as *const u8, len) }),
        }
    }

    /// Mutable bytes at `[ptr, ptr+len)`.
    pub fn bytes_mut(&mut self, ptr: u64, len: usize) -> Result<&mut [u8], Fault> {
        match self.find(ptr, len as u64)? {
            (start, off, false) => Ok(&mut self.allocs.get_mut(&start).ok_or(Fault)?[off..off + len]),
            // SAFETY: as in `bytes`; the memory is the process's own,
            // writable, and nothing else holds a slice of it meanwhile (the
            // session runs one request at a time).
            (_, _, true) => Ok(unsafe { std::slice::from_raw_parts_mut(ptr as usize as *mut u8, len) }),
        }
    }

    /// Reads `n` f32 values.
    pub fn read_f32(&self, ptr: u64, n: usize) -> Result<Vec<f32>, Fault> {
        let b = self.bytes(ptr, n.checked_mul(4).ok_or(Fault)?)?;
        Ok(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// Writes f32 values.
    pub fn write_f32(&mut self, ptr: u64, v: &[f32]) -> Result<(), Fault> {
        let b = self.bytes_mut(ptr, v.len().checked_mul(4).ok_or(Fault)?)?;
        for (c, x) in b.chunks_exact_mut(4).zip(v) {
            c.copy_from_slice(&x.to_le_bytes());
        }
        Ok(())
    }

    pub(super) fn alloc(&mut self, size: u64) -> Option<u64> {
        let (addr, next) = Self::bump(self.next, self.end, size)?;
        self.allocs.insert(addr, Self::zeroed(size)?);
        self.next = next;
        Some(addr)
    }

    /// `size` zeroed bytes for a module's global, in the modules' part.
    pub(super) fn alloc_global(&mut self, size: u64) -> Option<u64> {
        let (addr, next) = Self::bump(self.modules_next, self.modules_end, size)?;
        self.allocs.insert(addr, Self::zeroed(size)?);
        self.modules_next = next;
        Some(addr)
    }

    /// Places `buf`, a global of a module loaded at a restore that the
    /// snapshot does not place, past where globals come back.
    pub(super) fn rehome(&mut self, buf: super::ipc::Buf) -> Option<u64> {
        let (addr, next) = Self::bump(self.rehomed_next, self.end_all, buf.len() as u64)?;
        self.allocs.insert(addr, buf);
        self.rehomed_next = next;
        Some(addr)
    }

    /// The address `size` bytes take from `next` on, and the next after
    /// them (a guard between), if they fit before `end`.
    fn bump(next: u64, end: u64, size: u64) -> Option<(u64, u64)> {
        let after = next.checked_add(size)?.checked_add(GUARD)?.checked_next_multiple_of(ALIGN)?;
        (after <= end).then_some((next, after))
    }

    fn zeroed(size: u64) -> Option<super::ipc::Buf> {
        let len = usize::try_from(size).ok()?;
        let mut v = Vec::new();
        v.try_reserve_exact(len).ok()?;
        v.resize(len, 0);
        Some(v.into())
    }

    /// Whether `[addr, addr+size)` (with the guard after it) is clear of
    /// every allocation.
    pub(super) fn is_free(&self, addr: u64, size: u64) -> bool {
        let Some(end) = addr.checked_add(size).and_then(|e| e.checked_add(GUARD)) else { return false };
        let before = self.allocs.range(..=addr).next_back().is_none_or(|(&a, b)| a + b.len() as u64 + GUARD <= addr);
        let after = self.allocs.range(addr..).next().is_none_or(|(&a, _)| a >= end);
        addr != 0 && before && after
    }

    /// Places `buf` at `addr` (checked free by the caller), and hands out
    /// no address inside it later.
    pub(super) fn place(&mut self, addr: u64, buf: super::ipc::Buf) {
        let end = addr.saturating_add(buf.len() as u64).saturating_add(GUARD);
        if (self.next..self.end).contains(&addr) || (self.next..self.end).contains(&end) {
            self.next = end.checked_next_multiple_of(ALIGN).unwrap_or(self.end).min(self.end);
        }
        if (self.modules_next..self.modules_end).contains(&addr) || (self.modules_next..self.modules_end).contains(&end) {
            self.modules_next = end.checked_next_multiple_of(ALIGN).unwrap_or(self.modules_end).min(self.modules_end);
        }
        self.allocs.insert(addr, buf);
    }

    /// Reserves `size` bytes of addresses without backing them (graph
    /// memory, backed while a graph holds it); never handed out again.
    pub(super) fn reserve(&mut self, size: u64) -> Option<u64> {
        let addr = self.next;
        let next = addr.checked_add(size)?.checked_add(GUARD)?.checked_next_multiple_of(ALIGN)?;
        if next > self.end {
            return None;
        }
        self.next = next;
        self.reserved.insert(addr, next);
        Some(addr)
    }

    /// Reserves `[addr, addr+size)` if no allocation or reservation holds
    /// any of it (a restore asks for its old addresses, which may lie
    /// outside this context's span: it is a new one).
    pub(super) fn reserve_at(&mut self, addr: u64, size: u64) -> bool {
        let Some(end) = addr.checked_add(size).and_then(|e| e.checked_add(GUARD)) else { return false };
        let clash = self.reserved.range(..end).next_back().is_some_and(|(_, &e)| e > addr);
        if clash || !self.is_free(addr, size) {
            return false;
        }
        if (self.next..self.end).contains(&addr) || (self.next..self.end).contains(&end) {
            self.next = end.checked_next_multiple_of(ALIGN).unwrap_or(self.end).min(self.end);
        }
        self.reserved.insert(addr, end);
        true
    }
}

/// Arguments of a kernel call, read from the packed parameter buffer.
pub struct Args<'a> {
    pub(super) buf: &'a [u8],
    pub(super) layout: &'a [Param],
}

impl Args<'_> {
    fn raw<const N: usize>(&self, i: usize) -> Result<[u8; N], Fault> {
        let p = self.layout.get(i).ok_or(Fault)?;
        if p.size as usize != N {
            return Err(Fault);
        }
        let o = p.offset as usize;
        self.buf.get(o..o + N).and_then(|s| s.try_into().ok()).ok_or(Fault)
    }
    /// Parameter `i` as a pointer or 64-bit integer.
    pub fn u64(&self, i: usize) -> Result<u64, Fault> {
        self.raw::<8>(i).map(u64::from_le_bytes)
    }
    /// Parameter `i` as a 32-bit integer.
    pub fn i32(&self, i: usize) -> Result<i32, Fault> {
        self.raw::<4>(i).map(i32::from_le_bytes)
    }
    /// Parameter `i` as a float.
    pub fn f32(&self, i: usize) -> Result<f32, Fault> {
        self.raw::<4>(i).map(f32::from_le_bytes)
    }
    /// Parameter `i` as a double.
    pub fn f64(&self, i: usize) -> Result<f64, Fault> {
        self.raw::<8>(i).map(f64::from_le_bytes)
    }
    /// Parameter `i` as a 16-bit integer.
    pub fn i16(&self, i: usize) -> Result<i16, Fault> {
        self.raw::<2>(i).map(i16::from_le_bytes)
    }
    /// Parameter `i` as an 8-bit integer.
    pub fn i8(&self, i: usize) -> Result<i8, Fault> {
        self.raw::<1>(i).map(|b| b[0] as i8)
    }
}

/// Everything a host kernel sees.
pub struct Call<'a> {
    /// Launch geometry.
    pub dims: LaunchDims,
    /// Arguments.
    pub args: Args<'a>,
    /// The context's memory.
    pub mem: &'a mut Mem,
    /// The module's globals: name to address.
    pub globals: &'a HashMap<String, u64>,
    /// What the kernel prints (device `printf`).
    pub out: &'a mut Vec<u8>,
    /// What the driver writes to standard error for it (a failed device
    /// assertion).
    pub err: &'a mut Vec<u8>,
    /// A device assertion failed (the fault it returns is
    /// `CUDA_ERROR_ASSERT`, not an illegal address).
    pub asserted: bool,
}

impl Call<'_> {
    /// Total threads along x, y, z.
    pub fn threads(&self) -> [u64; 3] {
        let d = &self.dims;
        [0, 1, 2].map(|i| d.grid[i] as u64 * d.block[i] as u64)
    }
}

/// A host implementation of a kernel.
pub type HostKernel = fn(&mut Call<'_>) -> Result<(), Fault>;

/// The registry: kernel name to Rust implementation. These mirror
/// `tests/kernels/kernels.cu` (and one kernel of the device-launch test
/// program).
pub static KERNELS: &[(&str, HostKernel)] = &[
    ("pvgpu_null", |_| Ok(())),
    ("mat_sum", k_mat_sum),
    ("jacobi_step", k_jacobi_step),
    ("saxpy", k_saxpy),
    ("mixed_params", k_mixed_params),
    ("scale_by_global", k_scale_by_global),
    ("spin", k_spin),
    ("poke", k_poke),
    ("pvgpu_printf", k_printf),
    ("pvgpu_assert", k_assert),
    ("pvgpu_cond_from_flag", k_cond_from_flag),
    ("pvgpu_cond_count_down", k_cond_count_down),
    ("pvgpu_graph_launch", k_graph_launch),
    ("pvgpu_tex_read", k_tex_read),
    ("pvgpu_count_calls", k_count_calls),
    ("pvgpu_surf_scale", k_surf_scale),
];

/// `pvgpu_tex_read(cudaTextureObject_t tex, float *out, int w, int h)`:
/// `out[y * w + x] = tex2D<float>(tex, x + 0.5f, y + 0.5f)`, texel `(x,
/// y)` of a float texture read with point filtering and unnormalised
/// coordinates. Not in `kernels.cu`: the texture test program
/// (`tests/runtime/textures.cu`) has it.
fn k_tex_read(c: &mut Call<'_>) -> Result<(), Fault> {
    let (tex, out) = (c.args.u64(0)?, c.args.u64(1)?);
    let (w, h) = (c.args.i32(2)?.max(0) as u64, c.args.i32(3)?.max(0) as u64);
    let mut v = Vec::with_capacity((w * h) as usize);
    for y in 0..h {
        for x in 0..w {
            v.push(c.mem.texel(tex, x, y)?);
        }
    }
    c.mem.write_f32(out, &v)
}

/// `pvgpu_surf_scale(cudaSurfaceObject_t surf, int w, int h, float k)`:
/// every float of a `w` x `h` surface multiplied by `k`
/// (`surf2Dread`, `surf2Dwrite`). In `tests/runtime/textures.cu`.
fn k_surf_scale(c: &mut Call<'_>) -> Result<(), Fault> {
    let surf = c.args.u64(0)?;
    let (w, h) = (c.args.i32(1)?.max(0) as u64, c.args.i32(2)?.max(0) as u64);
    let k = f32::from_bits(c.args.i32(3)? as u32);
    for y in 0..h {
        for x in 0..w {
            let v = c.mem.surface_f32(surf, x, y, None)?;
            c.mem.surface_f32(surf, x, y, Some(v * k))?;
        }
    }
    Ok(())
}

/// `pvgpu_graph_launch(cudaGraphExec_t exec, int fire_and_forget, int
/// *status)`: `cudaGraphLaunch(exec, ...)` from the device, a tail launch
/// or a fire-and-forget one (here both run after the launching work), its
/// answer in `*status` (0, or `cudaErrorInvalidValue` for a graph the
/// device does not know). Not in `kernels.cu`: device launch needs
/// relocatable device code, which the test program that uses it
/// (`tests/runtime/graph_device_launch.cu`) is built with.
fn k_graph_launch(c: &mut Call<'_>) -> Result<(), Fault> {
    let (exec, status) = (c.args.u64(0)?, c.args.u64(2)?);
    let answer: i32 = if c.mem.launch_graph(exec) { 0 } else { 1 };
    c.mem.bytes_mut(status, 4)?.copy_from_slice(&answer.to_le_bytes());
    Ok(())
}

/// `pvgpu_cond_from_flag(const int *flag, handle)`: the condition is the
/// flag.
fn k_cond_from_flag(c: &mut Call<'_>) -> Result<(), Fault> {
    let (flag, handle) = (c.args.u64(0)?, c.args.u64(1)?);
    let v = c.mem.bytes(flag, 4)?;
    let v = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
    c.mem.set_conditional(handle, v)
}

/// `pvgpu_cond_count_down(int *counter, handle)`: one less in the
/// counter; the condition is whether it is still above zero.
fn k_cond_count_down(c: &mut Call<'_>) -> Result<(), Fault> {
    let (counter, handle) = (c.args.u64(0)?, c.args.u64(1)?);
    let b = c.mem.bytes_mut(counter, 4)?;
    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) - 1;
    b.copy_from_slice(&v.to_le_bytes());
    c.mem.set_conditional(handle, u32::from(v > 0))
}

fn covered(c: &Call<'_>, n: i32) -> usize {
    (n.max(0) as u64).min(c.threads()[0]) as usize
}

fn k_mat_sum(c: &mut Call<'_>) -> Result<(), Fault> {
    let (a, b, out) = (c.args.u64(0)?, c.args.u64(1)?, c.args.u64(2)?);
    let n = covered(c, c.args.i32(3)?);
    let av = c.mem.read_f32(a, n)?;
    let bv = c.mem.read_f32(b, n)?;
    let sum: Vec<f32> = av.iter().zip(&bv).map(|(x, y)| x + y).collect();
    c.mem.write_f32(out, &sum)
}

fn k_jacobi_step(c: &mut Call<'_>) -> Result<(), Fault> {
    let (src, dst) = (c.args.u64(0)?, c.args.u64(1)?);
    let n = c.args.i32(2)?.max(0) as usize;
    let [tx, ty, _] = c.threads();
    let (w, h) = ((n as u64).min(tx) as usize, (n as u64).min(ty) as usize);
    if w == 0 || h == 0 {
        return Ok(());
    }
    let cells = n.checked_mul(n).ok_or(Fault)?;
    let inp = c.mem.read_f32(src, cells)?;
    let mut out = c.mem.read_f32(dst, cells)?;
    for y in 0..h {
        for x in 0..w {
            let i = y * n + x;
            out[i] = if x == 0 || y == 0 || x == n - 1 || y == n - 1 {
                inp[i]
            } else {
                0.25 * (inp[i - n] + inp[i + n] + inp[i - 1] + inp[i + 1])
            };
        }
    }
    c.mem.write_f32(dst, &out)
}

fn k_saxpy(c: &mut Call<'_>) -> Result<(), Fault> {
    let a = c.args.f32(0)?;
    let (x, y) = (c.args.u64(1)?, c.args.u64(2)?);
    let n = covered(c, c.args.i32(3)?);
    let xv = c.mem.read_f32(x, n)?;
    let mut yv = c.mem.read_f32(y, n)?;
    for (yi, xi) in yv.iter_mut().zip(&xv) {
        *yi += a * xi;
    }
    c.mem.write_f32(y, &yv)
}

fn k_mixed_params(c: &mut Call<'_>) -> Result<(), Fault> {
    if c.threads()[0] == 0 {
        return Ok(());
    }
    let vals = [
        c.args.i8(0)? as i64 as u64,
        c.args.f64(1)?.to_bits(),
        c.args.i16(2)? as i64 as u64,
        c.args.u64(3)?,
        c.args.f32(4)?.to_bits() as u64,
    ];
    let out = c.args.u64(5)?;
    let b = c.mem.bytes_mut(out, 40)?;
    for (chunk, v) in b.chunks_exact_mut(8).zip(vals) {
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    Ok(())
}

fn k_scale_by_global(c: &mut Call<'_>) -> Result<(), Fault> {
    let x = c.args.u64(0)?;
    let n = covered(c, c.args.i32(1)?);
    let g = *c.globals.get("pvgpu_scale").ok_or(Fault)?;
    let s = c.mem.read_f32(g, 1)?[0];
    let v: Vec<f32> = c.mem.read_f32(x, n)?.into_iter().map(|e| e * s).collect();
    c.mem.write_f32(x, &v)
}

/// `pvgpu_count_calls(unsigned *out)`: `*out = ++pvgpu_calls`, a kernel
/// keeping its state in a `__device__ unsigned pvgpu_calls` of its module
/// that the host never looks up. Not in `kernels.cu`: tests load a module
/// declaring both.
fn k_count_calls(c: &mut Call<'_>) -> Result<(), Fault> {
    let g = *c.globals.get("pvgpu_calls").ok_or(Fault)?;
    let b = c.mem.bytes_mut(g, 4)?;
    let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]).wrapping_add(1);
    b.copy_from_slice(&n.to_le_bytes());
    let out = c.args.u64(0)?;
    c.mem.bytes_mut(out, 4)?.copy_from_slice(&n.to_le_bytes());
    Ok(())
}

fn k_spin(c: &mut Call<'_>) -> Result<(), Fault> {
    // Treat the cycle count as nanoseconds of a 1 GHz clock, capped at 10 s.
    let cycles = c.args.u64(0)?.min(10_000_000_000);
    std::thread::sleep(Duration::from_nanos(cycles));
    Ok(())
}

fn k_poke(c: &mut Call<'_>) -> Result<(), Fault> {
    let p = c.args.u64(0)?;
    c.mem.bytes_mut(p, 4)?.copy_from_slice(&1i32.to_le_bytes());
    Ok(())
}

/// `assert(p[i] != tag)` for each thread `i` along x (of the first 1024):
/// each that fails writes the line the driver writes to standard error,
/// and the kernel faults with `CUDA_ERROR_ASSERT`.
fn k_assert(c: &mut Call<'_>) -> Result<(), Fault> {
    let (p, tag) = (c.args.u64(0)?, c.args.i32(1)?);
    let (blocks, threads) = (c.dims.grid[0], c.dims.block[0]);
    for (i, (b, t)) in (0..blocks).flat_map(|b| (0..threads).map(move |t| (b, t))).enumerate().take(1024) {
        let v = i32::from_le_bytes(c.mem.bytes_mut(p + 4 * i as u64, 4)?.try_into().map_err(|_| Fault)?);
        if v == tag {
            c.err.extend_from_slice(
                format!("pvgpu_assert: block: [{b},0,0], thread: [{t},0,0] Assertion `p[i] != tag` failed.\n").as_bytes(),
            );
            c.asserted = true;
        }
    }
    if c.asserted { Err(Fault) } else { Ok(()) }
}

/// `printf("pvgpu_printf tag %d block %d thread %d\n", ...)` from each
/// thread along x, block by block (at most 1024 lines).
fn k_printf(c: &mut Call<'_>) -> Result<(), Fault> {
    let tag = c.args.i32(0)?;
    let (blocks, threads) = (c.dims.grid[0], c.dims.block[0]);
    for (n, (b, t)) in (0..blocks).flat_map(|b| (0..threads).map(move |t| (b, t))).enumerate() {
        if n >= 1024 {
            break;
        }
        c.out.extend_from_slice(format!("pvgpu_printf tag {tag} block {b} thread {t}\n").as_bytes());
    }
    Ok(())
}
