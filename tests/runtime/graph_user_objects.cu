// User objects through NVIDIA's runtime: objects whose references the
// program and its graphs own, each with a destructor that counts its runs
// and signals. A destructor runs once, after the last owner lets its
// references go: the program's own release; a graph destroyed, or
// releasing its references (those it owns, or, as the driver allows,
// the program's); a clone of a graph; a child-graph node's copy (gone with
// the node or its parent); an executable graph, destroyed while its
// launches run (the destructor sees the graph's host node done); an
// executable graph updated from another graph, or whose child-graph node
// is set from another; a graph made by stream capture. References moved to
// a graph leave the object's count as it was; zero counts and unknown
// flags are refused. The program prints what it sees (no timings); the
// last line is PASS.
//
// A destructor may run on another thread, after the call that let the
// last reference go has returned: the program waits (a bounded time) for
// the signal of the one it expects, and before checking that one has not
// run, it waits for a fresh object's destructor (destructors that share a
// thread run in order).
//
// Built by nvcc like any CUDA program; its kernel is one pvgpu's host test
// double implements (by name), so CI runs it without a GPU.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>

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

static const int N = 256;

// What a destructor saw. Objects are static: a destructor that came late
// still writes to live memory.
struct Seen {
    int runs;       // how many times it ran
    int host_runs;  // runs of the host node when it ran
};

static std::mutex mu;
static std::condition_variable signal_cv;
static std::atomic<int> host_node_runs{0};

static void CUDART_CB destroy(void *p) {
    Seen *s = (Seen *)p;
    {
        std::lock_guard<std::mutex> l(mu);
        s->runs++;
        s->host_runs = host_node_runs.load();
    }
    signal_cv.notify_all();
}

static void CUDART_CB host_node(void *) { host_node_runs++; }

// How many times `s`'s destructor ran, once it has run (or after 10 s).
static int runs_once_run(Seen &s) {
    std::unique_lock<std::mutex> l(mu);
    signal_cv.wait_for(l, std::chrono::seconds(10), [&] { return s.runs > 0; });
    return s.runs;
}

// How many times `s`'s destructor ran, after a fresh object's destructor.
static int runs_now(Seen &s) {
    static Seen fresh[32];
    static int used = 0;
    Seen &f = fresh[used++ % 32];
    cudaUserObject_t u;
    CHECK(cudaUserObjectCreate(&u, &f, destroy, 1, cudaUserObjectNoDestructorSync));
    CHECK(cudaUserObjectRelease(u, 1));
    runs_once_run(f);
    std::lock_guard<std::mutex> l(mu);
    return s.runs;
}

static cudaUserObject_t make(Seen &s, unsigned refs) {
    cudaUserObject_t u;
    CHECK(cudaUserObjectCreate(&u, &s, destroy, refs, cudaUserObjectNoDestructorSync));
    return u;
}

// A graph of one empty node that owns the program's one reference of a
// new object.
static cudaGraph_t graph_owning(Seen &s) {
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t n;
    CHECK(cudaGraphAddEmptyNode(&n, g, nullptr, 0));
    CHECK(cudaGraphRetainUserObject(g, make(s, 1), 1, cudaGraphUserObjectMove));
    return g;
}

static const char *err(cudaError_t e) { return cudaGetErrorName(e); }

static void program_references() {
    static Seen a;
    cudaUserObject_t u = make(a, 2);
    CHECK(cudaUserObjectRelease(u, 1));
    printf("2 references, 1 released: destroyed %d\n", runs_now(a));
    CHECK(cudaUserObjectRetain(u, 2));
    CHECK(cudaUserObjectRelease(u, 2));
    printf("2 more retained and released: destroyed %d\n", runs_now(a));
    CHECK(cudaUserObjectRelease(u, 1));
    printf("last released: destroyed %d\n", runs_once_run(a));
}

