// A CUDA runtime-API program as users write them, built with nvcc (static
// or shared cudart) and run unchanged through pvgpu's drop-in libcuda. Its
// kernels are those the backend's host test double implements (same names
// and parameters as tests/kernels/kernels.cu), so CI runs it without a GPU;
// on a GPU it runs as is.
//
// Each check prints "ok <name>" or "FAIL <name>: <why>"; the last line is
// "PASS" when every check passed. Kernel printf output is framed by
// "before printf" and "after printf" so the caller can check it arrives in
// order with the program's own output.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

extern "C" {
__global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void mat_sum(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
__device__ float pvgpu_scale = 3.0f;
__global__ void scale_by_global(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= pvgpu_scale;
}
__global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
__global__ void poke(int *p) { *(volatile int *)p = 1; }
__device__ unsigned pvgpu_printf_turn;

// Blocks print in turn (the GPU starts them in any order, and the lines
// appear in the order they were printed), so the output is the same on
// every run; the program launches it once.
__global__ void pvgpu_printf(int tag) {
    if (threadIdx.x == 0)
        while (atomicAdd(&pvgpu_printf_turn, 0) != blockIdx.x) {
        }
    __syncthreads();
    printf("pvgpu_printf tag %d block %d thread %d\n", tag, (int)blockIdx.x, (int)threadIdx.x);
    __syncthreads();
    __threadfence();
    if (threadIdx.x == 0) atomicAdd(&pvgpu_printf_turn, 1);
}
}

static int failures = 0;

static void check(bool ok, const char *name, const char *why) {
    if (ok) {
        printf("ok %s\n", name);
    } else {
        printf("FAIL %s: %s\n", name, why);
        failures++;
    }
}

static bool cuda_ok(cudaError_t e, const char *name) {
    if (e != cudaSuccess) {
        printf("FAIL %s: %s (%d)\n", name, cudaGetErrorString(e), (int)e);
        failures++;
        return false;
    }
    return true;
}

#define CK(call) cuda_ok((call), #call)

static const int N = 4096;

static void device_queries() {
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    check(count >= 1, "device count", "no device");
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    check(strlen(p.name) > 0 && p.totalGlobalMem > 0 && p.major >= 3, "device properties", p.name);
    int driver = 0, runtime = 0;
    CK(cudaDriverGetVersion(&driver));
    CK(cudaRuntimeGetVersion(&runtime));
    check(driver >= 13000 && runtime >= 13000, "versions", "driver or runtime below 13.0");
    int warp = 0;
    CK(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, 0));
    check(warp == 32, "attribute", "warp size is not 32");
    CK(cudaSetDevice(0));
}

static void copies_and_launches() {
    float *hx = (float *)malloc(N * 4), *hy = (float *)malloc(N * 4), *want = (float *)malloc(N * 4);
    for (int i = 0; i < N; i++) {
        hx[i] = (float)i;
        hy[i] = (float)(2 * i);
        want[i] = 2.5f * hx[i] + hy[i];
    }
    float *x, *y, *z;
    CK(cudaMalloc(&x, N * 4));
    CK(cudaMalloc(&y, N * 4));
    CK(cudaMalloc(&z, N * 4));
    CK(cudaMemcpy(x, hx, N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(y, hy, N * 4, cudaMemcpyHostToDevice));
    saxpy<<<(N + 255) / 256, 256>>>(2.5f, x, y, N);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(hy, y, N * 4, cudaMemcpyDeviceToHost));
    check(memcmp(hy, want, N * 4) == 0, "saxpy <<<>>>", "wrong result");

    CK(cudaMemcpy(z, y, N * 4, cudaMemcpyDeviceToDevice));
    CK(cudaMemset(y, 0, N * 4));
    mat_sum<<<N / 256, 256>>>(z, y, x, N);
    CK(cudaMemcpy(hx, x, N * 4, cudaMemcpyDeviceToHost));
    check(memcmp(hx, want, N * 4) == 0, "memset, device copy, mat_sum", "wrong result");

    cudaPointerAttributes pa;
    CK(cudaPointerGetAttributes(&pa, x));
    check(pa.type == cudaMemoryTypeDevice && pa.devicePointer == x, "pointer attributes", "not device memory");

    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, saxpy));
    check(fa.maxThreadsPerBlock > 0, "function attributes", "no max threads");
    int blocks = 0, min_grid = 0, block = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, saxpy, 256, 0));
    CK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, saxpy));
    check(blocks > 0 && block > 0, "occupancy", "zero");

    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(z));
    free(hx);
    free(hy);
    free(want);
}

