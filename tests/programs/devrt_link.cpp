// Device-side kernel launches through the JIT linker, as NVIDIA's dsl
// sample does them with libNVVM: a parent kernel compiled to relocatable
// PTX with NVRTC launches a child kernel from the device; the link takes
// the PTX and the toolkit's device runtime library, libcudadevrt.a
// (cuLinkAddFile with CU_JIT_INPUT_LIBRARY), and the program checks what
// the children wrote. A file that is no library is refused.
//
//   g++ devrt_link.cpp -o devrt_link -I$CUDA/include -lnvrtc -lcuda
// libcudadevrt.a is looked for in $CUDA_HOME/lib64 (default /usr/local/cuda).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <nvrtc.h>
#include <string>
#include <vector>

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
extern "C" __global__ void child(int* out, int base) {
    out[base + threadIdx.x] = 3 * (base + threadIdx.x) + 1;
}
extern "C" __global__ void parent(int* out) {
    if (threadIdx.x == 0) child<<<1, 32>>>(out, blockIdx.x * 32);
}
)";

int main() {
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    int major = 0, minor = 0;
    CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));

    nvrtcProgram p;
    nvrtcCreateProgram(&p, kSource, "dsl.cu", 0, nullptr, nullptr);
    std::string arch = "--gpu-architecture=compute_" + std::to_string(major * 10 + minor);
    const char* opts[] = {arch.c_str(), "--relocatable-device-code=true"};
    if (nvrtcCompileProgram(p, 2, opts) != NVRTC_SUCCESS) {
        printf("NVRTC failed\n");
        return 1;
    }
    size_t n = 0;
    nvrtcGetPTXSize(p, &n);
    std::string ptx(n, '\0');
    nvrtcGetPTX(p, &ptx[0]);
    nvrtcDestroyProgram(&p);

    const char* home = getenv("CUDA_HOME");
    std::string lib = std::string(home ? home : "/usr/local/cuda") + "/lib64/libcudadevrt.a";
    char error[4096] = {0};
    CUjit_option lopts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* lvals[] = {error, (void*)sizeof error};
    CUlinkState link;
    CU(cuLinkCreate(2, lopts, lvals, &link));
    CU(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void*)ptx.c_str(), ptx.size() + 1, "dsl.ptx", 0, nullptr, nullptr));
    CUresult added = cuLinkAddFile(link, CU_JIT_INPUT_LIBRARY, lib.c_str(), 0, nullptr, nullptr);
    if (added != CUDA_SUCCESS) {
        const char* name = nullptr;
        cuGetErrorName(added, &name);
        printf("cuLinkAddFile of %s: %s\n", lib.c_str(), name ? name : "?");
        return 1;
    }
    void* cubin = nullptr;
    size_t size = 0;
    CUresult done = cuLinkComplete(link, &cubin, &size);
    if (done != CUDA_SUCCESS) {
        printf("link failed: %s\n", error);
        return 1;
    }
    printf("linked with the device runtime library: %s\n", size > 0 ? "an image" : "EMPTY");
    CUmodule mod;
    CU(cuModuleLoadData(&mod, cubin));
    CU(cuLinkDestroy(link));
    CUfunction parent;
    CU(cuModuleGetFunction(&parent, mod, "parent"));
    const int blocks = 8, total = blocks * 32;
    CUdeviceptr d;
    CU(cuMemAlloc(&d, total * sizeof(int)));
    CU(cuMemsetD32(d, 0, total));
    void* args[] = {&d};
    CU(cuLaunchKernel(parent, blocks, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr));
    CU(cuCtxSynchronize());
    std::vector<int> h(total);
    CU(cuMemcpyDtoH(h.data(), d, total * sizeof(int)));
    int wrong = 0;
    for (int i = 0; i < total; i++) wrong += h[i] != 3 * i + 1;
    printf("%d children launched from the device wrote %d values: %s\n", blocks, total, wrong == 0 ? "correct" : "WRONG");

    // A file that is no archive is refused at once.
    CU(cuLinkCreate(0, nullptr, nullptr, &link));
    std::string self = "/proc/self/cmdline";
    CUresult bad = cuLinkAddFile(link, CU_JIT_INPUT_LIBRARY, self.c_str(), 0, nullptr, nullptr);
    printf("a file that is no library: %s\n", bad == CUDA_SUCCESS ? "accepted" : "refused");
    cuLinkDestroy(link);
    CU(cuMemFree(d));
    CU(cuModuleUnload(mod));
    printf("done\n");
    return wrong == 0 ? 0 : 1;
}
