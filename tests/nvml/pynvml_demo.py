"""What a pynvml-based monitor asks of NVML, run against pvgpu's drop-in
libnvidia-ml.so.1 and libcuda.so.1 (tests/tests/nvml.rs runs it against a
harness backend over each transport).

Prints one `key: value` line per answer, checks that the answers agree with
each other and that errors come back as NVML's, and ends with PASS. Memory
the script allocates through libcuda.so.1 (with ctypes, as a CUDA program
would) must show in NVML's answers: NVML shares the process's session.
With --no-driver it only checks that nvmlInit fails as NVML does without a
driver (no backend, or a libcuda.so.1 that is not pvgpu's).
"""

import ctypes
import os
import re
import sys

import pynvml as nv

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def error_of(fn, *args):
    """The NVML status `fn(*args)` raised, or None if it returned."""
    try:
        fn(*args)
    except nv.NVMLError as e:
        return e.value
    return None


def gauge(fn, *args):
    """A gauge's value, or 'not supported' (the backend cannot read it)."""
    try:
        return fn(*args)
    except nv.NVMLError_NotSupported:
        return "not supported"


def loaded_libraries(*names):
    """The files mapped into this process whose paths contain one of `names`."""
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if any(n in path for n in names):
                found.add(os.path.realpath(path))
    return sorted(found)


def no_driver():
    code = error_of(nv.nvmlInit)
    print(f"init: {code}")
    check(code == nv.NVML_ERROR_DRIVER_NOT_LOADED, "nvmlInit without pvgpu's libcuda and a backend is NVML_ERROR_DRIVER_NOT_LOADED")
    check(error_of(nv.nvmlDeviceGetCount) == nv.NVML_ERROR_UNINITIALIZED, "nothing initialised")


def device(i, count):
    h = nv.nvmlDeviceGetHandleByIndex(i)
    check(nv.nvmlDeviceGetIndex(h) == i, "index round trip")
    print(f"device {i} name: {nv.nvmlDeviceGetName(h)}")

    uuid = nv.nvmlDeviceGetUUID(h)
    print(f"device {i} uuid: {uuid}")
    check(re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid) is not None, "UUID format")
    check(nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByUUID(uuid)) == i, "handle by UUID")
    check(nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByUUID(uuid.upper())) == i, "UUID in capitals")

    mem = nv.nvmlDeviceGetMemoryInfo(h)
    print(f"device {i} memory: total={mem.total} free={mem.free} used={mem.used}")
    check(mem.total > 0 and mem.used <= mem.total and mem.free == mem.total - mem.used, "memory adds up")
    mem2 = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
    print(f"device {i} memory_v2: total={mem2.total} reserved={mem2.reserved} free={mem2.free} used={mem2.used}")
    check(mem2.total == mem.total and mem2.free + mem2.used + mem2.reserved == mem2.total, "memory v2 adds up")
    check(error_of(nv.nvmlDeviceGetMemoryInfo, h, 1) == nv.NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "memory v2 checks its version")

    util = gauge(nv.nvmlDeviceGetUtilizationRates, h)
    print(f"device {i} utilization: " + (util if isinstance(util, str) else f"gpu={util.gpu}% memory={util.memory}%"))
    if not isinstance(util, str):
        check(0 <= util.gpu <= 100 and 0 <= util.memory <= 100, "utilization is a percentage")
    print(f"device {i} temperature: {gauge(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)}")
    print(f"device {i} power_mw: {gauge(nv.nvmlDeviceGetPowerUsage, h)}")
    link = [gauge(f, h) for f in (nv.nvmlDeviceGetCurrPcieLinkGeneration, nv.nvmlDeviceGetCurrPcieLinkWidth,
                                   nv.nvmlDeviceGetMaxPcieLinkGeneration, nv.nvmlDeviceGetMaxPcieLinkWidth)]
    print(f"device {i} pcie: gen {link[0]} x{link[1]}, at most gen {link[2]} x{link[3]}")
    fabric = nv.c_nvmlGpuFabricInfo_v2_t()
    nv.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(fabric))
    links = nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
    print(f"device {i} nvlink: link 0 {gauge(nv.nvmlDeviceGetNvLinkState, h, 0)}, fabric state {fabric.state}, links {links.value.uiVal}")
    print(f"device {i} mig: {nv.nvmlDeviceGetMigMode(h)}")
    check(error_of(nv.nvmlDeviceGetTemperature, h, 7) == nv.NVML_ERROR_INVALID_ARGUMENT, "unknown sensor")

    major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
    print(f"device {i} compute_capability: {major}.{minor}")
    check(major >= 3, "compute capability")

    pci = nv.nvmlDeviceGetPciInfo(h)
    print(f"device {i} pci: bus_id={pci.busId} legacy={pci.busIdLegacy} domain={pci.domain} bus={pci.bus} device={pci.device} "
          f"pci_device_id=0x{pci.pciDeviceId:08x}")
    check(pci.busId == f"{pci.domain:08X}:{pci.bus:02X}:{pci.device:02X}.0", "bus id format")
    check(pci.busIdLegacy == f"{pci.domain:04X}:{pci.bus:02X}:{pci.device:02X}.0", "legacy bus id format")
    check(nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByPciBusId(pci.busId)) == i, "handle by PCI bus id")
    check(nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByPciBusId(pci.busIdLegacy)) == i, "handle by legacy PCI bus id")

    procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
    print(f"device {i} processes: " + ", ".join(f"pid={p.pid} used={p.usedGpuMemory}" for p in procs))
    check([p.pid for p in procs] == [os.getpid()], "this process, alone, is running")
    check(all(p.usedGpuMemory == mem.used for p in procs), "the process holds the session's memory")
    check(len(nv.nvmlDeviceGetComputeRunningProcesses_v2(h)) == 1, "processes v2")

    check(error_of(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, 0) == nv.NVML_ERROR_NOT_SUPPORTED, "no NVLink")
    return h


