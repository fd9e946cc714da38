// Copies between the memory of two devices (cudaMemcpyPeer), both ways,
// at sizes from 1 to 256 MiB: the rate of each size, and a digest of what
// arrived, which must be the same natively and through pvgpu (with the
// two devices behind one backend or two; tests/gpu/two_backends.sh,
// tests/gpu/peer_copies.sh). With one device, the copies are between two
// allocations of it (natively, the reference for the digests). Lines
// starting with "time" are rates (not compared).
#include <cstdio>
#include <cstdint>
#include <chrono>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    printf("%s failed: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__global__ void fill(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = (uint32_t)(i * 2654435761u) ^ seed;
}

static uint64_t digest(const std::vector<uint32_t> &v) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
    return h;
}

int main() {
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    const int last = n - 1;
    for (size_t mib : {1, 2, 4, 16, 64, 256}) {
        size_t bytes = mib << 20, words = bytes / 4;
        uint32_t *a, *b;
        CHECK(cudaSetDevice(0));
        CHECK(cudaMalloc(&a, bytes));
        fill<<<256, 256>>>(a, words, (uint32_t)mib);
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaSetDevice(last));
        CHECK(cudaMalloc(&b, bytes));
        CHECK(cudaMemcpyPeer(b, last, a, 0, bytes));
        std::vector<uint32_t> host(words);
        CHECK(cudaMemcpy(host.data(), b, bytes, cudaMemcpyDeviceToHost));
        printf("%zu MiB from the first device to the last: digest %016llx\n", mib, (unsigned long long)digest(host));
        int reps = mib >= 64 ? 4 : 16;
        auto t = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; i++) {
            CHECK(cudaMemcpyPeer(b, last, a, 0, bytes));
            CHECK(cudaMemcpyPeer(a, 0, b, last, bytes));
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
        CHECK(cudaSetDevice(0));
        CHECK(cudaMemcpy(host.data(), a, bytes, cudaMemcpyDeviceToHost));
        printf("%zu MiB back to the first device: digest %016llx\n", mib, (unsigned long long)digest(host));
        printf("time %zu MiB peer copies, both ways: %.2f GB/s\n", mib, 2.0 * reps * bytes / 1e9 / s);
        CHECK(cudaFree(a));
        CHECK(cudaSetDevice(last));
        CHECK(cudaFree(b));
    }
    printf("PASS\n");
    return 0;
}
