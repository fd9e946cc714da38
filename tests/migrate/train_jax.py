"""A JAX training that prints its loss at every step, for
tests/migrate/run.sh (case jax-MB): a jit-compiled MLP step (XLA runs it
as CUDA graphs, its command buffers), the same losses natively and
through pvgpu, before and after its session moved to another backend.

    python3 train_jax.py STEPS [EXTRA_MB] [PAUSE_S] [mlp|conv|scan|rejit]

`conv` trains a small convolutional network instead (XLA's convolutions
are cuDNN's); `scan` runs each step as a `lax.scan` of 4 updates (a loop
inside one compiled program); `rejit` first compiles and runs a few
functions and drops them, so that their modules are unloaded before the
training's are loaded, as in a notebook that redefines a cell.

Run with XLA_PYTHON_CLIENT_PREALLOCATE=false (the session holds what the
program uses, not 75 % of the GPU) and autotuning off, so that both runs
pick the same kernels. EXTRA_MB of device memory holds a known pattern,
checked at the end with the sum of the weights. Each step's wall time
(sleep excluded) goes to standard error as `step_ms MS`.
"""
import sys, time
import jax, jax.numpy as jnp

steps = int(sys.argv[1])
extra_mb = int(sys.argv[2]) if len(sys.argv) > 2 else 0
pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
mode = sys.argv[4] if len(sys.argv) > 4 else "mlp"
if mode == "rejit":
    for i in range(3):
        f = jax.jit(lambda a, i=i: jnp.sin(a) * (i + 1) + jnp.arange(4096.0)[: a.shape[0]])
        f(jnp.ones(1024)).block_until_ready()
        del f
    jax.clear_caches()
    import gc
    gc.collect()
k = jax.random.split(jax.random.PRNGKey(0), 5)
params = {
    "w1": jax.random.normal(k[0], (512, 1024)) * 0.04, "b1": jnp.zeros(1024),
    "w2": jax.random.normal(k[1], (1024, 1024)) * 0.03, "b2": jnp.zeros(1024),
    "w3": jax.random.normal(k[2], (1024, 10)) * 0.03, "b3": jnp.zeros(10),
}
if mode == "conv":
    params = {"c1": jax.random.normal(k[0], (16, 3, 3, 3)) * 0.2, "c2": jax.random.normal(k[1], (32, 16, 3, 3)) * 0.08,
              "w": jax.random.normal(k[2], (32, 10)) * 0.1, "b": jnp.zeros(10)}
x = jax.random.normal(k[3], (256, 512)) if mode != "conv" else jax.random.normal(k[3], (256, 3, 16, 16))
y = jax.random.randint(k[4], (256,), 0, 10)
n = extra_mb * (1 << 20) // 4
extra = jnp.arange(n, dtype=jnp.int32) if n else None


def loss_fn(p):
    if mode == "conv":
        dn = ("NCHW", "OIHW", "NCHW")
        h = jax.nn.relu(jax.lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME", dimension_numbers=dn))
        h = jax.nn.relu(jax.lax.conv_general_dilated(h, p["c2"], (2, 2), "SAME", dimension_numbers=dn))
        logits = h.mean(axis=(2, 3)) @ p["w"] + p["b"]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(256), y])
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    h = jax.nn.relu(h @ p["w2"] + p["b2"])
    logits = h @ p["w3"] + p["b3"]
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(256), y])


def update(p):
    loss, g = jax.value_and_grad(loss_fn)(p)
    return jax.tree_util.tree_map(lambda a, b: a - 0.05 * b, p, g), loss


@jax.jit
def step(p):
    if mode == "scan":
        p, losses = jax.lax.scan(lambda c, _: update(c), p, None, length=4)
        return p, losses[-1]
    return update(p)


last = time.perf_counter()
for i in range(steps):
    params, loss = step(params)
    print(f"{i} {float(loss):.6e}", flush=True)
    now = time.perf_counter()
    print(f"step_ms {(now - last) * 1e3:.1f}", file=sys.stderr, flush=True)
    time.sleep(pause)
    last = time.perf_counter()
ok_extra = extra is None or bool((extra == jnp.arange(n, dtype=jnp.int32)).all())
weights = sum(float(jnp.abs(v).astype(jnp.float64 if jax.config.x64_enabled else jnp.float32).sum()) for v in params.values())
print(f"extra {'intact' if ok_extra else 'CHANGED'}", flush=True)
print(f"weights {weights:.9e}", flush=True)
