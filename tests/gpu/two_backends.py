"""PyTorch on two GPUs, as a program uses them on one machine: a model's
two halves on cuda:0 and cuda:1 (pipeline style), activations and
gradients copied between them every step, and bulk tensor copies timed.
Through pvgpu the two GPUs may be served by two backends
(PVGPU_BACKEND=a,b; tests/gpu/two_backends.sh). Prints the losses (%.6e)
and the weights' sums, which must match a native run, and lines starting
with "time" (not compared)."""

import time

import torch

assert torch.cuda.device_count() == 2, f"{torch.cuda.device_count()} devices"
print("devices:", [torch.cuda.get_device_name(i) for i in range(2)])
torch.manual_seed(0)
d0, d1 = torch.device("cuda:0"), torch.device("cuda:1")
first = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU()).to(d0)
second = torch.nn.Sequential(torch.nn.Linear(512, 10)).to(d1)
opt = torch.optim.SGD(list(first.parameters()) + list(second.parameters()), lr=0.05)
g = torch.Generator().manual_seed(1)
x = torch.randn(1024, 256, generator=g).to(d0)
y = torch.randint(0, 10, (1024,), generator=g).to(d1)
for step in range(20):
    opt.zero_grad()
    h = first(x).to(d1)
    loss = torch.nn.functional.cross_entropy(second(h), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6e}")
print("weights", f"{sum(p.double().sum().item() for p in first.parameters()):.6e}",
      f"{sum(p.double().sum().item() for p in second.parameters()):.6e}")

# Bulk copies between the two GPUs, and one through the host for scale.
for mib in (16, 256):
    a = torch.full((mib << 18,), 3.0, device=d0)
    b = torch.empty_like(a, device=d1)
    b.copy_(a)
    torch.cuda.synchronize(d1)
    t = time.perf_counter()
    for _ in range(5):
        b.copy_(a)
    torch.cuda.synchronize(d0)
    torch.cuda.synchronize(d1)
    s = time.perf_counter() - t
    assert b.sum().item() == 3.0 * (mib << 18)
    print(f"time cuda:0 to cuda:1 {mib} MiB: {5 * (mib << 20) / 1e9 / s:.2f} GB/s")
print("PASS")
