// A __managed__ variable of a module the program loads itself, as
// NVIDIA's uvmlite sample uses one with libNVVM: NVRTC compiles a kernel
// that adds to a __managed__ array; the program loads the image with
// cuModuleLoadData, finds the array with cuModuleGetGlobal, writes it
// through its pointer from the CPU, launches the kernel, synchronises and
// reads the kernel's sums through the same pointer.
//
//   g++ managed_global.cpp -o managed_global -lnvrtc -lcuda
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <nvrtc.h>
#include <string>

#define CU(call)                                                                   \
    do {                                                                           \
        CUresult r_ = (call);                                                      \
        if (r_ != CUDA_SUCCESS) {                                                  \
            const char* n_ = nullptr;                                              \
            cuGetErrorName(r_, &n_);                                               \
            printf("CUDA error %s at %s:%d\n", n_ ? n_ : "?", __FILE__, __LINE__); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static const char* kSource = R"(
__managed__ int counts[256];
extern "C" __global__ void add(int k) {
    counts[threadIdx.x] += k * threadIdx.x;
}
)";

int main() {
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    int major = 0, minor = 0, managed = 0;
    CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CU(cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev));
    printf("managed memory: %s\n", managed ? "yes" : "no");
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));

    nvrtcProgram p;
    nvrtcCreateProgram(&p, kSource, "uvm.cu", 0, nullptr, nullptr);
    std::string arch = "--gpu-architecture=sm_" + std::to_string(major * 10 + minor);
    const char* opts[] = {arch.c_str()};
    if (nvrtcCompileProgram(p, 1, opts) != NVRTC_SUCCESS) {
        printf("NVRTC failed\n");
        return 1;
    }
    size_t n = 0;
    nvrtcGetCUBINSize(p, &n);
    std::string cubin(n, '\0');
    nvrtcGetCUBIN(p, &cubin[0]);
    nvrtcDestroyProgram(&p);

    CUmodule mod;
    CU(cuModuleLoadData(&mod, cubin.data()));
    CUdeviceptr d;
    size_t bytes = 0;
    CU(cuModuleGetGlobal(&d, &bytes, mod, "counts"));
    unsigned int is_managed = 0;
    CU(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
    printf("counts: %zu bytes, managed: %s\n", bytes, is_managed ? "yes" : "no");
    // The host pointer of managed memory is its device pointer, as NVIDIA's
    // uvmlite sample reads it.
    void* host = nullptr;
    CU(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, d));
    printf("host pointer is the device pointer: %s\n", (uintptr_t)host == (uintptr_t)d ? "yes" : "no");
    int* counts = (int*)host;
    for (int i = 0; i < 256; i++) counts[i] = i;
    CUfunction add;
    CU(cuModuleGetFunction(&add, mod, "add"));
    for (int k = 1; k <= 3; k++) {
        void* args[] = {&k};
        CU(cuLaunchKernel(add, 1, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
        CU(cuCtxSynchronize());
        long long sum = 0;
        for (int i = 0; i < 256; i++) sum += counts[i];
        printf("after kernel %d, the CPU reads a sum of %lld\n", k, sum);
        counts[0] += 1000;
    }
    CU(cuModuleUnload(mod));
    printf("done\n");
    return 0;
}
