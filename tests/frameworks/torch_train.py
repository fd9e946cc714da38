"""PyTorch as its users run it: tensor ops, a cuBLAS matmul, a cuDNN
convolution, and two small models trained for a few hundred steps (an MLP in
fp32, a transformer encoder in bf16 autocast). Prints one line per check and
the loss curve every 50 steps; the same script runs natively and through
pvgpu, and the outputs are compared (losses to 3 decimals).

    python3 torch_train.py [--steps N] [--json FILE]

With --bench-runs R (pvgpu-bench) the checks are skipped and each model is
trained R+1 times, the first as a warm-up; the JSON then holds the mean step
time of each timed run ("mlp_step_ms_runs", "transformer_step_ms_runs").
"""
import argparse, json, time

t0 = time.perf_counter()
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--json")
ap.add_argument("--bench-runs", type=int, default=0)
args = ap.parse_args()
d = "cuda"
timings = {}


def check(name, f):
    try:
        print(f"{name}: {f()}", flush=True)
    except Exception as e:  # a failure is a result: say which and go on
        print(f"{name}: ERROR", type(e).__name__, str(e).splitlines()[0][:300], flush=True)


x = torch.ones(1024, device=d)
torch.cuda.synchronize()
timings["import_to_first_op_s"] = time.perf_counter() - t0
def checks():
    check("tensor ops", lambda: ((x * 2).sum().item(), torch.arange(10, device=d).cumsum(0)[-1].item()))
    torch.manual_seed(0)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    check("fp32 matmul matches CPU", lambda: bool(((a.to(d) @ b.to(d)).cpu() - a @ b).abs().max() < 1e-2))
    check("bf16 matmul matches CPU", lambda: bool(((a.to(d).bfloat16() @ b.to(d).bfloat16()).float().cpu() - a @ b).abs().max() < 1.0))
    def conv():
        torch.manual_seed(0)
        m, inp = torch.nn.Conv2d(3, 16, 3, padding=1), torch.randn(4, 3, 32, 32)
        ref = m(inp)
        return bool((m.to(d)(inp.to(d)).cpu() - ref).abs().max() < 1e-3)
    check("cuDNN conv2d matches CPU", conv)


if not args.bench_runs:
    checks()


def train(name, model, batch, steps, amp):
    torch.manual_seed(1)
    model = model().to(d)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    curve = []
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        xb, yb = batch(i)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i % 50 == 0 or i == steps - 1:
            curve.append(round(loss.item(), 3))
    torch.cuda.synchronize()
    timings[name + "_step_ms"] = (time.perf_counter() - start) / steps * 1e3
    return curve


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))


g = torch.Generator().manual_seed(2)
xs, ys = torch.randn(64, 128, 256, generator=g), torch.randint(0, 10, (64, 128), generator=g)
xs, ys = xs.to(d), ys.to(d)
def run(name, label, f):
    """Once, checked, or (--bench-runs) a warm-up and timed runs."""
    if not args.bench_runs:
        return check(label, f)
    f()
    timings[name + "_step_ms_runs"] = []
    for _ in range(args.bench_runs):
        f()
        timings[name + "_step_ms_runs"].append(timings[name + "_step_ms"])


run("mlp", "mlp loss", lambda: train("mlp", mlp, lambda i: (xs[i % 64], ys[i % 64]), args.steps, False))


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(1000, 128)
        layer = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 2)
        self.out = torch.nn.Linear(128, 1000)

    def forward(self, t):
        return self.out(self.enc(self.emb(t))).flatten(0, 1)


toks = torch.randint(0, 1000, (32, 16, 33), generator=g).to(d)
run("transformer", "transformer bf16 loss", lambda: train("transformer", Tiny, lambda i: (toks[i % 32, :, :32], toks[i % 32, :, 1:].flatten()), args.steps, True))
print("timings:", {k: [round(x, 3) for x in v] if isinstance(v, list) else round(v, 3) for k, v in timings.items()}, flush=True)
if args.json:
    with open(args.json, "w") as f:
        json.dump(timings, f)
