// A program allocating from memory pools of its own, for
// tests/migrate/run.sh: a pool with a size limit, a release threshold and
// a reuse policy set, a buffer from it that a kernel adds to at every
// step, a second pool made after the module, and each step an allocation
// made and freed again on a stream. Each step prints a checksum and the
// pool's bytes in use, so a session that moved shows whether its pools,
// their settings and their memory came along.
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      printf("FAIL %s line %d: %s\n", #x, __LINE__, cudaGetErrorName(e_));             \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

__global__ void add(int *buf, const int *step_buf, int n, int s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) buf[i] += step_buf[i % 1024] + s + i % 13;
}

__global__ void fill(int *b, int s) { b[threadIdx.x + blockIdx.x * blockDim.x] = s * 3 + threadIdx.x; }

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 100, n = 1 << 20;
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  props.maxSize = 64 << 20;
  cudaMemPool_t pool, late;
  CK(cudaMemPoolCreate(&pool, &props));
  unsigned long long threshold = 8 << 20;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  int no = 0;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &no));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int *buf;
  CK(cudaMallocFromPoolAsync((void **)&buf, n * sizeof(int), pool, st));
  CK(cudaMemsetAsync(buf, 0, n * sizeof(int), st));
  props.maxSize = 0;
  CK(cudaMemPoolCreate(&late, &props));
  int *kept;
  CK(cudaMallocFromPoolAsync((void **)&kept, 1024 * sizeof(int), late, st));
  fill<<<4, 256, 0, st>>>(kept, 7);
  int *out = new int[n];
  for (int s = 0; s < steps; s++) {
    int *step_buf;
    CK(cudaMallocFromPoolAsync((void **)&step_buf, 1024 * sizeof(int), pool, st));
    fill<<<4, 256, 0, st>>>(step_buf, s);
    add<<<n / 256, 256, 0, st>>>(buf, step_buf, n, s);
    add<<<4, 256, 0, st>>>(buf, kept, 1024, 0);
    CK(cudaFreeAsync(step_buf, st));
    CK(cudaMemcpyAsync(out, buf, n * sizeof(int), cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    long long sum = 0;
    for (int i = 0; i < n; i++) sum += out[i] * (long long)(1 + i % 7);
    unsigned long long used = 0, got = 0;
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got));
    void *big = nullptr;
    cudaError_t over = cudaMallocFromPoolAsync(&big, 128 << 20, pool, st);
    cudaGetLastError();
    printf("%d %lld used %llu threshold %llu over-limit %s\n", s, sum, used, got, cudaGetErrorName(over));
    fflush(stdout);
    usleep(50000);
  }
  CK(cudaFreeAsync(buf, st)); CK(cudaFreeAsync(kept, st)); CK(cudaStreamSynchronize(st));
  CK(cudaMemPoolDestroy(pool)); CK(cudaMemPoolDestroy(late));
  printf("done\n");
  return 0;
}
