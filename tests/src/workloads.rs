//! The workloads every transport runs (MatSum, Jacobi, null calls and
//! launches) against a [`Device`]: a pvgpu session ([`Gpu`]) or, in
//! `pvgpu-bench`, the driver called directly; with CPU references.

use crate::PTX;
use pvgpu_frontend::{Client, Context, Function, Module, Stream, arg};

/// f32 slice as bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Bytes as f32 values.
pub fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// What the workloads need of a device: implemented by a pvgpu session
/// ([`Gpu`]) and, in `pvgpu-bench`, by the driver called directly.
pub trait Device {
    /// A kernel handle.
    type Kernel;
    /// Looks up a kernel of the test module.
    fn kernel(&self, name: &str) -> pvgpu_frontend::Result<Self::Kernel>;
    /// `cuMemAlloc`.
    fn alloc(&self, bytes: u64) -> pvgpu_frontend::Result<u64>;
    /// `cuMemFree`.
    fn free(&self, d: u64) -> pvgpu_frontend::Result<()>;
    /// `cuMemcpyHtoD`.
    fn htod(&self, d: u64, src: &[u8]) -> pvgpu_frontend::Result<()>;
    /// `cuMemcpyDtoH`.
    fn dtoh(&self, dst: &mut [u8], d: u64) -> pvgpu_frontend::Result<()>;
    /// `cuLaunchKernel` on the default stream.
    fn launch(&self, k: &Self::Kernel, grid: [u32; 3], block: [u32; 3], args: &[&[u8]]) -> pvgpu_frontend::Result<()>;
    /// `cuCtxSynchronize`.
    fn sync(&self) -> pvgpu_frontend::Result<()>;
}

/// A pvgpu session set up for the workloads: a context and the kernels
/// module.
pub struct Gpu<'a> {
    /// The client.
    pub c: &'a Client,
    /// Its context.
    pub ctx: Context,
    /// The kernels module.
    pub module: Module,
}

impl<'a> Gpu<'a> {
    /// Initialises, retains the primary context of device 0 and loads the
    /// PTX module.
    pub fn new(c: &'a Client) -> pvgpu_frontend::Result<Self> {
        c.init()?;
        let ctx = c.primary_ctx_retain(0)?;
        let module = c.module_load(ctx, PTX)?;
        Ok(Gpu { c, ctx, module })
    }

    /// Looks up a kernel.
    pub fn func(&self, name: &str) -> pvgpu_frontend::Result<Function> {
        self.c.module_get_function(self.module, name)
    }
}

impl Device for Gpu<'_> {
    type Kernel = Function;
    fn kernel(&self, name: &str) -> pvgpu_frontend::Result<Function> {
        self.func(name)
    }
    fn alloc(&self, bytes: u64) -> pvgpu_frontend::Result<u64> {
        self.c.mem_alloc(self.ctx, bytes)
    }
    fn free(&self, d: u64) -> pvgpu_frontend::Result<()> {
        self.c.mem_free(d)
    }
    fn htod(&self, d: u64, src: &[u8]) -> pvgpu_frontend::Result<()> {
        self.c.memcpy_htod(d, src)
    }
    fn dtoh(&self, dst: &mut [u8], d: u64) -> pvgpu_frontend::Result<()> {
        self.c.memcpy_dtoh(dst, d)
    }
    fn launch(&self, k: &Function, grid: [u32; 3], block: [u32; 3], args: &[&[u8]]) -> pvgpu_frontend::Result<()> {
        self.c.launch(k, grid, block, 0, Stream::DEFAULT, args)
    }
    fn sync(&self) -> pvgpu_frontend::Result<()> {
        self.c.ctx_synchronize(self.ctx)
    }
}

/// Inputs of MatSum of `n` elements.
pub fn matsum_inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
    ((0..n).map(|i| i as f32 * 0.5).collect(), (0..n).map(|i| (n - i) as f32 * 0.25).collect())
}

