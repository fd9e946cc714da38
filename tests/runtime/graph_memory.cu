// Graph memory through the runtime API, as NVIDIA's graphMemoryNodes and
// graphMemoryFootprint samples use it: cudaMallocAsync and cudaFreeAsync
// captured into a graph, allocation and free nodes added by hand, an
// allocation a graph leaves to the program (used and freed outside the
// graph, then allocated again by the next launch), and the device's
// graph-memory attributes and trim. Every result is checked against the
// CPU; the last line is PASS.
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

static const int N = 1 << 16;
static const size_t BYTES = N * sizeof(float);
static const int BLOCKS = N / 256;

static void expect(const char *what, const float *d, float a, const std::vector<float> &xs, float b) {
    std::vector<float> got(N);
    CHECK(cudaMemcpy(got.data(), d, BYTES, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        if (got[i] != a * xs[i] + b) {
            printf("FAIL: %s: element %d is %g, expected %g\n", what, i, got[i], a * xs[i] + b);
            exit(1);
        }
    }
    printf("%s: ok\n", what);
}

int main() {
    int dev = 0;
    CHECK(cudaSetDevice(dev));
    float *x, *y;
    CHECK(cudaMalloc(&x, BYTES));
    CHECK(cudaMalloc(&y, BYTES));
    std::vector<float> xs(N);
    for (int i = 0; i < N; i++) xs[i] = (float)(i % 53);
    CHECK(cudaMemcpy(x, xs.data(), BYTES, cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // Captured: tmp = 0; tmp += 3x; y = tmp; free tmp.
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    float *tmp = nullptr;
    CHECK(cudaMallocAsync((void **)&tmp, BYTES, s));
    CHECK(cudaMemsetAsync(tmp, 0, BYTES, s));
    saxpy<<<BLOCKS, 256, 0, s>>>(3.0f, x, tmp, N);
    CHECK(cudaMemcpyAsync(y, tmp, BYTES, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaFreeAsync(tmp, s));
    CHECK(cudaStreamEndCapture(s, &g));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &count));
    printf("captured nodes: %zu\n", count);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int i = 0; i < 3; i++) {
        CHECK(cudaMemsetAsync(y, 0, BYTES, s));
        CHECK(cudaGraphLaunch(e, s));
    }
    CHECK(cudaStreamSynchronize(s));
    expect("captured allocation, three launches", y, 3.0f, xs, 0.0f);

    // By hand: allocate, set, copy out, free.
    cudaGraph_t h;
    CHECK(cudaGraphCreate(&h, 0));
    cudaMemAllocNodeParams ap = {};
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = dev;
    ap.bytesize = BYTES;
    cudaGraphNode_t alloc, set, copy, free_node;
    CHECK(cudaGraphAddMemAllocNode(&alloc, h, nullptr, 0, &ap));
    cudaMemsetParams mp = {};
    mp.dst = (void *)ap.dptr;
    mp.value = 0;
    mp.elementSize = 4;
    mp.width = N;
    mp.height = 1;
    CHECK(cudaGraphAddMemsetNode(&set, h, &alloc, 1, &mp));
    CHECK(cudaGraphAddMemcpyNode1D(&copy, h, &set, 1, y, ap.dptr, BYTES, cudaMemcpyDeviceToDevice));
    CHECK(cudaGraphAddMemFreeNode(&free_node, h, &copy, 1, ap.dptr));
    cudaMemAllocNodeParams back = {};
    CHECK(cudaGraphMemAllocNodeGetParams(alloc, &back));
    void *freed = nullptr;
    CHECK(cudaGraphMemFreeNodeGetParams(free_node, &freed));
    printf("node parameters read back: %s\n", back.dptr == ap.dptr && back.bytesize == BYTES && freed == ap.dptr ? "same" : "DIFFERENT");
    cudaGraphExec_t he;
    CHECK(cudaGraphInstantiate(&he, h, 0));
    CHECK(cudaMemsetAsync(y, 0xff, BYTES, s));
    CHECK(cudaGraphLaunch(he, s));
    CHECK(cudaStreamSynchronize(s));
    expect("allocation node set and copied out", y, 0.0f, xs, 0.0f);

    // An allocation the graph leaves to the program.
    cudaGraph_t k;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    float *kept = nullptr;
    CHECK(cudaMallocAsync((void **)&kept, BYTES, s));
    CHECK(cudaMemcpyAsync(kept, x, BYTES, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaStreamEndCapture(s, &k));
    cudaGraphExec_t ke;
    CHECK(cudaGraphInstantiate(&ke, k, 0));
    for (int round = 0; round < 2; round++) {
        CHECK(cudaGraphLaunch(ke, s));
        saxpy<<<BLOCKS, 256, 0, s>>>(1.0f, x, kept, N);
        CHECK(cudaMemcpyAsync(y, kept, BYTES, cudaMemcpyDeviceToDevice, s));
        CHECK(cudaFreeAsync(kept, s));
        CHECK(cudaStreamSynchronize(s));
        expect(round == 0 ? "kept allocation used outside" : "kept allocation again", y, 2.0f, xs, 0.0f);
    }

    size_t high = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemHigh, &high));
    printf("graph memory high-water mark at least one allocation: %s\n", high >= BYTES ? "yes" : "no");
    size_t zero = 0;
    CHECK(cudaDeviceSetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemHigh, &zero));
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphExecDestroy(he));
    CHECK(cudaGraphExecDestroy(ke));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphDestroy(h));
    CHECK(cudaGraphDestroy(k));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaDeviceGraphMemTrim(dev));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    printf("PASS\n");
    return 0;
}