static void symbols() {
    float *x;
    float h[256], two = 2.0f, back = 0;
    for (int i = 0; i < 256; i++) h[i] = (float)i;
    CK(cudaMalloc(&x, sizeof h));
    CK(cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice));
    CK(cudaMemcpyFromSymbol(&back, pvgpu_scale, sizeof back));
    check(back == 3.0f, "read a __device__ variable", "not its initial value");
    CK(cudaMemcpyToSymbol(pvgpu_scale, &two, sizeof two));
    scale_by_global<<<1, 256>>>(x, 256);
    CK(cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost));
    check(h[10] == 20.0f && h[255] == 510.0f, "write a __device__ variable, use it", "wrong scale");
    CK(cudaFree(x));
}

struct Order {
    volatile int seen;
    volatile float value;
    float *pinned;
};

static void CUDART_CB host_fn(void *p) {
    Order *o = (Order *)p;
    o->value = o->pinned[7];
    o->seen++;
}

static void CUDART_CB stream_cb(cudaStream_t, cudaError_t status, void *p) {
    Order *o = (Order *)p;
    if (status == cudaSuccess) o->seen += 10;
}

static void streams_events_pinned_callbacks() {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *pinned;
    CK(cudaMallocHost(&pinned, N * 4));
    for (int i = 0; i < N; i++) pinned[i] = (float)i;
    float *x, *y;
    CK(cudaMalloc(&x, N * 4));
    CK(cudaMalloc(&y, N * 4));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    CK(cudaMemcpyAsync(x, pinned, N * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(y, 0, N * 4, s));
    saxpy<<<N / 256, 256, 0, s>>>(3.0f, x, y, N);
    CK(cudaMemcpyAsync(pinned, y, N * 4, cudaMemcpyDeviceToHost, s));
    // The host function must see the copy before it, and the work after it
    // must wait for it.
    Order o = {0, -1.0f, pinned};
    CK(cudaLaunchHostFunc(s, host_fn, &o));
    CK(cudaStreamAddCallback(s, stream_cb, &o, 0));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    CK(cudaStreamSynchronize(s));
    check(o.value == 21.0f, "host function after the copy before it", "did not see the copied data");
    check(o.seen == 11, "host function and stream callback ran once each", "wrong count");
    float ms = -1;
    CK(cudaEventElapsedTime(&ms, a, b));
    check(ms >= 0, "event timing", "negative");
    check(cudaStreamQuery(s) == cudaSuccess, "stream query", "busy after synchronize");

    float *host2;
    CK(cudaHostAlloc(&host2, 1024, cudaHostAllocPortable));
    unsigned int flags = 99;
    CK(cudaHostGetFlags(&flags, host2));
    // The driver reports flags of its own choosing (a portable allocation may
    // come back without the portable bit), so only that it answered is checked.
    check(flags != 99, "host alloc flags", "flags not written");
    int on_stack = 0;
    check(cudaHostGetFlags(&flags, &on_stack) == cudaErrorInvalidValue, "host alloc flags",
          "pageable memory reported as pinned");
    cudaGetLastError();
    CK(cudaFreeHost(host2));

    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFreeHost(pinned));
    CK(cudaStreamDestroy(s));
}

