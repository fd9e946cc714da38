"""cuda.core as its quick-start uses it: compile a C++ kernel with NVRTC
through Program, launch it, check the result (copies through
cuda.bindings)."""
import sys

import numpy as np

try:
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
except ImportError:
    from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
from cuda.bindings import driver

code = r"""
template <typename T>
__global__ void vector_add(const T *a, const T *b, T *c, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""


def check(r):
    err = r[0] if isinstance(r, tuple) else r
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"driver call failed: {err}")
    return r[1:] if isinstance(r, tuple) else None


dev = Device()
dev.set_current()
stream = dev.create_stream()
print("device:", dev.name)
prog = Program(code, code_type="c++", options=ProgramOptions(std="c++17", arch=f"sm_{dev.arch}"))
mod = prog.compile("cubin", name_expressions=("vector_add<float>",))
kernel = mod.get_kernel("vector_add<float>")
n = 1 << 16
a = np.arange(n, dtype=np.float32)
b = np.full(n, 2.0, dtype=np.float32)
bufs = [dev.allocate(n * 4, stream=stream) for _ in range(3)]
stream.sync()
check(driver.cuMemcpyHtoD(int(bufs[0].handle), a, n * 4))
check(driver.cuMemcpyHtoD(int(bufs[1].handle), b, n * 4))
config = LaunchConfig(grid=(n + 255) // 256, block=256)
launch(stream, config, kernel, bufs[0], bufs[1], bufs[2], np.uint64(n))
stream.sync()
c = np.empty(n, dtype=np.float32)
check(driver.cuMemcpyDtoH(c, int(bufs[2].handle), n * 4))
ok = bool(np.array_equal(c, a + b))
print("vector_add<float>:", "ok" if ok else "wrong")
for buf in bufs:
    buf.close(stream)
stream.sync()
print("Test PASSED" if ok else "Test FAILED")
sys.exit(0 if ok else 1)
