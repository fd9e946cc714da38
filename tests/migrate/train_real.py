"""Trainings built the way their users build them, for
tests/migrate/run.sh (cases cnn-MB and attn-MB): what a move must carry
beyond a plain MLP: cuDNN convolutions and batch norm in bfloat16 autocast
(channels-last), a transformer block with PyTorch's fused attention
(`scaled_dot_product_attention`), and a fused AdamW.

    python3 train_real.py STEPS cnn|attn [EXTRA_MB] [PAUSE_S]

cuDNN runs deterministically (its heuristics pick the kernels, not
timing), so the losses are the same natively and through pvgpu, step for
step. The attention's backward pass accumulates with atomics and may differ
in the last bits from run to run natively too, so `attn` prints its losses
to 4 significant digits. Each step's wall time (sleep excluded) goes to
standard error as `step_ms MS`.
"""
import sys, time, torch
import torch.nn as nn
import torch.nn.functional as F

steps = int(sys.argv[1])
mode = sys.argv[2]
extra_mb = int(sys.argv[3]) if len(sys.argv) > 3 else 0
pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.05
torch.manual_seed(0)
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
dev = torch.device("cuda")


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.na = nn.BatchNorm2d(c)
        self.b = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.nb = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.nb(self.b(F.relu(self.na(self.a(x))))))


class Attn(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.n1 = nn.LayerNorm(d)
        self.n2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.out(a)
        return x + self.mlp(self.n2(x))


if mode == "cnn":
    model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), Block(64), Block(64),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(dev, memory_format=torch.channels_last)
    x = torch.randn(64, 3, 32, 32, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (64,), device=dev)
    fmt = "{:.6e}"
else:
    model = nn.Sequential(Attn(256, 4), Attn(256, 4), nn.Linear(256, 1000)).to(dev)
    x = torch.randn(16, 128, 256, device=dev)
    y = torch.randint(0, 1000, (16, 128), device=dev)
    fmt = "{:.3e}"
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
n = extra_mb * (1 << 20) // 4
extra = torch.arange(n, device=dev, dtype=torch.int32) if n else None
last = time.perf_counter()
for step in range(steps):
    opt.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
        loss = F.cross_entropy(out.float().reshape(-1, out.shape[-1]), y.reshape(-1))
    loss.backward()
    opt.step()
    print(f"{step} " + fmt.format(loss.item()), flush=True)
    now = time.perf_counter()
    print(f"step_ms {(now - last) * 1e3:.1f}", file=sys.stderr, flush=True)
    time.sleep(pause)
    last = time.perf_counter()
ok_extra = extra is None or bool((extra == torch.arange(n, device=dev, dtype=torch.int32)).all().item())
print(f"extra {'intact' if ok_extra else 'CHANGED'}", flush=True)
weights = sum(p.double().abs().sum().item() for p in model.parameters())
print("weights " + (fmt.format(weights)), flush=True)
