// CUDA graphs through the runtime API, as applications and frameworks use
// them: work captured across two streams and replayed, a graph re-captured
// each iteration and applied with cudaGraphExecUpdate instead of being
// instantiated again, a graph built by hand (memset, kernel, 1D copy, child
// graph) with kernel parameters changed in the executable graph, a
// capture invalidated by a synchronising call, and host functions in
// graphs (captured with cudaLaunchHostFunc and added by hand, run at every
// launch in graph order, also while the program makes no CUDA call).
// Every result is checked against the CPU; the last line is PASS.
//
// Built by nvcc like any CUDA program; its kernels are ones pvgpu's host
// test double implements (by name), so CI runs it without a GPU.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
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

extern "C" __global__ void mat_sum(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

static const int N = 1 << 16;
static const int BLOCKS = N / 256;

static std::vector<float> read(const float *d) {
    std::vector<float> h(N);
    CHECK(cudaMemcpy(h.data(), d, N * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

static void expect(const char *what, const float *d, const std::vector<float> &want) {
    std::vector<float> got = read(d);
    for (int i = 0; i < N; i++) {
        if (got[i] != want[i]) {
            printf("FAIL: %s: element %d is %g, expected %g\n", what, i, got[i], want[i]);
            exit(1);
        }
    }
    printf("%s: ok\n", what);
}

// y = 1; y += 2x on s1; forked to s2: z = x + y; joined: y += z.
static void capture_fork_join(const float *x, float *y, float *z, const std::vector<float> &xs) {
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(s1, &st));
    if (st != cudaStreamCaptureStatusActive) {
        printf("FAIL: s1 is not capturing\n");
        exit(1);
    }
    CHECK(cudaMemsetAsync(y, 0, N * sizeof(float), s1));
    saxpy<<<BLOCKS, 256, 0, s1>>>(1.0f, x, y, N);  // y = x
    CHECK(cudaEventRecord(fork, s1));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    mat_sum<<<BLOCKS, 256, 0, s2>>>(x, y, z, N);  // z = 2x
    CHECK(cudaEventRecord(join, s2));
    CHECK(cudaStreamWaitEvent(s1, join, 0));
    saxpy<<<BLOCKS, 256, 0, s1>>>(3.0f, z, y, N);  // y = 7x
    CHECK(cudaGetLastError());
    CHECK(cudaStreamEndCapture(s1, &g));
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
    printf("captured nodes: %zu\n", nodes);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    std::vector<float> y_want(N), z_want(N);
    for (int i = 0; i < N; i++) {
        z_want[i] = 2 * xs[i];
        y_want[i] = 7 * xs[i];
    }
    for (int round = 0; round < 3; round++) {
        // On s1: a non-blocking stream does not wait for the legacy
        // default stream, where cudaMemset would run.
        CHECK(cudaMemsetAsync(y, 0xff, N * sizeof(float), s1));
        CHECK(cudaGraphLaunch(e, s1));
        CHECK(cudaStreamSynchronize(s1));
    }
    expect("fork and join, replayed", y, y_want);
    expect("the forked stream's work", z, z_want);
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaEventDestroy(fork));
    CHECK(cudaEventDestroy(join));
}

// Each iteration captures y += a*x with a new a, and updates the one
// executable graph from the new capture.
static void recapture_and_update(const float *x, float *y, const std::vector<float> &xs) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemset(y, 0, N * sizeof(float)));
    cudaGraphExec_t e = nullptr;
    std::vector<float> want(N, 0.0f);
    int instantiated = 0;
    for (int it = 1; it <= 5; it++) {
        cudaGraph_t g;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        saxpy<<<BLOCKS, 256, 0, s>>>((float)it, x, y, N);
        CHECK(cudaStreamEndCapture(s, &g));
        cudaGraphExecUpdateResultInfo info;
        if (e == nullptr || cudaGraphExecUpdate(e, g, &info) != cudaSuccess) {
            (void)cudaGetLastError();
            if (e) CHECK(cudaGraphExecDestroy(e));
            CHECK(cudaGraphInstantiate(&e, g, 0));
            instantiated++;
        }
        CHECK(cudaGraphDestroy(g));
        CHECK(cudaGraphLaunch(e, s));
        for (int i = 0; i < N; i++) want[i] += it * xs[i];
    }
    CHECK(cudaStreamSynchronize(s));
    printf("instantiated %d time(s) for 5 captures\n", instantiated);
    expect("re-captured and updated", y, want);
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaStreamDestroy(s));
}