def used(h):
    """NVML's used memory, and the process list's."""
    procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
    check([p.pid for p in procs] == [os.getpid()], "this process, alone, is running")
    return nv.nvmlDeviceGetMemoryInfo(h).used, procs[0].usedGpuMemory


def sharing(h):
    """Allocates through libcuda.so.1, the library NVML loaded (so the same
    backend session), and checks that NVML reports the program's memory;
    then that nvmlShutdown leaves libcuda's session open. Ends with NVML
    shut down."""
    cuda = ctypes.CDLL("libcuda.so.1")
    print(f"cuda_library_path: {' '.join(loaded_libraries('libcuda', 'libpvgpu_cuda'))}")
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    size = 64 << 20
    check(cuda.cuInit(0) == 0, "cuInit")
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0, "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0, "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx) == 0, "cuCtxSetCurrent")

    before = used(h)
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0, "cuMemAlloc_v2")
    during = used(h)
    check(cuda.cuMemFree_v2(ptr) == 0, "cuMemFree_v2")
    after = used(h)
    print(f"shared_memory: before={before[0]} allocated={during[0]} freed={after[0]}")
    check(during == (before[0] + size, before[0] + size), "NVML and its process list see the program's allocation")
    check(after == before, "and see it freed")

    nv.nvmlShutdown()
    check(error_of(nv.nvmlDeviceGetCount) == nv.NVML_ERROR_UNINITIALIZED, "NVML shut down")
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0, "libcuda's session outlives NVML's shutdown")
    nv.nvmlInit()
    again = used(nv.nvmlDeviceGetHandleByIndex(0))
    print(f"reinit_memory: {again[0]}")
    check(again == (before[0] + size, before[0] + size), "NVML initialised again sees the same session")
    check(cuda.cuMemFree_v2(ptr) == 0, "cuMemFree_v2")
    nv.nvmlShutdown()
    check(cuda.cuDevicePrimaryCtxRelease_v2(dev) == 0, "cuDevicePrimaryCtxRelease_v2")


