// Device queries as deviceQuery does them (the properties pvgpu reports as
// the GPU does; those it masks are listed in docs/compatibility.md).
#include "common.h"

int main() {
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    printf("devices: %d\n", n);
    for (int d = 0; d < n; d++) {
        cudaDeviceProp p;
        CHECK(cudaGetDeviceProperties(&p, d));
        printf("device %d: %s\n", d, p.name);
        printf("  compute capability %d.%d, %d multiprocessors, warp %d\n", p.major, p.minor, p.multiProcessorCount, p.warpSize);
        printf("  max threads per block %d, per SM %d\n", p.maxThreadsPerBlock, p.maxThreadsPerMultiProcessor);
        printf("  block dims %d x %d x %d, grid dims %d x %d x %d\n", p.maxThreadsDim[0], p.maxThreadsDim[1], p.maxThreadsDim[2],
               p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2]);
        printf("  shared memory per block %zu, opt-in %zu, per SM %zu\n", p.sharedMemPerBlock, p.sharedMemPerBlockOptin,
               p.sharedMemPerMultiprocessor);
        printf("  registers per block %d, L2 %d, memory bus %d bits\n", p.regsPerBlock, p.l2CacheSize, p.memoryBusWidth);
        printf("  total memory %zu MiB, concurrent kernels %d, async engines %d\n", p.totalGlobalMem >> 20, p.concurrentKernels,
               p.asyncEngineCount);
        printf("  cooperative launch %d, unified addressing %d\n", p.cooperativeLaunch, p.unifiedAddressing);
        int drv = 0, rt = 0;
        CHECK(cudaDriverGetVersion(&drv));
        CHECK(cudaRuntimeGetVersion(&rt));
        printf("  driver %d, runtime %d\n", drv, rt);
        size_t free_b = 0, total_b = 0;
        CHECK(cudaSetDevice(d));
        CHECK(cudaMemGetInfo(&free_b, &total_b));
        printf("  cudaMemGetInfo total matches: %d\n", total_b >> 20 == p.totalGlobalMem >> 20);
    }
    printf("Result = PASS\n");
    return 0;
}
