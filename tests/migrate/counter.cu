// A program whose kernels keep their state in __device__ variables the
// host never names, for tests/migrate/run.sh: a step counter and a table a
// kernel fills once; and whose kernels need the context limits it set (a
// device heap of 64 MiB for a 16 MiB malloc, past the 8 MiB default) and
// the kernel attribute it set (80 KiB of dynamic shared memory, past the
// 48 KiB every kernel may use, as attention kernels set it). Each
// step prints what the kernels see, so a session that moved shows whether
// those globals kept their bytes (a module loaded afresh would give the
// counter back its initial value, 100) and its limits came along.
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

__device__ unsigned counter = 100;
__device__ int table[512];

__global__ void fill_table(int seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 512) table[i] = (i * 37 + seed) % 1009;
}

__global__ void step(int *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) atomicAdd(&counter, 1);
  if (i < 512) out[i] = table[i] + i;
}

__global__ void read_counter(unsigned *out) { *out = counter; }

__global__ void use_shared(int *out) {
  extern __shared__ int big[];
  int n = (80 << 10) / sizeof(int);
  for (int i = threadIdx.x; i < n; i += blockDim.x) big[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) *out = big[n - 1];
}

__global__ void use_heap(int *ok) {
  char *p = (char *)malloc(16 << 20);
  *ok = p != nullptr;
  if (p) { p[0] = 1; free(p); }
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 100;
  int *out;
  unsigned *c;
  cudaMalloc(&out, 512 * sizeof(int));
  cudaMalloc(&c, sizeof(unsigned));
  cudaDeviceSetLimit(cudaLimitMallocHeapSize, 64 << 20);
  cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 4 << 20);
  int *ok;
  cudaMalloc(&ok, sizeof(int));
  cudaFuncSetAttribute(use_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 80 << 10);
  fill_table<<<2, 256>>>(7);
  int h[512];
  for (int s = 0; s < steps; s++) {
    step<<<2, 256>>>(out);
    read_counter<<<1, 1>>>(c);
    unsigned n = 0;
    cudaMemcpy(&n, c, sizeof n, cudaMemcpyDeviceToHost);
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    long long sum = 0;
    for (int i = 0; i < 512; i++) sum += h[i] * (long long)(i % 11 + 1);
    use_heap<<<1, 1>>>(ok);
    int heap_ok = 0, last = 0;
    cudaMemcpy(&heap_ok, ok, sizeof heap_ok, cudaMemcpyDeviceToHost);
    use_shared<<<1, 256, 80 << 10>>>(ok);
    cudaError_t shared = cudaGetLastError();
    cudaMemcpy(&last, ok, sizeof last, cudaMemcpyDeviceToHost);
    size_t heap = 0, fifo = 0;
    cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize);
    cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize);
    printf("%d counter %u table %lld heap %zu fifo %zu malloc %s shared %s %d %s\n", s, n, sum, heap, fifo,
           heap_ok ? "ok" : "failed", cudaGetErrorName(shared), last, cudaGetErrorString(cudaGetLastError()));
    fflush(stdout);
    usleep(50000);
  }
  return 0;
}
