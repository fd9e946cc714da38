// Host memory in CUDA graphs, as NVIDIA's simpleCudaGraphs, jacobiCudaGraphs
// and conjugateGradientCudaGraphs samples use it: memcpy nodes built by hand
// that read ordinary (pageable) and page-locked host memory and write a
// result into a variable on the stack, a host node that reads that result,
// and a copy into a stack variable captured from a stream. A graph reads and
// writes the host memory as it is at each launch. Every result is checked
// against the CPU; the last line is PASS.
//
// Built by nvcc like any CUDA program; its kernel is one pvgpu's host test
// double implements (by name), so CI runs it without a GPU.
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                               \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            printf("FAIL: %s at line %d: %s\n", #x, __LINE__,                  \
                   cudaGetErrorName(e_));                                      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

static const int N = 1 << 14;
static const size_t BYTES = N * sizeof(float);

struct Seen {
    const float *out;
    double sum;
};

// Host node: sums what the graph copied back, as simpleCudaGraphs' callback
// reads its result.
static void CUDART_CB sum_out(void *p) {
    Seen *s = (Seen *)p;
    double t = 0;
    for (int i = 0; i < N; i++) t += s->out[i];
    s->sum = t;
}

static cudaMemcpy3DParms copy_params(void *dst, const void *src, cudaMemcpyKind kind) {
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr((void *)src, BYTES, N, 1);
    p.dstPtr = make_cudaPitchedPtr(dst, BYTES, N, 1);
    p.extent = make_cudaExtent(BYTES, 1, 1);
    p.kind = kind;
    return p;
}

int main() {
    float *x_d, *y_d;
    CHECK(cudaMalloc(&x_d, BYTES));
    CHECK(cudaMalloc(&y_d, BYTES));
    std::vector<float> in(N), out(N);
    float *pinned;
    CHECK(cudaMallocHost(&pinned, BYTES));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // By hand: x <- in (pageable); y <- pinned; y = 2x + y; out <- y
    // (pageable); host node sums out.
    Seen seen = {out.data(), 0};
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t cx, cy, k, back, host;
    cudaMemcpy3DParms px = copy_params(x_d, in.data(), cudaMemcpyHostToDevice);
    cudaMemcpy3DParms py = copy_params(y_d, pinned, cudaMemcpyHostToDevice);
    CHECK(cudaGraphAddMemcpyNode(&cx, g, nullptr, 0, &px));
    CHECK(cudaGraphAddMemcpyNode(&cy, g, nullptr, 0, &py));
    float a = 2.0f;
    int n = N;
    void *args[] = {&a, &x_d, &y_d, &n};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)saxpy;
    kp.gridDim = dim3(N / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    cudaGraphNode_t deps[] = {cx, cy};
    CHECK(cudaGraphAddKernelNode(&k, g, deps, 2, &kp));
    cudaMemcpy3DParms pb = copy_params(out.data(), y_d, cudaMemcpyDeviceToHost);
    CHECK(cudaGraphAddMemcpyNode(&back, g, &k, 1, &pb));
    cudaHostNodeParams hp = {};
    hp.fn = sum_out;
    hp.userData = &seen;
    CHECK(cudaGraphAddHostNode(&host, g, &back, 1, &hp));
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int round = 1; round <= 3; round++) {
        // The graph reads the host memory as it is at each launch.
        double want = 0;
        for (int i = 0; i < N; i++) {
            in[i] = (float)((i + round) % 17);
            pinned[i] = (float)round;
            want += 2.0 * in[i] + round;
        }
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
        bool same = true;
        for (int i = 0; i < N; i++) same = same && out[i] == 2.0f * in[i] + (float)round;
        printf("round %d: copied back %s, host node saw sum %s\n", round, same ? "right" : "WRONG", seen.sum == want ? "right" : "WRONG");
        if (!same || seen.sum != want) exit(1);
    }

    // Captured: a copy into a variable on the stack, read after each launch
    // (conjugateGradientCudaGraphs reads its residual so).
    float r = -1.0f;
    cudaGraph_t cg;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    saxpy<<<N / 256, 256, 0, s>>>(1.0f, x_d, y_d, N);
    CHECK(cudaMemcpyAsync(&r, y_d + 5, sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamEndCapture(s, &cg));
    cudaGraphExec_t ce;
    CHECK(cudaGraphInstantiate(&ce, cg, 0));
    float y5 = out[5];
    for (int i = 0; i < 3; i++) {
        CHECK(cudaGraphLaunch(ce, s));
        CHECK(cudaStreamSynchronize(s));
        y5 += in[5];
        printf("captured copy to the stack, launch %d: %s\n", i + 1, r == y5 ? "right" : "WRONG");
        if (r != y5) exit(1);
    }

    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphExecDestroy(ce));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphDestroy(cg));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(x_d));
    CHECK(cudaFree(y_d));
    printf("PASS\n");
    return 0;
}
