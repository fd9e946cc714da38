// Tiled matrix multiply in shared memory (as the CUDA programming guide
// writes it), checked against the CPU.
#include "common.h"
#include <cmath>

#define TILE 16

__global__ void matmul(const float *A, const float *B, float *C, int n) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0;
    for (int t = 0; t < n / TILE; t++) {
        As[threadIdx.y][threadIdx.x] = A[row * n + t * TILE + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * TILE + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * n + col] = acc;
}

int main() {
    const int n = 512;
    size_t bytes = n * n * sizeof(float);
    float *A = (float *)malloc(bytes), *B = (float *)malloc(bytes), *C = (float *)malloc(bytes);
    for (int i = 0; i < n * n; i++) {
        A[i] = (float)((i * 7) % 13) / 13.0f;
        B[i] = (float)((i * 5) % 11) / 11.0f;
    }
    float *dA, *dB, *dC;
    CHECK(cudaMalloc(&dA, bytes));
    CHECK(cudaMalloc(&dB, bytes));
    CHECK(cudaMalloc(&dC, bytes));
    CHECK(cudaMemcpy(dA, A, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, B, bytes, cudaMemcpyHostToDevice));
    dim3 block(TILE, TILE), grid(n / TILE, n / TILE);
    for (int rep = 0; rep < 5; rep++) matmul<<<grid, block>>>(dA, dB, dC, n);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(C, dC, bytes, cudaMemcpyDeviceToHost));
    double max_err = 0;
    for (int i = 0; i < n; i += 37) {
        for (int j = 0; j < n; j += 41) {
            double ref = 0;
            for (int k = 0; k < n; k++) ref += (double)A[i * n + k] * B[k * n + j];
            max_err = fmax(max_err, fabs(ref - C[i * n + j]) / fmax(1.0, fabs(ref)));
        }
    }
    printf("max relative error below 1e-4: %s\n", max_err < 1e-4 ? "yes" : "no");
    printf("C[0] = %.4f, C[last] = %.4f\n", C[0], C[n * n - 1]);
    printf(max_err < 1e-4 ? "Test PASSED\n" : "Test FAILED\n");
    return max_err < 1e-4 ? 0 : 1;
}
