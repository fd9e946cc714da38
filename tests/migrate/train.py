"""A PyTorch training that prints its loss at every step, for
tests/migrate/run.sh: the same seed gives the same losses natively and
through pvgpu, before and after its session moved to another backend.

    python3 train.py STEPS [EXTRA_MB] [PAUSE_S]

It holds EXTRA_MB of device memory filled with a known pattern, and checks
it at the end. Each step's wall time (sleep excluded) goes to standard
error as `step_ms MS`: the longest is the pause a move cost the program.
"""
import sys, time, torch

steps = int(sys.argv[1])
extra_mb = int(sys.argv[2]) if len(sys.argv) > 2 else 0
pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
torch.manual_seed(0)
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(256, 512, device=dev)
y = torch.randint(0, 10, (256,), device=dev)
n = extra_mb * (1 << 20) // 4
extra = torch.arange(n, device=dev, dtype=torch.int32) if n else None
small = [torch.full((k + 1,), k, device=dev, dtype=torch.int16) for k in range(200)]
last = time.perf_counter()
for step in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print(f"{step} {loss.item():.6f}", flush=True)
    now = time.perf_counter()
    print(f"step_ms {(now - last) * 1e3:.1f}", file=sys.stderr, flush=True)
    time.sleep(pause)
    last = time.perf_counter()
ok_extra = extra is None or bool((extra == torch.arange(n, device=dev, dtype=torch.int32)).all().item())
ok_small = all(bool((t == k).all().item()) and t.numel() == k + 1 for k, t in enumerate(small))
print(f"extra {'intact' if ok_extra else 'CHANGED'} small {'intact' if ok_small else 'CHANGED'}", flush=True)