// memset y = 1; y += a*x; out = y (1D copy node); then the whole graph as a
// child of another, followed by out += x.
static void built_by_hand(const float *x, float *y, float *out, const std::vector<float> &xs) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemsetParams ms = {};
    ms.dst = y;
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    const float one = 1.0f;
    memcpy(&ms.value, &one, 4);
    cudaGraphNode_t set, kern, copy;
    CHECK(cudaGraphAddMemsetNode(&set, g, nullptr, 0, &ms));
    float a = 3.0f;
    int n = N;
    const float *xp = x;
    float *yp = y;
    void *args[] = {&a, &xp, &yp, &n};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)saxpy;
    kp.gridDim = dim3(BLOCKS);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&kern, g, &set, 1, &kp));
    CHECK(cudaGraphAddMemcpyNode1D(&copy, g, &kern, 1, out, y, N * sizeof(float), cudaMemcpyDeviceToDevice));
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiateWithFlags(&e, g, 0));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<float> want(N);
    for (int i = 0; i < N; i++) want[i] = 3 * xs[i] + 1;
    expect("built by hand", out, want);

    a = 5.0f;
    CHECK(cudaGraphExecKernelNodeSetParams(e, kern, &kp));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++) want[i] = 5 * xs[i] + 1;
    expect("kernel parameters set in the executable graph", out, want);

    cudaGraph_t outer;
    CHECK(cudaGraphCreate(&outer, 0));
    cudaGraphNode_t child, after;
    CHECK(cudaGraphAddChildGraphNode(&child, outer, nullptr, 0, g));
    float a1 = 1.0f;
    float *op = out;
    void *args2[] = {&a1, &xp, &op, &n};
    cudaKernelNodeParams kp2 = kp;
    kp2.kernelParams = args2;
    CHECK(cudaGraphAddKernelNode(&after, outer, &child, 1, &kp2));
    cudaGraphExec_t e2;
    CHECK(cudaGraphInstantiate(&e2, outer, 0));
    CHECK(cudaGraphUpload(e2, s));
    CHECK(cudaGraphLaunch(e2, s));
    CHECK(cudaStreamSynchronize(s));
    // The child is a copy of g as it was: a = 3.
    for (int i = 0; i < N; i++) want[i] = 3 * xs[i] + 1 + xs[i];
    expect("a child graph, then a kernel", out, want);
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphExecDestroy(e2));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphDestroy(outer));
    CHECK(cudaStreamDestroy(s));
}

static void invalidated(float *y) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemsetAsync(y, 0, 16, s));
    cudaError_t sync = cudaDeviceSynchronize();
    cudaError_t end = cudaStreamEndCapture(s, &g);
    printf("synchronising during capture: %s, then %s\n", cudaGetErrorName(sync), cudaGetErrorName(end));
    (void)cudaGetLastError();
    if (sync != cudaErrorStreamCaptureUnsupported || end != cudaErrorStreamCaptureInvalidated) {
        printf("FAIL: unexpected statuses\n");
        exit(1);
    }
    CHECK(cudaStreamDestroy(s));
}

// What host nodes record: each appends its letter.
static std::string trail;
static void CUDART_CB note(void *letter) { trail += *(const char *)letter; }
static volatile int raised = 0;
static void CUDART_CB raise_flag(void *) { raised = 1; }

