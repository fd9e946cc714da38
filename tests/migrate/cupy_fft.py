"""A CuPy program that prints a checksum at every step, for
tests/migrate/run.sh (case cupy): FFTs through cuFFT (a plan cached
across steps), an elementwise kernel and a reduction CuPy compiles with
NVRTC, and a raw kernel, on arrays kept across steps.

    python3 cupy_fft.py STEPS [PAUSE_S]
"""
import sys, time
import cupy as cp

steps = int(sys.argv[1])
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
rng = cp.random.RandomState(0)
a = rng.standard_normal((512, 512)).astype(cp.complex64)
acc = cp.zeros((512, 512), dtype=cp.float32)
decay = cp.RawKernel(r'''
extern "C" __global__ void decay(float* acc, int n, float f) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] *= f;
}''', "decay")
mix = cp.ElementwiseKernel("float32 x, complex64 y", "float32 z", "z = x + abs(y) * 1e-3f", "pvgpu_mix")
last = time.perf_counter()
for step in range(steps):
    f = cp.fft.fft2(a)
    a = cp.fft.ifft2(f * cp.exp(-1j * 0.01 * step).astype(cp.complex64)).astype(cp.complex64)
    acc = mix(acc, f)
    decay((acc.size // 256,), (256,), (acc, cp.int32(acc.size), cp.float32(0.99)))
    print(f"{step} {float(acc.sum()):.6e} {float(cp.abs(a).max()):.6e}", flush=True)
    now = time.perf_counter()
    print(f"step_ms {(now - last) * 1e3:.1f}", file=sys.stderr, flush=True)
    time.sleep(pause)
    last = time.perf_counter()
