// Managed memory as the runtime API gives it (cudaMallocManaged): the CPU
// initialises arrays, a kernel reads and writes them, the CPU reads the
// results after synchronising, changes a few elements and a second launch
// sees them; copies, memsets, prefetches and advice on managed memory;
// 2D copies naming managed memory as host memory; many small allocations
// side by side; pointer attributes; __managed__
// variables written by the CPU and by a kernel; with concurrent managed
// access, the CPU using managed memory while a kernel runs on another
// stream (other allocations, and the other half of the kernel's own), and
// threads each working on their own allocation with the CPU and a stream
// of their own at once. Every result
// is checked against the CPU; the output is compared line by line with the
// native run (managed.expected); the last line is PASS.
//
// Built by nvcc like any CUDA program; its kernel is one pvgpu's host test
// double implements (by name), so CI runs it without a GPU.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
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

__managed__ float factor = 3.0f;
__managed__ float result[4] = {1.0f, 1.0f, 1.0f, 1.0f};

static bool all_ok = true;

static void verdict(const char *what, bool ok) {
    all_ok = all_ok && ok;
    printf("%-52s %s\n", what, ok ? "ok" : "MISMATCH");
}

static const int N = 1 << 20;

static void kernels_and_cpu() {
    float *x, *y;
    CHECK(cudaMallocManaged(&x, N * sizeof(float)));
    CHECK(cudaMallocManaged(&y, N * sizeof(float)));
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 1000);
        y[i] = 1.0f;
    }
    saxpy<<<(N + 255) / 256, 256>>>(2.0f, x, y, N);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    bool ok = true;
    for (int i = 0; i < N; i++) ok = ok && y[i] == 2.0f * (i % 1000) + 1.0f;
    verdict("kernel sees the CPU's writes, CPU sees the kernel's", ok);
    // A few changes by the CPU, read by the next launch.
    y[5] = 100.0f;
    y[N - 1] = -7.0f;
    x[3000] = 0.5f;
    saxpy<<<(N + 255) / 256, 256>>>(1.0f, x, y, N);
    CHECK(cudaDeviceSynchronize());
    ok = y[5] == 105.0f && y[N - 1] == -7.0f + 575.0f && y[3000] == 2.0f * 0 + 1.0f + 0.5f && y[7] == 3.0f * 7 + 1.0f;
    verdict("the next launch sees the CPU's changes", ok);
    // Copies: managed to ordinary host memory and to device memory.
    std::vector<float> h(N);
    CHECK(cudaMemcpy(h.data(), y, N * sizeof(float), cudaMemcpyDefault));
    ok = true;
    for (int i = 0; i < N; i++) ok = ok && h[i] == y[i];
    verdict("cudaMemcpy from managed memory", ok);
    float *d;
    CHECK(cudaMalloc(&d, N * sizeof(float)));
    CHECK(cudaMemcpy(d, x, N * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(y, 0, N * sizeof(float)));
    CHECK(cudaMemcpy(y, d, 16 * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaDeviceSynchronize());
    ok = y[0] == 0.0f && y[1] == 1.0f && y[15] == 15.0f && y[16] == 0.0f && y[N - 1] == 0.0f;
    verdict("memset and copies into managed memory", ok);
    CHECK(cudaFree(d));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
}

static void pitched_copies() {
    // Managed memory named as host memory by 2D copies, both ways.
    float *m, *d;
    size_t pitch;
    CHECK(cudaMallocManaged(&m, 64 * sizeof(float)));
    for (int i = 0; i < 64; i++) m[i] = (float)i;
    CHECK(cudaMallocPitch(&d, &pitch, 8 * sizeof(float), 8));
    CHECK(cudaMemcpy2D(d, pitch, m, 8 * sizeof(float), 8 * sizeof(float), 8, cudaMemcpyHostToDevice));
    std::vector<float> h(64);
    CHECK(cudaMemcpy2D(h.data(), 8 * sizeof(float), d, pitch, 8 * sizeof(float), 8, cudaMemcpyDeviceToHost));
    CHECK(cudaMemset(m, 0, 64 * sizeof(float)));
    CHECK(cudaMemcpy2D(m, 8 * sizeof(float), d, pitch, 8 * sizeof(float), 8, cudaMemcpyDeviceToHost));
    CHECK(cudaDeviceSynchronize());
    bool ok = true;
    for (int i = 0; i < 64; i++) ok = ok && h[i] == (float)i && m[i] == (float)i;
    verdict("2D copies from and to managed memory", ok);
    CHECK(cudaFree(d));
    CHECK(cudaFree(m));
}

static void prefetch_advise_attributes() {
    int dev = 0, managed = 0;
    CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, dev));
    printf("managed memory supported: %d\n", managed);
    float *a;
    CHECK(cudaMallocManaged(&a, 4096 * sizeof(float)));
    for (int i = 0; i < 4096; i++) a[i] = (float)i;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamAttachMemAsync(s, a, 0, cudaMemAttachGlobal));
    cudaMemLocation loc;
    loc.type = cudaMemLocationTypeDevice;
    loc.id = dev;
    CHECK(cudaMemAdvise(a, 4096 * sizeof(float), cudaMemAdviseSetReadMostly, loc));
    CHECK(cudaMemAdvise(a, 4096 * sizeof(float), cudaMemAdviseUnsetReadMostly, loc));
    CHECK(cudaMemPrefetchAsync(a, 4096 * sizeof(float), loc, 0, s));
    saxpy<<<16, 256, 0, s>>>(1.0f, a, a, 4096);
    CHECK(cudaStreamSynchronize(s));
    bool ok = true;
    for (int i = 0; i < 4096; i++) ok = ok && a[i] == 2.0f * i;
    verdict("prefetched, advised, attached, computed on a stream", ok);
    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, a + 10));
    printf("pointer type: %d (managed %d), device %d\n", (int)pa.type, (int)cudaMemoryTypeManaged, pa.device);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(a));
}

