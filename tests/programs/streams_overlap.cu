// Overlapping copies and kernels on several streams with pinned memory and
// events, as the simpleStreams/asyncAPI samples do.
#include "common.h"

__global__ void scale(float *x, int n, float f) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        for (int k = 0; k < 64; k++) v = v * 0.999f + f;
        x[i] = v;
    }
}

int main() {
    const int streams = 4, n = 1 << 22, chunk = n / streams;
    float *h;
    CHECK(cudaMallocHost(&h, n * sizeof(float)));
    for (int i = 0; i < n; i++) h[i] = (float)(i % 1000);
    float *d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    cudaStream_t s[streams];
    cudaEvent_t start, stop;
    for (int i = 0; i < streams; i++) CHECK(cudaStreamCreate(&s[i]));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventRecord(start, 0));
    for (int i = 0; i < streams; i++) {
        float *hp = h + i * chunk, *dp = d + i * chunk;
        CHECK(cudaMemcpyAsync(dp, hp, chunk * sizeof(float), cudaMemcpyHostToDevice, s[i]));
        scale<<<chunk / 256, 256, 0, s[i]>>>(dp, chunk, 1.0f);
        CHECK(cudaMemcpyAsync(hp, dp, chunk * sizeof(float), cudaMemcpyDeviceToHost, s[i]));
    }
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    bool ok = ms > 0;
    for (int i = 0; i < n; i += 997) {
        float v = (float)(i % 1000);
        for (int k = 0; k < 64; k++) v = v * 0.999f + 1.0f;
        if (fabsf(v - h[i]) > 1e-3f * fabsf(v)) {
            printf("mismatch at %d: %f vs %f\n", i, h[i], v);
            ok = false;
            break;
        }
    }
    for (int i = 0; i < streams; i++) CHECK(cudaStreamDestroy(s[i]));
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFree(d));
    printf(ok ? "Test PASSED\n" : "Test FAILED\n");
    return ok ? 0 : 1;
}