/// CPU reference of MatSum.
pub fn matsum_cpu(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// MatSum as the thesis runs it: allocate three arrays, copy two in, launch,
/// copy the result out, free all three.
pub fn matsum<D: Device>(d: &D, f: &D::Kernel, a: &[f32], b: &[f32]) -> pvgpu_frontend::Result<Vec<f32>> {
    let mut out = vec![0u8; a.len() * 4];
    matsum_bytes(d, f, &f32_bytes(a), &f32_bytes(b), &mut out)?;
    Ok(bytes_f32(&out))
}

/// [`matsum`] on little-endian f32 bytes (what the benchmark times, so that
/// host-side conversions stay out of the measurement).
pub fn matsum_bytes<D: Device>(d: &D, f: &D::Kernel, a: &[u8], b: &[u8], out: &mut [u8]) -> pvgpu_frontend::Result<()> {
    let n = a.len() / 4;
    let bytes = a.len() as u64;
    let (da, db, dc) = (d.alloc(bytes)?, d.alloc(bytes)?, d.alloc(bytes)?);
    d.htod(da, a)?;
    d.htod(db, b)?;
    let n32 = n as i32;
    let blocks = (n as u32).div_ceil(256);
    d.launch(f, [blocks, 1, 1], [256, 1, 1], &[arg(&da), arg(&db), arg(&dc), arg(&n32)])?;
    d.dtoh(out, dc)?;
    d.free(da)?;
    d.free(db)?;
    d.free(dc)?;
    Ok(())
}

/// Initial Jacobi grid: hot top edge, cold elsewhere.
pub fn jacobi_init(n: usize) -> Vec<f32> {
    let mut g = vec![0f32; n * n];
    for (x, v) in g.iter_mut().take(n).enumerate() {
        *v = 100.0 + x as f32 * 0.01;
    }
    g
}

/// CPU reference of `sweeps` Jacobi sweeps.
pub fn jacobi_cpu(init: &[f32], n: usize, sweeps: usize) -> Vec<f32> {
    let mut a = init.to_vec();
    let mut b = init.to_vec();
    for _ in 0..sweeps {
        for y in 0..n {
            for x in 0..n {
                let i = y * n + x;
                b[i] = if x == 0 || y == 0 || x == n - 1 || y == n - 1 { a[i] } else { 0.25 * (a[i - n] + a[i + n] + a[i - 1] + a[i + 1]) };
            }
        }
        std::mem::swap(&mut a, &mut b);
    }
    a
}

/// Jacobi on the device: copy the grid in, `sweeps` launches ping-ponging
/// two buffers, copy the result out.
pub fn jacobi<D: Device>(d: &D, f: &D::Kernel, init: &[f32], n: usize, sweeps: usize) -> pvgpu_frontend::Result<Vec<f32>> {
    let bytes = (n * n * 4) as u64;
    let (mut a, mut b) = (d.alloc(bytes)?, d.alloc(bytes)?);
    let data = f32_bytes(init);
    d.htod(a, &data)?;
    d.htod(b, &data)?;
    let n32 = n as i32;
    let blocks = (n as u32).div_ceil(16);
    for _ in 0..sweeps {
        d.launch(f, [blocks, blocks, 1], [16, 16, 1], &[arg(&a), arg(&b), arg(&n32)])?;
        std::mem::swap(&mut a, &mut b);
    }
    let mut out = vec![0u8; n * n * 4];
    d.dtoh(&mut out, a)?;
    d.free(a)?;
    d.free(b)?;
    Ok(bytes_f32(&out))
}

/// Panics with the first few differences (index, got, want) and their
/// count, instead of printing whole arrays.
pub fn assert_same<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
    if let Some(&first) = bad.first() {
        let show: Vec<String> = bad.iter().take(8).map(|&i| format!("[{i}] got {:?} want {:?}", got[i], want[i])).collect();
        panic!(
            "{what}: {} of {} elements differ, from index {first} (byte {}): {}",
            bad.len(),
            got.len(),
            first * std::mem::size_of::<T>(),
            show.join(", ")
        );
    }
}

/// Largest absolute difference.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
