// What cudaMalloc and cudaFree cost, natively and through pvgpu with
// either --device-memory (tests/migrate/run.sh prints it beside the
// migration figures): microseconds per call for 256-byte, 1 MiB and
// 64 MiB allocations, each size allocated N times and then freed.
#include <chrono>
#include <cstdio>
#include <vector>
static double us_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}
int main() {
  cudaFree(0);
  const size_t sizes[] = {256, 1 << 20, 64 << 20};
  const int counts[] = {2000, 200, 50};
  for (int k = 0; k < 3; k++) {
    std::vector<void *> p(counts[k]);
    auto t = std::chrono::steady_clock::now();
    for (auto &q : p) if (cudaMalloc(&q, sizes[k]) != cudaSuccess) { printf("cudaMalloc failed\n"); return 1; }
    double a = us_since(t) / counts[k];
    t = std::chrono::steady_clock::now();
    for (auto q : p) cudaFree(q);
    double f = us_since(t) / counts[k];
    printf("%zu bytes: malloc %.1f us, free %.1f us\n", sizes[k], a, f);
  }
  return 0;
}
