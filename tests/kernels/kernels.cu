// Kernels used by the pvgpu end-to-end tests and by pvgpu-bench.
//
// The images beside this file are generated from it with nvcc 13.0 (the
// one tests/cuda-toolkit.sh unpacks):
//     nvcc -ptx -arch=compute_75 -o kernels.ptx kernels.cu
//     nvcc -cubin -arch=sm_90 -o kernels.sm_90.cubin kernels.cu
//     nvcc -fatbin -gencode arch=compute_90,code=sm_90 \
//          -gencode arch=compute_75,code=compute_75 -o kernels.fatbin kernels.cu
// The host executor (the backend's test double) implements each kernel again
// in Rust, keyed by the names below, and reads the parameter layout from the
// PTX, so the same module image runs on both executors.

#include <cstdio>

extern "C" {

// An empty kernel: launch-cost benchmarks.
__global__ void pvgpu_null() {}

// MatSum (GPUsockets workload): c[i] = a[i] + b[i].
__global__ void mat_sum(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

// One Jacobi sweep of the Laplace equation on an n x n grid; the boundary is
// copied unchanged.
__global__ void jacobi_step(const float *in, float *out, int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= n || y >= n) return;
    int i = y * n + x;
    if (x == 0 || y == 0 || x == n - 1 || y == n - 1) {
        out[i] = in[i];
    } else {
        out[i] = 0.25f * (in[i - n] + in[i + n] + in[i - 1] + in[i + 1]);
    }
}

// y[i] = a * x[i] + y[i]
__global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// Parameters of mixed sizes and alignments: checks the parameter layout.
// Writes the arguments back so the caller can compare them.
__global__ void mixed_params(char c, double d, short s, unsigned long long u,
                             float f, unsigned long long *out) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[0] = (unsigned long long)(long long)c;
        out[1] = __double_as_longlong(d);
        out[2] = (unsigned long long)(long long)s;
        out[3] = u;
        out[4] = (unsigned long long)__float_as_uint(f);
    }
}

// A device global, read through cuModuleGetGlobal and used by scale_by_global.
__device__ float pvgpu_scale = 3.0f;

__global__ void scale_by_global(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= pvgpu_scale;
}

// Spins for about `cycles` GPU clock cycles: keeps a stream busy so that
// stream and event queries can observe work in flight.
__global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// Writes through the pointer it is given: with a bad pointer, the launch
// faults with CUDA_ERROR_ILLEGAL_ADDRESS.
__global__ void poke(int *p) {
    *(volatile int *)p = 1;
}

// Device printf, one line per thread: kernel output reaching the program.
__global__ void pvgpu_printf(int tag) {
    printf("pvgpu_printf tag %d block %d thread %d\n", tag, (int)blockIdx.x, (int)threadIdx.x);
}

// Conditional nodes: the condition is the flag (one thread).
__global__ void pvgpu_cond_from_flag(const int *flag, cudaGraphConditionalHandle handle) {
    cudaGraphSetConditional(handle, (unsigned)*flag);
}

// Conditional nodes: one less in the counter; the condition is whether it
// is still above zero (a while loop that runs `*counter` times).
__global__ void pvgpu_cond_count_down(int *counter, cudaGraphConditionalHandle handle) {
    int v = --*counter;
    cudaGraphSetConditional(handle, v > 0 ? 1u : 0u);
}

}