static void refused() {
    static Seen b;
    cudaUserObject_t u;
    printf("create with flags 0: %s\n", err(cudaUserObjectCreate(&u, &b, destroy, 1, 0)));
    printf("create with no reference: %s\n", err(cudaUserObjectCreate(&u, &b, destroy, 0, cudaUserObjectNoDestructorSync)));
    u = make(b, 1);
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    printf("retain 0: %s\n", err(cudaUserObjectRetain(u, 0)));
    printf("release 0: %s\n", err(cudaUserObjectRelease(u, 0)));
    printf("graph retain 0: %s\n", err(cudaGraphRetainUserObject(g, u, 0, 0)));
    printf("graph retain with flags 2: %s\n", err(cudaGraphRetainUserObject(g, u, 1, 2)));
    printf("graph release 0: %s\n", err(cudaGraphReleaseUserObject(g, u, 0)));
    CHECK(cudaGraphDestroy(g));
    printf("refused calls changed nothing: destroyed %d\n", runs_now(b));
    CHECK(cudaUserObjectRelease(u, 1));
    printf("released: destroyed %d\n", runs_once_run(b));
}

static void graph_references() {
    // Moved: the graph owns the only reference.
    static Seen c;
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphRetainUserObject(g, make(c, 1), 1, cudaGraphUserObjectMove));
    printf("moved to a graph: destroyed %d\n", runs_now(c));
    CHECK(cudaGraphDestroy(g));
    printf("graph destroyed: destroyed %d\n", runs_once_run(c));

    // Retained: the graph owns 2 more; it releases them itself.
    static Seen d;
    cudaUserObject_t u = make(d, 1);
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphRetainUserObject(g, u, 2, 0));
    CHECK(cudaUserObjectRelease(u, 1));
    printf("graph owns 2, program released its own: destroyed %d\n", runs_now(d));
    CHECK(cudaGraphReleaseUserObject(g, u, 1));
    printf("graph released 1: destroyed %d\n", runs_now(d));
    CHECK(cudaGraphReleaseUserObject(g, u, 1));
    printf("graph released the last: destroyed %d\n", runs_once_run(d));
    CHECK(cudaGraphDestroy(g));
    printf("graph destroyed after: destroyed %d\n", runs_now(d));

    // A graph owning none releases the program's reference.
    static Seen o;
    u = make(o, 1);
    CHECK(cudaGraphCreate(&g, 0));
    printf("graph owning none releases 1: %s, ", err(cudaGraphReleaseUserObject(g, u, 1)));
    printf("destroyed %d\n", runs_once_run(o));
    CHECK(cudaGraphDestroy(g));
    printf("graph destroyed after: destroyed %d\n", runs_now(o));
}

static void clone() {
    static Seen e;
    cudaGraph_t g = graph_owning(e), c;
    CHECK(cudaGraphClone(&c, g));
    CHECK(cudaGraphDestroy(g));
    printf("original destroyed, clone alive: destroyed %d\n", runs_now(e));
    CHECK(cudaGraphDestroy(c));
    printf("clone destroyed: destroyed %d\n", runs_once_run(e));
}