// With concurrent managed access (the H100 and H200 report it), the CPU
// may use managed memory while a kernel runs: here it fills one allocation
// and the second half of another while a kernel on a non-blocking stream
// triples the first half, and synchronises with that stream only.
static void concurrent_access() {
    int dev = 0, concurrent = 0;
    CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, dev));
    printf("concurrent managed access: %d\n", concurrent);
    if (!concurrent) return;
    const int n = 1 << 16, half = n / 2;
    float *a, *b;
    CHECK(cudaMallocManaged(&a, n * sizeof(float)));
    CHECK(cudaMallocManaged(&b, n * sizeof(float)));
    for (int i = 0; i < n; i++) a[i] = (float)i;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    saxpy<<<half / 256, 256, 0, s>>>(2.0f, a, a, half);
    for (int i = 0; i < n; i++) b[i] = (float)(n - i);
    for (int i = half; i < n; i++) a[i] = -1.0f * i;
    float sum = 0;
    for (int i = 0; i < 4; i++) sum += b[i];
    CHECK(cudaStreamSynchronize(s));
    bool ok = sum == 4.0f * n - 6.0f;
    for (int i = 0; i < half; i++) ok = ok && a[i] == 3.0f * i;
    for (int i = half; i < n; i++) ok = ok && a[i] == -1.0f * i;
    verdict("the CPU works on managed memory while a kernel runs", ok);
    saxpy<<<n / 256, 256, 0, s>>>(1.0f, b, b, n);
    CHECK(cudaStreamSynchronize(s));
    ok = true;
    for (int i = 0; i < n; i++) ok = ok && b[i] == 2.0f * (n - i);
    verdict("and the next kernel sees what it wrote", ok);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
}

// Four threads, each with an allocation and a non-blocking stream of its
// own: the CPU fills it, a kernel doubles it, the CPU checks and refills,
// while the other threads submit work and touch their own pages.
static void threads_at_once() {
    const int n = 3 * 4096 + 100, rounds = 20, threads = 4;
    std::vector<int> good(threads, 1);
    std::vector<std::thread> ts;
    for (int k = 0; k < threads; k++) {
        ts.emplace_back([&good, k, n, rounds] {
            float *a;
            cudaStream_t s;
            if (cudaMallocManaged(&a, n * sizeof(float)) != cudaSuccess ||
                cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
                good[k] = 0;
                return;
            }
            for (int r = 0; r < rounds; r++) {
                for (int i = 0; i < n; i++) a[i] = (float)(k * 1000 + r + i % 97);
                saxpy<<<(n + 255) / 256, 256, 0, s>>>(1.0f, a, a, n);
                if (cudaStreamSynchronize(s) != cudaSuccess) good[k] = 0;
                for (int i = 0; i < n; i++)
                    if (a[i] != 2.0f * (k * 1000 + r + i % 97)) good[k] = 0;
            }
            cudaStreamDestroy(s);
            cudaFree(a);
        });
    }
    for (auto &t : ts) t.join();
    bool ok = true;
    for (int k = 0; k < threads; k++) ok = ok && good[k];
    verdict("four threads, each its own memory and stream", ok);
}

static void many_small() {
    // 64 allocations of 100 bytes each, written by the CPU, one kernel each.
    float *p[64];
    for (int k = 0; k < 64; k++) {
        CHECK(cudaMallocManaged(&p[k], 25 * sizeof(float)));
        for (int i = 0; i < 25; i++) p[k][i] = (float)(k + i);
    }
    for (int k = 0; k < 64; k++) saxpy<<<1, 32>>>(1.0f, p[k], p[k], 25);
    CHECK(cudaDeviceSynchronize());
    bool ok = true;
    for (int k = 0; k < 64; k++)
        for (int i = 0; i < 25; i++) ok = ok && p[k][i] == 2.0f * (k + i);
    verdict("64 small allocations side by side", ok);
    for (int k = 0; k < 64; k++) CHECK(cudaFree(p[k]));
}

static void managed_variables() {
    bool ok = factor == 3.0f && result[2] == 1.0f;
    verdict("__managed__ variables start as the program says", ok);
    factor = 5.0f;
    // result[0] = 2 * factor + result[0], on the device.
    saxpy<<<1, 1>>>(2.0f, &factor, result, 1);
    CHECK(cudaDeviceSynchronize());
    ok = result[0] == 11.0f && result[1] == 1.0f;
    verdict("a kernel reads and writes __managed__ variables", ok);
    result[3] = 7.0f;
    saxpy<<<1, 4>>>(1.0f, result, result, 4);
    CHECK(cudaDeviceSynchronize());
    ok = result[0] == 22.0f && result[1] == 2.0f && result[3] == 14.0f && factor == 5.0f;
    verdict("and sees the CPU's later writes", ok);
}

int main() {
    managed_variables();
    kernels_and_cpu();
    pitched_copies();
    prefetch_advise_attributes();
    concurrent_access();
    threads_at_once();
    many_small();
    printf("%s\n", all_ok ? "PASS" : "FAIL");
    return all_ok ? 0 : 1;
}
