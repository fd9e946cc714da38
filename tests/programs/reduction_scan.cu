// A reduction with warp shuffles and a block-level inclusive scan.
#include "common.h"

__inline__ __device__ int warp_sum(int v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);
    return v;
}

__global__ void reduce(const int *in, int n, unsigned long long *out) {
    int sum = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) sum += in[i];
    __shared__ int warps[32];
    sum = warp_sum(sum);
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        sum = threadIdx.x < blockDim.x / 32 ? warps[threadIdx.x] : 0;
        sum = warp_sum(sum);
        if (threadIdx.x == 0) atomicAdd(out, (unsigned long long)sum);
    }
}

__global__ void block_scan(const int *in, int *out) {
    __shared__ int s[1024];
    int t = threadIdx.x;
    s[t] = in[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (int o = 1; o < blockDim.x; o *= 2) {
        int v = t >= o ? s[t - o] : 0;
        __syncthreads();
        s[t] += v;
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + t] = s[t];
}

int main() {
    const int n = 1 << 22;
    int *h = (int *)malloc(n * sizeof(int));
    unsigned long long ref = 0;
    for (int i = 0; i < n; i++) {
        h[i] = (i * 37) % 101;
        ref += h[i];
    }
    int *d, *scan;
    unsigned long long *sum, got = 0;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMalloc(&scan, n * sizeof(int)));
    CHECK(cudaMalloc(&sum, sizeof got));
    CHECK(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(sum, 0, sizeof got));
    reduce<<<128, 256>>>(d, n, sum);
    CHECK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost));
    printf("sum %llu (expected %llu)\n", got, ref);
    block_scan<<<n / 1024, 1024>>>(d, scan);
    int *hs = (int *)malloc(n * sizeof(int));
    CHECK(cudaMemcpy(hs, scan, n * sizeof(int), cudaMemcpyDeviceToHost));
    bool ok = got == ref;
    for (int b = 0; b < n / 1024 && ok; b += 97) {
        int acc = 0;
        for (int i = 0; i < 1024; i++) {
            acc += h[b * 1024 + i];
            ok &= hs[b * 1024 + i] == acc;
        }
    }
    CHECK(cudaFree(d));
    CHECK(cudaFree(scan));
    CHECK(cudaFree(sum));
    printf(ok ? "Test PASSED\n" : "Test FAILED\n");
    return ok ? 0 : 1;
}
