"""CuPy and JAX as their users start: elementwise kernels, reductions, a
matmul (cuBLAS), a user kernel; a jit-compiled function and a matmul. One
line per check; run natively and through pvgpu and compare.

    python3 cupy_jax.py cupy|jax
"""
import sys


def check(name, f):
    try:
        print(name, f(), flush=True)
    except Exception as e:
        print(name, "ERROR", type(e).__name__, (str(e).splitlines() or [""])[0][:300], flush=True)


if sys.argv[1] == "cupy":
    import cupy as cp
    check("sum", lambda: float(cp.arange(1000, dtype=cp.float32).sum()))
    check("elementwise", lambda: round(float((cp.sin(cp.arange(10, dtype=cp.float64)) ** 2).sum()), 9))
    check("user kernel", lambda: float(cp.ElementwiseKernel("float32 x", "float32 y", "y = x * 3", "t3")(cp.ones(8, dtype=cp.float32)).sum()))
    check("reduction", lambda: float(cp.linalg.norm(cp.ones(10000, dtype=cp.float32))))
    check("matmul", lambda: float((cp.ones((256, 256), dtype=cp.float32) @ cp.ones((256, 256), dtype=cp.float32)).sum()))
    check("fft", lambda: round(float(cp.abs(cp.fft.fft(cp.ones(64))).sum()), 6))
else:
    import jax, jax.numpy as jnp
    check("devices", lambda: [str(x) for x in jax.devices()])
    check("jit", lambda: float(jax.jit(lambda x: (x * 2).sum())(jnp.arange(1000.0))))
    check("matmul", lambda: float((jnp.ones((256, 256)) @ jnp.ones((256, 256))).sum()))
    check("grad", lambda: float(jax.grad(lambda w: ((w * 3.0) ** 2).sum())(jnp.ones(4))[0]))
