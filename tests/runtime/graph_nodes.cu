// Copy nodes of pitched memory and kernel node attributes, as the runtime
// API makes them: a graph copies rows of ordinary host memory into a
// pitched device allocation (cudaMallocPitch), slices of it into a 3D one
// (cudaMalloc3D) and rows back into page-locked host memory, all at other
// pitches; the host input changes between launches and the graph reads it
// as it is at each; the nodes' parameters are read back and one is set
// (in the graph: an executable graph's copies stay one-dimensional). Then a kernel node's attributes (priority, shared
// memory carve-out) are set, read, copied and kept by a captured launch.
// Every result is checked against the CPU; the output is compared line by
// line with the native run (graph_nodes.expected); the last line is PASS.
//
// Built by nvcc like any CUDA program; its kernel is one pvgpu's host test
// double implements (by name), so CI runs it without a GPU.
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

static bool all_ok = true;

static void verdict(const char *what, bool ok) {
    all_ok = all_ok && ok;
    printf("%-48s %s\n", what, ok ? "ok" : "MISMATCH");
}

// Rows of 64 bytes: 8 of them in each of 2 slices.
static const size_t W = 64, H = 8, D = 2;
// The host input: 80 bytes from row to row; the output: 96.
static const size_t IN_PITCH = 80, OUT_PITCH = 96;

static void copy_nodes() {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<unsigned char> in(IN_PITCH * H * D);
    unsigned char *out;
    CHECK(cudaMallocHost(&out, OUT_PITCH * H * D));
    memset(out, 0, OUT_PITCH * H * D);
    void *rows;
    size_t rows_pitch;
    CHECK(cudaMallocPitch(&rows, &rows_pitch, W, H * D));
    cudaPitchedPtr vol;
    CHECK(cudaMalloc3D(&vol, make_cudaExtent(W, H, D)));

    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    // Host rows to the pitched allocation (a 2D copy of H * D rows).
    cudaMemcpy3DParms up = {};
    up.srcPtr = make_cudaPitchedPtr(in.data(), IN_PITCH, W, H * D);
    up.dstPtr = make_cudaPitchedPtr(rows, rows_pitch, W, H * D);
    up.extent = make_cudaExtent(W, H * D, 1);
    up.kind = cudaMemcpyHostToDevice;
    // Its rows as D slices of H rows of the 3D allocation.
    cudaMemcpy3DParms across = {};
    across.srcPtr = make_cudaPitchedPtr(rows, rows_pitch, W, H);
    across.dstPtr = vol;
    across.extent = make_cudaExtent(W, H, D);
    across.kind = cudaMemcpyDeviceToDevice;
    // The volume back to page-locked host rows.
    cudaMemcpy3DParms down = {};
    down.srcPtr = vol;
    down.dstPtr = make_cudaPitchedPtr(out, OUT_PITCH, W, H);
    down.extent = make_cudaExtent(W, H, D);
    down.kind = cudaMemcpyDeviceToHost;
    cudaGraphNode_t n_up, n_across, n_down;
    CHECK(cudaGraphAddMemcpyNode(&n_up, g, nullptr, 0, &up));
    CHECK(cudaGraphAddMemcpyNode(&n_across, g, &n_up, 1, &across));
    CHECK(cudaGraphAddMemcpyNode(&n_down, g, &n_across, 1, &down));

    cudaMemcpy3DParms back = {};
    CHECK(cudaGraphMemcpyNodeGetParams(n_across, &back));
    printf("device-to-device node: extent %zux%zux%zu, same source %s, same destination %s\n", back.extent.width,
           back.extent.height, back.extent.depth, back.srcPtr.ptr == rows ? "yes" : "NO",
           back.dstPtr.ptr == vol.ptr ? "yes" : "NO");

    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int launch = 0; launch < 2; launch++) {
        for (size_t i = 0; i < in.size(); i++) in[i] = (unsigned char)(i * 3 + launch * 5);
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
        bool same = true;
        for (size_t r = 0; r < H * D; r++) same = same && memcmp(&out[r * OUT_PITCH], &in[r * IN_PITCH], W) == 0;
        char what[64];
        snprintf(what, sizeof what, "launch %d: host rows round trip", launch);
        verdict(what, same);
    }

    // The first node reads every other row: refused in the executable
    // graph (its copies stay one-dimensional), set in the graph and run by
    // a new executable graph.
    up.srcPtr = make_cudaPitchedPtr(in.data(), 2 * IN_PITCH, W, H);
    up.extent = make_cudaExtent(W, H, 1);
    printf("pitched copy set in the executable graph: %s\n", cudaGetErrorName(cudaGraphExecMemcpyNodeSetParams(e, n_up, &up)));
    CHECK(cudaGraphMemcpyNodeSetParams(n_up, &up));
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (size_t i = 0; i < in.size(); i++) in[i] = (unsigned char)(255 - i);
    memset(out, 0, OUT_PITCH * H * D);
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    bool same = true;
    for (size_t r = 0; r < H; r++) same = same && memcmp(&out[r * OUT_PITCH], &in[2 * r * IN_PITCH], W) == 0;
    verdict("set in the graph: every other row", same);

    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaFree(rows));
    CHECK(cudaFree(vol.ptr));
    CHECK(cudaFreeHost(out));
    CHECK(cudaStreamDestroy(s));
}

