// Thrust and CUB from NVIDIA's CCCL: sorts, reductions, scans, transforms.
#include "common.h"
#include <cub/cub.cuh>
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

struct square {
    __host__ __device__ long long operator()(int x) const { return (long long)x * x; }
};

int main() {
    const int n = 1 << 20;
    thrust::host_vector<int> h(n);
    for (int i = 0; i < n; i++) h[i] = (int)((i * 2654435761u) % 1000003);
    thrust::device_vector<int> d = h;
    thrust::sort(d.begin(), d.end());
    thrust::host_vector<int> sorted = d;
    bool ok = true;
    for (int i = 1; i < n; i++) ok &= sorted[i - 1] <= sorted[i];
    long long sum = thrust::reduce(d.begin(), d.end(), 0LL);
    thrust::device_vector<long long> sq(n);
    thrust::transform(d.begin(), d.end(), sq.begin(), square());
    long long sumsq = thrust::reduce(sq.begin(), sq.end(), 0LL);
    thrust::device_vector<int> ones(n, 1), scan(n);
    thrust::inclusive_scan(ones.begin(), ones.end(), scan.begin());
    ok &= scan.back() == n;
    printf("thrust: sorted %s, sum %lld, sum of squares %lld, scan end %d\n", ok ? "yes" : "no", sum, sumsq, (int)scan.back());

    int *in = thrust::raw_pointer_cast(d.data());
    int *out;
    int *keys_out;
    CHECK(cudaMalloc(&out, sizeof(int)));
    CHECK(cudaMalloc(&keys_out, n * sizeof(int)));
    void *tmp = nullptr;
    size_t tmp_bytes = 0;
    cub::DeviceReduce::Sum(tmp, tmp_bytes, in, out, n);
    CHECK(cudaMalloc(&tmp, tmp_bytes));
    cub::DeviceReduce::Sum(tmp, tmp_bytes, in, out, n);
    int cub_sum = 0;
    CHECK(cudaMemcpy(&cub_sum, out, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(tmp));
    tmp = nullptr;
    tmp_bytes = 0;
    thrust::device_vector<int> unsorted = h;
    int *uin = thrust::raw_pointer_cast(unsorted.data());
    cub::DeviceRadixSort::SortKeys(tmp, tmp_bytes, uin, keys_out, n);
    CHECK(cudaMalloc(&tmp, tmp_bytes));
    cub::DeviceRadixSort::SortKeys(tmp, tmp_bytes, uin, keys_out, n);
    thrust::host_vector<int> cub_sorted(n);
    CHECK(cudaMemcpy(cub_sorted.data(), keys_out, n * sizeof(int), cudaMemcpyDeviceToHost));
    ok &= cub_sorted == sorted;
    ok &= (long long)cub_sum == (int)sum;
    printf("cub: sum %d, radix sort matches thrust: %s\n", cub_sum, cub_sorted == sorted ? "yes" : "no");
    CHECK(cudaFree(tmp));
    CHECK(cudaFree(out));
    CHECK(cudaFree(keys_out));
    printf(ok ? "Test PASSED\n" : "Test FAILED\n");
    return ok ? 0 : 1;
}
