// A memory pool of the program's own, as RAPIDS RMM's
// cuda_async_memory_resource and NVIDIA's streamOrderedAllocation sample
// use one: cudaMemPoolCreate with a release threshold, allocations from
// it on a stream (cudaMallocFromPoolAsync, and cudaMallocAsync once it is
// the device's current pool), its attributes (memory in use, reserved,
// high-water mark), cudaMemPoolTrimTo, a pool's size limit, and
// cudaMemPoolDestroy of the current pool. The output is compared line by
// line with the native run (mem_pool.expected); the last line is PASS.
//
// Built by nvcc like any CUDA program; its kernel is one pvgpu's host test
// double implements (by name), so CI runs it without a GPU.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                               \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            printf("FAIL: %s at line %d: %s\n", #x, __LINE__,                  \
                   cudaGetErrorName(e_));                                      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

static uint64_t attr(cudaMemPool_t pool, cudaMemPoolAttr a) {
    uint64_t v = 0;
    CHECK(cudaMemPoolGetAttribute(pool, a, &v));
    return v;
}

int main() {
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(float);
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    cudaMemPool_t dflt;
    CHECK(cudaDeviceGetDefaultMemPool(&dflt, 0));
    printf("pool created, not the default: %s\n", pool != dflt ? "yes" : "no");
    uint64_t keep = UINT64_MAX;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    printf("release threshold: %llu\n", (unsigned long long)attr(pool, cudaMemPoolAttrReleaseThreshold));
    int follow = 0;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &follow));
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &follow));
    printf("opportunistic reuse: %d\n", follow);

    std::vector<float> hx(n), hy(n);
    for (int i = 0; i < n; i++) { hx[i] = (float)(i % 1000); hy[i] = 1.0f; }
    float *x, *y;
    CHECK(cudaMallocFromPoolAsync((void **)&x, bytes, pool, s));
    CHECK(cudaMallocFromPoolAsync((void **)&y, bytes, pool, s));
    CHECK(cudaMemcpyAsync(x, hx.data(), bytes, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(y, hy.data(), bytes, cudaMemcpyHostToDevice, s));
    saxpy<<<(n + 255) / 256, 256, 0, s>>>(2.0f, x, y, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(hy.data(), y, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    bool ok = true;
    for (int i = 0; i < n; i++) ok = ok && hy[i] == 2.0f * (float)(i % 1000) + 1.0f;
    printf("saxpy over the pool's memory: %s\n", ok ? "ok" : "WRONG");
    printf("in use while allocated: %s\n", attr(pool, cudaMemPoolAttrUsedMemCurrent) >= 2 * bytes ? "at least the two buffers" : "less");
    printf("reserved covers it: %s\n", attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 2 * bytes ? "yes" : "no");
    CHECK(cudaFreeAsync(x, s));
    CHECK(cudaFreeAsync(y, s));
    CHECK(cudaStreamSynchronize(s));
    printf("in use after the frees: %llu\n", (unsigned long long)attr(pool, cudaMemPoolAttrUsedMemCurrent));
    printf("high-water mark kept: %s\n", attr(pool, cudaMemPoolAttrUsedMemHigh) >= 2 * bytes ? "yes" : "no");
    CHECK(cudaMemPoolTrimTo(pool, 0));
    printf("reserved after a trim to 0: %llu\n", (unsigned long long)attr(pool, cudaMemPoolAttrReservedMemCurrent));

    // The device's current pool: cudaMallocAsync draws from it.
    CHECK(cudaDeviceSetMemPool(0, pool));
    cudaMemPool_t cur;
    CHECK(cudaDeviceGetMemPool(&cur, 0));
    printf("current pool is the program's: %s\n", cur == pool ? "yes" : "no");
    float *z;
    CHECK(cudaMallocAsync((void **)&z, bytes, s));
    CHECK(cudaMemsetAsync(z, 0, bytes, s));
    CHECK(cudaStreamSynchronize(s));
    printf("cudaMallocAsync drew from it: %s\n", attr(pool, cudaMemPoolAttrUsedMemCurrent) >= bytes ? "yes" : "no");
    CHECK(cudaFreeAsync(z, s));
    CHECK(cudaStreamSynchronize(s));

    // A pool's size limit.
    cudaMemPoolProps small = props;
    small.maxSize = 64 << 20;
    cudaMemPool_t limited;
    CHECK(cudaMemPoolCreate(&limited, &small));
    void *a, *b = nullptr;
    CHECK(cudaMallocFromPoolAsync(&a, 48 << 20, limited, s));
    cudaError_t past = cudaMallocFromPoolAsync(&b, 48 << 20, limited, s);
    printf("a second 48 MiB from a 64 MiB pool: %s\n", cudaGetErrorName(past));
    cudaGetLastError();
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolDestroy(limited));

    // Destroying the current pool makes the default one current again.
    CHECK(cudaMemPoolDestroy(pool));
    CHECK(cudaDeviceGetMemPool(&cur, 0));
    printf("current pool after its destroy: %s\n", cur == dflt ? "the default" : "another");
    printf("destroying the default pool: %s\n", cudaGetErrorName(cudaMemPoolDestroy(dflt)));
    cudaGetLastError();
    CHECK(cudaStreamDestroy(s));
    printf("PASS\n");
    return 0;
}
