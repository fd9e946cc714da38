// The asyncAPI sample's pattern: queue work, let the CPU do its own while
// polling an event, then check.
#include "common.h"
#include <cstring>

__global__ void increment(int *g, int inc) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    g[i] = g[i] + inc;
}

int main() {
    const int n = 16 * 1024 * 1024, value = 26;
    int *a, *d;
    CHECK(cudaMallocHost(&a, n * sizeof(int)));
    memset(a, 0, n * sizeof(int));
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMemset(d, 255, n * sizeof(int)));
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    CHECK(cudaMemcpyAsync(d, a, n * sizeof(int), cudaMemcpyHostToDevice, 0));
    increment<<<n / 512, 512, 0, 0>>>(d, value);
    CHECK(cudaMemcpyAsync(a, d, n * sizeof(int), cudaMemcpyDeviceToHost, 0));
    CHECK(cudaEventRecord(done, 0));
    unsigned long counter = 0;
    while (cudaEventQuery(done) == cudaErrorNotReady) counter++;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        if (a[i] != value) {
            printf("Error! data[%d] = %d, ref = %d\n", i, a[i], value);
            ok = false;
            break;
        }
    }
    (void)counter;
    printf("CPU polled the event while the GPU worked\n");
    CHECK(cudaEventDestroy(done));
    CHECK(cudaFreeHost(a));
    CHECK(cudaFree(d));
    printf(ok ? "Test PASSED\n" : "Test FAILED\n");
    return ok ? 0 : 1;
}