static void child_graphs() {
    // The node holds a copy of the child, with the child's references.
    static Seen f;
    cudaGraph_t child = graph_owning(f), parent;
    CHECK(cudaGraphCreate(&parent, 0));
    cudaGraphNode_t n;
    CHECK(cudaGraphAddChildGraphNode(&n, parent, nullptr, 0, child));
    CHECK(cudaGraphDestroy(child));
    printf("child destroyed, its node alive: destroyed %d\n", runs_now(f));
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, parent, 0));
    CHECK(cudaGraphDestroy(parent));
    printf("parent destroyed, its executable graph alive: destroyed %d\n", runs_now(f));
    CHECK(cudaGraphExecDestroy(e));
    printf("executable graph destroyed, never launched: destroyed %d\n", runs_once_run(f));

    // Gone with the node.
    static Seen g;
    child = graph_owning(g);
    CHECK(cudaGraphCreate(&parent, 0));
    CHECK(cudaGraphAddChildGraphNode(&n, parent, nullptr, 0, child));
    CHECK(cudaGraphDestroy(child));
    CHECK(cudaGraphDestroyNode(n));
    printf("child-graph node destroyed: destroyed %d\n", runs_once_run(g));
    CHECK(cudaGraphDestroy(parent));

    // An executable graph's child-graph node set from another child.
    static Seen old_child, new_child;
    cudaGraph_t c1 = graph_owning(old_child), c2 = graph_owning(new_child);
    CHECK(cudaGraphCreate(&parent, 0));
    CHECK(cudaGraphAddChildGraphNode(&n, parent, nullptr, 0, c1));
    CHECK(cudaGraphInstantiate(&e, parent, 0));
    CHECK(cudaGraphDestroy(c1));
    CHECK(cudaGraphExecChildGraphNodeSetParams(e, n, c2));
    CHECK(cudaGraphDestroy(c2));
    CHECK(cudaGraphDestroy(parent));
    printf("executable graph's child set from another: old child's object destroyed %d, ", runs_once_run(old_child));
    printf("new child's %d\n", runs_now(new_child));
    CHECK(cudaGraphExecDestroy(e));
    printf("executable graph destroyed: new child's object destroyed %d\n", runs_once_run(new_child));
}

static void launched() {
    float *x, *y;
    CHECK(cudaMalloc(&x, N * sizeof(float)));
    CHECK(cudaMalloc(&y, N * sizeof(float)));
    CHECK(cudaMemset(x, 0, N * sizeof(float)));
    CHECK(cudaMemset(y, 0, N * sizeof(float)));
    static Seen h;
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    float a = 2.0f;
    int n = N;
    void *args[] = {&a, &x, &y, &n};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)saxpy;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(N);
    kp.kernelParams = args;
    cudaGraphNode_t k, hn;
    CHECK(cudaGraphAddKernelNode(&k, g, nullptr, 0, &kp));
    cudaHostNodeParams hp = {};
    hp.fn = host_node;
    CHECK(cudaGraphAddHostNode(&hn, g, &k, 1, &hp));
    CHECK(cudaGraphRetainUserObject(g, make(h, 1), 1, cudaGraphUserObjectMove));
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphDestroy(g));
    printf("graph destroyed, its executable graph alive: destroyed %d\n", runs_now(h));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaStreamSynchronize(s));
    int runs = runs_once_run(h);
    std::lock_guard<std::mutex> l(mu);
    printf("launched twice, destroyed at once: destroyed %d, after %d host node runs\n", runs, h.host_runs);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
}

static void updated() {
    static Seen i, j;
    cudaGraph_t gi = graph_owning(i), gj = graph_owning(j);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, gi, 0));
    CHECK(cudaGraphDestroy(gi));
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(e, gj, &info));
    CHECK(cudaGraphDestroy(gj));
    printf("executable graph updated: old graph's object destroyed %d, ", runs_once_run(i));
    printf("new graph's %d\n", runs_now(j));
    CHECK(cudaGraphExecDestroy(e));
    printf("executable graph destroyed: new graph's object destroyed %d\n", runs_once_run(j));
}

static void captured() {
    float *x, *y;
    CHECK(cudaMalloc(&x, N * sizeof(float)));
    CHECK(cudaMalloc(&y, N * sizeof(float)));
    static Seen k;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    saxpy<<<1, N, 0, s>>>(1.0f, x, y, N);
    cudaStreamCaptureStatus st;
    cudaGraph_t being;
    CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, &being, nullptr, nullptr, nullptr));
    CHECK(cudaGraphRetainUserObject(being, make(k, 1), 1, cudaGraphUserObjectMove));
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g));
    printf("capture ended: destroyed %d\n", runs_now(k));
    CHECK(cudaGraphDestroy(g));
    printf("captured graph destroyed: destroyed %d\n", runs_once_run(k));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
}

int main() {
    program_references();
    refused();
    graph_references();
    clone();
    child_graphs();
    launched();
    updated();
    captured();
    printf("PASS\n");
    return 0;
}
