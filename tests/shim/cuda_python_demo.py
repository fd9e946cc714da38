"""A cuda-python (cuda.bindings.driver) program: loads a PTX kernel and
launches it. pvgpu runs it unchanged against its drop-in libcuda.so.1
(LD_LIBRARY_PATH and PVGPU_BACKEND set); it runs natively on a GPU machine
too. Prints PASS when the result matches numpy.

    python3 cuda_python_demo.py kernels.ptx
"""
import sys

import numpy as np
from cuda.bindings import driver as cuda


def check(result):
    err, *rest = result
    if err != cuda.CUresult.CUDA_SUCCESS:
        _, name = cuda.cuGetErrorName(err)
        raise RuntimeError(f"CUDA error {name.decode() if name else err}")
    return rest[0] if len(rest) == 1 else tuple(rest)


def main(ptx_path):
    check(cuda.cuInit(0))
    version = check(cuda.cuDriverGetVersion())
    dev = check(cuda.cuDeviceGet(0))
    name = check(cuda.cuDeviceGetName(256, dev))
    print("driver", version, "device", name.split(b"\0")[0].decode())
    ctx = check(cuda.cuDevicePrimaryCtxRetain(dev))
    check(cuda.cuCtxSetCurrent(ctx))

    ptx = np.char.array(open(ptx_path, "rb").read())
    module = check(cuda.cuModuleLoadData(ptx.ctypes.data))
    kernel = check(cuda.cuModuleGetFunction(module, b"mat_sum"))

    n = 1 << 20
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 0.25, dtype=np.float32)
    c = np.zeros(n, dtype=np.float32)
    da = check(cuda.cuMemAlloc(a.nbytes))
    db = check(cuda.cuMemAlloc(b.nbytes))
    dc = check(cuda.cuMemAlloc(c.nbytes))
    stream = check(cuda.cuStreamCreate(0))
    check(cuda.cuMemcpyHtoDAsync(da, a.ctypes.data, a.nbytes, stream))
    check(cuda.cuMemcpyHtoDAsync(db, b.ctypes.data, b.nbytes, stream))

    args = [np.array([int(da)], dtype=np.uint64), np.array([int(db)], dtype=np.uint64),
            np.array([int(dc)], dtype=np.uint64), np.array([n], dtype=np.int32)]
    params = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    check(cuda.cuLaunchKernel(kernel, (n + 255) // 256, 1, 1, 256, 1, 1, 0, stream, params.ctypes.data, 0))
    check(cuda.cuMemcpyDtoHAsync(c.ctypes.data, dc, c.nbytes, stream))
    check(cuda.cuStreamSynchronize(stream))
    assert np.array_equal(c, a + b), "mat_sum result differs from numpy"

    for p in (da, db, dc):
        check(cuda.cuMemFree(p))
    check(cuda.cuStreamDestroy(stream))
    check(cuda.cuModuleUnload(module))
    check(cuda.cuDevicePrimaryCtxRelease(dev))
    print("PASS")


if __name__ == "__main__":
    main(sys.argv[1])