// Captured: y = x; y += x; host 'A'; y += x; host 'B'. By hand: host 'C',
// then the captured graph as a child, then host 'D'. Three launches.
static void host_nodes(const float *x, float *y, const std::vector<float> &xs) {
    static const char A = 'A', B = 'B', C = 'C', D = 'D';
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g, outer;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemcpyAsync(y, x, N * sizeof(float), cudaMemcpyDeviceToDevice, s));
    saxpy<<<BLOCKS, 256, 0, s>>>(1.0f, x, y, N);
    CHECK(cudaLaunchHostFunc(s, note, (void *)&A));
    saxpy<<<BLOCKS, 256, 0, s>>>(1.0f, x, y, N);
    CHECK(cudaLaunchHostFunc(s, note, (void *)&B));
    CHECK(cudaStreamEndCapture(s, &g));
    if (!trail.empty()) {
        printf("FAIL: a captured host function ran at capture\n");
        exit(1);
    }
    CHECK(cudaGraphCreate(&outer, 0));
    cudaGraphNode_t c, child, d;
    cudaHostNodeParams hp = {};
    hp.fn = note;
    hp.userData = (void *)&C;
    CHECK(cudaGraphAddHostNode(&c, outer, nullptr, 0, &hp));
    CHECK(cudaGraphAddChildGraphNode(&child, outer, &c, 1, g));
    hp.userData = (void *)&D;
    CHECK(cudaGraphAddHostNode(&d, outer, &child, 1, &hp));
    cudaHostNodeParams back = {};
    CHECK(cudaGraphHostNodeGetParams(d, &back));
    if (back.fn != note || back.userData != (void *)&D) {
        printf("FAIL: host node parameters read back wrong\n");
        exit(1);
    }
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, outer, 0));
    for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    printf("host nodes ran: %s\n", trail.c_str());
    if (trail != "CABDCABDCABD") {
        printf("FAIL: expected CABDCABDCABD\n");
        exit(1);
    }
    std::vector<float> want(N);
    for (int i = 0; i < N; i++) want[i] = 3 * xs[i];
    expect("work around host nodes", y, want);
    // Changed in the executable graph only.
    trail.clear();
    hp.userData = (void *)&A;
    CHECK(cudaGraphExecHostNodeSetParams(e, d, &hp));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    printf("after exec set: %s\n", trail.c_str());
    if (trail != "CABA") {
        printf("FAIL: expected CABA\n");
        exit(1);
    }

    // A host node runs while the program makes no CUDA call.
    cudaGraph_t flag;
    cudaGraphNode_t raise;
    CHECK(cudaGraphCreate(&flag, 0));
    hp.fn = raise_flag;
    hp.userData = nullptr;
    CHECK(cudaGraphAddHostNode(&raise, flag, nullptr, 0, &hp));
    cudaGraphExec_t fe;
    CHECK(cudaGraphInstantiate(&fe, flag, 0));
    CHECK(cudaGraphLaunch(fe, s));
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!raised && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    printf("host node ran without a further call: %s\n", raised ? "yes" : "no");
    if (!raised) exit(1);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(fe));
    CHECK(cudaGraphDestroy(flag));
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(outer));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
}

int main() {
    float *x, *y, *z;
    CHECK(cudaMalloc(&x, N * sizeof(float)));
    CHECK(cudaMalloc(&y, N * sizeof(float)));
    CHECK(cudaMalloc(&z, N * sizeof(float)));
    std::vector<float> xs(N);
    for (int i = 0; i < N; i++) xs[i] = (float)(i % 101);
    CHECK(cudaMemcpy(x, xs.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    capture_fork_join(x, y, z, xs);
    recapture_and_update(x, y, xs);
    built_by_hand(x, y, z, xs);
    invalidated(y);
    host_nodes(x, y, xs);
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaFree(z));
    printf("PASS\n");
    return 0;
}
