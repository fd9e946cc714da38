// Templated kernels (C++ names, instantiated for several types).
#include "common.h"

template <typename T> __global__ void axpy(T a, const T *x, T *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

template <typename T> bool run(const char *name) {
    const int n = 10000;
    T *hx = new T[n], *hy = new T[n];
    for (int i = 0; i < n; i++) {
        hx[i] = (T)(i % 100);
        hy[i] = (T)1;
    }
    T *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(T)));
    CHECK(cudaMalloc(&y, n * sizeof(T)));
    CHECK(cudaMemcpy(x, hx, n * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(y, hy, n * sizeof(T), cudaMemcpyHostToDevice));
    axpy<T><<<(n + 127) / 128, 128>>>((T)3, x, y, n);
    CHECK(cudaMemcpy(hy, y, n * sizeof(T), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int i = 0; i < n; i++) ok &= hy[i] == (T)3 * (T)(i % 100) + (T)1;
    printf("axpy<%s>: %s\n", name, ok ? "ok" : "wrong");
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    delete[] hx;
    delete[] hy;
    return ok;
}

int main() {
    bool ok = run<float>("float") & run<double>("double") & run<int>("int") & run<long long>("long long");
    printf(ok ? "Test PASSED\n" : "Test FAILED\n");
    return ok ? 0 : 1;
}
