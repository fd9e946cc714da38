// Keeps the whole GPU busy with kernels of about BUSY_MS milliseconds
// (default 2) from `start_at` (Unix seconds) for `secs` seconds; prints how
// many ran.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <cuda_runtime.h>

// A fixed amount of arithmetic per thread: work, not wall time, so a
// kernel that shares the GPU takes longer.
__global__ void spin(long long iters, int *out) {
    float x = threadIdx.x * 1e-3f;
    for (long long i = 0; i < iters; i++) x = x * 0.999999f + 0.5f;
    if (x == 123.456f) atomicAdd(out, 1000000);
    if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(out, 1);
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "busy NAME START_AT SECS\n"); return 2; }
    double start_at = atof(argv[2]), secs = atof(argv[3]);
    double ms = getenv("BUSY_MS") ? atof(getenv("BUSY_MS")) : 2.0;
    if (secs <= 0 || secs > 120) { fprintf(stderr, "SECS must be in (0, 120]\n"); return 2; }
    int clock_khz = 0, sms = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    (void)clock_khz;
    int *d;
    if (cudaMalloc(&d, 4) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    cudaMemset(d, 0, 4);
    // Calibrate, alone: iterations for a kernel of `ms`.
    long long probe = 1 << 16;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    spin<<<sms * 4, 128>>>(probe, d);
    cudaEventRecord(e0);
    spin<<<sms * 4, 128>>>(probe, d);
    cudaEventRecord(e1);
    if (cudaEventSynchronize(e1) != cudaSuccess) { fprintf(stderr, "warm-up failed\n"); return 1; }
    float took = 0;
    cudaEventElapsedTime(&took, e0, e1);
    long long cycles = getenv("BUSY_ITERS") ? atoll(getenv("BUSY_ITERS")) : (long long)(probe * ms / took);
    fprintf(stderr, "%s: %lld iterations a kernel\n", argv[1], cycles);
    cudaMemset(d, 0, 4);
    using clk = std::chrono::system_clock;
    auto t0 = clk::time_point(std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(start_at)));
    std::this_thread::sleep_until(t0);
    auto begin = std::chrono::steady_clock::now();
    long n = 0;
    double el = 0;
    while (el < secs) {
        for (int i = 0; i < 4; i++) spin<<<sms * 4, 128>>>(cycles, d);
        n += 4;
        if (cudaDeviceSynchronize() != cudaSuccess) { fprintf(stderr, "%s: kernel failed\n", argv[1]); return 1; }
        el = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    }
    int done = 0;
    cudaMemcpy(&done, d, 4, cudaMemcpyDeviceToHost);
    printf("%s kernels %ld in %.2f s (device counted %d)\n", argv[1], n, el, done);
    return 0;
}
