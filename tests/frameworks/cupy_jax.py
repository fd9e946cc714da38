"""CuPy and JAX as their users start: elementwise kernels, reductions, a
matmul (cuBLAS), a user kernel; a jit-compiled function and a matmul. One
line per check; run natively and through pvgpu and compare.

    python3 cupy_jax.py cupy|jax [--json FILE]
"""
import json, sys, time

t0 = time.perf_counter()


def check(name, f):
    try:
        print(f"{name}: {f()}", flush=True)
    except Exception as e:
        print(f"{name}: ERROR", type(e).__name__, (str(e).splitlines() or [""])[0][:300], flush=True)


if sys.argv[1] == "cupy":
    import cupy as cp
    cp.ones(1).sum().item()
    first = time.perf_counter() - t0
    check("sum", lambda: float(cp.arange(1000, dtype=cp.float32).sum()))
    check("elementwise", lambda: round(float((cp.sin(cp.arange(10, dtype=cp.float64)) ** 2).sum()), 9))
    check("user kernel", lambda: float(cp.ElementwiseKernel("float32 x", "float32 y", "y = x * 3", "t3")(cp.ones(8, dtype=cp.float32)).sum()))
    check("reduction", lambda: float(cp.linalg.norm(cp.ones(10000, dtype=cp.float32))))
    check("matmul", lambda: float((cp.ones((256, 256), dtype=cp.float32) @ cp.ones((256, 256), dtype=cp.float32)).sum()))
    check("fft", lambda: round(float(cp.abs(cp.fft.fft(cp.ones(64))).sum()), 6))
    check("sort", lambda: float(cp.sort(cp.arange(100000, 0, -1, dtype=cp.float32))[:5].sum()))

    def sparse():
        import cupyx.scipy.sparse as sp
        m = sp.random(2000, 2000, density=0.01, format="csr", dtype=cp.float32, random_state=1)
        return round(float((m @ cp.ones(2000, dtype=cp.float32)).sum()), 2)

    check("sparse matvec", sparse)
    check("batched matmul", lambda: float(cp.matmul(cp.ones((8, 64, 64), dtype=cp.float32), cp.ones((8, 64, 64), dtype=cp.float32)).sum()))
else:
    import jax, jax.numpy as jnp
    jnp.ones(1).block_until_ready()
    first = time.perf_counter() - t0
    check("devices", lambda: [str(x) for x in jax.devices()])
    check("jit", lambda: float(jax.jit(lambda x: (x * 2).sum())(jnp.arange(1000.0))))
    check("matmul", lambda: float((jnp.ones((256, 256)) @ jnp.ones((256, 256))).sum()))
    check("grad", lambda: float(jax.grad(lambda w: ((w * 3.0) ** 2).sum())(jnp.ones(4))[0]))
    check("sort", lambda: float(jnp.sort(jnp.arange(100000.0, 0.0, -1.0))[:5].sum()))
    check("conv", lambda: float(jax.lax.conv(jnp.ones((1, 3, 32, 32)), jnp.ones((8, 3, 3, 3)), (1, 1), "SAME").sum()))
if "--json" in sys.argv:
    with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
        json.dump({"import_to_first_op_s": first}, f)
