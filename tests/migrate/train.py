"""A PyTorch training that prints its loss at every step, for
tests/migrate/run.sh: the same seed gives the same losses (and, at the end,
the same sum of the model's weights) natively and through pvgpu, before
and after its session moved to another backend.

    python3 train.py STEPS [EXTRA_MB] [PAUSE_S] [graph]

It holds EXTRA_MB of device memory filled with a known pattern, and checks
it at the end. With `graph`, each step replays one CUDA graph of the whole
step (forward, backward, optimizer), captured after three warm-up steps,
as PyTorch's documentation shows ("whole network capture"). Each step's
wall time (sleep excluded) goes to standard error as `step_ms MS`: the
steps longer than usual show what a move cost the program.
"""
import sys, time, torch

steps = int(sys.argv[1])
extra_mb = int(sys.argv[2]) if len(sys.argv) > 2 else 0
pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
graphed = len(sys.argv) > 4 and sys.argv[4] == "graph"
torch.manual_seed(0)
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=graphed)
x = torch.randn(256, 512, device=dev)
y = torch.randint(0, 10, (256,), device=dev)
n = extra_mb * (1 << 20) // 4
extra = torch.arange(n, device=dev, dtype=torch.int32) if n else None
small = [torch.full((k + 1,), k, device=dev, dtype=torch.int16) for k in range(200)]


def train_step():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


if graphed:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            train_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = train_step()
last = time.perf_counter()
for step in range(steps):
    if graphed:
        graph.replay()
        loss = static_loss
    else:
        opt.zero_grad()
        loss = train_step()
    print(f"{step} {loss.item():.6e}", flush=True)
    now = time.perf_counter()
    print(f"step_ms {(now - last) * 1e3:.1f}", file=sys.stderr, flush=True)
    time.sleep(pause)
    last = time.perf_counter()
ok_extra = extra is None or bool((extra == torch.arange(n, device=dev, dtype=torch.int32)).all().item())
ok_small = all(bool((t == k).all().item()) and t.numel() == k + 1 for k, t in enumerate(small))
print(f"extra {'intact' if ok_extra else 'CHANGED'} small {'intact' if ok_small else 'CHANGED'}", flush=True)
weights = sum(p.double().abs().sum().item() for p in model.parameters())
print(f"weights {weights:.9e}", flush=True)
