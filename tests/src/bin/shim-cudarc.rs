//! `shim-cudarc`: an ordinary cudarc program (safe API, dynamically loaded
//! libcuda) used to check that pvgpu's drop-in libcuda.so.1 serves programs
//! that `dlopen` the driver. It knows nothing of pvgpu: run it with
//! `LD_LIBRARY_PATH` pointing at the drop-in library and `PVGPU_BACKEND` set,
//! or natively on a GPU machine. Prints PASS and exits 0 when every result
//! matches a CPU reference.

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

const PTX: &str = include_str!("../../kernels/kernels.ptx");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = CudaContext::new(0)?;
    println!("device: {}", ctx.name()?);
    let stream = ctx.default_stream();
    let module = ctx.load_module(Ptx::from_src(PTX))?;
    let mat_sum = module.load_function("mat_sum")?;
    let saxpy = module.load_function("saxpy")?;

    let n = 50_000usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    let da = stream.clone_htod(&a)?;
    let db = stream.clone_htod(&b)?;
    let mut dc = stream.alloc_zeros::<f32>(n)?;
    let n32 = n as i32;
    let cfg = LaunchConfig::for_num_elems(n as u32);
    let mut l = stream.launch_builder(&mat_sum);
    l.arg(&da).arg(&db).arg(&mut dc).arg(&n32);
    // SAFETY: mat_sum(const float*, const float*, float*, int) with n-element buffers.
    unsafe { l.launch(cfg) }?;
    let c = stream.clone_dtoh(&dc)?;
    assert!(c.iter().enumerate().all(|(i, &v)| v == 1.5 * i as f32), "mat_sum");

    // A second stream, ordered after the first through cudarc's events.
    let s2 = ctx.new_stream()?;
    let mut l = s2.launch_builder(&saxpy);
    let two = 2.0f32;
    l.arg(&two).arg(&da).arg(&mut dc).arg(&n32);
    // SAFETY: saxpy(float, const float*, float*, int) with n-element buffers.
    unsafe { l.launch(cfg) }?;
    let c = s2.clone_dtoh(&dc)?;
    assert!(c.iter().enumerate().all(|(i, &v)| v == 3.5 * i as f32), "saxpy on a second stream");

    let (free, total) = cudarc::driver::result::mem_get_info()?;
    assert!(free <= total && total > 0);
    stream.synchronize()?;
    println!("PASS");
    Ok(())
}
