// Host functions and stream callbacks: they run after the work before them
// on their stream, and the work after them waits for them.
#include "common.h"
#include <atomic>

struct Step {
    int *host;
    int expect;
    std::atomic<int> *ok;
    std::atomic<int> *order;
    int seq;
};

static void CUDART_CB check_fn(void *p) {
    Step *s = (Step *)p;
    if (s->host[0] == s->expect && s->order->fetch_add(1) == s->seq) s->ok->fetch_add(1);
    s->host[0] += 1000;
}

static void CUDART_CB callback(cudaStream_t, cudaError_t status, void *p) {
    if (status == cudaSuccess) ((std::atomic<int> *)p)->fetch_add(1);
}

__global__ void add(int *d, int v) { d[0] += v; }

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int *h, *d;
    CHECK(cudaMallocHost(&h, sizeof(int)));
    CHECK(cudaMalloc(&d, sizeof(int)));
    CHECK(cudaMemset(d, 0, sizeof(int)));
    std::atomic<int> ok(0), order(0), cbs(0);
    Step steps[4];
    int total = 0;
    for (int i = 0; i < 4; i++) {
        add<<<1, 1, 0, s>>>(d, i + 1);
        total += i + 1;
        CHECK(cudaMemcpyAsync(h, d, sizeof(int), cudaMemcpyDeviceToHost, s));
        steps[i] = Step{h, total, &ok, &order, i};
        CHECK(cudaLaunchHostFunc(s, check_fn, &steps[i]));
        CHECK(cudaStreamAddCallback(s, callback, &cbs, 0));
    }
    CHECK(cudaStreamSynchronize(s));
    printf("host functions in order after their copies: %d of 4\n", ok.load());
    printf("stream callbacks: %d of 4\n", cbs.load());
    bool good = ok.load() == 4 && cbs.load() == 4;
    CHECK(cudaFreeHost(h));
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(s));
    printf(good ? "Test PASSED\n" : "Test FAILED\n");
    return good ? 0 : 1;
}
