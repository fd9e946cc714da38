// Page-locked host memory the device reaches through a pointer, as
// programs use it: cudaHostAlloc(Mapped) and cudaHostGetDevicePointer; a
// cudaMallocHost pointer handed straight to a kernel (unified addressing,
// as XLA hands its timing semaphore); repeated rounds where the program
// writes, a kernel reads and writes, and the program reads back. Through
// pvgpu this must compute the same over every transport: over TCP nothing
// is shared, and the drop-in library mirrors the memory in the backend.
//
// A kernel's write seen by the program polling the memory without any
// CUDA call (over TCP a thread of the library keeps the mirror coherent
// while work is in flight).
//
// With --spin (GPU only: the kernels are not ones the host test double
// implements), XLA's delay-kernel pattern: a kernel spins on a flag in
// page-locked memory that the program sets only after launching it, then
// synchronises; and a kernel and the program passing a counter back and
// forth through mapped memory, neither making a call.
//
// Each check prints "ok <name>" or "FAIL <name>"; the last line is PASS.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

extern "C" {
__global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void poke(int *p) { *(volatile int *)p = 1; }
// Waits (up to about a second) for *flag to become 1, then reports what
// it saw: 1 released, 2 timed out.
__global__ void wait_flag(volatile int *flag, int *seen) {
    long long start = clock64();
    while (*flag != 1 && clock64() - start < 2000000000LL) {
    }
    *seen = *flag == 1 ? 1 : 2;
}
// Passes a counter with the program: writes r to *out, waits for the
// program to echo it in *in, `rounds` times (each wait up to about a
// second); *done says how many rounds passed.
__global__ void ping_pong(volatile int *out, volatile int *in, int rounds, int *done) {
    int r = 1;
    for (; r <= rounds; r++) {
        *out = r;
        __threadfence_system();
        long long start = clock64();
        while (*in != r && clock64() - start < 2000000000LL) {
        }
        if (*in != r) break;
    }
    *done = r - 1;
}
}

// Waits up to 10 s for *p to become `want`, reading it as the program
// would (no CUDA call); whether it did.
static bool poll_for(volatile int *p, int want) {
    auto start = std::chrono::steady_clock::now();
    while (*p != want) {
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) return false;
    }
    return true;
}

#define CHECK(x)                                                               \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            printf("FAIL %s at line %d: %s\n", #x, __LINE__,                   \
                   cudaGetErrorName(e_));                                      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static bool all_ok = true;

static void report(const char *name, bool ok) {
    printf("%s %s\n", ok ? "ok" : "FAIL", name);
    all_ok = all_ok && ok;
}

static const int N = 1 << 12;

int main(int argc, char **argv) {
    bool spin = argc > 1 && strcmp(argv[1], "--spin") == 0;
    CHECK(cudaFree(0));

    // cudaHostAllocMapped and its device pointer.
    float *h;
    CHECK(cudaHostAlloc((void **)&h, 2 * N * sizeof(float), cudaHostAllocMapped));
    float *d;
    CHECK(cudaHostGetDevicePointer((void **)&d, h, 0));
    bool ok = true;
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < N; i++) {
            h[i] = (float)(i % 13) * round;
            h[N + i] = 1.0f;
        }
        saxpy<<<N / 256, 256>>>(2.0f, d, d + N, N);
        CHECK(cudaDeviceSynchronize());
        for (int i = 0; i < N; i++) ok = ok && h[N + i] == 2.0f * (float)(i % 13) * round + 1.0f;
    }
    report("mapped memory through its device pointer, 3 rounds", ok);

    // The host pointer of cudaMallocHost memory, straight to kernels.
    float *u;
    CHECK(cudaMallocHost((void **)&u, 2 * N * sizeof(float)));
    for (int i = 0; i < N; i++) {
        u[i] = (float)i;
        u[N + i] = 0.5f;
    }
    saxpy<<<N / 256, 256>>>(1.0f, u, u + N, N);
    CHECK(cudaStreamSynchronize(0));
    ok = true;
    for (int i = 0; i < N; i++) ok = ok && u[N + i] == (float)i + 0.5f;
    report("host pointer of page-locked memory in a kernel", ok);

    // A flag the kernel sets, read by the program after an event.
    int *flag;
    CHECK(cudaMallocHost((void **)&flag, sizeof(int)));
    *flag = 0;
    cudaEvent_t e;
    CHECK(cudaEventCreate(&e));
    poke<<<1, 1>>>(flag);
    CHECK(cudaEventRecord(e, 0));
    CHECK(cudaEventSynchronize(e));
    report("a kernel's write seen after the event", *flag == 1);

    // The program polls for a kernel's write, making no call.
    *flag = 0;
    poke<<<1, 1>>>(flag);
    report("a kernel's write seen while polling, without a call", poll_for(flag, 1));
    CHECK(cudaDeviceSynchronize());

    // Copies into memory a kernel reads later, and back.
    float *dev;
    CHECK(cudaMalloc((void **)&dev, N * sizeof(float)));
    CHECK(cudaMemcpy(dev, u + N, N * sizeof(float), cudaMemcpyDefault));
    for (int i = 0; i < N; i++) u[N + i] = 0.0f;
    CHECK(cudaMemcpy(u + N, dev, N * sizeof(float), cudaMemcpyDeviceToHost));
    ok = true;
    for (int i = 0; i < N; i++) ok = ok && u[N + i] == (float)i + 0.5f;
    report("copies beside it", ok);

    if (spin) {
        // XLA's delay kernel: the flag is set after the launch, while the
        // kernel spins; the kernel must see it.
        int *sem, *seen;
        CHECK(cudaMallocHost((void **)&sem, sizeof(int)));
        CHECK(cudaMallocHost((void **)&seen, sizeof(int)));
        *sem = 0;
        *seen = 0;
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s));
        wait_flag<<<1, 1, 0, s>>>(sem, seen);
        CHECK(cudaEventRecord(e, s));
        *sem = 1;
        CHECK(cudaEventSynchronize(e));
        report("a kernel spinning on a flag set after its launch", *seen == 1);
        // A counter passed back and forth, no call on either side.
        int *to_host, *to_device, *done;
        CHECK(cudaMallocHost((void **)&to_host, sizeof(int)));
        CHECK(cudaMallocHost((void **)&to_device, sizeof(int)));
        CHECK(cudaMallocHost((void **)&done, sizeof(int)));
        *to_host = *to_device = *done = 0;
        const int rounds = 20;
        ping_pong<<<1, 1, 0, s>>>(to_host, to_device, rounds, done);
        bool passed = true;
        for (int r = 1; r <= rounds && passed; r++) {
            passed = poll_for(to_host, r);
            *(volatile int *)to_device = r;
        }
        CHECK(cudaStreamSynchronize(s));
        report("a counter passed with a kernel, no call on either side", passed && *done == rounds);
        CHECK(cudaFreeHost(to_host));
        CHECK(cudaFreeHost(to_device));
        CHECK(cudaFreeHost(done));
        CHECK(cudaFreeHost(sem));
        CHECK(cudaFreeHost(seen));
        CHECK(cudaStreamDestroy(s));
    }
    CHECK(cudaFree(dev));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFreeHost(u));
    CHECK(cudaFreeHost(flag));
    CHECK(cudaEventDestroy(e));
    printf("%s\n", all_ok ? "PASS" : "FAIL");
    return all_ok ? 0 : 1;
}
