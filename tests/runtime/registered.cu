// Registered host memory the device reaches through a pointer, as NPP and
// other libraries use it: cudaHostRegister of the program's own (page
// aligned) buffers, cudaHostGetDevicePointer, kernels reading and writing
// them over several rounds in which the program changes them between
// kernels; a registered buffer handed straight to a kernel (unified
// addressing); copies to and from registered memory; the errors of
// registering twice and unregistering what is not registered. Through
// pvgpu this must compute the same over every transport: the drop-in
// library mirrors the registered pages in the backend. The output is
// compared line by line with the native run (registered.expected); the
// last line is PASS.
//
// Built by nvcc like any CUDA program; its kernel is one pvgpu's host test
// double implements (by name), so CI runs it without a GPU.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x)                                                               \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            printf("FAIL: %s at line %d: %s\n", #x, __LINE__,                  \
                   cudaGetErrorName(e_));                                      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

static float *page_aligned(size_t bytes) {
    void *p = nullptr;
    if (posix_memalign(&p, 4096, bytes) != 0) {
        printf("FAIL: posix_memalign\n");
        exit(1);
    }
    return (float *)p;
}

int main() {
    const int n = 300000;
    const size_t bytes = n * sizeof(float);
    CHECK(cudaSetDevice(0));
    float *x = page_aligned(bytes), *y = page_aligned(bytes), *z = page_aligned(bytes);
    CHECK(cudaHostRegister(x, bytes, cudaHostRegisterMapped));
    CHECK(cudaHostRegister(y, bytes, cudaHostRegisterMapped));
    CHECK(cudaHostRegister(z, bytes, cudaHostRegisterDefault));
    float *dx, *dy;
    CHECK(cudaHostGetDevicePointer((void **)&dx, x, 0));
    CHECK(cudaHostGetDevicePointer((void **)&dy, y, 0));
    printf("device pointers of registered memory: %s\n", dx && dy ? "given" : "MISSING");

    bool ok = true;
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < n; i++) { x[i] = (float)(i % 97) * round; y[i] = (float)round; }
        saxpy<<<(n + 255) / 256, 256>>>(2.0f, dx, dy, n);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        for (int i = 0; i < n; i++) ok = ok && y[i] == 2.0f * (float)(i % 97) * round + (float)round;
    }
    printf("three rounds of a kernel over registered memory: %s\n", ok ? "ok" : "WRONG");

    // A registered buffer handed straight to a kernel.
    for (int i = 0; i < n; i++) z[i] = 1.0f;
    saxpy<<<(n + 255) / 256, 256>>>(1.0f, dx, z, n);
    CHECK(cudaDeviceSynchronize());
    ok = true;
    for (int i = 0; i < n; i++) ok = ok && z[i] == 1.0f + x[i];
    printf("a registered pointer passed to a kernel: %s\n", ok ? "ok" : "WRONG");

    // Copies to and from registered memory.
    float *d;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMemcpy(d, x, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(z, d, bytes, cudaMemcpyDeviceToHost));
    ok = true;
    for (int i = 0; i < n; i++) ok = ok && z[i] == x[i];
    printf("copies through registered memory: %s\n", ok ? "ok" : "WRONG");
    CHECK(cudaFree(d));

    printf("registering again: %s\n", cudaGetErrorName(cudaHostRegister(x, bytes, cudaHostRegisterDefault)));
    cudaGetLastError();
    CHECK(cudaHostUnregister(x));
    CHECK(cudaHostUnregister(y));
    CHECK(cudaHostUnregister(z));
    printf("unregistering again: %s\n", cudaGetErrorName(cudaHostUnregister(x)));
    cudaGetLastError();
    free(x);
    free(y);
    free(z);
    printf("PASS\n");
    return 0;
}
