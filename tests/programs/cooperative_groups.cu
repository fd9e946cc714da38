// Cooperative groups: a grid-wide reduction with grid.sync() launched with
// cudaLaunchCooperativeKernel, and tiled warp reductions.
#include "common.h"
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

__global__ void grid_sum(const int *in, int n, int *partial, int *out) {
    cg::grid_group grid = cg::this_grid();
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int v = 0;
    for (int i = grid.thread_rank(); i < n; i += grid.size()) v += in[i];
    v = cg::reduce(warp, v, cg::plus<int>());
    if (warp.thread_rank() == 0) atomicAdd(&partial[blockIdx.x], v);
    grid.sync();
    if (grid.thread_rank() == 0) {
        int s = 0;
        for (int b = 0; b < gridDim.x; b++) s += partial[b];
        *out = s;
    }
}

int main() {
    int dev = 0, coop = 0;
    CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    printf("cooperative launch supported: %d\n", coop);
    const int n = 1 << 20;
    int *h = (int *)malloc(n * sizeof(int)), ref = 0;
    for (int i = 0; i < n; i++) {
        h[i] = i % 7;
        ref += h[i];
    }
    int blocks = 0, sms = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, grid_sum, 256, 0));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int grid = blocks * sms;
    int *d, *partial, *out, got = -1;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMalloc(&partial, grid * sizeof(int)));
    CHECK(cudaMalloc(&out, sizeof(int)));
    CHECK(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(partial, 0, grid * sizeof(int)));
    int nn = n;
    void *args[] = {&d, &nn, &partial, &out};
    CHECK(cudaLaunchCooperativeKernel((void *)grid_sum, grid, 256, args, 0, 0));
    CHECK(cudaMemcpy(&got, out, sizeof(int), cudaMemcpyDeviceToHost));
    printf("grid-wide sum %d (expected %d)\n", got, ref);
    CHECK(cudaFree(d));
    CHECK(cudaFree(partial));
    CHECK(cudaFree(out));
    free(h);
    printf(got == ref ? "Test PASSED\n" : "Test FAILED\n");
    return got == ref ? 0 : 1;
}
