"""What a hostile guest may try on a GPU (take more memory than its quota
through limits, module globals and extra contexts; context flags that reach
outside its session; a kernel that never ends), natively or through pvgpu.

  python3 hostile.py quota CUBIN      # stack limit, a module with a huge
                                      # global, extra contexts, core dumps
  python3 hostile.py stuck PTX        # launch a kernel that never ends, exit

Prints one `key: value` line per step; `used_mib` is the device's memory in
use after the step (nvidia-smi), so native and pvgpu runs can be compared.
"""
import os
import subprocess
import sys

from cuda.bindings import driver as cu


def used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True, text=True)
    return out.stdout.strip()


def code(r):
    err = r[0] if isinstance(r, tuple) else r
    return int(err)


def new_ctx(dev, flags=0):
    try:
        return cu.cuCtxCreate(None, flags, dev)
    except TypeError:
        return cu.cuCtxCreate(flags, dev)


def quota(cubin):
    assert code(cu.cuInit(0)) == 0
    dev = cu.cuDeviceGet(0)[1]
    err, ctx = new_ctx(dev)
    print("ctx_create:", code(err), "used_mib:", used_mib(), flush=True)
    # CU_LIMIT_STACK_SIZE = 0: a stack this size for every resident thread.
    print("stack_256k:", code(cu.cuCtxSetLimit(cu.CUlimit(0), 256 << 10)), "used_mib:", used_mib(), flush=True)
    print("stack_after:", cu.cuCtxGetLimit(cu.CUlimit(0))[1], flush=True)
    with open(cubin, "rb") as f:
        image = f.read()
    err, mod = cu.cuModuleLoadData(image)
    print("module_big_global:", code(err), "used_mib:", used_mib(), flush=True)
    made = 0
    last = 0
    for _ in range(63):
        err, c = new_ctx(dev)
        last = code(err)
        if last != 0:
            break
        made += 1
    print("extra_contexts:", made, "then:", last, "used_mib:", used_mib(), flush=True)
    # CU_CTX_COREDUMP_ENABLE, CU_CTX_USER_COREDUMP_ENABLE.
    for name, flags in (("coredump", 0x20), ("user_coredump", 0x40)):
        err, c = new_ctx(dev, flags)
        print(f"ctx_{name}:", code(err), flush=True)
    print("alive: yes", flush=True)


def stuck(ptx):
    assert code(cu.cuInit(0)) == 0
    dev = cu.cuDeviceGet(0)[1]
    err, ctx = cu.cuDevicePrimaryCtxRetain(dev)
    cu.cuCtxSetCurrent(ctx)
    with open(ptx, "rb") as f:
        image = f.read() + b"\0"
    err, mod = cu.cuModuleLoadData(image)
    assert code(err) == 0, code(err)
    err, fn = cu.cuModuleGetFunction(mod, b"forever")
    err, flag = cu.cuMemAlloc(4)
    cu.cuMemsetD32(flag, 0, 1)
    import ctypes
    arg = ctypes.c_uint64(int(flag))
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    err, = cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, ctypes.addressof(params), 0)
    print("launched:", code(err), flush=True)
    os._exit(0)


if __name__ == "__main__":
    {"quota": quota, "stuck": stuck}[sys.argv[1]](sys.argv[2])
