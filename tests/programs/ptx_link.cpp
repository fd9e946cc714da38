// PTX JIT linking as NVIDIA's ptxjit sample and NVRTC users do it: two
// translation units compiled to relocatable PTX with NVRTC (a kernel that
// calls a device function of the other unit), linked with cuLinkCreate,
// cuLinkAddData and cuLinkComplete, loaded and run; then a link that must
// fail for an unresolved symbol, with the driver's error log.
//
//   g++ ptx_link.cpp -o ptx_link -lnvrtc -lcuda
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

static const char* kMain = R"(
extern __device__ float twice_plus(float x, float k);
extern "C" __global__ void apply(float* v, float k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = twice_plus(v[i], k);
}
)";
static const char* kHelper = R"(
__device__ float twice_plus(float x, float k) { return 2.0f * x + k; }
)";
static const char* kOrphan = R"(
extern __device__ float missing(float x);
extern "C" __global__ void orphan(float* v) { v[0] = missing(v[0]); }
)";

static std::string ptx_of(const char* src, const char* name, int major, int minor) {
    nvrtcProgram p;
    nvrtcCreateProgram(&p, src, name, 0, nullptr, nullptr);
    std::string arch = "--gpu-architecture=compute_" + std::to_string(major * 10 + minor);
    const char* opts[] = {arch.c_str(), "--relocatable-device-code=true"};
    if (nvrtcCompileProgram(p, 2, opts) != NVRTC_SUCCESS) {
        printf("NVRTC failed on %s\n", name);
        exit(1);
    }
    size_t n = 0;
    nvrtcGetPTXSize(p, &n);
    std::string ptx(n, '\0');
    nvrtcGetPTX(p, &ptx[0]);
    nvrtcDestroyProgram(&p);
    return ptx;
}

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
    std::string main_ptx = ptx_of(kMain, "main.cu", major, minor), helper_ptx = ptx_of(kHelper, "helper.cu", major, minor);

    char info[4096] = {0}, error[4096] = {0};
    float wall = -1;
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                           CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME, CU_JIT_LOG_VERBOSE};
    void* vals[] = {info, (void*)sizeof info, error, (void*)sizeof error, nullptr, (void*)1};
    CUlinkState link;
    CU(cuLinkCreate(6, opts, vals, &link));
    CU(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void*)main_ptx.c_str(), main_ptx.size() + 1, "main.ptx", 0, nullptr, nullptr));
    CU(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void*)helper_ptx.c_str(), helper_ptx.size() + 1, "helper.ptx", 0, nullptr, nullptr));
    void* cubin = nullptr;
    size_t cubin_size = 0;
    CU(cuLinkComplete(link, &cubin, &cubin_size));
    memcpy(&wall, &vals[4], sizeof wall);
    printf("linked: image %s, ELF %s, info log %s, wall time %s\n", cubin_size > 0 ? "non-empty" : "EMPTY",
           memcmp(cubin, "\x7f" "ELF", 4) == 0 ? "yes" : "no", strlen(info) > 0 ? "non-empty" : "empty",
           wall >= 0 ? "set" : "unset");
    CUmodule mod;
    CU(cuModuleLoadData(&mod, cubin));
    CU(cuLinkDestroy(link));
    CUfunction apply;
    CU(cuModuleGetFunction(&apply, mod, "apply"));
    const int n = 1000;
    std::vector<float> h(n);
    for (int i = 0; i < n; i++) h[i] = (float)i;
    CUdeviceptr d;
    CU(cuMemAlloc(&d, n * sizeof(float)));
    CU(cuMemcpyHtoD(d, h.data(), n * sizeof(float)));
    float k = 0.5f;
    int count = n;
    void* args[] = {&d, &k, &count};
    CU(cuLaunchKernel(apply, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
    CU(cuMemcpyDtoH(h.data(), d, n * sizeof(float)));
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += h[i] != 2.0f * i + 0.5f;
    printf("kernel calling the other unit's function: %s\n", wrong == 0 ? "correct" : "WRONG");

    // An unresolved symbol: the link fails and says why.
    std::string orphan = ptx_of(kOrphan, "orphan.cu", major, minor);
    error[0] = 0;
    vals[3] = (void*)sizeof error;
    CU(cuLinkCreate(4, opts, vals, &link));
    CU(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void*)orphan.c_str(), orphan.size() + 1, "orphan.ptx", 0, nullptr, nullptr));
    CUresult r = cuLinkComplete(link, &cubin, &cubin_size);
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    printf("unresolved symbol: %s, error log %s\n", name ? name : "?",
           strstr(error, "missing") ? "names the symbol" : "does not name it");
    CU(cuLinkDestroy(link));
    CU(cuMemFree(d));
    CU(cuModuleUnload(mod));
    printf("done\n");
    return wrong == 0 ? 0 : 1;
}
