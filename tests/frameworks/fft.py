"""FFTs as CuPy, PyTorch and JAX users call them (cuFFT underneath), and
PyTorch's attention kernels. Each check compares the GPU's result with
NumPy's on the CPU and prints whether it is within tolerance, so the
output is the same natively and through pvgpu.

    python3 fft.py cupy|torch|jax [--json FILE]
"""
import json, sys, time

import numpy as np

t0 = time.perf_counter()
rng = np.random.default_rng(7)
x1 = (rng.standard_normal(4096) + 1j * rng.standard_normal(4096)).astype(np.complex64)
x2 = rng.standard_normal((96, 80)).astype(np.float32)
xb = (rng.standard_normal((16, 1000)) + 1j * rng.standard_normal((16, 1000))).astype(np.complex128)


def check(name, f):
    try:
        print(f"{name}: {f()}", flush=True)
    except Exception as e:
        print(f"{name}: ERROR", type(e).__name__, (str(e).splitlines() or [""])[0][:300], flush=True)


def close(got, want, tol):
    """'ok' when `got` is within `tol` of `want`, relative to its largest value."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    return "ok" if err <= tol else f"error {err:.2e}"


def cupy_checks():
    import cupy as cp

    check("fft 4096", lambda: close(cp.fft.fft(cp.asarray(x1)).get(), np.fft.fft(x1), 1e-5))
    check("ifft of fft", lambda: close(cp.fft.ifft(cp.fft.fft(cp.asarray(x1))).get(), x1, 1e-5))
    check("rfft2 96x80", lambda: close(cp.fft.rfft2(cp.asarray(x2)).get(), np.fft.rfft2(x2), 1e-5))
    check("irfft2 of rfft2", lambda: close(cp.fft.irfft2(cp.fft.rfft2(cp.asarray(x2)), x2.shape).get(), x2, 1e-5))
    check("batched double 16x1000", lambda: close(cp.fft.fft(cp.asarray(xb), axis=1).get(), np.fft.fft(xb, axis=1), 1e-12))
    check("fftn 3d", lambda: close(cp.fft.fftn(cp.asarray(x1.reshape(16, 16, 16))).get(), np.fft.fftn(x1.reshape(16, 16, 16)), 1e-5))

    def plan_reuse():
        import cupyx.scipy.fft as cfft
        a = cp.asarray(x1)
        plan = cfft.get_fft_plan(a)
        with plan:
            outs = [cfft.fft(a * k) for k in range(1, 4)]
        return close(cp.stack(outs).get(), np.stack([np.fft.fft(x1 * k) for k in range(1, 4)]), 1e-5)

    check("plan reused 3 times", plan_reuse)


def torch_checks():
    import torch

    dev = "cuda"
    check("fft 4096", lambda: close(torch.fft.fft(torch.from_numpy(x1).to(dev)).cpu().numpy(), np.fft.fft(x1), 1e-5))
    check("rfft2 96x80", lambda: close(torch.fft.rfft2(torch.from_numpy(x2).to(dev)).cpu().numpy(), np.fft.rfft2(x2), 1e-5))
    check("irfft2 of rfft2", lambda: close(torch.fft.irfft2(torch.fft.rfft2(torch.from_numpy(x2).to(dev)), s=x2.shape).cpu().numpy(), x2, 1e-5))
    check("batched double 16x1000", lambda: close(torch.fft.fft(torch.from_numpy(xb).to(dev), dim=1).cpu().numpy(), np.fft.fft(xb, axis=1), 1e-12))

    def fft_grad():
        a = torch.from_numpy(x2).to(dev).requires_grad_()
        torch.fft.rfft2(a).abs().sum().backward()
        return "finite" if bool(torch.isfinite(a.grad).all()) else "not finite"

    check("rfft2 backward", fft_grad)

    def attention(backend):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        g = torch.Generator().manual_seed(3)
        q, k, v = (torch.randn(2, 4, 128, 64, generator=g) for _ in range(3))
        want = torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1) @ v
        with sdpa_kernel(backend):
            got = torch.nn.functional.scaled_dot_product_attention(q.to(dev).half(), k.to(dev).half(), v.to(dev).half())
        return close(got.float().cpu().numpy(), want.numpy(), 1e-2)

    from torch.nn.attention import SDPBackend
    check("sdpa flash", lambda: attention(SDPBackend.FLASH_ATTENTION))
    check("sdpa memory efficient", lambda: attention(SDPBackend.EFFICIENT_ATTENTION))


def jax_checks():
    import jax, jax.numpy as jnp

    check("fft 4096", lambda: close(np.asarray(jnp.fft.fft(jnp.asarray(x1))), np.fft.fft(x1), 1e-5))
    check("rfft2 96x80", lambda: close(np.asarray(jnp.fft.rfft2(jnp.asarray(x2))), np.fft.rfft2(x2), 1e-5))
    check("jit irfft2 of rfft2", lambda: close(np.asarray(jax.jit(lambda a: jnp.fft.irfft2(jnp.fft.rfft2(a), s=a.shape))(jnp.asarray(x2))), x2, 1e-5))
    check("grad through fft", lambda: "finite" if bool(jnp.isfinite(jax.grad(lambda a: jnp.abs(jnp.fft.rfft2(a)).sum())(jnp.asarray(x2))).all()) else "not finite")


{"cupy": cupy_checks, "torch": torch_checks, "jax": jax_checks}[sys.argv[1]]()
if "--json" in sys.argv:
    with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
        json.dump({"total_s": time.perf_counter() - t0}, f)