static void kernel_attributes() {
    const int n = 1 << 12;
    float *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    std::vector<float> ones(n, 1.0f);
    CHECK(cudaMemcpy(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(y, 0, n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    float a = 2.0f;
    int len = n;
    void *args[] = {&a, &x, &y, &len};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)saxpy;
    kp.gridDim = dim3(n / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    cudaGraphNode_t k1, k2;
    CHECK(cudaGraphAddKernelNode(&k1, g, nullptr, 0, &kp));
    CHECK(cudaGraphAddKernelNode(&k2, g, &k1, 1, &kp));
    cudaKernelNodeAttrValue v = {};
    CHECK(cudaGraphKernelNodeGetAttribute(k1, cudaLaunchAttributePriority, &v));
    printf("priority never set: %d\n", v.priority);
    v.priority = -1;
    CHECK(cudaGraphKernelNodeSetAttribute(k1, cudaLaunchAttributePriority, &v));
    cudaKernelNodeAttrValue carve = {};
    carve.sharedMemCarveout = 25;
    CHECK(cudaGraphKernelNodeSetAttribute(k1, cudaLaunchAttributePreferredSharedMemoryCarveout, &carve));
    CHECK(cudaGraphKernelNodeCopyAttributes(k2, k1));
    v = {}, carve = {};
    CHECK(cudaGraphKernelNodeGetAttribute(k2, cudaLaunchAttributePriority, &v));
    CHECK(cudaGraphKernelNodeGetAttribute(k2, cudaLaunchAttributePreferredSharedMemoryCarveout, &carve));
    printf("copied to the second node: priority %d, carve-out %u\n", v.priority, carve.sharedMemCarveout);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<float> back(n);
    CHECK(cudaMemcpy(back.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (float f : back) ok = ok && f == 4.0f;
    verdict("two attributed kernels: y = 4", ok);
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));

    // A launch's attributes become its captured node's.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributePriority;
    attr.val.priority = -1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(n / 256);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, saxpy, a, (const float *)x, y, len));
    cudaGraph_t cap;
    CHECK(cudaStreamEndCapture(s, &cap));
    cudaGraphNode_t node;
    size_t count = 1;
    CHECK(cudaGraphGetNodes(cap, &node, &count));
    v = {};
    CHECK(cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributePriority, &v));
    printf("captured launch: priority %d\n", v.priority);
    CHECK(cudaGraphDestroy(cap));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaStreamDestroy(s));
}

int main() {
    copy_nodes();
    kernel_attributes();
    printf("%s\n", all_ok ? "PASS" : "FAIL");
    return all_ok ? 0 : 1;
}
