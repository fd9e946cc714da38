// The classic: c = a + b, with the runtime API and <<<>>>.
#include "common.h"
#include <cmath>

__global__ void vectorAdd(const float *a, const float *b, float *c, int n) {
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + 0.0f;
}

int main() {
    const int n = 50000;
    size_t bytes = n * sizeof(float);
    float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes), *hc = (float *)malloc(bytes);
    srand(1);
    for (int i = 0; i < n; i++) {
        ha[i] = rand() / (float)RAND_MAX;
        hb[i] = rand() / (float)RAND_MAX;
    }
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
    int threads = 256, blocks = (n + threads - 1) / threads;
    printf("CUDA kernel launch with %d blocks of %d threads\n", blocks, threads);
    vectorAdd<<<blocks, threads>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        if (fabs(ha[i] + hb[i] - hc[i]) > 1e-5) {
            printf("Result verification failed at element %d\n", i);
            return 1;
        }
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    free(ha);
    free(hb);
    free(hc);
    printf("Test PASSED\n");
    return 0;
}
