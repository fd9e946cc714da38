// A histogram with atomicAdd in global and shared memory.
#include "common.h"

__global__ void histogram(const unsigned char *data, int n, unsigned int *bins) {
    __shared__ unsigned int local[256];
    local[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) atomicAdd(&local[data[i]], 1);
    __syncthreads();
    atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}

int main() {
    const int n = 1 << 24;
    unsigned char *h = (unsigned char *)malloc(n);
    unsigned int ref[256] = {0}, got[256];
    for (int i = 0; i < n; i++) {
        h[i] = (unsigned char)((i * 2654435761u) >> 24);
        ref[h[i]]++;
    }
    unsigned char *d;
    unsigned int *bins;
    CHECK(cudaMalloc(&d, n));
    CHECK(cudaMalloc(&bins, sizeof got));
    CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(bins, 0, sizeof got));
    histogram<<<256, 256>>>(d, n, bins);
    CHECK(cudaMemcpy(got, bins, sizeof got, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int b = 0; b < 256; b++) ok &= got[b] == ref[b];
    printf("bin 0 %u, bin 255 %u\n", got[0], got[255]);
    CHECK(cudaFree(d));
    CHECK(cudaFree(bins));
    free(h);
    printf(ok ? "Test PASSED\n" : "Test FAILED\n");
    return ok ? 0 : 1;
}
