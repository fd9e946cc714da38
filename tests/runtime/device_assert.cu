// A failed device assertion, as a program sees it: a kernel asserts for
// every thread, one thread's assertion fails, and the synchronisation after
// it fails with cudaErrorAssert while the driver's message (file, line,
// kernel, block, thread and the expression) reaches the program's standard
// error. Before it, a launch where every assertion holds. The test checks
// standard output against device_assert.expected and standard error for
// the message; the last line is PASS.
#include <cassert>
#include <cstdio>
#include <cuda_runtime.h>

// Unmangled, so that the host executor's kernel of this name runs it.
extern "C" __global__ void pvgpu_assert(const int *p, int tag) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    assert(p[i] != tag);
}

int main() {
    int h[64];
    for (int i = 0; i < 64; i++) h[i] = i;
    int *d = nullptr;
    if (cudaMalloc(&d, sizeof h) != cudaSuccess || cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) != cudaSuccess) {
        printf("FAIL: no device memory\n");
        return 1;
    }
    pvgpu_assert<<<2, 32>>>(d, 1000);
    printf("launched: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("every assertion holds: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    // Block 1, thread 5.
    pvgpu_assert<<<2, 32>>>(d, 37);
    cudaError_t e = cudaDeviceSynchronize();
    printf("one fails: %s\n", cudaGetErrorName(e));
    printf("%s\n", e == cudaErrorAssert ? "PASS" : "FAIL");
    return e == cudaErrorAssert ? 0 : 1;
}