def raw_errors(h, count):
    """Calls through ctypes, where pynvml would not let a bad argument by."""
    lib = nv.nvmlLib
    buf = ctypes.create_string_buffer(4)
    check(lib.nvmlDeviceGetName(h, buf, ctypes.c_uint(4)) == nv.NVML_ERROR_INSUFFICIENT_SIZE, "short name buffer")
    check(lib.nvmlDeviceGetUUID(h, buf, ctypes.c_uint(4)) == nv.NVML_ERROR_INSUFFICIENT_SIZE, "short UUID buffer")
    check(lib.nvmlDeviceGetCount_v2(None) == nv.NVML_ERROR_INVALID_ARGUMENT, "null count")
    check(lib.nvmlDeviceGetMemoryInfo(h, None) == nv.NVML_ERROR_INVALID_ARGUMENT, "null memory")
    stray = ctypes.c_void_p(0x1234)
    n = ctypes.c_uint()
    check(lib.nvmlDeviceGetIndex(stray, ctypes.byref(n)) == nv.NVML_ERROR_INVALID_ARGUMENT, "stray handle")
    check(lib.nvmlDeviceGetIndex(None, ctypes.byref(n)) == nv.NVML_ERROR_INVALID_ARGUMENT, "null handle")
    # Asking the length of the process list.
    n = ctypes.c_uint(0)
    ret = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), None)
    check(ret == nv.NVML_ERROR_INSUFFICIENT_SIZE and n.value == 1, "process list length")


def main():
    if "--no-driver" in sys.argv:
        no_driver()
        return

    print(f"library: {'loaded' if error_of(nv.nvmlInit) is None else 'init failed'}")
    print(f"library_path: {' '.join(loaded_libraries('libnvidia-ml', 'libpvgpu_nvml'))}")
    nv.nvmlInit()  # a second initialisation is counted
    print(f"driver_version: {nv.nvmlSystemGetDriverVersion()}")
    print(f"nvml_version: {nv.nvmlSystemGetNVMLVersion()}")
    cuda = nv.nvmlSystemGetCudaDriverVersion()
    print(f"cuda_driver_version: {cuda}")
    check(cuda == nv.nvmlSystemGetCudaDriverVersion_v2(), "CUDA driver versions agree")
    check(cuda >= 12000, "CUDA 12 or later")

    count = nv.nvmlDeviceGetCount()
    print(f"device_count: {count}")
    check(count >= 1, "a device")
    handles = [device(i, count) for i in range(count)]
    raw_errors(handles[0], count)

    print(f"bad_index: {error_of(nv.nvmlDeviceGetHandleByIndex, count)}")
    check(error_of(nv.nvmlDeviceGetHandleByIndex, count) == nv.NVML_ERROR_INVALID_ARGUMENT, "bad index")
    check(error_of(nv.nvmlDeviceGetHandleByUUID, "GPU-00000000-0000-0000-0000-000000000000") == nv.NVML_ERROR_NOT_FOUND, "unknown UUID")
    check(error_of(nv.nvmlDeviceGetHandleByPciBusId, "0000:ff:1f.0") == nv.NVML_ERROR_NOT_FOUND, "unknown bus id")
    check(error_of(nv.nvmlDeviceGetHandleByPciBusId, "not a bus id") == nv.NVML_ERROR_INVALID_ARGUMENT, "malformed bus id")
    print(f"not_exported: {error_of(nv.nvmlDeviceGetFanSpeed, handles[0])}")
    check(error_of(nv.nvmlDeviceGetFanSpeed, handles[0]) == nv.NVML_ERROR_FUNCTION_NOT_FOUND, "unimplemented functions are not exported")
    check(nv.nvmlErrorString(nv.NVML_ERROR_NOT_SUPPORTED) == "Not Supported", "error string")

    nv.nvmlShutdown()
    check(nv.nvmlDeviceGetCount() == count, "still initialised once")
    nv.nvmlShutdown()
    print(f"after_shutdown: {error_of(nv.nvmlDeviceGetCount)}")
    check(error_of(nv.nvmlDeviceGetCount) == nv.NVML_ERROR_UNINITIALIZED, "uninitialised after the last shutdown")
    check(error_of(nv.nvmlShutdown) == nv.NVML_ERROR_UNINITIALIZED, "shutdown without init")

    nv.nvmlInit()
    sharing(nv.nvmlDeviceGetHandleByIndex(0))


main()
if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
print("PASS")
