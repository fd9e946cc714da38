"""One of N PyTorch trainings run at once (tests/contention/run.sh): a
transformer encoder in bf16 autocast, trained for STEPS steps after a
warm-up. Prints its progress to stderr as it goes (so a run that stalls
shows where) and one JSON line at the end: wall time from the start signal,
mean, median and worst step time.

    python3 train.py NAME START_AT STEPS
"""
import json, sys, time

name, start_at, steps = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
t_import = time.time()
import torch

d = "cuda"
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 4), torch.nn.Linear(512, 512)).to(d)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
xb = torch.randn(32, 128, 512, device=d)
yb = torch.randn(32, 128, 512, device=d)


def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(xb).float(), yb)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


for _ in range(5):
    step()
torch.cuda.synchronize()
ready = time.time()
print(f"{name} ready after {ready - t_import:.1f} s", file=sys.stderr, flush=True)
time.sleep(max(0.0, start_at - time.time()))
t0 = time.time()
times = []
for i in range(steps):
    s = time.perf_counter()
    loss = step()
    loss.item()  # a step ends when its loss is on the host, as in a training loop that logs it
    times.append((time.perf_counter() - s) * 1e3)
    if i % 25 == 0:
        print(f"{name} step {i} at {time.time() - t0:.1f} s, {times[-1]:.1f} ms", file=sys.stderr, flush=True)
wall = time.time() - t0
times.sort()
print(json.dumps({"name": name, "wall_s": round(wall, 3), "mean_step_ms": round(sum(times) / len(times), 2),
                  "median_step_ms": round(times[len(times) // 2], 2), "max_step_ms": round(times[-1], 2)}), flush=True)
