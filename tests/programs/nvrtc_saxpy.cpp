// Runtime compilation with NVRTC, loaded and launched with the driver API
// (as NVIDIA's NVRTC samples do): the program compiles for the GPU the
// driver reports.
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <nvrtc.h>
#include <vector>

#define NV(x)                                                                  \
    do {                                                                       \
        nvrtcResult r_ = (x);                                                  \
        if (r_ != NVRTC_SUCCESS) {                                             \
            printf("NVRTC error %s at line %d\n", nvrtcGetErrorString(r_), __LINE__); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)
#define CU(x)                                                                  \
    do {                                                                       \
        CUresult r_ = (x);                                                     \
        if (r_ != CUDA_SUCCESS) {                                              \
            const char *s_;                                                    \
            cuGetErrorName(r_, &s_);                                           \
            printf("CUDA error %s at line %d\n", s_, __LINE__);                \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static const char *source = R"(
extern "C" __global__ void saxpy(float a, const float *x, float *y, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
)";

int main() {
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    int major = 0, minor = 0;
    CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    nvrtcProgram prog;
    NV(nvrtcCreateProgram(&prog, source, "saxpy.cu", 0, nullptr, nullptr));
    char arch[32];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
    const char *opts[] = {arch};
    NV(nvrtcCompileProgram(prog, 1, opts));
    size_t size = 0;
    NV(nvrtcGetCUBINSize(prog, &size));
    std::vector<char> cubin(size);
    NV(nvrtcGetCUBIN(prog, cubin.data()));
    NV(nvrtcDestroyProgram(&prog));
    printf("compiled for sm_%d%d\n", major, minor);
    CUcontext ctx;
    CUctxCreateParams params = {};
    CU(cuCtxCreate(&ctx, &params, 0, dev));
    CUmodule mod;
    CUfunction fn;
    CU(cuModuleLoadData(&mod, cubin.data()));
    CU(cuModuleGetFunction(&fn, mod, "saxpy"));
    const size_t n = 1 << 16;
    std::vector<float> hx(n), hy(n);
    for (size_t i = 0; i < n; i++) {
        hx[i] = (float)i;
        hy[i] = 1.0f;
    }
    CUdeviceptr x, y;
    CU(cuMemAlloc(&x, n * 4));
    CU(cuMemAlloc(&y, n * 4));
    CU(cuMemcpyHtoD(x, hx.data(), n * 4));
    CU(cuMemcpyHtoD(y, hy.data(), n * 4));
    float a = 2.0f;
    size_t nn = n;
    void *args[] = {&a, &x, &y, &nn};
    CU(cuLaunchKernel(fn, n / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(hy.data(), y, n * 4));
    bool ok = true;
    for (size_t i = 0; i < n; i++) ok &= hy[i] == 2.0f * i + 1.0f;
    CU(cuMemFree(x));
    CU(cuMemFree(y));
    CU(cuModuleUnload(mod));
    CU(cuCtxDestroy(ctx));
    printf(ok ? "Test PASSED\n" : "Test FAILED\n");
    return ok ? 0 : 1;
}