static void stream_ordered_allocation() {
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    unsigned long long threshold = 64 << 20, got = 0;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got));
    check(got == threshold, "pool release threshold", "not what was set");
    float *x, *y;
    float h[N];
    for (int i = 0; i < N; i++) h[i] = 1.0f;
    CK(cudaMallocAsync(&x, N * 4, s));
    CK(cudaMallocFromPoolAsync(&y, N * 4, pool, s));
    CK(cudaMemcpyAsync(x, h, N * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(y, h, N * 4, cudaMemcpyHostToDevice, s));
    saxpy<<<N / 256, 256, 0, s>>>(4.0f, x, y, N);
    CK(cudaMemcpyAsync(h, y, N * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaFreeAsync(x, s));
    CK(cudaFreeAsync(y, s));
    CK(cudaStreamSynchronize(s));
    check(h[0] == 5.0f && h[N - 1] == 5.0f, "cudaMallocAsync, use, cudaFreeAsync", "wrong result");
    CK(cudaStreamDestroy(s));
}

static void pitched() {
    const int W = 100, H = 37;
    float *d;
    size_t pitch = 0;
    CK(cudaMallocPitch(&d, &pitch, W * 4, H));
    check(pitch >= W * 4, "cudaMallocPitch", "pitch narrower than a row");
    static float h[H][W], back[H][W];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) h[y][x] = (float)(y * 1000 + x);
    CK(cudaMemset2D(d, pitch, 0xff, W * 4, H));
    CK(cudaMemcpy2D(d, pitch, h, W * 4, (W - 2) * 4, H, cudaMemcpyHostToDevice));
    CK(cudaMemcpy2D(back, W * 4, d, pitch, W * 4, H, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int y = 0; y < H; y++) {
        for (int x = 0; x < W - 2; x++) ok &= back[y][x] == h[y][x];
        unsigned int tail;
        memcpy(&tail, &back[y][W - 1], 4);
        ok &= tail == 0xffffffffu;
    }
    check(ok, "cudaMemcpy2D and cudaMemset2D", "wrong rows");
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    float *e;
    size_t pitch2 = 0;
    CK(cudaMallocPitch(&e, &pitch2, W * 4, H));
    CK(cudaMemcpy2DAsync(e, pitch2, d, pitch, W * 4, H, cudaMemcpyDeviceToDevice, s));
    memset(back, 0, sizeof back);
    CK(cudaMemcpy2DAsync(back, W * 4, e, pitch2, W * 4, H, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    check(back[H - 1][W - 3] == h[H - 1][W - 3], "cudaMemcpy2DAsync device to device and back", "wrong rows");
    CK(cudaFree(d));
    CK(cudaFree(e));
    CK(cudaStreamDestroy(s));
}

static void kernel_printf() {
    printf("before printf\n");
    pvgpu_printf<<<2, 2>>>(7);
    CK(cudaDeviceSynchronize());
    printf("after printf\n");
}

static void launch_forms() {
    float *x, *y;
    float h[256];
    for (int i = 0; i < 256; i++) h[i] = 1.0f;
    CK(cudaMalloc(&x, sizeof h));
    CK(cudaMalloc(&y, sizeof h));
    CK(cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(y, h, sizeof h, cudaMemcpyHostToDevice));
    float a = 1.0f;
    int n = 256;
    void *args[] = {&a, &x, &y, &n};
    CK(cudaLaunchKernel((const void *)saxpy, dim3(1), dim3(256), args, 0, 0));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(256);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributePriority;
    attr[0].val.priority = 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, saxpy, a, (const float *)x, y, n));
    CK(cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost));
    check(h[0] == 3.0f && h[255] == 3.0f, "cudaLaunchKernel and cudaLaunchKernelEx", "wrong result");
    CK(cudaFree(x));
    CK(cudaFree(y));
}

static void errors() {
    float *x;
    CK(cudaMalloc(&x, 1024));
    cudaError_t e = cudaFree((void *)0x1234);
    check(e == cudaErrorInvalidValue, "free of an address never allocated", cudaGetErrorName(e));
    cudaGetLastError();
    saxpy<<<0, 256>>>(1.0f, x, x, 0);
    e = cudaGetLastError();
    check(e != cudaSuccess, "launch with an empty grid fails at the launch", "no error");
    printf("  empty grid: %s\n", cudaGetErrorName(e));
    char big[8192];
    e = cudaMemcpy(x, big, sizeof big, cudaMemcpyHostToDevice);
    check(e != cudaSuccess, "copy past the end of an allocation", "succeeded");
    cudaGetLastError();
    CK(cudaFree(x));
}

static void reset_and_go_on() {
    CK(cudaDeviceReset());
    float *x;
    check(cudaMalloc(&x, 4096) == cudaSuccess, "allocation after cudaDeviceReset", "failed");
    CK(cudaFree(x));
}

static void kernel_fault() {
    poke<<<1, 1>>>((int *)0x10);
    cudaError_t e = cudaDeviceSynchronize();
    check(e == cudaErrorIllegalAddress, "a faulting kernel's error", cudaGetErrorName(e));
}

int main() {
    device_queries();
    copies_and_launches();
    symbols();
    streams_events_pinned_callbacks();
    stream_ordered_allocation();
    pitched();
    kernel_printf();
    launch_forms();
    errors();
    reset_and_go_on();
    kernel_fault();
    if (failures == 0) {
        printf("PASS\n");
        return 0;
    }
    printf("%d checks failed\n", failures);
    return 1;
}
