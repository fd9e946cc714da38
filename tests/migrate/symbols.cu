// A program with a __device__ table set through cudaMemcpyToSymbol, for
// tests/migrate/run.sh: each step adds the table into a buffer and prints
// a checksum, so a session that moved with a global it looked up shows
// whether the global came along.
#include <cstdio>
#include <unistd.h>
__device__ int table[256];
__global__ void add(int *buf, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) buf[i] += table[i % 256];
}
int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 100, n = 1 << 20, h[256];
  for (int i = 0; i < 256; i++) h[i] = i * 7 + 1;
  cudaMemcpyToSymbol(table, h, sizeof h);
  int *buf; cudaMalloc(&buf, n * sizeof(int)); cudaMemset(buf, 0, n * sizeof(int));
  int *out = new int[n];
  for (int s = 0; s < steps; s++) {
    add<<<n / 256, 256>>>(buf, n);
    cudaMemcpy(out, buf, n * sizeof(int), cudaMemcpyDeviceToHost);
    long long sum = 0; for (int i = 0; i < n; i++) sum += out[i];
    printf("%d %lld %s\n", s, sum, cudaGetErrorString(cudaGetLastError()));
    fflush(stdout); usleep(50000);
  }
  return 0;
}
