# Matrix multiplies from START_AT (Unix seconds) for SECS; prints how many.
import sys, time, torch
name, start_at, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
y = x @ x
torch.cuda.synchronize()
time.sleep(max(0.0, start_at - time.time()))
t0, n = time.time(), 0
while time.time() - t0 < secs:
    for _ in range(8):
        y = x @ x
    n += 8
    torch.cuda.synchronize()
print(f"{name} matmuls {n} in {time.time() - t0:.2f} s")
