"""A numba CUDA program (numba-cuda). pvgpu runs it against its drop-in
libcuda.so.1; prints PASS when the result matches numpy."""
import numpy as np
from numba import cuda


@cuda.jit
def add(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def main():
    n = 100_000
    a = np.arange(n, dtype=np.float32)
    b = np.ones(n, dtype=np.float32)
    out = cuda.device_array(n, dtype=np.float32)
    add[(n + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), out)
    assert np.array_equal(out.copy_to_host(), a + b)
    print("PASS")


if __name__ == "__main__":
    main()
