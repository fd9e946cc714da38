"""CUDA graphs as frameworks use them: PyTorch's whole training step
captured with torch.cuda.graph and replayed, make_graphed_callables, and
torch.compile's reduce-overhead mode (CUDA graphs under Inductor); JAX's
jit training loop (XLA runs command buffers, which are CUDA graphs); CuPy's
stream capture. One line per check; run natively and through pvgpu and
compare.

    python3 graphs.py torch|jax|cupy [--json FILE]
"""
import json, sys, time

t0 = time.perf_counter()
timings = {}


def check(name, f):
    try:
        print(f"{name}: {f()}", flush=True)
    except Exception as e:
        print(f"{name}: ERROR", type(e).__name__, (str(e).splitlines() or [""])[0][:300], flush=True)


def timed(name, f, *args):
    s = time.perf_counter()
    v = f(*args)
    timings[name] = time.perf_counter() - s
    return v


def torch_checks():
    import torch

    torch.manual_seed(0)
    dev = "cuda"

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)

    x = torch.randn(128, 64, device=dev, generator=torch.Generator(dev).manual_seed(1))
    y = torch.randint(0, 10, (128,), device=dev, generator=torch.Generator(dev).manual_seed(2))

    def eager(steps):
        m = model()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(steps):
            opt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
        return round(loss.item(), 4)

    def whole_step(steps):
        m = model()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        sx, sy = x.clone(), y.clone()
        # Warm up on a side stream, as the documentation asks.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                opt.zero_grad(set_to_none=False)
                torch.nn.functional.cross_entropy(m(sx), sy).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=False)
        with torch.cuda.graph(g):
            loss = torch.nn.functional.cross_entropy(m(sx), sy)
            loss.backward()
            opt.step()
        for _ in range(steps):
            g.replay()
        torch.cuda.synchronize()
        # `loss` is the captured step's output: the loss of the last replay.
        return round(loss.item(), 4)

    def graphed_callables():
        m = model()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        gm = torch.cuda.make_graphed_callables(m, (x.clone().requires_grad_(False),))
        for _ in range(5):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(gm(x), y)
            loss.backward()
            opt.step()
        return round(loss.item(), 4)

    def compiled():
        m = model()
        f = torch.compile(m, mode="reduce-overhead")
        with torch.no_grad():
            for _ in range(4):
                out = f(x)
        return round(out.float().abs().sum().item(), 2)

    def transformer_steps(steps, graphed):
        """A small transformer encoder trained with Adam on a fixed batch:
        eagerly, or with the whole step captured once and replayed."""
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        net = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 2), torch.nn.Flatten(), torch.nn.Linear(16 * 64, 10)).to(dev)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3, capturable=graphed)
        g = torch.Generator(dev).manual_seed(3)
        sx = torch.randn(32, 16, 64, device=dev, generator=g)
        sy = torch.randint(0, 10, (32,), device=dev, generator=g)

        def step():
            opt.zero_grad(set_to_none=False)
            out = torch.nn.functional.cross_entropy(net(sx), sy)
            out.backward()
            opt.step()
            return out

        if not graphed:
            for _ in range(steps):
                loss = step()
            return round(loss.item(), 3)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg):
            loss = step()
        for _ in range(steps - 3):
            cg.replay()
        torch.cuda.synchronize()
        return round(loss.item(), 3)

    check("eager 20 steps", lambda: eager(20))
    check("captured step 20 replays", lambda: timed("captured_step_s", whole_step, 20))
    check("make_graphed_callables", graphed_callables)
    check("compile reduce-overhead", lambda: timed("compile_s", compiled))
    check("transformer 200 steps eager", lambda: timed("transformer_eager_s", transformer_steps, 200, False))
    check("transformer 200 steps captured", lambda: timed("transformer_graphed_s", transformer_steps, 200, True))


