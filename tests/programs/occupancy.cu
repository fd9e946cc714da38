// The occupancy calculator: the same answers natively and through pvgpu.
#include "common.h"

__global__ void square(int *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= a[i];
}

__global__ void heavy(float *a, int n) {
    __shared__ float buf[4096];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? a[i] : 0;
    __syncthreads();
    if (i < n) a[i] = buf[(threadIdx.x + 1) % blockDim.x];
}

int main() {
    int min_grid = 0, block = 0, active = 0;
    CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, square, 0, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, square, block, 0));
    printf("square: block %d, min grid %d, active blocks per SM %d\n", block, min_grid, active);
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, heavy, 256, 0));
    printf("heavy: active blocks per SM at 256 threads %d\n", active);
    size_t dyn = 0;
    CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&dyn, square, 4, 256));
    printf("dynamic shared memory for 4 blocks of 256: %zu\n", dyn);
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, heavy));
    printf("heavy: static shared %zu, max threads %d\n", fa.sharedSizeBytes, fa.maxThreadsPerBlock);
    int n = 1 << 20, *d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMemset(d, 0, n * sizeof(int)));
    square<<<(n + block - 1) / block, block>>>(d, n);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(d));
    printf("Test PASSED\n");
    return 0;
}
