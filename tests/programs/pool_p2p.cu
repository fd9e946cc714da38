// Stream-ordered allocation across two GPUs, as NVIDIA's
// streamOrderedAllocationP2P sample does it: device 1 is given access to
// device 0's default memory pool, device 0 allocates from it on a stream
// and fills the buffer, and a kernel on device 1 reads it directly.
// On fewer than two GPUs, or GPUs that are no peers, it says so and exits 0.
#include "common.h"

__global__ void fill(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 3 * i + 1;
}

__global__ void sum_from_peer(const int *peer, long long *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd((unsigned long long *)out, (unsigned long long)peer[i]);
}

static const char *access_name(cudaMemAccessFlags f) {
    return f == cudaMemAccessFlagsProtReadWrite ? "read-write" : f == cudaMemAccessFlagsProtNone ? "none" : "read";
}

int main() {
    int count = 0, peer = 0;
    CHECK(cudaGetDeviceCount(&count));
    if (count < 2) { printf("needs two GPUs: waived\n"); return 0; }
    CHECK(cudaDeviceCanAccessPeer(&peer, 1, 0));
    if (!peer) { printf("GPU 1 cannot reach GPU 0: waived\n"); return 0; }
    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    cudaMemLocation loc = {};
    loc.type = cudaMemLocationTypeDevice;
    loc.id = 1;
    cudaMemAccessFlags flags;
    CHECK(cudaMemPoolGetAccess(&flags, pool, &loc));
    printf("GPU 1's access to GPU 0's pool before: %s\n", access_name(flags));
    cudaMemAccessDesc desc = {};
    desc.location = loc;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
    CHECK(cudaMemPoolGetAccess(&flags, pool, &loc));
    printf("after: %s\n", access_name(flags));
    loc.id = 0;
    CHECK(cudaMemPoolGetAccess(&flags, pool, &loc));
    printf("GPU 0's own access: %s\n", access_name(flags));

    const int n = 1 << 20;
    cudaStream_t s0, s1;
    cudaEvent_t filled;
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
    int *buf;
    CHECK(cudaMallocAsync(&buf, n * sizeof(int), s0));
    fill<<<(n + 255) / 256, 256, 0, s0>>>(buf, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(filled, s0));

    CHECK(cudaSetDevice(1));
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    long long *out, got = 0;
    CHECK(cudaMallocAsync(&out, sizeof(long long), s1));
    CHECK(cudaMemsetAsync(out, 0, sizeof(long long), s1));
    CHECK(cudaStreamWaitEvent(s1, filled, 0));
    sum_from_peer<<<(n + 255) / 256, 256, 0, s1>>>(buf, out, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(&got, out, sizeof(long long), cudaMemcpyDeviceToHost, s1));
    CHECK(cudaFreeAsync(out, s1));
    CHECK(cudaStreamSynchronize(s1));
    long long want = 3LL * (n - 1) * n / 2 + n;
    printf("GPU 1 summed GPU 0's pool memory: %lld (expected %lld): %s\n", got, want, got == want ? "PASS" : "FAIL");

    CHECK(cudaSetDevice(0));
    CHECK(cudaFreeAsync(buf, s0));
    CHECK(cudaStreamSynchronize(s0));
    desc.location.id = 1;
    desc.flags = cudaMemAccessFlagsProtNone;
    CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
    loc.id = 1;
    CHECK(cudaMemPoolGetAccess(&flags, pool, &loc));
    printf("GPU 1's access at the end: %s\n", access_name(flags));
    return got == want ? 0 : 1;
}