def jax_checks():
    import jax, jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    w1 = jax.random.normal(k1, (64, 256)) * 0.1
    w2 = jax.random.normal(k2, (256, 10)) * 0.1
    x = jax.random.normal(k3, (128, 64))
    y = jnp.arange(128) % 10

    def loss(p, x, y):
        h = jax.nn.relu(x @ p[0])
        logits = h @ p[1]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(128), y])

    @jax.jit
    def step(p, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y)
        return [w - 0.1 * dw for w, dw in zip(p, g)], l

    def train(steps):
        p = [w1, w2]
        for _ in range(steps):
            p, l = step(p, x, y)
        return round(float(l), 4)

    @jax.jit
    def scan_train(p):
        def body(p, _):
            p, l = step(p, x, y)
            return p, l
        return jax.lax.scan(body, p, None, length=50)[1][-1]

    def transformer(steps):
        """A one-block transformer (attention, MLP, layer norms) trained with
        jit-compiled SGD steps on a fixed batch."""
        d, t, n = 64, 16, 32
        ks = jax.random.split(jax.random.PRNGKey(1), 8)
        p = {
            "qkv": jax.random.normal(ks[0], (d, 3 * d)) * 0.05,
            "o": jax.random.normal(ks[1], (d, d)) * 0.05,
            "m1": jax.random.normal(ks[2], (d, 4 * d)) * 0.05,
            "m2": jax.random.normal(ks[3], (4 * d, d)) * 0.05,
            "out": jax.random.normal(ks[4], (t * d, 10)) * 0.05,
        }
        xs = jax.random.normal(ks[5], (n, t, d))
        ys = jnp.arange(n) % 10

        def norm(h):
            return (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-5)

        def forward(p, x):
            q, k, v = jnp.split(norm(x) @ p["qkv"], 3, axis=-1)
            a = jax.nn.softmax(q @ k.transpose(0, 2, 1) / jnp.sqrt(d), axis=-1) @ v
            h = x + a @ p["o"]
            h = h + jax.nn.gelu(norm(h) @ p["m1"]) @ p["m2"]
            return h.reshape(n, t * d) @ p["out"]

        def tloss(p):
            return -jnp.mean(jax.nn.log_softmax(forward(p, xs))[jnp.arange(n), ys])

        @jax.jit
        def tstep(p):
            l, g = jax.value_and_grad(tloss)(p)
            return jax.tree_util.tree_map(lambda w, dw: w - 0.05 * dw, p, g), l

        for _ in range(steps):
            p, l = tstep(p)
        return round(float(l), 3)

    check("jit training 30 steps", lambda: timed("jax_train_s", train, 30))
    check("jit training 300 steps", lambda: timed("jax_train_300_s", train, 300))
    check("transformer 300 jit steps", lambda: timed("jax_transformer_s", transformer, 300))
    check("scan training 50 steps", lambda: round(float(scan_train([w1, w2])), 4))


def cupy_checks():
    import cupy as cp

    a = cp.arange(1 << 16, dtype=cp.float32)
    out = cp.zeros_like(a)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        b = a * 2.0
        cp.add(b, 1.0, out=out)
        g = s.end_capture()
    for _ in range(3):
        g.launch(stream=s)
    s.synchronize()
    check("stream capture replayed", lambda: float(out.sum()))
    check("capture status after", lambda: s.is_capturing())

    # A host function captured with the work: a host node, run per launch.
    ran = []
    with s:
        s.begin_capture()
        cp.add(out, 1.0, out=out)
        s.launch_host_func(lambda arg: ran.append(arg), 7)
        g2 = s.end_capture()
    for _ in range(3):
        g2.launch(stream=s)
    s.synchronize()
    check("captured host function over 3 launches", lambda: (len(ran), sum(ran), float(out.sum())))


{"torch": torch_checks, "jax": jax_checks, "cupy": cupy_checks}[sys.argv[1]]()
if "--json" in sys.argv:
    with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
        json.dump({"total_s": time.perf_counter() - t0, **timings}, f)
