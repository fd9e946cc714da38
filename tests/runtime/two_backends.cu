// One program, the GPUs of several backends (PVGPU_BACKEND=a,b): it sees
// their devices numbered in the list's order, computes on each with the
// runtime API as on one machine's GPUs (cudaSetDevice, cudaMalloc, <<<>>>,
// streams and events), and copies between devices of different backends
// (cudaMemcpyPeer, cudaMemcpyPeerAsync, cudaMemcpy with unified
// addressing); an event of one backend orders a stream of another, and a
// pointer says which device holds it. Natively the same code runs on one
// machine's GPUs.
//
// Usage: two_backends DEVICES. Prints what it checked; the last line is
// PASS. Built by nvcc like any CUDA program; its kernel is one pvgpu's
// host test double implements (by name), so CI runs it without a GPU.
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

static const int N = 1 << 20;

// Compares y with a * i + b for every i; prints the first difference.
static bool holds(const std::vector<float> &y, float a, float b, const char *what) {
    for (int i = 0; i < N; i++) {
        if (y[i] != a * (float)(i % 1000) + b) {
            printf("FAIL: %s: y[%d] = %g, want %g\n", what, i, y[i], a * (float)(i % 1000) + b);
            return false;
        }
    }
    return true;
}

int main(int argc, char **argv) {
    int want = argc > 1 ? atoi(argv[1]) : 2;
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    printf("devices: %d\n", n);
    if (n != want || n < 2) {
        printf("FAIL: %d devices, want %d\n", n, want);
        return 1;
    }
    const size_t bytes = N * sizeof(float);
    std::vector<float> x(N), y(N);
    for (int i = 0; i < N; i++) x[i] = (float)(i % 1000);

    // On each device: y = (d + 1) * x + d.
    std::vector<float *> dx(n), dy(n);
    for (int d = 0; d < n; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaMalloc(&dx[d], bytes));
        CHECK(cudaMalloc(&dy[d], bytes));
        CHECK(cudaMemcpy(dx[d], x.data(), bytes, cudaMemcpyHostToDevice));
        CHECK(cudaMemset(dy[d], 0, bytes));
        std::vector<float> fill(N, (float)d);
        CHECK(cudaMemcpy(dy[d], fill.data(), bytes, cudaMemcpyHostToDevice));
        saxpy<<<(N + 255) / 256, 256>>>((float)(d + 1), dx[d], dy[d], N);
        CHECK(cudaGetLastError());
    }
    for (int d = 0; d < n; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(y.data(), dy[d], bytes, cudaMemcpyDeviceToHost));
        if (!holds(y, (float)(d + 1), (float)d, "saxpy")) return 1;
        cudaPointerAttributes pa;
        CHECK(cudaPointerGetAttributes(&pa, dy[d]));
        printf("device %d: saxpy ok, its pointer is on device %d\n", d, pa.device);
    }

    // The last device's result to device 0, and back, across backends.
    int last = n - 1;
    CHECK(cudaMemcpyPeer(dy[0], 0, dy[last], last, bytes));
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpy(y.data(), dy[0], bytes, cudaMemcpyDeviceToHost));
    if (!holds(y, (float)(last + 1), (float)last, "cudaMemcpyPeer")) return 1;
    printf("cudaMemcpyPeer from device %d to device 0: ok\n", last);

    // Device 0 works on the copy; a stream of the last device waits for
    // its event, then copies the result over asynchronously.
    cudaStream_t s0, sl;
    cudaEvent_t done;
    CHECK(cudaStreamCreate(&s0));
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    saxpy<<<(N + 255) / 256, 256, 0, s0>>>(1.0f, dx[0], dy[0], N);
    CHECK(cudaEventRecord(done, s0));
    CHECK(cudaSetDevice(last));
    CHECK(cudaStreamCreate(&sl));
    CHECK(cudaStreamWaitEvent(sl, done, 0));
    CHECK(cudaMemcpyPeerAsync(dy[last], last, dy[0], 0, bytes, sl));
    CHECK(cudaStreamSynchronize(sl));
    CHECK(cudaMemcpy(y.data(), dy[last], bytes, cudaMemcpyDeviceToHost));
    if (!holds(y, (float)(last + 2), (float)last, "cudaMemcpyPeerAsync after an event")) return 1;
    printf("cudaMemcpyPeerAsync after another device's event: ok\n");

    // Unified addressing: the runtime finds each side's device.
    CHECK(cudaMemcpy(dx[last], dy[0], bytes, cudaMemcpyDefault));
    CHECK(cudaMemcpy(y.data(), dx[last], bytes, cudaMemcpyDefault));
    if (!holds(y, (float)(last + 2), (float)last, "cudaMemcpyDefault")) return 1;
    printf("cudaMemcpy with cudaMemcpyDefault between devices: ok\n");

    int can = -1;
    CHECK(cudaDeviceCanAccessPeer(&can, 0, last));
    printf("device 0 reaches device %d's memory directly: %s\n", last, can ? "yes" : "no");

    // How fast a peer copy is (not compared: a line starting with "time").
    cudaEvent_t t0, t1;
    CHECK(cudaSetDevice(0));
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    CHECK(cudaEventRecord(t0, 0));
    for (int i = 0; i < 5; i++) CHECK(cudaMemcpyPeer(dy[0], 0, dy[last], last, bytes));
    CHECK(cudaEventRecord(t1, 0));
    CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    printf("time cudaMemcpyPeer %zu MiB from device %d to 0: %.2f GB/s\n", bytes >> 20, last, 5.0 * bytes / 1e6 / ms);
    CHECK(cudaEventDestroy(t0));
    CHECK(cudaEventDestroy(t1));

    for (int d = 0; d < n; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaFree(dx[d]));
        CHECK(cudaFree(dy[d]));
    }
    CHECK(cudaStreamDestroy(sl));
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamDestroy(s0));
    CHECK(cudaEventDestroy(done));
    printf("PASS\n");
    return 0;
}
