// The driver API as its samples use it: CUDA 13's cuCtxCreate with zeroed
// creation parameters, a module loaded from an nvcc-built fatbin file, and
// one context handed from thread to thread with cuCtxPopCurrent and
// cuCtxPushCurrent (the "contexts migrating between threads" pattern).
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <thread>
#include <vector>

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

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: %s kernels.fatbin\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    std::vector<char> image(len);
    if (fread(image.data(), 1, len, f) != (size_t)len) return 2;
    fclose(f);
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CUctxCreateParams params = {};
    CU(cuCtxCreate(&ctx, &params, 0, dev));
    CUmodule mod;
    CU(cuModuleLoadData(&mod, image.data()));
    CUfunction mat_sum;
    CU(cuModuleGetFunction(&mat_sum, mod, "mat_sum"));
    CU(cuCtxPopCurrent(nullptr));
    const int n = 1 << 16, workers = 4;
    bool ok = true;
    for (int w = 0; w < workers; w++) {
        std::thread t([&, w] {
            CU(cuCtxPushCurrent(ctx));
            std::vector<float> a(n, (float)w), b(n, 1.0f), c(n);
            CUdeviceptr da, db, dc;
            CU(cuMemAlloc(&da, n * 4));
            CU(cuMemAlloc(&db, n * 4));
            CU(cuMemAlloc(&dc, n * 4));
            CU(cuMemcpyHtoD(da, a.data(), n * 4));
            CU(cuMemcpyHtoD(db, b.data(), n * 4));
            int nn = n;
            void *args[] = {&da, &db, &dc, &nn};
            CU(cuLaunchKernel(mat_sum, n / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
            CU(cuMemcpyDtoH(c.data(), dc, n * 4));
            for (int i = 0; i < n; i++) ok &= c[i] == w + 1.0f;
            CU(cuMemFree(da));
            CU(cuMemFree(db));
            CU(cuMemFree(dc));
            CUcontext popped;
            CU(cuCtxPopCurrent(&popped));
            ok &= popped == ctx;
        });
        t.join();
        printf("worker %d done\n", w);
    }
    CU(cuCtxPushCurrent(ctx));
    CU(cuModuleUnload(mod));
    CU(cuCtxDestroy(ctx));
    printf(ok ? "Test PASSED\n" : "Test FAILED\n");
    return ok ? 0 : 1;
}
