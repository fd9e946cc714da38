"""A JAX training that prints its loss at every step, for
tests/migrate/run.sh (case jax-MB): a jit-compiled MLP step (XLA runs it
as CUDA graphs, its command buffers), the same losses natively and
through pvgpu, before and after its session moved to another backend.

    python3 train_jax.py STEPS [EXTRA_MB] [PAUSE_S]

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
k = jax.random.split(jax.random.PRNGKey(0), 5)
params = {
    "w1": jax.random.normal(k[0], (512, 1024)) * 0.04, "b1": jnp.zeros(1024),
    "w2": jax.random.normal(k[1], (1024, 1024)) * 0.03, "b2": jnp.zeros(1024),
    "w3": jax.random.normal(k[2], (1024, 10)) * 0.03, "b3": jnp.zeros(10),
}
x = jax.random.normal(k[3], (256, 512))
y = jax.random.randint(k[4], (256,), 0, 10)
n = extra_mb * (1 << 20) // 4
extra = jnp.arange(n, dtype=jnp.int32) if n else None


def loss_fn(p):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    h = jax.nn.relu(h @ p["w2"] + p["b2"])
    logits = h @ p["w3"] + p["b3"]
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(256), y])


@jax.jit
def step(p):
    loss, g = jax.value_and_grad(loss_fn)(p)
    return jax.tree_util.tree_map(lambda a, b: a - 0.05 * b, p, g), loss


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
