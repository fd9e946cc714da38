// Stream capture and graphs through the driver API, as programs and
// frameworks use them: a capture forked and joined across two streams and
// replayed, a graph built node by node and changed after instantiation
// (kernel parameters, cuGraphExecUpdate), a child graph, the generic node
// interface and the executable graph's node setters, capture into an
// existing graph, stream memory operations, node parameters and kernel
// node attributes, a pitched copy node, and what capture refuses (each
// call's CUresult is printed, so a run through pvgpu is compared with the
// native run call by call).
//
//   graphs_driver kernels.fatbin
#include <atomic>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <unistd.h>
#include <vector>

#define CU(x)                                                                  \
    do {                                                                       \
        CUresult r_ = (x);                                                     \
        if (r_ != CUDA_SUCCESS) {                                              \
            const char *s_;                                                    \
            cuGetErrorName(r_, &s_);                                           \
            printf("CUDA error %s at line %d\n", s_, __LINE__);                \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

// Prints what a call answered (the refusals are part of the output).
static void say(const char *what, CUresult r) {
    const char *s;
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS) s = "?";
    printf("%-44s %s\n", what, s);
}

static int status(CUstream s) {
    CUstreamCaptureStatus st;
    CUresult r = cuStreamIsCapturing(s, &st);
    return r == CUDA_SUCCESS ? (int)st : -(int)r;
}

static const int N = 1 << 14;
static bool all_ok = true;

// Compares a device sum with the CPU's, prints both.
static void check(const char *what, double got, double want) {
    bool ok = got == want;
    all_ok = all_ok && ok;
    printf("%-44s %.0f%s\n", what, got, ok ? "" : " (MISMATCH)");
    if (!ok) printf("  expected %.0f\n", want);
}

static double cpu_sum(const std::vector<float> &v) {
    double s = 0;
    for (float x : v) s += x;
    return s;
}

static double sum_of(CUdeviceptr d) {
    std::vector<float> h(N);
    CU(cuMemcpyDtoH(h.data(), d, N * 4));
    double s = 0;
    for (float v : h) s += v;
    return s;
}

static size_t count_nodes(CUgraph g) {
    size_t n = 0;
    CU(cuGraphGetNodes(g, nullptr, &n));
    return n;
}

static size_t count_edges(CUgraph g) {
    size_t n = 0;
    CU(cuGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
    return n;
}

struct Kernels {
    CUfunction saxpy, mat_sum, spin;
};

static void saxpy_on(const Kernels &k, CUstream s, float a, CUdeviceptr x, CUdeviceptr y) {
    int n = N;
    void *args[] = {&a, &x, &y, &n};
    CU(cuLaunchKernel(k.saxpy, N / 256, 1, 1, 256, 1, 1, 0, s, args, nullptr));
}

// y = 2x + y on s1; forked: z = x + y, w = z on s2; joined: y = z + y.
static void captured_replay(const Kernels &k, CUdeviceptr x, CUdeviceptr y, CUdeviceptr z, CUdeviceptr w, const std::vector<float> &xs) {
    CUstream s1, s2;
    CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent fork, join;
    CU(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    CU(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    CU(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    printf("capturing: s1 %d s2 %d\n", status(s1), status(s2));
    saxpy_on(k, s1, 2.0f, x, y);
    CU(cuEventRecord(fork, s1));
    CU(cuStreamWaitEvent(s2, fork, 0));
    CUstreamCaptureStatus st;
    cuuint64_t id1, id2;
    const CUgraphNode *deps;
    size_t ndeps;
    CU(cuStreamGetCaptureInfo(s1, &st, &id1, nullptr, nullptr, nullptr, nullptr));
    CU(cuStreamGetCaptureInfo(s2, &st, &id2, nullptr, &deps, nullptr, &ndeps));
    printf("s2 joined: status %d same id %d deps %zu\n", (int)st, id1 == id2, ndeps);
    int n = N;
    void *sum_args[] = {&x, &y, &z, &n};
    CU(cuLaunchKernel(k.mat_sum, N / 256, 1, 1, 256, 1, 1, 0, s2, sum_args, nullptr));
    CU(cuMemcpyDtoDAsync(w, z, N * 4, s2));
    CU(cuEventRecord(join, s2));
    CU(cuStreamWaitEvent(s1, join, 0));
    saxpy_on(k, s1, 1.0f, z, y);
    CUgraph g;
    CU(cuStreamEndCapture(s1, &g));
    printf("ended: s1 %d s2 %d nodes %zu edges %zu\n", status(s1), status(s2), count_nodes(g), count_edges(g));
    std::vector<float> ys(N, 1.0f), zs(N);
    check("before launch: y", sum_of(y), cpu_sum(ys));
    CUgraphExec e;
    CU(cuGraphInstantiate(&e, g, 0));
    CU(cuGraphDestroy(g));
    for (int round = 0; round < 3; round++) {
        CUstream s = round == 1 ? nullptr : s1;
        CU(cuGraphLaunch(e, s));
        CU(cuStreamSynchronize(s));
        for (int i = 0; i < N; i++) {
            ys[i] = 2 * xs[i] + ys[i];
            zs[i] = xs[i] + ys[i];
            ys[i] = zs[i] + ys[i];
        }
        char what[64];
        snprintf(what, sizeof what, "round %d: y", round);
        check(what, sum_of(y), cpu_sum(ys));
        snprintf(what, sizeof what, "round %d: w", round);
        check(what, sum_of(w), cpu_sum(zs));
    }
    CU(cuGraphExecDestroy(e));
    CU(cuStreamDestroy(s1));
    CU(cuStreamDestroy(s2));
    CU(cuEventDestroy(fork));
    CU(cuEventDestroy(join));
}

static void refusals(CUdeviceptr d) {
    CUstream s1, s2;
    CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent e;
    CU(cuEventCreate(&e, 0));
    CUgraph g = nullptr;
    const CUstreamCaptureMode global = CU_STREAM_CAPTURE_MODE_GLOBAL;
    say("begin capture of the legacy stream", cuStreamBeginCapture(nullptr, global));
    say("begin capture", cuStreamBeginCapture(s1, global));
    say("begin capture again", cuStreamBeginCapture(s1, global));
    say("end capture", cuStreamEndCapture(s1, &g));
    printf("graph %s\n", g ? "returned" : "null");
    CU(cuGraphDestroy(g));

    say("begin capture", cuStreamBeginCapture(s1, global));
    say("query the capturing stream", cuStreamQuery(s1));
    printf("status after it %d\n", status(s1));
    say("end capture", cuStreamEndCapture(s1, &g));

    say("begin capture", cuStreamBeginCapture(s1, global));
    say("memset", cuMemsetD8Async(d, 1, 4096, s1));
    say("synchronize the context", cuCtxSynchronize());
    printf("status after it %d\n", status(s1));
    say("end capture", cuStreamEndCapture(s1, &g));

    say("begin capture", cuStreamBeginCapture(s1, global));
    say("memset", cuMemsetD8Async(d, 2, 4096, s1));
    say("record", cuEventRecord(e, s1));
    say("wait", cuStreamWaitEvent(s2, e, 0));
    say("memset on the forked stream", cuMemsetD8Async(d, 3, 4096, s2));
    say("end capture on the forked stream", cuStreamEndCapture(s2, &g));
    say("end capture unjoined", cuStreamEndCapture(s1, &g));
    printf("status after it: s1 %d s2 %d\n", status(s1), status(s2));

    // What a global capture refuses of calls on other streams and of
    // memory management, and what a relaxed one lets through.
    CUdeviceptr extra = 0;
    unsigned char b[4096];
    say("begin capture", cuStreamBeginCapture(s1, global));
    say("memset", cuMemsetD8Async(d, 5, 4096, s1));
    say("synchronize another stream", cuStreamSynchronize(s2));
    say("synchronous copy to the device", cuMemcpyHtoD(d, b, 16));
    say("allocate", cuMemAlloc(&extra, 4096));
    printf("status after them %d\n", status(s1));
    say("end capture", cuStreamEndCapture(s1, &g));
    if (extra) CU(cuMemFree(extra));
    extra = 0;

    CU(cuMemsetD8(d, 9, 4096));
    say("begin relaxed capture", cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_RELAXED));
    say("memset", cuMemsetD8Async(d, 4, 4096, s1));
    say("allocate", cuMemAlloc(&extra, 4096));
    say("free", cuMemFree(extra));
    say("end capture", cuStreamEndCapture(s1, &g));
    CU(cuMemcpyDtoH(b, d, 4096));
    printf("captured memset did not run: %d\n", b[0] == 9 && b[4095] == 9);
    CU(cuGraphDestroy(g));

    say("begin relaxed capture", cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_RELAXED));
    say("synchronize the context", cuCtxSynchronize());
    printf("status after it %d\n", status(s1));
    say("end capture", cuStreamEndCapture(s1, &g));

    // Another thread's allocation while this thread captures: a
    // thread-local capture binds only this thread; a global one binds
    // every thread in global mode, not one in relaxed mode (as XLA's
    // autotuner copies on one thread while another captures).
    CUcontext ctx;
    CU(cuCtxGetCurrent(&ctx));
    g = nullptr;
    auto other_thread = [&](const char *what, CUstreamCaptureMode mode) {
        std::thread t([&] {
            CU(cuCtxSetCurrent(ctx));
            CUstreamCaptureMode m = mode;
            CU(cuThreadExchangeStreamCaptureMode(&m));
            CUdeviceptr p = 0;
            say(what, cuMemAlloc(&p, 4096));
            if (p) CU(cuMemFree(p));
        });
        t.join();
    };
    say("begin thread-local capture", cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    say("memset", cuMemsetD8Async(d, 6, 4096, s1));
    other_thread("allocate on another thread", CU_STREAM_CAPTURE_MODE_GLOBAL);
    say("allocate on this thread", cuMemAlloc(&extra, 4096));
    say("end capture", cuStreamEndCapture(s1, &g));
    if (g) CU(cuGraphDestroy(g));
    g = nullptr;
    say("begin capture", cuStreamBeginCapture(s1, global));
    say("memset", cuMemsetD8Async(d, 7, 4096, s1));
    other_thread("allocate on another thread, relaxed", CU_STREAM_CAPTURE_MODE_RELAXED);
    other_thread("allocate on another thread", CU_STREAM_CAPTURE_MODE_GLOBAL);
    printf("status after them %d\n", status(s1));
    say("end capture", cuStreamEndCapture(s1, &g));
    CU(cuStreamDestroy(s1));
    CU(cuStreamDestroy(s2));
    CU(cuEventDestroy(e));
}

static CUDA_KERNEL_NODE_PARAMS saxpy_node(const Kernels &k, void **args) {
    CUDA_KERNEL_NODE_PARAMS p = {};
    p.func = k.saxpy;
    p.gridDimX = N / 256;
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 256;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    return p;
}

static void explicit_graph(const Kernels &k, CUcontext ctx, CUdeviceptr x, CUdeviceptr y, CUdeviceptr out, const std::vector<float> &xs) {
    auto want = [&](float a) {
        double s = 0;
        for (float v : xs) s += a * v + 1.0f;
        return s;
    };
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUgraph g;
    CU(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS ms = {};
    ms.dst = y;
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    float one = 1.0f;
    memcpy(&ms.value, &one, 4);
    CUgraphNode set, kern, copy;
    CU(cuGraphAddMemsetNode(&set, g, nullptr, 0, &ms, ctx));
    float a = 3.0f;
    int n = N;
    void *args[] = {&a, &x, &y, &n};
    CUDA_KERNEL_NODE_PARAMS kp = saxpy_node(k, args);
    CU(cuGraphAddKernelNode(&kern, g, &set, 1, &kp));
    CUDA_MEMCPY3D cp = {};
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = y;
    cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.dstDevice = out;
    cp.WidthInBytes = N * 4;
    cp.Height = 1;
    cp.Depth = 1;
    CU(cuGraphAddMemcpyNode(&copy, g, &kern, 1, &cp, ctx));
    CUgraphNodeType t;
    CU(cuGraphNodeGetType(kern, &t));
    size_t nd = 0;
    CU(cuGraphNodeGetDependencies(copy, nullptr, nullptr, &nd));
    printf("explicit: nodes %zu edges %zu kernel type %d copy deps %zu\n", count_nodes(g), count_edges(g), (int)t, nd);
    CUgraphExec e;
    CU(cuGraphInstantiate(&e, g, 0));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("a=3", sum_of(out), want(3));
    a = 5.0f;
    CU(cuGraphExecKernelNodeSetParams(e, kern, &kp));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("a=5 in the executable graph", sum_of(out), want(5));
    a = 7.0f;
    CU(cuGraphKernelNodeSetParams(kern, &kp));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("a=7 in the graph only", sum_of(out), want(5));
    CUgraphExecUpdateResultInfo info;
    say("update from the graph", cuGraphExecUpdate(e, g, &info));
    printf("update result %d\n", (int)info.result);
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("a=7 after the update", sum_of(out), want(7));

    CUgraph bigger;
    CU(cuGraphClone(&bigger, g));
    CUgraphNode empty;
    CU(cuGraphAddEmptyNode(&empty, bigger, nullptr, 0));
    say("update from a graph with a node more", cuGraphExecUpdate(e, bigger, &info));
    printf("update result %d\n", (int)info.result);

    CUgraph outer;
    CU(cuGraphCreate(&outer, 0));
    CUgraphNode child_node, twice;
    CU(cuGraphAddChildGraphNode(&child_node, outer, nullptr, 0, g));
    CUgraph child;
    CU(cuGraphChildGraphNodeGetGraph(child_node, &child));
    printf("child nodes %zu\n", count_nodes(child));
    float a1 = 1.0f;
    void *args2[] = {&a1, &x, &out, &n};
    CUDA_KERNEL_NODE_PARAMS kp2 = saxpy_node(k, args2);
    CU(cuGraphAddKernelNode(&twice, outer, &child_node, 1, &kp2));
    CUgraphExec e2;
    CU(cuGraphInstantiate(&e2, outer, 0));
    CU(cuGraphLaunch(e2, s));
    CU(cuStreamSynchronize(s));
    double twice_want = 0;
    for (float v : xs) twice_want += (7 * v + 1.0f) + v;
    check("child then saxpy", sum_of(out), twice_want);
    CU(cuGraphRemoveDependencies(outer, &child_node, &twice, nullptr, 1));
    printf("edges after removal %zu\n", count_edges(outer));
    CU(cuGraphDestroyNode(child_node));
    printf("nodes after destroying the child %zu\n", count_nodes(outer));
    CU(cuGraphExecDestroy(e));
    CU(cuGraphExecDestroy(e2));
    CU(cuGraphDestroy(g));
    CU(cuGraphDestroy(bigger));
    CU(cuGraphDestroy(outer));
    CU(cuStreamDestroy(s));
}


static float bits_of(float v, unsigned *out) {
    memcpy(out, &v, 4);
    return v;
}

static double line_sum(const std::vector<float> &xs, float a, float b) {
    double s = 0;
    for (float v : xs) s += a * v + b;
    return s;
}

// The generic node interface and the setters of executable graphs' nodes:
// memset, kernel and copy nodes added with cuGraphAddNode, then changed in
// the executable graph one by one (memset value, a node disabled, the
// copy's destination, the kernel through cuGraphExecNodeSetParams), a
// child graph swapped for a changed one, and capture into an existing
// graph.
static void generic_nodes(const Kernels &k, CUcontext ctx, CUdeviceptr x, CUdeviceptr y, CUdeviceptr out, CUdeviceptr z,
                          const std::vector<float> &xs) {
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUgraph g;
    CU(cuGraphCreate(&g, 0));
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMSET;
    p.memset.dst = y;
    p.memset.elementSize = 4;
    p.memset.width = N;
    p.memset.height = 1;
    bits_of(2.0f, &p.memset.value);
    p.memset.ctx = ctx;
    CUgraphNode set, kern, copy;
    CU(cuGraphAddNode(&set, g, nullptr, nullptr, 0, &p));
    float a = 2.0f;
    int n = N;
    void *args[] = {&a, &x, &y, &n};
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_KERNEL;
    p.kernel.func = k.saxpy;
    p.kernel.gridDimX = N / 256;
    p.kernel.gridDimY = p.kernel.gridDimZ = 1;
    p.kernel.blockDimX = 256;
    p.kernel.blockDimY = p.kernel.blockDimZ = 1;
    p.kernel.kernelParams = args;
    CUgraphNodeParams kp = p;
    CU(cuGraphAddNode(&kern, g, &set, nullptr, 1, &p));
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    p.memcpy.copyCtx = ctx;
    CUDA_MEMCPY3D &c = p.memcpy.copyParams;
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = y;
    c.dstDevice = out;
    c.WidthInBytes = N * 4;
    c.Height = c.Depth = 1;
    CUDA_MEMCPY3D to_z = c;
    to_z.dstDevice = z;
    CU(cuGraphAddNode(&copy, g, &kern, nullptr, 1, &p));
    CUgraphExec e;
    CU(cuGraphInstantiate(&e, g, 0));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("generic nodes: y = 2x + 2", sum_of(out), line_sum(xs, 2, 2));

    CUDA_MEMSET_NODE_PARAMS ms = {};
    ms.dst = y;
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    bits_of(3.0f, &ms.value);
    CU(cuGraphExecMemsetNodeSetParams(e, set, &ms, ctx));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("memset set in the executable graph", sum_of(out), line_sum(xs, 2, 3));

    CU(cuGraphNodeSetEnabled(e, kern, 0));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("kernel node disabled", sum_of(out), line_sum(xs, 0, 3));
    CU(cuGraphNodeSetEnabled(e, kern, 1));

    CU(cuGraphExecMemcpyNodeSetParams(e, copy, &to_z, ctx));
    a = 4.0f;
    CU(cuGraphExecNodeSetParams(e, kern, &kp));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("copy moved, kernel set generically: z", sum_of(z), line_sum(xs, 4, 3));
    check("and out unchanged", sum_of(out), line_sum(xs, 0, 3));

    // A child graph swapped for the graph changed since.
    CUgraph outer;
    CU(cuGraphCreate(&outer, 0));
    CUgraphNode child;
    CU(cuGraphAddChildGraphNode(&child, outer, nullptr, 0, g));
    CUgraphExec e2;
    CU(cuGraphInstantiate(&e2, outer, 0));
    a = 6.0f;
    CUDA_KERNEL_NODE_PARAMS k6 = saxpy_node(k, args);
    CU(cuGraphKernelNodeSetParams(kern, &k6));
    CU(cuGraphLaunch(e2, s));
    CU(cuStreamSynchronize(s));
    check("child graph as instantiated", sum_of(out), line_sum(xs, 2, 2));
    say("swap the child graph", cuGraphExecChildGraphNodeSetParams(e2, child, g));
    CU(cuGraphLaunch(e2, s));
    CU(cuStreamSynchronize(s));
    check("child graph swapped", sum_of(out), line_sum(xs, 6, 2));

    // Capture into an existing graph, after its memset.
    CUgraph h;
    CU(cuGraphCreate(&h, 0));
    CUgraphNode first;
    CU(cuGraphAddMemsetNode(&first, h, nullptr, 0, &ms, ctx));
    CU(cuStreamBeginCaptureToGraph(s, h, &first, nullptr, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    saxpy_on(k, s, 1.0f, x, y);
    CUgraph captured;
    CU(cuStreamEndCapture(s, &captured));
    printf("captured into the graph given: %d, nodes %zu\n", captured == h, count_nodes(h));
    CUgraphExec e3;
    CU(cuGraphInstantiate(&e3, h, 0));
    CU(cuGraphLaunch(e3, s));
    CU(cuStreamSynchronize(s));
    check("captured after a node: y = x + 3", sum_of(y), line_sum(xs, 1, 3));
    for (CUgraphExec x_ : {e, e2, e3}) CU(cuGraphExecDestroy(x_));
    for (CUgraph g_ : {g, outer, h}) CU(cuGraphDestroy(g_));
    CU(cuStreamDestroy(s));
}

// What a capture's next work follows, replaced and added to by hand
// (cuStreamUpdateCaptureDependencies): A; B after A; C after A only (set);
// D after C and A (added).
static void capture_dependencies(const Kernels &k, CUdeviceptr x, CUdeviceptr y) {
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus st;
    const CUgraphNode *deps = nullptr;
    size_t n = 0;
    saxpy_on(k, s, 1.0f, x, y);
    CU(cuStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, nullptr, &n));
    CUgraphNode a = deps[0];
    saxpy_on(k, s, 1.0f, x, y);
    CU(cuStreamUpdateCaptureDependencies(s, &a, nullptr, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    saxpy_on(k, s, 1.0f, x, y);
    CU(cuStreamUpdateCaptureDependencies(s, &a, nullptr, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES));
    CU(cuStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, nullptr, &n));
    printf("%-44s %zu\n", "dependencies after set and add", n);
    saxpy_on(k, s, 1.0f, x, y);
    CUgraph g;
    CU(cuStreamEndCapture(s, &g));
    printf("%-44s %zu nodes, %zu edges\n", "capture with updated dependencies", count_nodes(g), count_edges(g));
    check("captured nodes after dependency updates", (double)count_nodes(g), 4);
    check("captured edges after dependency updates", (double)count_edges(g), 4);
    CU(cuGraphDestroy(g));
    CU(cuStreamDestroy(s));
}

static std::atomic<int> host_ran{0};
static void CUDA_CB mark_ran(void *) { host_ran.fetch_add(1); }

// A host function waits behind a long kernel on one stream while another
// stream captures in global mode: the capture goes through (the driver
// runs host functions on a thread of its own, which disturbs no capture),
// and the function runs once.
static void capture_beside_host_function(const Kernels &k, CUdeviceptr x, CUdeviceptr y) {
    CUstream busy, cap;
    CU(cuStreamCreate(&busy, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING));
    long long cycles = 200000000;
    void *args[] = {&cycles};
    CU(cuLaunchKernel(k.spin, 1, 1, 1, 1, 1, 1, 0, busy, args, nullptr));
    CU(cuLaunchHostFunc(busy, mark_ran, nullptr));
    CU(cuStreamBeginCapture(cap, CU_STREAM_CAPTURE_MODE_GLOBAL));
    saxpy_on(k, cap, 1.0f, x, y);
    usleep(50000);
    saxpy_on(k, cap, 1.0f, x, y);
    CUgraph g = nullptr;
    CUresult r = cuStreamEndCapture(cap, &g);
    say("capture beside a pending host function", r);
    if (r != CUDA_SUCCESS) all_ok = false;
    if (g) CU(cuGraphDestroy(g));
    CU(cuStreamSynchronize(busy));
    check("host function beside a capture ran once", host_ran.load(), 1);
    CU(cuStreamDestroy(busy));
    CU(cuStreamDestroy(cap));
}

static std::atomic<int> ran_a{0}, ran_b{0}, ran_c{0};
static void CUDA_CB count(void *c) { static_cast<std::atomic<int> *>(c)->fetch_add(1); }
static void CUDA_CB stream_callback(CUstream, CUresult, void *) {}

// Host functions in graphs: one captured between two kernels, one added
// through the generic interface, four launches; then the generic one
// switched in the executable graph. A stream callback during capture is
// refused (its answer printed).
static void host_nodes(const Kernels &k, CUdeviceptr x, CUdeviceptr y) {
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    saxpy_on(k, s, 1.0f, x, y);
    say("host function during capture", cuLaunchHostFunc(s, count, &ran_a));
    saxpy_on(k, s, 1.0f, x, y);
    CUgraph g;
    CU(cuStreamEndCapture(s, &g));
    check("captured host function ran at capture", ran_a.load(), 0);
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_HOST;
    p.host.fn = count;
    p.host.userData = &ran_b;
    CUgraphNode generic;
    CU(cuGraphAddNode(&generic, g, nullptr, nullptr, 0, &p));
    CUgraphNodeType t;
    CU(cuGraphNodeGetType(generic, &t));
    check("generic host node's type", (double)t, CU_GRAPH_NODE_TYPE_HOST);
    CUgraphExec e;
    CU(cuGraphInstantiate(&e, g, 0));
    for (int i = 0; i < 4; i++) CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("captured host node runs per launch", ran_a.load(), 4);
    check("generic host node runs per launch", ran_b.load(), 4);
    p.host.userData = &ran_c;
    CU(cuGraphExecNodeSetParams(e, generic, &p));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("host node switched in the executable graph", ran_c.load() * 10 + ran_b.load(), 14);
    CUDA_HOST_NODE_PARAMS back;
    CU(cuGraphHostNodeGetParams(generic, &back));
    check("graph keeps its host node's data", back.userData == &ran_b, 1);
    CU(cuGraphExecDestroy(e));
    CU(cuGraphDestroy(g));

    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    say("stream callback during capture", cuStreamAddCallback(s, stream_callback, nullptr, 0));
    printf("status after it %d\n", status(s));
    CUgraph g2 = nullptr;
    say("end capture", cuStreamEndCapture(s, &g2));
    if (g2) CU(cuGraphDestroy(g2));
    CU(cuStreamDestroy(s));
}

// Stream memory operations: writes and satisfied waits of 32- and 64-bit
// values on a stream, a batch with a barrier, the same captured into a
// graph (a batch memory-operation node) and added by hand, and the
// refusals (misaligned address, unknown flags, memory not of the program).
static void memory_operations(CUcontext ctx, CUdeviceptr d) {
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuMemsetD32(d, 0, 4));
    CU(cuStreamWriteValue32(s, d, 7, 0));
    CU(cuStreamWaitValue32(s, d, 7, CU_STREAM_WAIT_VALUE_EQ));
    CU(cuStreamWriteValue64(s, d + 8, 0x100000002ull, 0));
    CU(cuStreamWaitValue64(s, d + 8, 1, CU_STREAM_WAIT_VALUE_GEQ));
    CUstreamBatchMemOpParams ops[3] = {};
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = d + 4;
    ops[0].writeValue.value = 5;
    ops[1].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    ops[1].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    ops[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[2].waitValue.address = d + 4;
    ops[2].waitValue.value = 4;
    ops[2].waitValue.flags = CU_STREAM_WAIT_VALUE_AND;
    CU(cuStreamBatchMemOp(s, 3, ops, 0));
    CU(cuStreamSynchronize(s));
    unsigned v[4];
    CU(cuMemcpyDtoH(v, d, sizeof v));
    printf("written: %u %u %#x %#x\n", v[0], v[1], v[2], v[3]);

    // Captured: the node writes again at every launch.
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuStreamWriteValue32(s, d, 9, 0));
    CUgraph g;
    CU(cuStreamEndCapture(s, &g));
    size_t n = 1;
    CUgraphNode node;
    CU(cuGraphGetNodes(g, &node, &n));
    CUgraphNodeType t;
    CU(cuGraphNodeGetType(node, &t));
    printf("captured memory operation: %zu node, batch memop %s\n", n, t == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP ? "yes" : "NO");
    // By hand, after the captured one.
    CUstreamBatchMemOpParams w = {};
    w.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    w.writeValue.address = d + 4;
    w.writeValue.value = 11;
    CUDA_BATCH_MEM_OP_NODE_PARAMS bp = {ctx, 1, &w, 0};
    CUgraphNode hand;
    CU(cuGraphAddBatchMemOpNode(&hand, g, &node, 1, &bp));
    CUgraphExec e;
    CU(cuGraphInstantiate(&e, g, 0));
    auto launch = [&](const char *what) {
        CU(cuMemsetD32(d, 0, 2));
        CU(cuGraphLaunch(e, s));
        CU(cuStreamSynchronize(s));
        CU(cuMemcpyDtoH(v, d, 8));
        printf("%s wrote %u %u\n", what, v[0], v[1]);
    };
    launch("launch 0");
    launch("launch 1");
    // The node's operations read back, then changed in the graph (the
    // executable graph keeps its own) and in the executable graph.
    CUDA_BATCH_MEM_OP_NODE_PARAMS got = {};
    CU(cuGraphBatchMemOpNodeGetParams(hand, &got));
    printf("node operations: %u, write %s, value %u, same address %s, same context %s\n", got.count,
           got.paramArray[0].operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? "yes" : "NO", got.paramArray[0].writeValue.value,
           got.paramArray[0].writeValue.address == d + 4 ? "yes" : "NO", got.ctx == ctx ? "yes" : "NO");
    w.writeValue.value = 12;
    CU(cuGraphBatchMemOpNodeSetParams(hand, &bp));
    CU(cuGraphBatchMemOpNodeGetParams(hand, &got));
    printf("node operations after set: value %u\n", got.paramArray[0].writeValue.value);
    launch("launch after set in the graph");
    w.writeValue.value = 13;
    CU(cuGraphExecBatchMemOpNodeSetParams(e, hand, &bp));
    launch("launch after set in the executable graph");
    CU(cuGraphExecDestroy(e));
    CU(cuGraphDestroy(g));

    say("wait value at a misaligned address", cuStreamWaitValue32(s, d + 2, 0, 0));
    CU(cuStreamSynchronize(s));
    say("write value with unknown flags", cuStreamWriteValue32(s, d, 0, 0x10));
    CU(cuStreamSynchronize(s));
    say("write value without a memory barrier", cuStreamWriteValue32(s, d, 0, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
    CU(cuStreamSynchronize(s));
    CU(cuStreamDestroy(s));
}

// Node parameters read back: a captured launch's kernel and arguments,
// changed and set in the executable graph (as NVIDIA's samples update a
// captured kernel), a memset node's parameters, an event node's event.
static void node_parameters(const Kernels &k, CUdeviceptr x, CUdeviceptr y) {
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    std::vector<float> xs(N);
    for (int i = 0; i < N; i++) xs[i] = (float)(i % 97);
    CU(cuMemcpyHtoD(x, xs.data(), N * 4));
    CU(cuMemsetD32(y, 0, N));
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    saxpy_on(k, s, 2.0f, x, y);
    CU(cuMemsetD32Async(x, 0x3f800000, N, s));
    CUgraph g;
    CU(cuStreamEndCapture(s, &g));
    CUgraphNode nodes[2];
    size_t n = 2;
    CU(cuGraphGetNodes(g, nodes, &n));
    CUgraphNode kern = nodes[0], set = nodes[1];
    CUgraphNodeType t;
    CU(cuGraphNodeGetType(kern, &t));
    if (t != CU_GRAPH_NODE_TYPE_KERNEL) std::swap(kern, set);
    CUDA_KERNEL_NODE_PARAMS kp = {};
    CU(cuGraphKernelNodeGetParams(kern, &kp));
    float a = *(float *)kp.kernelParams[0];
    int len = *(int *)kp.kernelParams[3];
    printf("kernel node: saxpy %s, grid %u, block %u, a = %g, n = %d, same y %s\n", kp.func == k.saxpy ? "yes" : "NO", kp.gridDimX,
           kp.blockDimX, a, len, *(CUdeviceptr *)kp.kernelParams[2] == y ? "yes" : "NO");
    CUDA_MEMSET_NODE_PARAMS mp = {};
    CU(cuGraphMemsetNodeGetParams(set, &mp));
    printf("memset node: value %#x, element size %u, width %zu, height %zu, same dst %s\n", mp.value, mp.elementSize, mp.width,
           mp.height, mp.dst == x ? "yes" : "NO");
    // The generic setter: the memset writes 2.0 instead.
    CUgraphNodeParams gp = {};
    gp.type = CU_GRAPH_NODE_TYPE_MEMSET;
    gp.memset.dst = mp.dst;
    gp.memset.value = 0x40000000;
    gp.memset.elementSize = 4;
    gp.memset.width = mp.width;
    gp.memset.height = 1;
    CU(cuGraphNodeSetParams(set, &gp));
    CU(cuGraphMemsetNodeGetParams(set, &mp));
    printf("memset node after cuGraphNodeSetParams: value %#x\n", mp.value);
    CUgraphExec e;
    CU(cuGraphInstantiate(&e, g, 0));
    float five = 5.0f;
    kp.kernelParams[0] = &five;
    CU(cuGraphExecKernelNodeSetParams(e, kern, &kp));
    unsigned on = 9;
    CU(cuGraphNodeGetEnabled(e, kern, &on));
    printf("kernel node enabled: %u\n", on);
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    check("y after the changed kernel", sum_of(y), 5.0 * cpu_sum(xs));
    CU(cuGraphExecDestroy(e));
    CU(cuGraphDestroy(g));
    CU(cuMemcpyHtoD(x, xs.data(), N * 4));
    CU(cuStreamDestroy(s));
}

// Kernel node attributes: never set (zero), set and read back, kept when
// the parameters change, copied to another node and into a clone, and a
// captured launch's attributes on its node.
static void kernel_attributes(const Kernels &k, CUdeviceptr x, CUdeviceptr y) {
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUgraph g;
    CU(cuGraphCreate(&g, 0));
    float a = 1.0f;
    int n = N;
    void *args[] = {&a, &x, &y, &n};
    CUDA_KERNEL_NODE_PARAMS kp = {};
    kp.func = k.saxpy;
    kp.gridDimX = N / 256, kp.gridDimY = 1, kp.gridDimZ = 1;
    kp.blockDimX = 256, kp.blockDimY = 1, kp.blockDimZ = 1;
    kp.kernelParams = args;
    CUgraphNode k1, k2;
    CU(cuGraphAddKernelNode(&k1, g, nullptr, 0, &kp));
    CU(cuGraphAddKernelNode(&k2, g, nullptr, 0, &kp));
    CUkernelNodeAttrValue v = {};
    CU(cuGraphKernelNodeGetAttribute(k1, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    printf("priority never set: %d\n", v.priority);
    v.priority = -1;
    CU(cuGraphKernelNodeSetAttribute(k1, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    CUkernelNodeAttrValue carve = {};
    carve.sharedMemCarveout = 50;
    CU(cuGraphKernelNodeSetAttribute(k1, CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, &carve));
    CU(cuGraphKernelNodeSetParams(k1, &kp));
    v = {};
    CU(cuGraphKernelNodeGetAttribute(k1, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    printf("priority after new parameters: %d\n", v.priority);
    CU(cuGraphKernelNodeCopyAttributes(k2, k1));
    v = {}, carve = {};
    CU(cuGraphKernelNodeGetAttribute(k2, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    CU(cuGraphKernelNodeGetAttribute(k2, CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, &carve));
    printf("copied: priority %d, carveout %u\n", v.priority, carve.sharedMemCarveout);
    CUgraph clone;
    CU(cuGraphClone(&clone, g));
    CUgraphNode k1c;
    CU(cuGraphNodeFindInClone(&k1c, k1, clone));
    v = {};
    CU(cuGraphKernelNodeGetAttribute(k1c, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    printf("in the clone: priority %d\n", v.priority);
    CUgraphExec e;
    CU(cuGraphInstantiate(&e, g, 0));
    CU(cuMemsetD32(y, 0, N));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    std::vector<float> xs(N);
    CU(cuMemcpyDtoH(xs.data(), x, N * 4));
    check("y after two attributed kernels", sum_of(y), 2.0 * cpu_sum(xs));
    CU(cuGraphExecDestroy(e));

    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUlaunchAttribute attr = {};
    attr.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    attr.value.priority = -1;
    CUlaunchConfig cfg = {};
    cfg.gridDimX = N / 256, cfg.gridDimY = 1, cfg.gridDimZ = 1;
    cfg.blockDimX = 256, cfg.blockDimY = 1, cfg.blockDimZ = 1;
    cfg.hStream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CU(cuLaunchKernelEx(&cfg, k.saxpy, args, nullptr));
    CUgraph cap;
    CU(cuStreamEndCapture(s, &cap));
    CUgraphNode captured;
    size_t count = 1;
    CU(cuGraphGetNodes(cap, &captured, &count));
    v = {};
    CU(cuGraphKernelNodeGetAttribute(captured, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    printf("captured launch: priority %d\n", v.priority);
    for (CUgraph h : {g, clone, cap}) CU(cuGraphDestroy(h));
    CU(cuStreamDestroy(s));
}

// A copy node of pitched memory: 2 slices of 3 rows of 32 bytes between
// regions of different pitches and slice heights, at offsets given as
// X, Y and Z; read back, then set in the graph.
static void pitched_copy_node(CUcontext ctx) {
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const size_t sp = 64, sr = 4, dp = 48, dr = 5;
    CUdeviceptr src, dst;
    CU(cuMemAlloc(&src, 3 * sr * sp));
    CU(cuMemAlloc(&dst, 2 * dr * dp));
    std::vector<unsigned char> bytes(3 * sr * sp), got(2 * dr * dp), want(2 * dr * dp, 0);
    for (size_t i = 0; i < bytes.size(); i++) bytes[i] = (unsigned char)(i * 7 % 251);
    CU(cuMemcpyHtoD(src, bytes.data(), bytes.size()));
    CU(cuMemsetD8(dst, 0, got.size()));
    CUDA_MEMCPY3D c = {};
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = src, c.srcPitch = sp, c.srcHeight = sr;
    c.srcXInBytes = 8, c.srcY = 1, c.srcZ = 1;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = dst, c.dstPitch = dp, c.dstHeight = dr;
    c.dstXInBytes = 4, c.dstY = 2;
    c.WidthInBytes = 32, c.Height = 3, c.Depth = 2;
    auto on_cpu = [&](const CUDA_MEMCPY3D &p) {
        for (size_t z = 0; z < p.Depth; z++)
            for (size_t y = 0; y < p.Height; y++)
                memcpy(&want[((p.dstZ + z) * dr + p.dstY + y) * dp + p.dstXInBytes],
                       &bytes[((p.srcZ + z) * sr + p.srcY + y) * sp + p.srcXInBytes], p.WidthInBytes);
    };
    CUgraph g;
    CU(cuGraphCreate(&g, 0));
    CUgraphNode node;
    CU(cuGraphAddMemcpyNode(&node, g, nullptr, 0, &c, ctx));
    CUDA_MEMCPY3D back = {};
    CU(cuGraphMemcpyNodeGetParams(node, &back));
    printf("pitched copy node: %zux%zux%zu bytes, pitches %zu and %zu, rows %zu and %zu\n", back.WidthInBytes, back.Height,
           back.Depth, back.srcPitch, back.dstPitch, back.srcHeight, back.dstHeight);
    CUgraphExec e;
    CU(cuGraphInstantiate(&e, g, 0));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    on_cpu(c);
    CU(cuMemcpyDtoH(got.data(), dst, got.size()));
    check("pitched copy node: bytes as on the CPU", got == want, 1);
    // 4 rows of 16 bytes of the last slice: refused in the executable
    // graph (its copies stay one-dimensional), set in the graph and run by
    // a new executable graph.
    CUDA_MEMCPY3D c2 = c;
    c2.srcXInBytes = 0, c2.srcY = 0, c2.srcZ = 2;
    c2.dstXInBytes = 16, c2.dstY = 0, c2.dstZ = 1;
    c2.WidthInBytes = 16, c2.Height = 4, c2.Depth = 1;
    say("pitched copy set in the executable graph", cuGraphExecMemcpyNodeSetParams(e, node, &c2, ctx));
    CU(cuGraphMemcpyNodeSetParams(node, &c2));
    CU(cuGraphExecDestroy(e));
    CU(cuGraphInstantiate(&e, g, 0));
    CU(cuMemsetD8(dst, 0, got.size()));
    CU(cuGraphLaunch(e, s));
    CU(cuStreamSynchronize(s));
    std::fill(want.begin(), want.end(), 0);
    on_cpu(c2);
    CU(cuMemcpyDtoH(got.data(), dst, got.size()));
    check("pitched copy set in the graph", got == want, 1);
    CU(cuGraphExecDestroy(e));
    CU(cuGraphDestroy(g));
    CU(cuMemFree(src));
    CU(cuMemFree(dst));
    CU(cuStreamDestroy(s));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: %s kernels.fatbin\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    std::vector<char> image(len);
    if (fread(image.data(), 1, len, f) != (size_t)len) return 2;
    fclose(f);
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CUmodule mod;
    CU(cuModuleLoadData(&mod, image.data()));
    Kernels k;
    CU(cuModuleGetFunction(&k.saxpy, mod, "saxpy"));
    CU(cuModuleGetFunction(&k.mat_sum, mod, "mat_sum"));
    CU(cuModuleGetFunction(&k.spin, mod, "spin"));
    CUdeviceptr x, y, z, w;
    for (CUdeviceptr *p : {&x, &y, &z, &w}) CU(cuMemAlloc(p, N * 4));
    std::vector<float> xs(N), ys(N, 1.0f);
    for (int i = 0; i < N; i++) xs[i] = (float)(i % 97);
    CU(cuMemcpyHtoD(x, xs.data(), N * 4));
    CU(cuMemcpyHtoD(y, ys.data(), N * 4));
    CU(cuMemsetD32(w, 0, N));
    captured_replay(k, x, y, z, w, xs);
    refusals(z);
    explicit_graph(k, ctx, x, y, w, xs);
    generic_nodes(k, ctx, x, y, w, z, xs);
    capture_beside_host_function(k, x, z);
    capture_dependencies(k, x, z);
    host_nodes(k, x, z);
    memory_operations(ctx, w);
    node_parameters(k, x, z);
    kernel_attributes(k, x, z);
    pitched_copy_node(ctx);
    for (CUdeviceptr p : {x, y, z, w}) CU(cuMemFree(p));
    CU(cuDevicePrimaryCtxRelease(dev));
    printf("%s\n", all_ok ? "PASS" : "FAIL");
    return all_ok ? 0 : 1;
}
